"""How close can any model come to single measurements? Two floors per context and metric,
from the repeats in the shipped knowledge (trials of one config at one workload):

- ``leave-one-out``: each repeat against the geometric mean of the others (what ``advisor
  knowledge eval`` prints as the noise floor): what a model that knew everything but the trial
  itself would err, on the trials that have repeats;
- ``best constant``: per (config, workload), the single figure that minimises the group's mean
  absolute percentage error, chosen *after* seeing every repeat. A model answers one figure per
  config and workload, so no model can score below this on those trials; it is a hard bound,
  and an optimistic one (it peeks).

Both are means over the trials that have repeats; ``share of all`` spreads the best-constant
bound over every trial of the context (the others counted as 0 error), the least any model's
MAPE over the whole context can be.

    PYTHONPATH=. python benchmarks/repeat_floor.py                      # vLLM contexts
    PYTHONPATH=. python benchmarks/repeat_floor.py --target faiss --metric p95_latency_ms
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks.stores import shipped_store
from knowledge import TrialRecord, TrialStatus
from knowledge.store import TrialFilter
from knowledge.surrogates import context_of, noise_floor
from knowledge.surrogates.training import _usable

METRICS = ["ttft_p95_ms", "tpot_p95_ms", "output_tokens_per_s"]


def best_constant_error(values: Sequence[float]) -> float:
    """The least mean absolute percentage error of one figure against ``values``: the error is
    piecewise linear and convex in the figure, so its minimum lies at one of the values."""
    v = np.asarray(values, dtype=float)
    return float(min(np.mean(np.abs(p - v) / v) for p in v))


def floors(trials: Sequence[TrialRecord], metric: str) -> dict[str, float | int | None]:
    groups: dict[tuple[str, str], list[float]] = {}
    for t in trials:
        value = t.metrics.get(metric)
        if isinstance(value, int | float) and value > 0:
            groups.setdefault((t.config_hash, t.workload_hash), []).append(float(value))
    repeated = [v for v in groups.values() if len(v) > 1]
    n = sum(len(v) for v in repeated)
    total = sum(len(v) for v in groups.values())
    bound = sum(best_constant_error(v) * len(v) for v in repeated)
    loo, _ = noise_floor(trials, metric)
    return {"trials": total, "repeated_trials": n, "leave_one_out": loo,
            "best_constant": bound / n if n else None,
            "best_constant_share_of_all": bound / total if total else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="vllm")
    parser.add_argument("--metric", action="append", help=f"default: {', '.join(METRICS)}")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    store = shipped_store()
    done = TrialFilter(target=args.target, status=TrialStatus.COMPLETE)
    trials = _usable(store.list_trials(done))
    report = []
    for key in sorted({context_of(t) for t in trials}):
        mine = [t for t in trials if context_of(t) == key]
        for metric in args.metric or METRICS:
            row = {"context": key.label(), "metric": metric, **floors(mine, metric)}
            if not row["repeated_trials"]:
                continue
            report.append(row)
            share = row["best_constant_share_of_all"]
            print(f"{row['context']:46} {metric:20} repeated {row['repeated_trials']:3d} of "
                  f"{row['trials']:3d}  leave-one-out {row['leave_one_out']:6.1%}  best constant "
                  f"{row['best_constant']:6.1%}  (share of all {share:5.1%})")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""A held-out-rate test no fold can leak into: the load curves fitted on the shipped knowledge
predict trials measured later at rates between the shipped ones (the 2026-12-04 between-rates
study: nine 8B configs at 22.5 / 37.5 / 52.5 / 67.5 req/s, each config's curve already measured
at 15 / 30 / 45 / 60 / 75 req/s, other prompts: seeds 5-8).

    PYTHONPATH=. python benchmarks/between_rates.py
    PYTHONPATH=. python benchmarks/between_rates.py --trials other.jsonl.gz --json out.json

The held-out trials default to the shipped file of that study (knowledge/data); the fit leaves
out every trial of the held-out file, wherever it came from.

Prints, per metric, the MAPE, the median absolute percentage error and the 90 % interval
coverage of the curves' predictions for every held-out trial whose config has a curve.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.stores import shipped_store, temp_store
from knowledge import TrialStatus
from knowledge.store import TrialFilter
from knowledge.surrogates import context_of, fit_load_curves, workload_features
from knowledge.surrogates.training import _usable
from knowledge.transfer import import_file, shipped_file

METRICS = ("ttft_p95_ms", "tpot_p95_ms", "output_tokens_per_s")
TRIALS = "h200-vllm-between-2026-12-04.jsonl"


def score(trials: Path | None = None, *, quiet: bool = False) -> list[dict[str, Any]]:
    """Per context and metric: MAPE, median APE and 90 % coverage of the curves fitted on the
    shipped knowledge without ``trials`` (default: the shipped between-rates study) predicting
    them. Prints a line per row unless ``quiet``."""
    shipped = shipped_store()
    held_store = temp_store("held.db")
    import_file(held_store, trials or shipped_file(TRIALS))
    done = TrialFilter(target="vllm", status=TrialStatus.COMPLETE)
    held = [t for t in held_store.list_trials(done) if t.metrics]
    held_uids = {t.uid for t in held}
    # Shipped since: left out of the fit, which then sees what it saw before they were measured.
    train_all = [t for t in shipped.list_trials(done) if t.metrics and t.uid not in held_uids]
    report = []
    for key in sorted({context_of(t) for t in held}):
        curves = fit_load_curves(_usable([t for t in train_all if context_of(t) == key]))
        if curves is None:
            continue
        mine = [t for t in held if context_of(t) == key]
        for metric in METRICS:
            errors, inside = [], []
            for t in mine:
                p = curves.predict(t.config, workload_features(t.workload_spec), metric)
                v = t.metrics.get(metric)
                if p is None or not isinstance(v, int | float) or v <= 0:
                    continue
                errors.append(abs(p[0] - v) / v)
                inside.append(p[1] <= v <= p[2])
            if not errors:
                continue
            row = {"context": key.label(), "metric": metric, "n": len(errors),
                   "mape": float(np.mean(errors)), "median_ape": float(np.median(errors)),
                   "coverage": float(np.mean(inside))}
            report.append(row)
            if not quiet:
                print(f"{row['context']:44} {metric:20} n={row['n']:3d}  MAPE {row['mape']:6.1%}"
                      f"  median {row['median_ape']:6.1%}  coverage {row['coverage']:4.0%}")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=Path, default=None,
                        help=f"the held-out trials (default: the shipped {TRIALS})")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    report = score(args.trials)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()

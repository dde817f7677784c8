"""What the curve alone, the simulator alone and their blend predict for one measured config at
the rates asked, from the shipped knowledge (knowledge/curve_blend.py): the figures a
prospective check commits before it measures.

    PYTHONPATH=. python docs/benchmarks/h200-blend-check-2026-12-05/blend_predictions.py \
        --model llama-3-8b --config '{"quantization": "fp8"}' --rates 75,82.5,90 --json out.json

``--config`` names the knobs that differ from the target's defaults; the config must have been
measured (it needs a load curve of its own at the context's workload).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.stores import shipped_store
from knowledge import TrialStatus
from knowledge.store import TrialFilter
from knowledge.surrogates import context_of, fit_load_curves, workload_features
from knowledge.surrogates.training import _usable
from search_spaces.space import load_space

METRICS = ("ttft_p95_ms", "tpot_p95_ms", "output_tokens_per_s")


def predictions(target: str, model: str, knobs: dict[str, Any], rates: list[float]
                ) -> list[dict[str, Any]]:
    trials = [t for t in _usable(shipped_store().list_trials(
        TrialFilter(status=TrialStatus.COMPLETE))) if t.target == target
        and context_of(t).model == model]
    if not trials:
        raise SystemExit(f"no shipped {target} trials of model {model!r}")
    defaults = load_space(target).default_config()
    wanted = defaults | knobs
    measured = [t for t in trials
                if all(t.config.get(k, defaults.get(k)) == v for k, v in wanted.items())]
    if not measured:
        raise SystemExit(f"config {knobs} was never measured on {model}")
    curves = fit_load_curves(trials)
    if curves is None:
        raise SystemExit("no load curves in this context")
    template = measured[0]
    base = workload_features(template.workload_spec)
    curve = curves.curve(template.config, base)
    if curve is None:
        raise SystemExit(f"config {knobs} has no load curve of its own")
    rows = []
    for rate in rates:
        workload = {**base, "rate_rps": rate}
        sim = curves.blend_.figures(template.config, workload) if curves.blend_ else None
        row: dict[str, Any] = {"rate_rps": rate, "capacity_rps": curve.capacity,
                               "curve_rates": list(curve.rates), "metrics": {}}
        for m in METRICS:
            alone = curve.predict(m, np.asarray([rate]))
            answer = curves.predict(template.config, workload, m)
            row["metrics"][m] = {
                "curve": float(alone[0]) if alone is not None else None,
                "simulator": float(sim[m]) if sim and m in sim else None,
                "answer": list(answer) if answer else None, "blended": curves.blended(m),
                "measured": sorted(float(t.metrics[m]) for t in measured
                                   if workload_features(t.workload_spec)["rate_rps"] == rate
                                   and m in t.metrics)}
        rows.append(row)
        print(f"{rate:6.1f} req/s  " + "  ".join(
            f"{m} curve {v['curve'] or float('nan'):8.1f} sim {v['simulator'] or float('nan'):8.1f}"
            f" answer {v['answer'][0] if v['answer'] else float('nan'):8.1f}"
            f"{' (blend)' if v['blended'] else ''}" for m, v in row["metrics"].items()))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="vllm")
    parser.add_argument("--model", required=True)
    parser.add_argument("--config", type=json.loads, default={},
                        help="the knobs that differ from the defaults (JSON)")
    parser.add_argument("--rates", required=True, help="comma-separated req/s")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    rows = predictions(args.target, args.model, args.config,
                       [float(r) for r in args.rates.split(",")])
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()

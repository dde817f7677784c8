"""A prospective test of the answers for an unmeasured shape: predictions written (and committed)
before the shape is measured, then scored against the measurements.

    # 1. before measuring: the answers for the shape at each rate, from the shipped knowledge
    PYTHONPATH=. python docs/benchmarks/h200-qwen7b-2026-12-04/shape_prospective.py predict \\
        --model-config docs/examples/model-configs/qwen2.5-7b/config.json \\
        --rate 15 --rate 30 --rate 45 --rate 60 --rate 75 --rate 90 -o predictions.json
    # 2. after measuring (advisor crosscheck --model-config ..., trials exported as JSONL)
    PYTHONPATH=. python docs/benchmarks/h200-qwen7b-2026-12-04/shape_prospective.py \\
        score predictions.json --measured trials.jsonl --json scored.json

``predict`` runs ``advisor recommend --model-config`` (the engine default under an SLO loose
enough that the answer keeps it, so every figure of the default is predicted) once per rate, in
a fresh store holding the shipped knowledge; an answer refused (e.g. a rate above the predicted
capacity) is kept with its reason. ``score`` compares each predicted figure with the median of
the measured trials of the default config at that rate (valid trials only) and reports the
absolute percentage error, whether the 90 % interval held the median and each repeat, and the
predicted against the measured capacity where the measurements show one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

METRICS = ("ttft_p95_ms", "tpot_p95_ms", "output_tokens_per_s")
#: Loose enough that the engine default meets it at every rate the answers cover.
LOOSE_SLO = "ttft_p95_ms<=60000,tpot_p95_ms<=1000"


def predict(model_config: Path, rates: list[float], hardware: str) -> dict[str, Any]:
    """The shipped knowledge's answer for the shape at each rate (one CLI call per rate)."""
    tmp = Path(tempfile.mkdtemp(prefix="shape-prospective-"))
    env = {**os.environ, "ADVISOR_DB_URL": f"sqlite:///{tmp / 'store.db'}",
           "ADVISOR_CACHE_DIR": str(tmp / "cache"), "PYTHONWARNINGS": "ignore"}
    answers = []
    for rate in rates:
        done = subprocess.run(
            [sys.executable, "-m", "advisor", "recommend", "--target", "vllm", "--hardware",
             hardware, "--model-config", str(model_config), "--rate-rps", f"{rate:g}",
             "--slo", LOOSE_SLO, "--json"], env=env, capture_output=True, text=True,
            timeout=1800)
        try:
            answer = json.loads(done.stdout)
        except ValueError:
            answer = {"status": "error", "exit_code": done.returncode,
                      "reason": done.stderr.strip().splitlines()[-1:] or ""}
        keep = {k: answer.get(k) for k in ("status", "basis", "answer", "shape_position",
                                           "feature", "model", "config", "predicted",
                                           "capacity_rps", "reason", "exit_code")
                if k in answer}
        answers.append({"rate_rps": rate, **keep})
        status = keep.get("status")
        print(f"{rate:6g} req/s  {status}", flush=True)
    return {"model_config": str(model_config), "hardware": hardware, "slo": LOOSE_SLO,
            "answers": answers}


def _trials(paths: list[Path]) -> list[dict[str, Any]]:
    """The trial records of ``advisor knowledge export`` files (a line is a study or a trial)."""
    rows = []
    for path in paths:
        for line in path.read_text().splitlines():
            if line.strip() and "trial" in (record := json.loads(line)):
                rows.append(record["trial"])
    return rows


def _rate(trial: dict[str, Any]) -> float | None:
    arrival = ((trial.get("workload_spec") or {}).get("params") or {}).get("arrival") or {}
    rate = arrival.get("rate_rps")
    return float(rate) if isinstance(rate, int | float) else None


def _valid(trial: dict[str, Any]) -> bool:
    """Complete and passed by the measurement gate (its stored verdict)."""
    return (trial.get("status") == "complete"
            and (trial.get("details") or {}).get("validity") == "valid")


def score(predictions: dict[str, Any], measured: list[dict[str, Any]]) -> dict[str, Any]:
    """Per answered rate and figure: predicted (interval), measured median and repeats, error."""
    model = next((a["model"] for a in predictions["answers"] if a.get("model")), None)
    trials = [t for t in measured if _valid(t)
              and ((t.get("workload_spec") or {}).get("params") or {}).get("model") == model]
    by_rate: dict[float, list[dict[str, Any]]] = {}
    for t in trials:
        if (r := _rate(t)) is not None:
            by_rate.setdefault(r, []).append(t)
    rows: list[dict[str, Any]] = []
    errors: dict[str, list[float]] = {m: [] for m in METRICS}
    for answer in predictions["answers"]:
        rate, pred = answer["rate_rps"], answer.get("predicted") or {}
        here = by_rate.get(rate, [])
        for metric in METRICS:
            values = [float(t["metrics"][metric]) for t in here if metric in t["metrics"]]
            p = pred.get(metric)
            row: dict[str, Any] = {"rate_rps": rate, "metric": metric, "status":
                                   answer.get("status"), "measured": values}
            if values:
                row["measured_median"] = float(np.median(values))
            if p and values:
                med = row["measured_median"]
                row |= {"predicted": p["value"], "low": p["low"], "high": p["high"],
                        "ape": abs(p["value"] - med) / med,
                        "median_inside": p["low"] <= med <= p["high"],
                        "repeats_inside": sum(p["low"] <= v <= p["high"] for v in values)}
                errors[metric].append(row["ape"])
            rows.append(row)
    summary = {m: {"n": len(e), "mape": float(np.mean(e)) if e else None,
                   "median_ape": float(np.median(e)) if e else None}
               for m, e in errors.items()}
    return {"model": model, "trials": len(trials), "rows": rows, "summary": summary}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("predict", help="write the answers before the shape is measured")
    p.add_argument("--model-config", type=Path, required=True)
    p.add_argument("--rate", type=float, action="append", required=True)
    p.add_argument("--hardware", default="h200")
    p.add_argument("-o", "--output", type=Path, required=True)
    s = sub.add_parser("score", help="score written answers against the measured trials")
    s.add_argument("predictions", type=Path)
    s.add_argument("--measured", type=Path, action="append", required=True,
                   help="exported trials (JSONL; repeatable)")
    s.add_argument("--json", type=Path, help="also write the scored rows here")
    args = parser.parse_args()
    if args.command == "predict":
        out = predict(args.model_config, args.rate, args.hardware)
        args.output.write_text(json.dumps(out, indent=1) + "\n")
        return
    scored = score(json.loads(args.predictions.read_text()), _trials(args.measured))
    for row in scored["rows"]:
        if "predicted" in row:
            print(f"{row['rate_rps']:6g} req/s {row['metric']:20} predicted {row['predicted']:9.1f}"
                  f" [{row['low']:.1f}, {row['high']:.1f}]  measured {row['measured_median']:9.1f}"
                  f" (n={len(row['measured'])})  error {row['ape']:6.1%}"
                  f"  {'inside' if row['median_inside'] else 'OUTSIDE'}")
        elif row["measured"]:
            print(f"{row['rate_rps']:6g} req/s {row['metric']:20} not answered ({row['status']});"
                  f" measured {row['measured_median']:.1f}")
    for metric, s_ in scored["summary"].items():
        if s_["n"]:
            print(f"{metric:20} n={s_['n']}  MAPE {s_['mape']:.1%}  median {s_['median_ape']:.1%}")
    if args.json:
        args.json.write_text(json.dumps(scored, indent=1) + "\n")


if __name__ == "__main__":
    main()

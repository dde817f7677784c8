"""Score the committed H100 predictions (predictions.json) against the measured windows.

    PYTHONPATH=. python docs/benchmarks/h100-heldout-2026-12-06/score.py

Per scored rate (not a probe rate) of the 8B `chat` defaults: predicted value and 90 % interval
against each measured window; per metric the MAPE (|predicted - measured| / measured) and the
share of measured figures inside their intervals; the capacity at the SLO against the measured
windows' verdicts. Prints a markdown table and writes score.json beside this file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from predict import METRICS, SLO, read_trials  # noqa: E402

from knowledge.transfer import read_trials_text  # noqa: E402

PROBE_RATES = {8.0, 24.0, 40.0, 64.0}


def main() -> int:
    pred = json.loads((HERE / "predictions.json").read_text())
    points = {p["rate_rps"]: p for p in pred["chat"]["points"]}
    measured = [(n, t) for n, t in read_trials(read_trials_text(
        HERE / "trials-heldout.jsonl.gz").splitlines()) if t.status == "complete"]
    rows, errs, hits = [], {m: [] for m in METRICS}, {m: [] for m in METRICS}
    verdicts = []
    for _name, t in sorted(measured, key=lambda x: x[1].workload_spec["params"]["arrival"]
                          ["rate_rps"]):
        rate = t.workload_spec["params"]["arrival"]["rate_rps"]
        meets = all(t.metrics[m] <= b for m, b in SLO.items())
        verdicts.append((rate, meets, rate in PROBE_RATES))
        if rate in PROBE_RATES or rate not in points:
            continue
        row = [f"{rate:g}", t.details.get("validity", "")]
        for m in METRICS:
            f, v = points[rate][m], float(t.metrics[m])
            e = abs(f["value"] - v) / v
            inside = f["low"] <= v <= f["high"]
            errs[m].append(e)
            hits[m].append(inside)
            row.append(f"{f['value']:.1f} [{f['low']:.1f}, {f['high']:.1f}] / {v:.1f} "
                       f"({100 * e:.0f} %{'' if inside else ', outside'})")
        rows.append(row)
    print("| req/s | validity | TTFT p95 ms pred [90 %] / measured | TPOT p95 ms | output tok/s |")
    print("|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    summary = {m: {"mape": sum(errs[m]) / len(errs[m]) if errs[m] else None,
                   "inside": sum(hits[m]), "n": len(hits[m])} for m in METRICS}
    cap = pred["chat"]["capacity_rps"]
    met = [r for r, ok, _ in verdicts if ok]
    failed = [r for r, ok, _ in verdicts if not ok]
    summary["capacity"] = {"predicted": cap, "measured_meets_at": met,
                           "measured_fails_at": failed}
    print()
    for m in METRICS:
        s = summary[m]
        mape = "n/a" if s["mape"] is None else f"{100 * s['mape']:.1f} %"
        print(f"- {m}: MAPE {mape}, inside 90 % interval {s['inside']}/{s['n']}")
    print(f"- capacity at {SLO}: predicted {cap['rate_rps']:.1f} req/s "
          f"[{cap['low']:.1f}, {cap['high']:.1f}]; windows meeting it: {met}; failing: {failed}")
    (HERE / "score.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Score the H100 predictions committed before measuring (predictions.json, commit 8692e02)
against the second call's windows (scored/trials-scored.jsonl, h100_scored_2026_12_06.sh).

    PYTHONPATH=. python docs/benchmarks/h100-heldout-2026-12-06/score_scored.py

For each workload (`chat`: 12 / 36 / 52 / 72 req/s, 3 rounds; `rag-long-prompt`: 2.8 / 6.5 /
9.4 / 12.2 req/s, one round) and each measured window: the predicted value and 90 % interval
against the measured figure; per metric the MAPE over windows and the share of windows inside
their interval; the capacity at the SLO against the measured bracket (the highest rate whose
windows meet the SLO in at least 2 of 3 — the answer engine's rule — and the lowest that does
not). Prints markdown and writes score-scored.json beside this file. Nothing here is fitted.
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from predict import METRICS, SLO, read_trials  # noqa: E402

from knowledge.transfer import read_trials_text  # noqa: E402

STUDIES = {"chat": "h100-8b-chat-1206-scored", "rag-long-prompt": "h100-8b-rag-1206-scored"}
#: A rate meets the SLO when at least this share of its windows do (advisor/answers/rule.py).
MEETS_SHARE = 2 / 3


def _meets(metrics: dict[str, float]) -> bool:
    return all(metrics[m] <= bound for m, bound in SLO.items())


def _capacity(verdicts: dict[float, list[bool]]) -> tuple[float | None, float | None]:
    """(highest rate meeting, lowest rate failing) by the rule, in rate order."""
    met = [r for r, v in sorted(verdicts.items()) if sum(v) >= MEETS_SHARE * len(v)]
    failed = [r for r, v in sorted(verdicts.items()) if sum(v) < MEETS_SHARE * len(v)]
    return (max(met) if met else None), (min(failed) if failed else None)


def score(pred: dict[str, Any], trials: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for workload, study in STUDIES.items():
        points = {p["rate_rps"]: p for p in pred[workload]["points"]}
        windows: dict[float, list[dict[str, float]]] = defaultdict(list)
        for name, t in trials:
            if name.startswith(study + "@") and t.status == "complete":
                rate = float(t.workload_spec["params"]["arrival"]["rate_rps"])
                windows[rate].append({**{m: float(t.metrics[m]) for m in METRICS},
                                      "validity": t.details.get("validity", "")})
        rows, errs, hits = [], defaultdict(list), defaultdict(list)
        for rate in sorted(windows):
            p = points[rate]
            for i, w in enumerate(windows[rate]):
                cells = {}
                for m in METRICS:
                    f, v = p[m], w[m]
                    e = abs(f["value"] - v) / v
                    inside = f["low"] <= v <= f["high"]
                    errs[m].append(e)
                    hits[m].append(inside)
                    cells[m] = {"predicted": f["value"], "low": f["low"], "high": f["high"],
                                "measured": v, "error": e, "inside": inside}
                rows.append({"rate_rps": rate, "round": i + 1, "validity": w["validity"],
                             "meets_slo": _meets(w), **cells})
        verdicts = {r: [_meets(w) for w in ws] for r, ws in windows.items()}
        met, failed = _capacity(verdicts)
        cap = pred[workload]["capacity_rps"]
        out[workload] = {
            "rows": rows,
            "metrics": {m: {"mape": sum(errs[m]) / len(errs[m]), "inside": sum(hits[m]),
                            "n": len(hits[m])} for m in METRICS},
            "capacity": {"predicted": cap, "measured_meets_at": met,
                         "measured_fails_at": failed,
                         # The error range the bracket allows (the capacity lies between).
                         "error_range": [None if x is None else cap["rate_rps"] / x - 1
                                         for x in (failed, met)]},
        }
    return out


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def main() -> int:
    pred = json.loads((HERE / "predictions.json").read_text())
    trials = read_trials(read_trials_text(HERE / "scored" / "trials-scored.jsonl.gz").splitlines())
    result = score(pred, trials)
    for workload, r in result.items():
        print(f"### {workload}\n")
        print("| req/s | round | validity | TTFT p95 ms pred [90 %] / measured | TPOT p95 ms "
              "| output tok/s | meets SLO |")
        print("|---|---|---|---|---|---|---|")
        for row in r["rows"]:
            cells = [f"{_fmt(row[m]['predicted'])} [{_fmt(row[m]['low'])}, "
                     f"{_fmt(row[m]['high'])}] / {_fmt(row[m]['measured'])} "
                     f"({100 * row[m]['error']:.0f} %{'' if row[m]['inside'] else ', outside'})"
                     for m in METRICS]
            print(f"| {row['rate_rps']:g} | {row['round']} | {row['validity']} | "
                  + " | ".join(cells) + f" | {'yes' if row['meets_slo'] else 'no'} |")
        print()
        for m, s in r["metrics"].items():
            print(f"- {m}: MAPE {100 * s['mape']:.1f} %, inside the 90 % interval "
                  f"{s['inside']}/{s['n']}")
        c = r["capacity"]
        lo, hi = c["error_range"]
        print(f"- capacity at {SLO}: predicted {c['predicted']['rate_rps']:.1f} req/s "
              f"[{c['predicted']['low']:.1f}, {c['predicted']['high']:.1f}]; measured: meets at "
              f"{c['measured_meets_at']}, fails at {c['measured_fails_at']} (error between "
              + ", ".join("n/a" if x is None or math.isnan(x) else f"{100 * x:+.0f} %"
                          for x in (lo, hi)) + ")\n")
    (HERE / "score-scored.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Score predictions.json (committed before measuring) against the H100 call of run.sh.

    cd docs/benchmarks/h100-1b-2026-12-06 && python score.py > score.md

Reads measured/trials.jsonl.gz (the device's store, exported) and
measured/crosscheck-{1b,8b}.jsonl.gz (the cross-check reports: the reference harness's
windows). Nothing is fitted:

- phase A, the 1B defaults on `chat`: per window the predicted value and 90 % interval against
  the measured figure; per metric the MAPE and the windows inside their interval; the reference
  harness's figures beside them; the capacity at each tier's SLO against the measured bracket
  (the highest rate whose windows meet it in at least 2 of 3 -- the answer engine's rule --
  and the lowest that does not);
- the tier answers: the config each answer recommends (here always vLLM's defaults, or none)
  measured at the asked rate -- did it meet the tier's SLO by the same rule, and was the
  answer right (a kept default must meet; "no config" is contradicted when the defaults meet);
  the 8B's windows at 45 req/s scored like phase A's.
Prints markdown; writes score.json beside this file.
"""

from __future__ import annotations

import gzip
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MEASURED = HERE / "measured"
METRICS = ("ttft_p95_ms", "tpot_p95_ms", "output_tokens_per_s")
STUDY_1B = "h100-1b-chat-1206-scored"
STUDY_8B = "h100-8b-chat-1206-tiers"
#: A rate meets the SLO when at least this share of its windows do (advisor/answers/rule.py).
MEETS_SHARE = 2 / 3



def _said(flag: bool | None, yes: str, no: str) -> str:
    """``yes`` / ``no`` for a verdict, ``n/a`` where there was none."""
    return "n/a" if flag is None else yes if flag else no

def _lines(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def parse_slo(slo: str) -> dict[str, float]:
    out = {}
    for part in slo.split(","):
        metric, bound = part.split("<=")
        out[metric.strip()] = float(bound)
    return out


def meets(m: dict[str, float], slo: dict[str, float]) -> bool:
    return all(m[k] <= bound for k, bound in slo.items())


def rule(windows: list[dict[str, float]], slo: dict[str, float]) -> bool:
    return sum(meets(w, slo) for w in windows) >= MEETS_SHARE * len(windows)


def windows_of(trials: list[dict[str, Any]], study: str) -> dict[float, list[dict[str, Any]]]:
    out: dict[float, list[dict[str, Any]]] = defaultdict(list)
    for row in trials:
        t = row["trial"]
        if row["study"]["name"].startswith(study + "@") and t["status"] == "complete":
            rate = float(t["workload_spec"]["params"]["arrival"]["rate_rps"])
            out[rate].append({**{m: float(t["metrics"][m]) for m in METRICS},
                              "validity": t["details"].get("validity", "")})
    return dict(sorted(out.items()))


def reference_of(report: list[dict[str, Any]]) -> dict[float, list[dict[str, float]]]:
    out: dict[float, list[dict[str, float]]] = defaultdict(list)
    for r in report:
        if r.get("type") == "measurement" and r.get("kind") == "reference" and not r.get("error"):
            out[float(r["rate_rps"])].append({m: float(r["metrics"][m]) for m in METRICS})
    return dict(out)


def score_points(points: dict[float, dict[str, Any]], windows: dict[float, list[dict[str, Any]]],
                 reference: dict[float, list[dict[str, float]]]) -> dict[str, Any]:
    rows, errs, hits = [], defaultdict(list), defaultdict(list)
    ref_errs: dict[str, list[float]] = defaultdict(list)
    for rate, ws in windows.items():
        p = points[rate]
        for i, w in enumerate(ws):
            cells = {}
            for m in METRICS:
                f, v = p[m], w[m]
                e = abs(f["value"] - v) / v
                inside = f["low"] <= v <= f["high"]
                errs[m].append(e)
                hits[m].append(inside)
                cells[m] = {"predicted": f["value"], "low": f["low"], "high": f["high"],
                            "measured": v, "error": e, "inside": inside}
            rows.append({"rate_rps": rate, "round": i + 1, "validity": w["validity"], **cells})
        for ref in reference.get(rate, []):
            for m in METRICS:
                ref_errs[m].append(abs(p[m]["value"] - ref[m]) / ref[m])
    return {"rows": rows,
            "metrics": {m: {"mape": sum(errs[m]) / len(errs[m]) if errs[m] else None,
                            "inside": sum(hits[m]), "n": len(hits[m]),
                            "mape_vs_reference": (sum(ref_errs[m]) / len(ref_errs[m])
                                                  if ref_errs[m] else None)}
                        for m in METRICS}}


def bracket(windows: dict[float, list[dict[str, Any]]], slo: dict[str, float]
            ) -> tuple[float | None, float | None]:
    """(highest rate meeting by the rule, lowest rate failing)."""
    verdicts = {r: rule(ws, slo) for r, ws in windows.items() if ws}
    met = [r for r, ok in verdicts.items() if ok]
    failed = [r for r, ok in verdicts.items() if not ok]
    return (max(met) if met else None), (min(failed) if failed else None)


def capacity_score(cap: dict[str, Any], met: float | None, failed: float | None
                   ) -> dict[str, Any]:
    c = cap["rate_rps"]
    # The measured capacity lies in [met, failed): the prediction's error lies between these.
    lo_err = None if failed is None else c / failed - 1
    hi_err = None if met is None else c / met - 1
    in_bracket = (met is None or c >= met) and (failed is None or c < failed)
    interval_overlaps = ((met is None or cap["high"] >= met)
                         and (failed is None or cap["low"] < failed))
    return {"predicted": cap, "measured_meets_at": met, "measured_fails_at": failed,
            "error_range": [lo_err, hi_err], "predicted_inside_bracket": in_bracket,
            "interval_overlaps_bracket": interval_overlaps}


def score(pred: dict[str, Any], trials: list[dict[str, Any]],
          reports: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    w1 = windows_of(trials, STUDY_1B)
    w8 = windows_of(trials, STUDY_8B)
    ref1 = reference_of(reports.get("1b", []))
    ref8 = reference_of(reports.get("8b", []))
    points_1b = {p["rate_rps"]: p for p in pred["defaults_1b_chat"]["points"]}
    out: dict[str, Any] = {"phase_a": score_points(points_1b, w1, ref1)}
    out["phase_a"]["reference"] = {str(r): v for r, v in ref1.items()}
    caps = {}
    for t in pred["tier_answers"]:
        if t["model"] == "llama-3.2-1b":
            slo = parse_slo(t["slo"])
            met, failed = bracket(w1, slo)
            caps[t["tier"]] = {"slo": t["slo"], **capacity_score(t["capacity"]["default"], met,
                                                                  failed)}
    out["phase_a"]["capacity"] = caps

    tiers = []
    for t in pred["tier_answers"]:
        slo = parse_slo(t["slo"])
        ws = (w1 if t["model"] == "llama-3.2-1b" else w8).get(t["rate_rps"], [])
        refs = (ref1 if t["model"] == "llama-3.2-1b" else ref8).get(t["rate_rps"], [])
        measured_cfg = "defaults"  # every answer here keeps them, or names none
        d_meets = rule(ws, slo) if ws else None
        if t["status"] == "keep_defaults":
            right = d_meets
            what = "the kept defaults meet the tier" if d_meets else "the kept defaults MISS"
        elif t["status"] == "no_feasible_config":
            right = None if d_meets is None else not d_meets
            what = ("the defaults miss too: the refusal holds for them (the closest config, "
                    f"{t['closest_change']}, was not measured)" if d_meets is False else
                    "the defaults MEET: the refusal was too cautious" if d_meets else "n/a")
        else:
            right, what = None, "a non-default pick: not measured by run.sh"
        tiers.append({
            "model": t["model"], "rate_rps": t["rate_rps"], "tier": t["tier"], "slo": t["slo"],
            "answer": t["status"], "config_change": t["config_change"],
            "measured_config": measured_cfg,
            "windows_meeting": sum(meets(w, slo) for w in ws), "windows": len(ws),
            "reference_meeting": sum(meets(r, slo) for r in refs), "reference": len(refs),
            "defaults_meet_by_rule": d_meets, "answer_right": right, "what": what,
            "measured": ws, "reference_figures": refs})
    out["tiers"] = tiers
    t8 = next(t for t in pred["tier_answers"] if t["model"] == "llama-3-8b")
    out["phase_b_8b"] = score_points({t8["rate_rps"]: t8["default_figures"]}, w8, ref8)
    out["phase_b_8b"]["reference"] = {str(r): v for r, v in ref8.items()}
    return out


def _f(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def _table(r: dict[str, Any], reference: dict[str, Any]) -> None:
    print("| req/s | round | validity | TTFT p95 ms pred [90 %] / measured | TPOT p95 ms "
          "| output tok/s |")
    print("|---|---|---|---|---|---|")
    for row in r["rows"]:
        cells = [f"{_f(row[m]['predicted'])} [{_f(row[m]['low'])}, {_f(row[m]['high'])}] / "
                 f"{_f(row[m]['measured'])} ({100 * row[m]['error']:.0f} %"
                 f"{'' if row[m]['inside'] else ', outside'})" for m in METRICS]
        print(f"| {row['rate_rps']:g} | {row['round']} | {row['validity']} | "
              + " | ".join(cells) + " |")
    for rate, refs in reference.items():
        for ref in refs:
            print(f"| {float(rate):g} | reference | `vllm bench serve` | "
                  + " | ".join(_f(ref[m]) for m in METRICS) + " |")
    print()
    for m, s in r["metrics"].items():
        if s["n"]:
            ref = ("" if s["mape_vs_reference"] is None
                   else "; against the reference harness's windows "
                        f"{100 * s['mape_vs_reference']:.1f} %")
            print(f"- {m}: MAPE {100 * s['mape']:.1f} %, inside the 90 % interval "
                  f"{s['inside']}/{s['n']}{ref}")
    print()


def main() -> int:
    pred = json.loads((HERE / "predictions.json").read_text())
    trials = [r for r in _lines(MEASURED / "trials.jsonl.gz")
              if r.get("format") == "slo-advisor-trial/1"]
    reports = {k: _lines(p) for k in ("1b", "8b")
               if (p := MEASURED / f"crosscheck-{k}.jsonl.gz").exists()}
    result = score(pred, trials, reports)
    print("### Phase A: Llama-3.2-1B shape, vLLM's defaults, `chat`\n")
    _table(result["phase_a"], result["phase_a"]["reference"])
    for tier, c in result["phase_a"]["capacity"].items():
        lo, hi = c["error_range"]
        p = c["predicted"]
        print(f"- capacity at `{c['slo']}` ({tier}): predicted {p['rate_rps']:.1f} req/s "
              f"[{p['low']:.1f}, {p['high']:.1f}]; measured: meets at {c['measured_meets_at']}, "
              f"fails at {c['measured_fails_at']} (error between "
              + ", ".join("n/a" if x is None else f"{100 * x:+.0f} %" for x in (lo, hi))
              + f"; predicted value inside the bracket: {c['predicted_inside_bracket']}, "
              f"interval overlaps it: {c['interval_overlaps_bracket']})")
    print("\n### The tier answers, measured\n")
    print("| model @ rate | tier | answer | measured config | windows meeting (advisor) "
          "| reference meeting | verdict by the rule | answer right? |")
    print("|---|---|---|---|---|---|---|---|")
    for t in result["tiers"]:
        model = "1B" if t["model"] == "llama-3.2-1b" else "8B"
        print(f"| {model} @ {t['rate_rps']:g} | {t['tier']} `{t['slo']}` | {t['answer']} | "
              f"{t['measured_config']} | {t['windows_meeting']}/{t['windows']} | "
              f"{t['reference_meeting']}/{t['reference']} | "
              f"{_said(t['defaults_meet_by_rule'], 'meets', 'misses')} | "
              f"{'yes' if t['answer_right'] else 'no' if t['answer_right'] is False else 'n/a'}: "
              f"{t['what']} |")
    print("\n### Phase B: Llama-3-8B shape, vLLM's defaults (the tiers' answer) at 45 req/s\n")
    _table(result["phase_b_8b"], result["phase_b_8b"]["reference"])
    (HERE / "score.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

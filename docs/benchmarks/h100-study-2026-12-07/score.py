"""Score the H100 study (issue 44, item 5) against predictions.json (committed before it ran).

    cd docs/benchmarks/h100-study-2026-12-07 && python score.py > score.md

Reads measured/trials.jsonl.gz (the device's store after the last phase, exported) and
measured/crosscheck-verify.jsonl.gz (the verification's report). Nothing is fitted:

- the study: every search trial in order, with its config change against vLLM's defaults, its
  status, wall time (start to finish, from the store's timestamps) and engine start;
- each complete window at 60 req/s against the committed calibrated prediction of the same
  batch limits and carried knobs (`predictions.json` candidates): the error per metric and
  whether the figure fell inside its 90 % interval. A config that also changes a knob the
  calibration does not carry is scored as "other knobs ignored" and counted apart;
- the verification: per config and round the advisor's client and `vllm bench serve`, and the
  paired comparison the crosscheck stored.
Prints markdown; writes score.json beside this file.
"""

from __future__ import annotations

import gzip
import json
import statistics
from datetime import datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MEASURED = HERE / "measured"
METRICS = ("ttft_p95_ms", "tpot_p95_ms", "output_tokens_per_s")
STUDY = "h100-8b-chat-1207-study"
VERIFY = "h100-8b-chat-1207-verify@60rps"
#: The knobs a calibration answers for: the batch limits through the simulator, the carried
#: ones as ratios (advisor/answers/calibration.py); any other changed knob is ignored by it.
CALIBRATED_KNOBS = ("max_num_seqs", "max_num_batched_tokens", "quantization", "kv_cache_dtype")
SLO = {"ttft_p95_ms": 300.0, "tpot_p95_ms": 40.0}
#: The verification's windows: each config limited to 0.46 of the GPU's memory, beside the other.
CO_RESIDENT = "co-resident (0.46 of the memory each), other knobs ignored"


def label(row: dict[str, Any]) -> str:
    """A window's name in the tables: the study's trial number, or the verification's round."""
    t = row["trial"]
    if row["study"]["name"] == VERIFY:
        c = (t.get("details") or {}).get("crosscheck") or {}
        return f"verify {c.get('config_label')} r{int(c.get('round') or 0) + 1}"
    return f"#{t['number']}"


def _lines(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _change(config: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k in defaults and defaults[k] != v}


def main() -> int:
    pred = json.loads((HERE / "predictions.json").read_text())
    defaults = pred["answer_document"]["default"]["config"]
    candidates = {json.dumps(c["change"], sort_keys=True): c for c in pred["candidates"]}
    rows = [r for r in _lines(MEASURED / "trials.jsonl.gz")
            if r.get("format") == "slo-advisor-trial/1"]
    study = sorted((r for r in rows if r["study"]["name"] == STUDY),
                   key=lambda r: r["trial"]["started_at"] or "")
    out: dict[str, Any] = {"study": [], "scored": [], "verify": []}
    print(f"## The study `{STUDY}`\n")
    print("| # | role | change against the defaults | status | wall s | start s | TTFT p95 | "
          "TPOT p95 | tok/s | meets |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in study:
        t = r["trial"]
        d = t.get("details") or {}
        change = _change(t["config"], defaults)
        wall = ((_time(t["finished_at"]) - _time(t["started_at"])).total_seconds()
                if t.get("finished_at") and t.get("started_at") else None)
        m = t.get("metrics") or {}
        meets = (all(m.get(k) is not None and m[k] <= b for k, b in SLO.items())
                 if t["status"] == "complete" else None)
        role = d.get("role") or d.get("advisor_source") or "sampled"
        out["study"].append({"number": t["number"], "role": role, "change": change,
                             "status": t["status"], "error": t.get("error"),
                             "wall_s": wall, "startup_s": d.get("startup_s"),
                             "metrics": {k: m.get(k) for k in METRICS}, "meets": meets,
                             "validity": d.get("validity"), "settled": d.get("settled")})

        def f(v: Any, p: int = 0) -> str:
            return "" if v is None else f"{v:,.{p}f}"
        print(f"| {t['number']} | {role} | `{json.dumps(change, sort_keys=True)}` | "
              f"{t['status']}{' (' + str(t.get('error'))[:60] + ')' if t.get('error') else ''}"
              f" | {f(wall)} | {f(d.get('startup_s'))} | {f(m.get('ttft_p95_ms'), 1)} | "
              f"{f(m.get('tpot_p95_ms'), 1)} | {f(m.get('output_tokens_per_s'))} | "
              f"{'' if meets is None else 'yes' if meets else 'no'} |")
    walls = [s["wall_s"] for s in out["study"] if s["wall_s"] is not None
             and s["status"] != "failed"]
    if walls:
        print(f"\nTrials that ran an engine: {len(walls)}, wall time median "
              f"{statistics.median(walls):.1f} s [{min(walls):.1f} .. {max(walls):.1f}], "
              f"{sum(walls):.0f} s in all.\n")

    print("## Committed predictions against the study's windows (60 req/s)\n")
    print("| trial | change | calibrated as | metric | predicted [90 %] | measured | error | "
          "inside |")
    print("|---|---|---|---|---|---|---|---|")
    kinds = ("carried", "other knobs ignored", CO_RESIDENT)
    errors: dict[str, dict[str, list[float]]] = {k: {} for k in kinds}
    inside: dict[str, list[bool]] = {k: [] for k in kinds}
    windows = [r for r in study if r["trial"]["status"] == "complete"]
    windows += [r for r in rows if r["study"]["name"] == VERIFY
                and r["trial"]["status"] == "complete"]
    for r in windows:
        t = r["trial"]
        change = _change(t["config"], defaults)
        calibrated = {k: v for k, v in change.items() if k in CALIBRATED_KNOBS}
        kind = (CO_RESIDENT if r["study"]["name"] == VERIFY
                else "carried" if calibrated == change else "other knobs ignored")
        c = candidates.get(json.dumps(calibrated, sort_keys=True))
        if c is None:
            continue
        for metric in METRICS:
            fig, measured = c["figures"].get(metric), (t.get("metrics") or {}).get(metric)
            if fig is None or measured is None:
                continue
            err = (fig["value"] - measured) / measured
            hit = fig["low"] <= measured <= fig["high"]
            errors[kind].setdefault(metric, []).append(abs(err))
            inside[kind].append(hit)
            out["scored"].append({"study": r["study"]["name"], "number": t["number"],
                                  "change": change, "kind": kind, "metric": metric,
                                  "predicted": fig, "measured": measured, "error": err,
                                  "inside": hit})
            print(f"| {label(r)} | `{json.dumps(change, sort_keys=True)}` | "
                  f"`{json.dumps(calibrated, sort_keys=True)}` | {metric} | "
                  f"{fig['value']:,.1f} [{fig['low']:,.1f} .. {fig['high']:,.1f}] | "
                  f"{measured:,.1f} | {err:+.0%} | {'yes' if hit else 'no'} |")
    print()
    for kind in errors:
        if not inside[kind]:
            continue
        mape = {m: sum(v) / len(v) for m, v in errors[kind].items()}
        out[f"mape_{kind}"] = mape
        out[f"inside_{kind}"] = [sum(inside[kind]), len(inside[kind])]
        print(f"- {kind}: MAPE " + ", ".join(f"{m} {v:.1%}" for m, v in mape.items())
              + f"; inside the 90 % interval {sum(inside[kind])} of {len(inside[kind])}")

    report = MEASURED / "crosscheck-verify.jsonl.gz"
    if report.exists():
        print("\n## The verification: the pick against the defaults\n")
        print("| config | round | harness | TTFT p95 | TPOT p95 | tok/s |")
        print("|---|---|---|---|---|---|")
        for line in _lines(report):
            if line.get("type") != "measurement":
                continue
            m = line.get("metrics") or {}
            out["verify"].append({k: line.get(k) for k in ("kind", "config", "round",
                                                           "validity", "trial_id")}
                                 | {"metrics": {k: m.get(k) for k in METRICS}})
            print(f"| {line.get('config')} | {int(line.get('round') or 0) + 1} | "
                  f"{'advisor' if line['kind'] == 'advisor' else 'vllm bench serve'} | "
                  + " | ".join("" if m.get(k) is None else f"{m[k]:,.1f}" for k in METRICS)
                  + " |")
        print()
        for kind in ("advisor", "reference"):
            for metric in METRICS:
                pick = [v["metrics"][metric] for v in out["verify"]
                        if v["kind"] == kind and v["config"] == "pick"]
                base = [v["metrics"][metric] for v in out["verify"]
                        if v["kind"] == kind and v["config"] == "defaults"]
                if len(pick) == len(base) and pick:
                    ratios = sorted(p / b for p, b in zip(pick, base, strict=True))
                    out.setdefault("paired", {}).setdefault(kind, {})[metric] = ratios
                    print(f"- {kind}, {metric}: pick / defaults per round "
                          + ", ".join(f"{r:.2f}" for r in ratios))
    (HERE / "score.json").write_text(json.dumps(out, indent=1, sort_keys=True, default=str)
                                     + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

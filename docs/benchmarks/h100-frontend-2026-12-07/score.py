"""Score this lease's calibrated predictions against the windows measured after them, and add up
the GPU time to a verified answer (issue 44, "Done when").

    cd docs/benchmarks/h100-frontend-2026-12-07 && python score.py > score.md

Reads measured/: predictions.json and profile.json (what predict.py and `advisor calibrate`
wrote on the device before the scored windows), trials-scored.jsonl.gz (the scored windows'
store), times-*.tsv and, where present, trials-verify.jsonl.gz and the answers.
Nothing is fitted here:

- each scored window (a trial of study ``<study>@<rate>rps``) against the prediction of that
  very window (``own_stream``; the measured window must carry the predicted workload: same seed,
  requests and rate, or the script stops) and against the prediction over other draws
  (``other_draws``): error per metric, and whether the figure fell inside the 90 % interval;
- MAPE per metric and workload, over all windows and over the first round alone (rounds 2-3
  replay round 1's requests, which the prefix cache may partly serve);
- the capacity at the SLO: predicted, against the bracket the measured rates give by the
  advisor's one rule (advisor/answers/rule.py: a rate meets where enough of its windows do);
- the time to a verified answer: the calibration, the study and the verification, each from
  the device's own clock (times-*.tsv).
Prints markdown; writes score.json beside this file.
"""

from __future__ import annotations

import gzip
import json
import math
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))

from advisor.answers.rule import measured_verdict  # noqa: E402
from objectives.slo import parse_slo  # noqa: E402

MEASURED = HERE / "measured"
METRICS = ("ttft_p95_ms", "tpot_p95_ms", "output_tokens_per_s")
GOALS = {"ttft_p95_ms": 25.0, "tpot_p95_ms": 15.0, "output_tokens_per_s": 10.0}
STUDIES = {"chat": "h100-8b-chat-1207c-scored", "rag-long-prompt": "h100-8b-rag-1207c-scored"}
SLO_TEXT = "ttft_p95_ms<=300,tpot_p95_ms<=40"


def lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists() and path.with_suffix(path.suffix + ".gz").exists():
        path = path.with_suffix(path.suffix + ".gz")
    if not path.exists():
        return []
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def windows(rows: list[dict[str, Any]], study: str) -> dict[float, list[dict[str, Any]]]:
    """The complete windows of ``study``'s rates, by rate, in round order."""
    out: dict[float, list[dict[str, Any]]] = {}
    for row in rows:
        name = (row.get("study") or {}).get("name", "")
        t = row.get("trial") or {}
        if not name.startswith(study + "@") or t.get("status") != "complete":
            continue
        rate = float(t["workload_spec"]["params"]["arrival"]["rate_rps"])
        out.setdefault(rate, []).append(t)
    for ts in out.values():
        ts.sort(key=lambda t: ((t.get("details") or {}).get("crosscheck") or {}).get("round", 0))
    return out


def same_workload(predicted: dict[str, Any], measured: dict[str, Any]) -> bool:
    keys = ("seed", "n_requests", "arrival", "prompt_len", "output_len", "shared_prefix")
    return all(predicted.get(k) == measured.get(k) for k in keys)


def pct(p: float, v: float) -> float:
    return 100.0 * abs(p - v) / v


def fmt(x: float) -> str:
    return f"{x:,.1f}" if x < 1000 else f"{x:,.0f}"


def score_workload(name: str, pred: dict[str, Any], rows: list[dict[str, Any]],
                   slo: Any) -> dict[str, Any]:
    by_rate = windows(rows, STUDIES[name])
    table, errs, errs_r1, errs_other = [], {m: [] for m in METRICS}, {m: [] for m in METRICS}, \
        {m: [] for m in METRICS}
    inside = {m: 0 for m in METRICS}
    verdicts = {}
    for point in pred["points"]:
        rate = point["rate_rps"]
        ws = by_rate.get(rate, [])
        for i, t in enumerate(ws):
            if not same_workload(point["workload"], t["workload_spec"]["params"]):
                raise SystemExit(f"{name} at {rate}: the measured window's workload is not the "
                                 "predicted one")
            cells = []
            for m in METRICS:
                v = t["metrics"].get(m)
                f = point["own_stream"][m]
                e = pct(f["value"], v)
                errs[m].append(e)
                if i == 0:
                    errs_r1[m].append(e)
                errs_other[m].append(pct(point["other_draws"][m]["value"], v))
                hit = f["low"] <= v <= f["high"]
                inside[m] += hit
                cells.append(f"{fmt(f['value'])} [{fmt(f['low'])}, {fmt(f['high'])}] / "
                             f"{fmt(v)} ({e:.0f} %{'' if hit else ', outside'})")
            table.append((rate, i + 1, (t.get("details") or {}).get("validity", "?"), cells))
        verdicts[rate] = measured_verdict(slo, [t["metrics"] for t in ws]) if ws else None
    n = len(errs["ttft_p95_ms"])
    mape = {m: (sum(v) / len(v) if v else math.nan) for m, v in errs.items()}
    cap = pred["capacity_rps"]
    met = [r for r, v in verdicts.items() if v is not None and v.meets]
    missed = [r for r, v in verdicts.items() if v is not None and v.meets is False]
    below = max((r for r in met if all(r < x for x in missed)), default=None)
    above = min((r for r in missed if below is None or r > below), default=None)
    return {"windows": n, "table": table, "mape": mape,
            "mape_round1": {m: (sum(v) / len(v) if v else math.nan) for m, v in errs_r1.items()},
            "mape_other_draws": {m: (sum(v) / len(v) if v else math.nan)
                                 for m, v in errs_other.items()},
            "inside": inside, "capacity": cap,
            "verdicts": {r: (v.text() if v else "not measured") for r, v in verdicts.items()},
            "bracket": (below, above)}


def capacity_line(s: dict[str, Any]) -> str:
    c, (lo, hi) = s["capacity"], s["bracket"]
    pred = c["rate_rps"]
    if lo is None and hi is None:
        return f"predicted {pred:.1f} req/s; no scored rate decided"
    parts = [f"predicted {pred:.1f} req/s [{c['low']:.1f}, {c['high']:.1f}]"]
    parts.append(f"measured: meets at {lo:g}" if lo is not None else "measured: meets at none")
    parts.append(f"misses at {hi:g}" if hi is not None else "misses at none scored")
    if lo is not None and hi is not None:
        worst = max(abs(pred / lo - 1), abs(pred / hi - 1)) if not lo <= pred < hi else \
            max(pred / lo - 1, 1 - pred / hi)
        inside = lo <= pred < hi
        parts.append(f"predicted {'inside' if inside else 'outside'} the bracket; the true "
                     f"capacity lies in [{lo:g}, {hi:g}), so the error is at most "
                     f"{100 * worst:.0f} %")
    return "; ".join(parts)


def times() -> dict[str, Any]:
    """Seconds of each part of the way to a verified answer, from the device's clock."""
    out: dict[str, Any] = {}
    profile = MEASURED / "profile.json"
    if profile.exists():
        out["calibration_s"] = json.loads(profile.read_text()).get("probe_seconds")
    for phase, start, end in (("answer", "study-start", "study-end"),
                              ("verify", "verify-start", "verify-end")):
        path = MEASURED / f"times-{phase}.tsv"
        if not path.exists():
            continue
        stamps = {ln.split("\t")[0]: int(ln.split("\t")[1])
                  for ln in path.read_text().splitlines() if ln.strip()}
        if start in stamps and end in stamps:
            out["study_s" if phase == "answer" else f"{phase}_s"] = stamps[end] - stamps[start]
    parts = [out.get(k) for k in ("calibration_s", "study_s", "verify_s")]
    if all(isinstance(p, int | float) for p in parts):
        out["total_s"] = sum(parts)  # type: ignore[arg-type]
    return out


def main() -> int:
    pred = json.loads((MEASURED / "predictions.json").read_text())
    rows = lines(MEASURED / "trials-scored.jsonl")
    slo = parse_slo(SLO_TEXT)
    result: dict[str, Any] = {"profile": pred["profile"], "gpu": pred["gpu"],
                              "step_model": pred["step_model"], "workloads": {}}
    print(f"# Scored: {pred['gpu']}, vLLM {pred['engine_versions'].get('vllm', '?')}, "
          f"the 8B shape's defaults\n")
    sm = pred["step_model"]
    print(f"Calibration (this lease): step {sm['fixed_ms']:.2f} ms + "
          f"{sm['per_sequence_ms']:.4f} ms/sequence + {sm['per_prefill_token_ms']:.4f} "
          f"ms/prompt token, frontend {sm['frontend_token_ms']:g} ms/token; probe "
          f"{pred['probe_seconds']} s.\n")
    all_inside, all_n = 0, 0
    for name, wp in pred["workloads"].items():
        s = score_workload(name, wp, rows, slo)
        result["workloads"][name] = {k: v for k, v in s.items() if k != "table"}
        if not s["windows"]:
            print(f"## {name}\n\nnot measured\n")
            continue
        print(f"## {name}\n")
        print("| req/s | round | validity | TTFT p95 ms pred [90 %] / measured | TPOT p95 ms | "
              "output tok/s |")
        print("|---|---|---|---|---|---|")
        for rate, rnd, validity, cells in s["table"]:
            print(f"| {rate:g} | {rnd} | {validity} | " + " | ".join(cells) + " |")
        print()
        for m in METRICS:
            print(f"- {m}: MAPE {s['mape'][m]:.1f} % (goal {GOALS[m]:g} %; first rounds only "
                  f"{s['mape_round1'][m]:.1f} %; against the other-draws prediction "
                  f"{s['mape_other_draws'][m]:.1f} %), inside the 90 % interval "
                  f"{s['inside'][m]}/{s['windows']}")
        print(f"- capacity at `{SLO_TEXT}`: {capacity_line(s)}")
        for rate, text in s["verdicts"].items():
            print(f"  - {rate:g} req/s: {text}")
        print()
        all_inside += sum(s["inside"].values())
        all_n += 3 * s["windows"]
    # pooled over every scored window of both workloads
    pooled: dict[str, list[float]] = {m: [] for m in METRICS}
    for name, wp in pred["workloads"].items():
        for point in wp["points"]:
            for t in windows(rows, STUDIES[name]).get(point["rate_rps"], []):
                for m in METRICS:
                    pooled[m].append(pct(point["own_stream"][m]["value"], t["metrics"][m]))
    if all_n:
        result["pooled"] = {"mape": {m: sum(v) / len(v) for m, v in pooled.items() if v},
                            "inside": all_inside, "figures": all_n}
        print("## Both workloads\n")
        print("- MAPE: " + ", ".join(f"{m} {sum(v) / len(v):.1f} %" for m, v in pooled.items()
                                     if v) + f"; inside the 90 % interval {all_inside} of "
              f"{all_n} figures ({100 * all_inside / all_n:.0f} %, goal 80 %)\n")
    t = times()
    result["time_to_answer"] = t
    if t:
        print("## Time to a verified answer (GPU seconds, device clock)\n")
        for k in ("calibration_s", "study_s", "verify_s", "total_s"):
            if k in t:
                print(f"- {k[:-2]}: {t[k]} s" + (f" ({t[k] / 60:.1f} min, goal 15 min)"
                                                if k == "total_s" else ""))
        print()
    (HERE / "score.json").write_text(json.dumps(result, indent=1, sort_keys=True,
                                                default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

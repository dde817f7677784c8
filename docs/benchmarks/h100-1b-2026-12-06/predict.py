"""Predictions for the H100 (issue 44, item 4), from the product's planner, made before measuring.

    python docs/benchmarks/h100-1b-2026-12-06/predict.py            # writes predictions.json here

Asks `advisor recommend --target vllm --hardware h100 ... --json` (the CLI, the product's one
answer engine) on a FRESH SQLite store that imports the shipped knowledge, nothing else:

- the Llama-3.2-1B shape's defaults on `chat` at four rates (RATES_1B, chosen from the predicted
  capacity: light load, ~0.6x, ~1x and ~1.3x of it): TTFT p95 / TPOT p95 / output tok/s with
  their 90 % intervals, and the capacity at the SLO `ttft_p95_ms<=300,tpot_p95_ms<=40`;
- for the 1B and the 8B, the recommended config at two SLO tiers (TIERS: the issue's SLO and the
  cheat-sheet's `interactive` tier for LLM serving, tighter on TPOT) at one rate each
  (TIER_RATES): status, config, figures, verdict, capacity, closest config.

The answers are the planner's as they come (the full JSON documents are kept under "answers");
the summary fields are read from them, nothing is fitted here. Run again on the same code and
knowledge, it writes the same file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
SLO = "ttft_p95_ms<=300,tpot_p95_ms<=40"
#: The tiers asked: the issue's SLO and the cheat-sheet's `interactive` tier for LLM serving
#: (objectives/kinds/llm_serving.py), TPOT 25 ms instead of 40.
TIERS = {"issue": SLO, "interactive": "ttft_p95_ms<=500,tpot_p95_ms<=25"}
#: The 1B defaults' rates on `chat`: from light load to past the predicted capacity (85 req/s
#: [25, 110] from a first question at 40 req/s): 0.25x, 0.6x, 1.0x, 1.3x of it.
RATES_1B = (20.0, 50.0, 85.0, 110.0)
#: One rate per model for the tier questions: the 1B's at a measured-in-phase-A rate; the 8B's
#: between its measured H100 windows (40 and 52 req/s), so the calibration answers, not a window.
TIER_RATES = {"llama-3.2-1b": 50.0, "llama-3-8b": 45.0}
METRICS = ("ttft_p95_ms", "tpot_p95_ms", "output_tokens_per_s")


def ask(env: dict[str, str], model: str, rate: float, slo: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "advisor", "recommend", "--target", "vllm", "--hardware", "h100",
           "--model", model, "--rate-rps", f"{rate:g}", "--slo", slo, "--json"]
    run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if run.returncode not in (0, 1):  # 1: no config recommended (still an answer)
        raise SystemExit(f"{' '.join(cmd)} failed ({run.returncode}):\n{run.stderr}")
    doc = json.loads(run.stdout)
    doc["_command"] = ("advisor recommend --target vllm --hardware h100 --model "
                       f"{model} --rate-rps {rate:g} --slo \"{slo}\" --json")
    return doc


def figs(figures: dict[str, Any]) -> dict[str, Any]:
    return {m: {k: figures[m].get(k) for k in ("value", "low", "high", "basis")}
            for m in METRICS if m in figures}


def diff(config: dict[str, Any] | None, default: dict[str, Any]) -> dict[str, Any] | None:
    return None if config is None else {k: v for k, v in config.items() if default.get(k) != v}


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "ADVISOR_DB_URL": f"sqlite:///{tmp}/advisor.db",
               "ADVISOR_CACHE_DIR": f"{tmp}/cache", "COLUMNS": "200"}
        env.pop("ADVISOR_IMPORT_SHIPPED", None)
        answers = {}
        for rate in RATES_1B:
            answers[f"llama-3.2-1b@{rate:g}|issue"] = ask(env, "llama-3.2-1b", rate, SLO)
        for model, rate in TIER_RATES.items():
            for tier, slo in TIERS.items():
                k = f"{model}@{rate:g}|{tier}"
                if k not in answers:
                    answers[k] = ask(env, model, rate, slo)

    points = []
    for rate in RATES_1B:
        a = answers[f"llama-3.2-1b@{rate:g}|issue"]
        points.append({"rate_rps": rate, **figs(a["default"]["figures"])})
    first = answers[f"llama-3.2-1b@{RATES_1B[0]:g}|issue"]
    tiers = []
    for model, rate in TIER_RATES.items():
        for tier, slo in TIERS.items():
            a = answers[f"{model}@{rate:g}|{tier}"]
            default = a["default"]["config"]
            closest = a.get("closest") or {}
            tiers.append({
                "model": model, "rate_rps": rate, "tier": tier, "slo": slo,
                "status": a["status"], "answer": a["answer"], "basis": a["basis"],
                "config_change": diff(a.get("config"), default),
                "figures": figs(a.get("figures") or {}),
                "verdict": a.get("verdict"),
                "default_figures": figs(a["default"]["figures"]),
                "default_verdict": (a["default"] or {}).get("verdict"),
                "capacity": a.get("capacity"),
                "closest_change": diff(closest.get("config"), default),
                "closest_verdict": closest.get("verdict"),
                "summary": a["summary"],
            })
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True, check=False).stdout.strip()
    out = {
        "what": "issue 44 item 4 on the H100: the planner's predictions, committed before "
                "measuring",
        "code_commit": head,
        "store": "fresh SQLite store, shipped knowledge imported (nothing else)",
        "slo": SLO,
        "tiers": TIERS,
        "defaults_1b_chat": {
            "model": "llama-3.2-1b", "workload": "chat", "config": "vLLM defaults",
            "points": points,
            "capacity": first["capacity"]["default"],
            "calibration": (first.get("details") or {}).get("calibration"),
        },
        "tier_answers": tiers,
        "answers": answers,
    }
    (HERE / "predictions.json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    for p in points:
        print(p["rate_rps"], {m: round(p[m]["value"], 1) for m in METRICS})
    print("capacity", out["defaults_1b_chat"]["capacity"])
    for t in tiers:
        print(t["model"], t["rate_rps"], t["tier"], t["status"], t["config_change"],
              "closest:", t["closest_change"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

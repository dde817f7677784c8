"""Predictions for the H100 study (issue 44, item 5), from the shipped calibration, made before
the study measured anything.

    python docs/benchmarks/h100-study-2026-12-07/predict.py     # writes predictions.json here

On a FRESH SQLite store holding the same shipped vLLM knowledge the device call imports
(knowledge/data/h100-vllm-*.jsonl.gz, h200-vllm-*.jsonl.gz; nothing of this study):

- the planner's answer to the study's question (`advisor recommend --target vllm --hardware
  h100 --model llama-3-8b --rate-rps 60 --slo ttft_p95_ms<=300,tpot_p95_ms<=40 --json`), as the
  CLI gives it: its status, the candidate it names, the defaults' figures;
- the calibrated figures (TTFT p95, TPOT p95, output tok/s, 90 % intervals) at 60 req/s of
  every config the planner considers from a calibration (`considered`: the defaults, the
  batch-limit variants, the carried quantization / KV-dtype configs). The study's warm start
  queues the candidate the answer names; its sampler picks the rest, so a sampled config that
  changes a knob the calibration does not carry is predicted as the candidate with its batch
  limits and carried knobs (score.py says which).

Run again on the same code and knowledge, it writes the same file.
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
sys.path.insert(0, str(ROOT))
SLO = "ttft_p95_ms<=300,tpot_p95_ms<=40"
RATE = 60.0
MODEL = "llama-3-8b"
METRICS = ("ttft_p95_ms", "tpot_p95_ms", "output_tokens_per_s")


def _store_files() -> list[str]:
    data = ROOT / "knowledge" / "data"
    return sorted(str(p) for pattern in ("h100-vllm-*.jsonl.gz", "h200-vllm-*.jsonl.gz")
                  for p in data.glob(pattern))


def candidate_predictions(db_url: str) -> list[dict[str, Any]]:
    """Every config the calibrated planner considers at RATE, with its predicted figures."""
    from advisor.answers.calibration import (
        _knob_effects_cached,
        _limits,
        _probe_params,
        _variants,
        calibration_profile,
    )
    from advisor.calibrate import workload_streams
    from knowledge import TrialStore
    from knowledge.calibrated import predict
    from knowledge.surrogates import workload_features
    from objectives.registry import get_target

    store = TrialStore(db_url)
    engine = get_target("vllm")
    calibration = calibration_profile(store, engine=engine, model=MODEL, hardware="h100")
    assert calibration is not None, "no calibration of the 8B on the H100 in the store"
    profile = calibration.profile
    params = {**_probe_params(profile), "model": profile.model}
    shape = {k: v for k, v in workload_features({"params": params}).items() if k != "rate_rps"}
    streams = workload_streams(params)(RATE)
    defaults = engine.space().default_config()
    configs: list[tuple[dict[str, Any], Any]] = [(c, None) for c in _variants(engine, profile)]
    configs += [(c.config, c.effect)
                for c in _knob_effects_cached(store, engine, profile, shape, list(METRICS))]
    out = []
    for config, effect in configs:
        slots, budget = _limits(engine, config)
        p = predict(profile, streams, rate_rps=RATE, slots=slots, token_budget=budget,
                    effect=effect)
        out.append({
            "change": {k: v for k, v in config.items() if defaults.get(k) != v},
            "carried_from": None if effect is None else effect.source,
            "figures": {m: {"value": p.figures[m].value, "low": p.figures[m].low,
                            "high": p.figures[m].high} for m in METRICS if m in p.figures},
        })
    return out


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "ADVISOR_DB_URL": f"sqlite:///{tmp}/advisor.db",
               "ADVISOR_CACHE_DIR": f"{tmp}/cache", "ADVISOR_IMPORT_SHIPPED": "0",
               "COLUMNS": "200"}
        subprocess.run([sys.executable, "-m", "advisor", "knowledge", "import", *_store_files()],
                       cwd=ROOT, env=env, check=True, capture_output=True)
        cmd = [sys.executable, "-m", "advisor", "recommend", "--target", "vllm", "--hardware",
               "h100", "--model", MODEL, "--rate-rps", f"{RATE:g}", "--slo", SLO, "--json"]
        run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                             check=False)
        if run.returncode not in (0, 1):
            raise SystemExit(f"{' '.join(cmd)} failed ({run.returncode}):\n{run.stderr}")
        answer = json.loads(run.stdout)
        os.environ["ADVISOR_IMPORT_SHIPPED"] = "0"
        candidates = candidate_predictions(env["ADVISOR_DB_URL"])
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True, check=False).stdout.strip()
    out = {
        "what": "issue 44 item 5 on the H100: the calibrated predictions at the study's "
                "question, committed before the study measured anything",
        "code_commit": head,
        "store": "fresh SQLite store with knowledge/data/h100-vllm-*.jsonl.gz and "
                 "h200-vllm-*.jsonl.gz imported (what the device call imports)",
        "question": {"model": MODEL, "workload": "chat", "rate_rps": RATE, "slo": SLO},
        "answer": {k: answer.get(k) for k in ("status", "basis", "summary", "closest",
                                              "default", "capacity", "candidates")},
        "candidates": candidates,
        "answer_document": answer,
    }
    (HERE / "predictions.json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(answer["status"], answer["summary"][:200])
    for c in candidates:
        print(json.dumps(c["change"]), {m: round(f["value"], 1)
                                        for m, f in c["figures"].items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

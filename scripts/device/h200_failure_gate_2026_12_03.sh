#!/usr/bin/env bash
# The failure gate on the H200 (issue 18 item 5): an `advisor tune` study of vLLM on the 8B shape
# whose store holds the shipped knowledge (ADVISOR_IMPORT_SHIPPED=1), so the failure model is fitted
# on every shipped vLLM start (the 2026-11-30 sets' failed starts included) before the first trial;
# each sampled config it predicts to fail (p >= 0.7) is stored `failed` / `predicted_failure` with
# its reason and never started. Through the device tool on nvidia-h200 (one GPU), carrying
# .vllm-h200 (the vLLM 0.26.0 payload) and .whl (optuna, sqlalchemy, sqlmodel, ... for Python 3.12).
#
#   bash scripts/device/h200_failure_gate_2026_12_03.sh > $OUT/log-gate.txt 2>&1
#
# No warm start and no default trial, so every trial is sampled (TPE's random start-up, seed 0)
# and the gate may judge each; no paired repeats. The `chat` preset at 45 req/s (8 s of
# arrivals), the shipped sets' workload. One call of at most 570 s: a vLLM start costs 70-190 s,
# a skipped config nothing, so the study stops itself before the call's limit and exports what
# finished ($OUT/trials-gate.jsonl) with the study's trial table ($OUT/trials-gate.txt).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
# shellcheck disable=SC1091
source .vllm-h200/activate.sh
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site \
  .whl/*.whl || { echo "wheel install failed" >&2; exit 1; }
export PYTHONPATH=/tmp/site:$PWD:$PYTHONPATH
export ADVISOR_DB_URL=sqlite:////tmp/advisor-gate.db ADVISOR_IMPORT_SHIPPED=1
export ADVISOR_CACHE_DIR=/tmp/advisor-cache PYTHONUNBUFFERED=1 COLUMNS=200
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
STUDY=h200-8b-chat-1203-gate

finish() {
  python3 -m advisor trials --study "$STUDY" > "$OUT/trials-gate.txt" 2>&1 || true
  python3 -m advisor knowledge export --study "$STUDY" -o "$OUT/trials-gate.jsonl" || true
  nvidia-smi > "$OUT/nvidia-smi-gate.txt" 2>&1 || true
}
trap finish EXIT
# The device tool kills a command at its limit without running traps: stop ourselves first.
( sleep "${ADVISOR_DEVICE_DEADLINE_S:-520}"; pkill -INT -f "advisor tune" ) &

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -m advisor tune --target vllm --model llama-3-8b --workload chat \
  --workload-param 'arrival={"process":"poisson","rate_rps":45}' \
  --workload-param n_requests=360 --workload-param drain_limit_s=15 \
  --name "$STUDY" --trials 40 --seed 0 --no-warm-start --no-include-default \
  --paired-repeats 0 --trial-timeout 300

#!/usr/bin/env bash
# The failure gate on the H200 (issue 18 item 5): an `advisor tune` study of vLLM on the 8B shape
# whose store holds the shipped knowledge (ADVISOR_IMPORT_SHIPPED=1), so the failure model is fitted
# on every shipped vLLM start (the 2026-11-30 sets' failed starts included) before the first trial;
# each sampled config it predicts to fail (p >= 0.7) is stored `failed` / `predicted_failure` with
# its reason and never started. Through the device tool on nvidia-h200 (one GPU), carrying
# .vllm-h200 (the vLLM 0.26.0 payload) and .whl (optuna, sqlalchemy, sqlmodel, ... for Python 3.12).
#
#   bash docs/benchmarks/h200-2026-12-03/h200_failure_gate_2026_12_03.sh > $OUT/log-gate.txt 2>&1
#
# No warm start and no default trial, so every trial is sampled (TPE's random start-up, seed 0)
# and the gate may judge each; no paired repeats. The `chat` preset at 45 req/s (8 s of
# arrivals), the shipped sets' workload. One call of at most 570 s: a vLLM start costs 70-190 s,
# a skipped config nothing, so the study stops itself before the call's limit and exports what
# finished ($OUT/trials-gate.jsonl) with the study's trial table ($OUT/trials-gate.txt).
set -uo pipefail
cd "$(dirname "$0")/../../.."  # the repository root
OUT=${OUT:-/tmp/out}
DEVICE_DB=/tmp/advisor-gate.db DEVICE_IMPORT_SHIPPED=1
# shellcheck source=scripts/device/h200_env.sh
source scripts/device/h200_env.sh
STUDY=h200-8b-chat-1203-gate

finish() {
  python3 -m advisor trials --study "$STUDY" > "$OUT/trials-gate.txt" 2>&1 || true
  python3 -m advisor knowledge export --study "$STUDY" -o "$OUT/trials-gate.jsonl" || true
  nvidia-smi > "$OUT/nvidia-smi-gate.txt" 2>&1 || true
}
trap finish EXIT
# The device tool kills a command at its limit without running traps: stop ourselves first.
stop_before_limit 520 INT "advisor tune"

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -m advisor tune --target vllm --model llama-3-8b --workload chat \
  --workload-param 'arrival={"process":"poisson","rate_rps":45}' \
  --workload-param n_requests=360 --workload-param drain_limit_s=15 \
  --name "$STUDY" --trials 40 --seed 0 --no-warm-start --no-include-default \
  --paired-repeats 0 --trial-timeout 300

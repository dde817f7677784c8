#!/usr/bin/env bash
# The H200 vLLM studies of 2026-11-30, as run through the device tool on nvidia-h200-x2
# (one study per GPU, in parallel; carry .vllm-h200 and .whl). Random-weight models of the
# Llama-3.2-1B and Llama-3-8B shapes, the `chat` workload (lognormal prompts median 256, outputs
# median 128) at Poisson rates chosen near each shape's knee, so knob choices trade TTFT against
# throughput. Trials land in $OUT/trials-gpu<i>.jsonl.
#
# Run 1: ADVISOR_DEVICE_DEADLINE_S=550 bash docs/benchmarks/h200-2026-11-30/h200_vllm_2026_11_30.sh
# Run 2: TRIALS=3 SEED=1 SUFFIX=-b ADVISOR_DEVICE_DEADLINE_S=225 bash docs/benchmarks/h200-2026-11-30/h200_vllm_2026_11_30.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."  # the repository root
TRIALS=${TRIALS:-12} SEED=${SEED:-0} SUFFIX=${SUFFIX:-}
COMMON="--target vllm --workload chat --sampler tpe --seed $SEED --timeout 420 --trials $TRIALS"
bash scripts/device/run_study.sh \
  "GPU=0 $COMMON --model llama-3.2-1b --name h200-vllm-1b-chat-150rps$SUFFIX --workload-param n_requests=600 --workload-param arrival={\"process\":\"poisson\",\"rate_rps\":150}" \
  "GPU=1 $COMMON --model llama-3-8b --name h200-vllm-8b-chat-60rps$SUFFIX --workload-param n_requests=400 --workload-param arrival={\"process\":\"poisson\",\"rate_rps\":60}"

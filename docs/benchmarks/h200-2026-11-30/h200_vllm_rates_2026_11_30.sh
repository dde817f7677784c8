#!/usr/bin/env bash
# The H200 rate-sweep studies of 2026-11-30 (second set), as run through the device tool on
# nvidia-h200-x2 (carry .vllm-h200 and .whl). Each trial starts `vllm serve` once and measures
# its config at four Poisson rates (`--also-rate`), so one engine start (~60-130 s) yields four
# trials, one per rate, each in the study of its rate. Random-weight models of the Llama-3-8B
# (GPU 0) and Llama-3.2-1B (GPU 1) shapes, the `chat` workload, an 8-second arrival window per
# rate. RUN names the call's studies and seeds their samplers; the first run also measures vLLM's
# defaults; TRANSFORMERS=N adds an N-trial transformers study on GPU 1 after the vLLM one.
# Trials land in $OUT/trials-gpu<i>.jsonl. FIRST="GPU=<i> !<command>" runs a job (the client
# cross-check, say) on that GPU before its studies.
#
#   RUN=a VLLM_TRIALS_1B=3 TRANSFORMERS=6 ADVISOR_DEVICE_DEADLINE_S=540 bash docs/benchmarks/h200-2026-11-30/h200_vllm_rates_2026_11_30.sh
#   RUN=b ADVISOR_DEVICE_DEADLINE_S=540 bash docs/benchmarks/h200-2026-11-30/h200_vllm_rates_2026_11_30.sh
#   RUN=c VLLM_TRIALS_1B=0 TRANSFORMERS=8 ADVISOR_DEVICE_DEADLINE_S=465 bash docs/benchmarks/h200-2026-11-30/h200_vllm_rates_2026_11_30.sh
#   RUN=d DRAIN=20 FIRST="GPU=1 !bash docs/benchmarks/h200-client-crosscheck/h200_client_crosscheck_2026_11_30.sh" ADVISOR_DEVICE_DEADLINE_S=545 bash docs/benchmarks/h200-2026-11-30/h200_vllm_rates_2026_11_30.sh
#   RUN=e DRAIN=20 VLLM_TRIALS_1B=8 TRANSFORMERS=6 ADVISOR_DEVICE_DEADLINE_S=545 bash docs/benchmarks/h200-2026-11-30/h200_vllm_rates_2026_11_30.sh
#   RUN=f DRAIN=20 VLLM_TRIALS_1B=0 TRANSFORMERS=8 ADVISOR_DEVICE_DEADLINE_S=430 bash docs/benchmarks/h200-2026-11-30/h200_vllm_rates_2026_11_30.sh
# (d, e and f ran back to back on one warm machine, so each call's export also held the earlier
# calls' trials; `advisor knowledge import` skips what it already has.)
# Runs from d on add DRAIN=20: a start then costs ~2 minutes for four trials.
# Not run yet: the one-knob ablation of vLLM's defaults toward the config that beat them, both
# measured in one lease (ENQUEUE adds `--enqueue`, INCLUDE_DEFAULT=1 measures the default first;
# 11 engine starts per GPU, ~20 minutes: one call measures about half, so split the YAML list in
# two and run each half as its own RUN letter, both with INCLUDE_DEFAULT=1):
#   RUN=g DRAIN=20 INCLUDE_DEFAULT=1 ENQUEUE=@docs/benchmarks/h200-2026-11-30/h200_vllm_ablation_configs.yaml VLLM_TRIALS_8B=11 VLLM_TRIALS_1B=11 ADVISOR_DEVICE_DEADLINE_S=545 bash docs/benchmarks/h200-2026-11-30/h200_vllm_rates_2026_11_30.sh
# Run it as `... > $OUT/log.txt 2>&1 < /dev/null`, never into a pipe: an engine left by a killed
# trial can hold a pipe open until the call's limit.
set -uo pipefail
cd "$(dirname "$0")/../../.."  # the repository root
RUN=${RUN:-a}
SEED=$(( $(printf '%d' "'$RUN") - 96 ))   # a -> 1, b -> 2, ...
DEFAULT=--include-default
[ "$RUN" = a ] || [ "${INCLUDE_DEFAULT:-0}" = 1 ] || DEFAULT=--no-include-default
# DRAIN=<s> bounds how long an overloaded config's queue is drained (workload drain_limit_s,
# docs/metrics.md); the 2026-11-30 runs predate it and waited for every request.
DRAIN_PARAM=${DRAIN:+--workload-param drain_limit_s=$DRAIN}
ENQUEUE_ARG=${ENQUEUE:+--enqueue $ENQUEUE}
COMMON="--target vllm --workload chat --sampler tpe --seed $SEED --timeout 480 $DEFAULT $DRAIN_PARAM $ENQUEUE_ARG"
poisson() { echo "arrival={\"process\":\"poisson\",\"rate_rps\":$1}"; }
STUDIES=(
  ${FIRST:+"$FIRST"}
  "GPU=0 $COMMON --model llama-3-8b --trials ${VLLM_TRIALS_8B:-40} --name h200-vllm-8b-chat-45rps-$RUN --workload-param n_requests=360 --workload-param $(poisson 45) --also-rate 15 --also-rate 30 --also-rate 60"
  "${VLLM_1B_GPU:-GPU=1} $COMMON --model llama-3.2-1b --trials ${VLLM_TRIALS_1B:-40} --name h200-vllm-1b-chat-90rps-$RUN --workload-param n_requests=720 --workload-param $(poisson 90) --also-rate 30 --also-rate 60 --also-rate 120"
)
if [ "${VLLM_TRIALS_1B:-40}" -eq 0 ]; then
  STUDIES=("${STUDIES[@]:0:${#STUDIES[@]}-1}")
fi
if [ "${TRANSFORMERS:-0}" -gt 0 ]; then
  STUDIES+=("GPU=1 --target transformers --slo ttft_p95_ms<=300,tpot_p95_ms<=40 --model llama-3.2-1b --workload chat --sampler tpe --seed $SEED --timeout 300 --trials $TRANSFORMERS --name h200-transformers-1b-chat-4rps-$RUN --workload-param n_requests=64 --workload-param $(poisson 4) $DRAIN_PARAM")
fi
bash scripts/device/run_study.sh "${STUDIES[@]}"

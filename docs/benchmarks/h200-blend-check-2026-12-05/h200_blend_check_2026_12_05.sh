#!/usr/bin/env bash
# A prospective check of the load curves blended with the simulator (issue 18, adopted
# 2026-12-05), at the answer the blend changed most: `advisor recommend --target vllm --hardware
# h200 --model llama-3-8b --rate-rps 90 --slo "ttft_p95_ms<=2000,tpot_p95_ms<=50"` recommends
# fp8 weights (the cheat-sheet's standard tier at 90 req/s), where the curves alone found no
# feasible config; its predictions, and the curve's and the simulator's alone at 82.5 and 90
# req/s, are in docs/benchmarks/h200-blend-check-2026-12-05/prediction.json, written and
# committed before this ran. The fp8 config was measured up to 75 req/s (TTFT p95 479 ms there):
# 82.5 and 90 req/s lie past every rate of its curve, where the simulator without a frontend is
# known to read low (docs/knowledge.md).
#
# Here vLLM serves the 8B shape (random weights) with `quantization: fp8` and every other knob at
# its default, the `chat` preset at 90 req/s (720 requests, 8 s of Poisson arrivals) and 82.5 req/s
# (the same window), three rounds of the advisor's client per rate each gated against the
# server's own metrics and stored as trials of study h200-8b-chat-1205-blend@<rate>rps, and one
# `vllm bench serve` run per rate on the same requests after them.
#
# Run through the device tool on nvidia-h200 (one GPU), carrying .vllm-h200 and .whl
# (h200_env.sh):
#
#   bash docs/benchmarks/h200-blend-check-2026-12-05/h200_blend_check_2026_12_05.sh > $OUT/log-blend-check.txt 2>&1
#
# and, in a second call of the same lease, the engine's defaults at the same rates (the baseline
# the answer chose fp8 over; their predictions are committed beside the fp8 ones):
#
#   bash docs/benchmarks/h200-blend-check-2026-12-05/h200_blend_check_2026_12_05.sh default '{}' \
#       > $OUT/log-blend-check-default.txt 2>&1
#
# Results in $OUT: crosscheck-blend-check[-LABEL].jsonl, trials-blend-check[-LABEL].jsonl (the
# store, exported), nvidia-smi-blend-check[-LABEL].txt. Time: the fp8 start (~150-200 s) and 8 windows of 8 s with warm-up
# and drain: at most 570 s (the deadline stops the crosscheck first, so what was measured is
# exported).
set -uo pipefail
cd "$(dirname "$0")/../../.."  # the repository root
OUT=${OUT:-/tmp/out}
LABEL=${1:-fp8}
KNOBS=${2:-'{"quantization": "fp8"}'}
# The study is named after the GPU the call got (the device tool may lend an H100 for an H200
# call): only on an H200 does this check the committed predictions; elsewhere it measures the
# answer's config against the defaults on that card, no more.
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$GPU_NAME" in
  *H200*) GPU_TAG=h200 ;;
  *H100*) GPU_TAG=h100 ;;
  *) GPU_TAG=gpu ;;
esac
if [ "$GPU_TAG" != h200 ]; then
  echo "NOTE: this GPU is '$GPU_NAME', not an H200: the committed predictions do not apply" \
    "to what this call measures" >&2
  # REQUIRE_H200=1: stop here, before the engine starts (the call then costs only its start).
  [ "${REQUIRE_H200:-0}" = 1 ] && { echo "REQUIRE_H200=1: stopping" >&2; exit 3; }
fi
if [ "$LABEL" = fp8 ]; then PHASE=blend-check STUDY=$GPU_TAG-8b-chat-1205-blend
else PHASE=blend-check-$LABEL STUDY=$GPU_TAG-8b-chat-1205-blend-$LABEL; fi
WINDOW=${WINDOW:-8}
# shellcheck source=scripts/device/h200_env.sh
source scripts/device/h200_env.sh
trap export_phase EXIT
stop_before_limit 570 TERM "advisor crosscheck"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

# shellcheck disable=SC2046
python3 -m advisor crosscheck $(chat_workload llama-3-8b 90) --rate 90 --rate 82.5 \
  --config "$LABEL=$KNOBS" --repeats 3 --reference-repeats 1 \
  --store-as "$STUDY" --slo "ttft_p95_ms<=2000,tpot_p95_ms<=50" \
  -o "$OUT/crosscheck-$PHASE.jsonl"

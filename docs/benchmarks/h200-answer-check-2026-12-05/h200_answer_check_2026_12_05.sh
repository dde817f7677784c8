#!/usr/bin/env bash
# A prospective check of the answer issue 18 asks for: `advisor recommend --target vllm
# --hardware h200 --model llama-3-8b --rate-rps 50 --slo "ttft_p95_ms<=300,tpot_p95_ms<=40"`
# answers "keep the defaults" with predicted TTFT p95, TPOT p95 and output tok/s and their 90 %
# intervals (docs/benchmarks/h200-answer-check-2026-12-05/prediction.json, written and committed
# before this ran). Here that answer is measured: vLLM's defaults on the 8B shape (random
# weights) with the `chat` preset at 50 req/s (a rate no shipped trial was measured at), three
# rounds of the advisor's client interleaved with three of the reference harness (`vllm bench
# serve`, the same requests on the same server), each advisor measurement gated against the
# server's own metrics and stored as a trial of study h200-8b-chat-1205-answer@50rps.
#
# Run through the device tool on nvidia-h200 (one GPU), carrying .vllm-h200 and .whl
# (h200_env.sh):
#
#   bash docs/benchmarks/h200-answer-check-2026-12-05/h200_answer_check_2026_12_05.sh > $OUT/log-answer-check.txt 2>&1
#
# Results in $OUT: crosscheck-answer-check.jsonl, trials-answer-check.jsonl (the store,
# exported), nvidia-smi-answer-check.txt. Time: the 8B's start (110-190 s) and three rounds of
# two 8-s windows with warm-up and drain: at most 570 s (the deadline stops the crosscheck
# first, so what was measured is exported).
set -uo pipefail
cd "$(dirname "$0")/../../.."  # the repository root
OUT=${OUT:-/tmp/out}
PHASE=answer-check
WINDOW=${WINDOW:-8}
# shellcheck source=scripts/device/h200_env.sh
source scripts/device/h200_env.sh
trap export_phase EXIT
stop_before_limit 570 TERM "advisor crosscheck"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

# shellcheck disable=SC2046
python3 -m advisor crosscheck $(chat_workload llama-3-8b 50) --rate 50 \
  --repeats 3 --reference-repeats 3 --store-as h200-8b-chat-1205-answer \
  -o "$OUT/crosscheck-$PHASE.jsonl"

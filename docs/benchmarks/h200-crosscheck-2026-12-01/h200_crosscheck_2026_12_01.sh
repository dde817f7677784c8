#!/usr/bin/env bash
# The H200 re-measurement of 2026-12-01 (issue: "Measurements you can trust"), through the device
# tool on nvidia-h200 (one GPU), carrying .vllm-h200 (the vLLM 0.26.0 payload) and .whl (optuna,
# sqlalchemy, sqlmodel, ... wheels for Python 3.12). Every phase is an `advisor crosscheck`: the
# advisor's client (server metrics + validity gate) and `vllm bench serve` on the same requests,
# the same server, the same rates; every advisor measurement is stored as a trial. The `chat`
# preset (prompts lognormal median 256, outputs median 128) clamped to what vllm bench serve's
# ShareGPT loader replays (prompts <= 1,024 tokens), Poisson arrivals, WINDOW seconds of arrivals
# per rate. Results land in $OUT: crosscheck-<phase>.jsonl, trials-<phase>.jsonl (the store,
# exported), metrics-<phase>.txt (a raw /metrics exposition), log-<phase>.txt.
#
#   PHASE=8b-defaults bash docs/benchmarks/h200-crosscheck-2026-12-01/h200_crosscheck_2026_12_01.sh > $OUT/log.txt 2>&1
#   PHASE=1b          bash docs/benchmarks/h200-crosscheck-2026-12-01/h200_crosscheck_2026_12_01.sh ...
#   PHASE=8b-paired   bash docs/benchmarks/h200-crosscheck-2026-12-01/h200_crosscheck_2026_12_01.sh ...
#
# 8b-defaults: vLLM's defaults alone on the GPU, 6 rates x 3 repeats, the reference once per rate.
# 1b: the Llama-3.2-1B shape's defaults, 4 rates x 3 repeats + reference.
# 8b-paired: vLLM's defaults and the config the shipped (client-bound) trials called best, both
#     up at once (each limited to 0.45 of the GPU), measured in turn, 3 rates x 3 interleaved
#     repeats; the reference for the non-default one.
# 8b-rounds (second session): the defaults at the goal's rates, 3 rounds each of the advisor's
#     window then the reference's (A R A R A R), so the goal is judged on the median ratio.
# 8b-knee (second session): the defaults from light load to past the knee, 3 repeats per rate,
#     gated against the server (no reference).
# 1b-more (second session): the 1B defaults at rates between the first call's, 3 repeats each.
# 1b-light (second session): the 1B defaults below their knee, 5 repeats per rate (the noise
#     floor where trials are valid, not frontend-delayed).
set -uo pipefail
cd "$(dirname "$0")/../../.."  # the repository root
OUT=${OUT:-/tmp/out}
PHASE=${PHASE:?set PHASE=8b-defaults, 1b, 8b-paired, 8b-rounds, 8b-knee, 1b-more or 1b-light}
WINDOW=${WINDOW:-8}
# shellcheck source=scripts/device/h200_env.sh
source scripts/device/h200_env.sh
trap export_phase EXIT
stop_before_limit 570 TERM "advisor crosscheck"

BEST=docs/benchmarks/h200-2026-11-30/h200_best_sampled_2026_11_30.yaml
cc() { python3 -m advisor crosscheck "$@"; }

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
case $PHASE in
  8b-defaults)
    # shellcheck disable=SC2046
    cc $(chat_workload llama-3-8b 15) --rate 15 --rate 45 --rate 60 --rate 75 --rate 90 --rate 120 \
      --repeats 3 --reference-repeats 1 --store-as h200-8b-chat-1201-defaults \
      --metrics-sample "$OUT/metrics-$PHASE.txt" -o "$OUT/crosscheck-$PHASE.jsonl"
    ;;
  1b)
    # shellcheck disable=SC2046
    cc $(chat_workload llama-3.2-1b 30) --rate 30 --rate 90 --rate 150 --rate 210 \
      --repeats 3 --reference-repeats 1 --store-as h200-1b-chat-1201-defaults \
      --metrics-sample "$OUT/metrics-$PHASE.txt" -o "$OUT/crosscheck-$PHASE.jsonl"
    ;;
  8b-paired)
    # shellcheck disable=SC2046
    cc $(chat_workload llama-3-8b 15) --rate 15 --rate 45 --rate 75 \
      --config default= --config "best-sampled=@$BEST" --co-resident --memory-share 0.45 \
      --repeats 3 --reference-repeats 1 --reference-config best-sampled \
      --store-as h200-8b-chat-1201-paired -o "$OUT/crosscheck-$PHASE.jsonl"
    ;;
  8b-rounds)
    # shellcheck disable=SC2046
    cc $(chat_workload llama-3-8b 15) --rate 15 --rate 45 --rate 75 \
      --repeats 3 --reference-repeats 3 --store-as h200-8b-chat-1201-rounds \
      -o "$OUT/crosscheck-$PHASE.jsonl"
    ;;
  8b-knee)
    # shellcheck disable=SC2046
    cc $(chat_workload llama-3-8b 15) --rate 30 --rate 60 --rate 90 --rate 105 --rate 120 \
      --repeats 3 --reference-repeats 0 --store-as h200-8b-chat-1201-knee \
      -o "$OUT/crosscheck-$PHASE.jsonl"
    ;;
  1b-more)
    # shellcheck disable=SC2046
    cc $(chat_workload llama-3.2-1b 30) --rate 15 --rate 60 --rate 120 --rate 180 \
      --repeats 3 --reference-repeats 0 --store-as h200-1b-chat-1201-more \
      -o "$OUT/crosscheck-$PHASE.jsonl"
    ;;
  1b-light)
    # shellcheck disable=SC2046
    cc $(chat_workload llama-3.2-1b 30) --rate 20 --rate 30 --rate 45 --rate 75 \
      --repeats 5 --reference-repeats 0 --store-as h200-1b-chat-1201-light \
      -o "$OUT/crosscheck-$PHASE.jsonl"
    ;;
  *) echo "unknown PHASE $PHASE" >&2; exit 2 ;;
esac

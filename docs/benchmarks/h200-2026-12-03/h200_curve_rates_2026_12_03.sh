#!/usr/bin/env bash
# More rates for the 8B load curves (issue 18, held-out rates), through the device tool on
# nvidia-h200 (one GPU), carrying .vllm-h200 (the vLLM 0.26.0 payload) and .whl (optuna,
# sqlalchemy, sqlmodel, ... wheels for Python 3.12), like docs/benchmarks/h200-crosscheck-2026-12-01/h200_crosscheck_2026_12_01.sh
# (same `chat` preset clamped to prompts <= 1,024 tokens, Poisson arrivals, WINDOW seconds of
# arrivals per rate, every measurement gated against the server's own metrics).
#
#   PHASE=8b-paired-mid bash docs/benchmarks/h200-2026-12-03/h200_curve_rates_2026_12_03.sh > $OUT/log-8b-paired-mid.txt 2>&1
#   PHASE=8b-recheck    bash docs/benchmarks/h200-2026-12-03/h200_curve_rates_2026_12_03.sh > $OUT/log-8b-recheck.txt 2>&1
#   PHASE=1b-knee       bash docs/benchmarks/h200-2026-12-03/h200_curve_rates_2026_12_03.sh > $OUT/log-1b-knee.txt 2>&1
#
# 8b-paired-mid: the two non-default 8B configs of the shipped data -- vLLM's defaults at a 0.45
#     memory share and the 2026-11-30 "best" -- were measured at 15/45/75 req/s only (12-01
#     paired session), so a held-out rate left a curve through two points. Both up at once again
#     (co-resident, 0.45 each), measured in turn at 30, 60 and 90 req/s, 2 interleaved repeats:
#     five or six rates each, enough for a curve of its own shape.
# 8b-recheck: the 12-01 `defaults@` session read TTFT p95 1,260-1,561 ms at 75 req/s where the
#     reference harness in the same session read 426 ms and two other sessions read 252-521 ms.
#     vLLM's defaults alone at 60, 75 and 90 req/s, 2 rounds of the advisor's window then
#     `vllm bench serve`'s (A R A R): which of the readings a fresh lease reproduces.
# 1b-knee: the 1B shape's defaults around their knee (capacity ~93 req/s offered), at 80, 100 and
#     110 req/s, 2 rounds, gated against the server: the 12-01 data jump from 75 to 90 to 120.
#
# Results land in $OUT: crosscheck-<phase>.jsonl, trials-<phase>.jsonl (the store, exported),
# nvidia-smi-<phase>.txt. The deadline below stops the crosscheck before the device tool's limit,
# so the trials measured so far are exported.
set -uo pipefail
cd "$(dirname "$0")/../../.."  # the repository root
OUT=${OUT:-/tmp/out}
PHASE=${PHASE:?set PHASE=8b-paired-mid, 8b-recheck or 1b-knee}
WINDOW=${WINDOW:-8}
# shellcheck source=scripts/device/h200_env.sh
source scripts/device/h200_env.sh
trap export_phase EXIT
stop_before_limit 560 TERM "advisor crosscheck"

BEST=docs/benchmarks/h200-2026-11-30/h200_best_sampled_2026_11_30.yaml
cc() { python3 -m advisor crosscheck "$@"; }

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
case $PHASE in
  8b-paired-mid)
    # shellcheck disable=SC2046
    cc $(chat_workload llama-3-8b 15) --rate 30 --rate 60 --rate 90 \
      --config default= --config "best-sampled=@$BEST" --co-resident --memory-share 0.45 \
      --repeats 2 --reference-repeats 0 \
      --store-as h200-8b-chat-1203-paired -o "$OUT/crosscheck-$PHASE.jsonl"
    ;;
  8b-recheck)
    # shellcheck disable=SC2046
    cc $(chat_workload llama-3-8b 15) --rate 60 --rate 75 --rate 90 \
      --repeats 2 --reference-repeats 2 --store-as h200-8b-chat-1203-recheck \
      -o "$OUT/crosscheck-$PHASE.jsonl"
    ;;
  1b-knee)
    # shellcheck disable=SC2046
    cc $(chat_workload llama-3.2-1b 30) --rate 80 --rate 100 --rate 110 \
      --repeats 2 --reference-repeats 0 --store-as h200-1b-chat-1203-knee \
      -o "$OUT/crosscheck-$PHASE.jsonl"
    ;;
  *) echo "unknown PHASE $PHASE" >&2; exit 2 ;;
esac

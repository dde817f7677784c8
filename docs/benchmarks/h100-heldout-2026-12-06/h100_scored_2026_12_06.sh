#!/usr/bin/env bash
# The held-out GPU, second call (issue 44): measure the points whose predictions were committed
# before any of them was measured (predictions.json, commit 8692e02: vLLM's defaults on the
# Llama-3-8B shape, `chat` at 12 / 36 / 52 / 72 req/s and `rag-long-prompt` at 2.8 / 6.5 / 9.4
# / 12.2 req/s; 52 and 72 req/s and every rag-long-prompt point never measured on any GPU).
#
#   phase chat: one engine start of the defaults, `chat` (the probe's workload: Poisson, 8 s of
#               arrivals per rate, drain limit 15 s), 3 interleaved rounds of the advisor's
#               client per rate, then the reference harness (`vllm bench serve`) once per rate
#               on the same requests, same lease;
#   phase rag:  a second engine start of the defaults, `rag-long-prompt` at its four rates,
#               16 s of arrivals per rate (96 requests at its preset's 6 req/s), one round.
# Every advisor window is stored as a trial (studies h100-8b-{chat,rag}-1206-scored@<rate>rps).
#
# Run through the device tool on nvidia-h100-x1, carrying .vllm-h200 and .whl:
#   bash docs/benchmarks/h100-heldout-2026-12-06/h100_scored_2026_12_06.sh > $OUT/log-scored.txt 2>&1
# Results in $OUT: trials-scored.jsonl (the store, exported), crosscheck-{chat,rag}.jsonl, the
# engines' logs (raw.tar.gz) and nvidia-smi.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" /tmp/raw
T0=$(date +%s)
# shellcheck disable=SC1091
source .vllm-h200/activate.sh
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site \
  .whl/*.whl || { echo "wheel install failed"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD:$PYTHONPATH ADVISOR_DB_URL=sqlite:////tmp/advisor-h100.db
export ADVISOR_IMPORT_SHIPPED=0 ADVISOR_CACHE_DIR=/tmp/advisor-cache PYTHONUNBUFFERED=1 COLUMNS=200
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
finish() {
  python3 -m advisor knowledge export -o "$OUT/trials-scored.jsonl" || true
  nvidia-smi > "$OUT/nvidia-smi-scored.txt" 2>&1
  tar -czf "$OUT/raw.tar.gz" -C /tmp raw
  echo "TOTAL_S $(( $(date +%s) - T0 ))"
}
trap finish EXIT
gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader)
echo "$gpu"
case "$gpu" in *H100*) ;; *) echo "not an H100: stopping" >&2; exit 3;; esac
# The engine's log lives in the trial's scratch folder, removed when the server stops: copy it.
( while sleep 2; do for f in /tmp/advisor-*/*.log; do [ -f "$f" ] && cp "$f" /tmp/raw/; done; done
) >/dev/null 2>&1 &
COPIER=$!
# The device tool kills a command at its limit without traps: each phase stops itself first,
# at an absolute time since the start (seconds).
guard() { ( sleep $(( $1 - ($(date +%s) - T0) )); pkill -TERM -f "advisor crosscheck" ) \
  >/dev/null 2>&1 & }
R0=20
guard "${CHAT_DEADLINE_S:-330}"; G1=$!
python3 -m advisor crosscheck --target vllm --workload chat --model llama-3-8b \
  --workload-param "arrival={\"process\":\"poisson\",\"rate_rps\":$R0}" \
  --workload-param n_requests=$(( R0 * 8 )) --workload-param drain_limit_s=15 \
  --rate 12 --rate 36 --rate 52 --rate 72 \
  --repeats 3 --reference-repeats 1 --store-as h100-8b-chat-1206-scored \
  -o "$OUT/crosscheck-chat.jsonl"
echo "CHAT_S $(( $(date +%s) - T0 ))"
kill "$G1" 2>/dev/null
guard "${RAG_DEADLINE_S:-565}"; G2=$!
python3 -m advisor crosscheck --target vllm --workload rag-long-prompt --model llama-3-8b \
  --workload-param n_requests=96 --workload-param drain_limit_s=15 \
  --rate 2.8 --rate 6.5 --rate 9.4 --rate 12.2 \
  --repeats 1 --reference-repeats 0 --store-as h100-8b-rag-1206-scored \
  -o "$OUT/crosscheck-rag.jsonl"
echo "RAG_S $(( $(date +%s) - T0 ))"
kill "$COPIER" "$G2" 2>/dev/null

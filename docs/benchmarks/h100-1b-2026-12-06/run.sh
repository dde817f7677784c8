#!/usr/bin/env bash
# The H100, issue 44 item 4: measure what predictions.json (committed before this ran) predicted.
#
#   phase A: one engine start of vLLM's defaults on the Llama-3.2-1B shape (random bf16 weights),
#            `chat` (Poisson, 8 s of arrivals per rate, drain limit 15 s: the probe's workload)
#            at 20 / 50 / 85 / 110 req/s, 3 interleaved rounds of the advisor's client per rate,
#            the reference harness (`vllm bench serve`) once per rate on the same requests;
#   phase B: the tier answers on the 8B shape at 45 req/s: the planner keeps vLLM's defaults at
#            both tiers there (predictions.json "tier_answers"), so the recommended config IS the
#            defaults: one engine start of them, 3 interleaved rounds, the reference harness once.
#            (The 1B's tier answers are at 50 req/s, measured in phase A: the defaults kept at
#            the interactive tier, no config at the issue's SLO.)
# Every advisor window is stored as a trial (studies h100-1b-chat-1206-scored@<rate>rps and
# h100-8b-chat-1206-tiers@45rps) and the store is exported to $OUT on exit.
#
# Run through the device tool on nvidia-h100-x1, carrying .vllm-h200 and .whl:
#   bash docs/benchmarks/h100-1b-2026-12-06/run.sh > $OUT/log.txt 2>&1; tail -30 $OUT/log.txt
# Results in $OUT: trials.jsonl (the store, exported), crosscheck-{1b,8b}.jsonl, the engines'
# logs (raw.tar.gz), nvidia-smi.txt, log.txt.
set -uo pipefail
cd "$(dirname "$0")/../../.."  # the repository root
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" /tmp/raw
T0=$(date +%s)
# shellcheck disable=SC1091
source .vllm-h200/activate.sh
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site \
  .whl/*.whl || { echo "wheel install failed"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD:${PYTHONPATH:-} ADVISOR_DB_URL=sqlite:////tmp/advisor-h100.db
export ADVISOR_IMPORT_SHIPPED=0 ADVISOR_CACHE_DIR=/tmp/advisor-cache PYTHONUNBUFFERED=1 COLUMNS=200
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
finish() {
  kill "${COPIER:-}" 2>/dev/null
  python3 -m advisor knowledge export -o "$OUT/trials.jsonl" || true
  nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
  tar -czf "$OUT/raw.tar.gz" -C /tmp raw
  echo "TOTAL_S $(( $(date +%s) - T0 ))"
}
trap finish EXIT
gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader)
echo "$gpu"
case "$gpu" in *H100*) ;; *) echo "not an H100: stopping" >&2; exit 3;; esac
python3 -c "import importlib.metadata as m; print('vllm', m.version('vllm'), 'torch', m.version('torch'))" || true
# The engine's log lives in the trial's scratch folder, removed when the server stops: copy it.
( while sleep 2; do for f in /tmp/advisor-*/*.log; do [ -f "$f" ] && cp "$f" /tmp/raw/; done; done
) >/dev/null 2>&1 &
COPIER=$!
# The device tool kills a command at its limit without traps: each phase stops itself first,
# at an absolute time since the start (seconds): `timeout --foreground` sends TERM to the
# crosscheck process alone, which stops its server (windows measured so far are already stored
# and written to the report).
phase() {  # phase DEADLINE_S CMD...: run CMD, TERM it (it alone) at DEADLINE_S after the start
  local left=$(( $1 - ($(date +%s) - T0) )); shift
  [ "$left" -gt 20 ] || { echo "no time left for: $*"; return 124; }
  if command -v timeout >/dev/null; then timeout --foreground -s TERM -k 20 "$left" "$@"; return; fi
  "$@" & local pid=$!  # no coreutils timeout: a guard that signals this process id alone
  ( sleep "$left"; kill -TERM "$pid" ) >/dev/null 2>&1 & local guard=$!
  wait "$pid"; local rc=$?; kill "$guard" 2>/dev/null; return $rc
}
gpu_free() {  # wait (at most 30 s) until no process holds the GPU
  for _ in $(seq 30); do
    [ -z "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader)" ] && return 0; sleep 1
  done
  echo "GPU still held after 30 s"; nvidia-smi
}
# The probe's workload: `chat` at R0 req/s for 8 s (n_requests scales with each --rate).
R0=20
WL=(--workload chat --workload-param "arrival={\"process\":\"poisson\",\"rate_rps\":$R0}"
    --workload-param n_requests=$(( R0 * 8 )) --workload-param drain_limit_s=15)
phase "${A_DEADLINE_S:-360}" python3 -m advisor crosscheck --target vllm --model llama-3.2-1b \
  "${WL[@]}" --rate 20 --rate 50 --rate 85 --rate 110 \
  --repeats 3 --reference-repeats 1 --store-as h100-1b-chat-1206-scored \
  -o "$OUT/crosscheck-1b.jsonl"; rc=$?
echo "A_S $(( $(date +%s) - T0 )) rc $rc"
gpu_free
phase "${B_DEADLINE_S:-550}" python3 -m advisor crosscheck --target vllm --model llama-3-8b \
  "${WL[@]}" --config 'default={}' --rate 45 \
  --repeats 3 --reference-repeats 1 --store-as h100-8b-chat-1206-tiers \
  -o "$OUT/crosscheck-8b.jsonl"; rc=$?
echo "B_S $(( $(date +%s) - T0 )) rc $rc"
kill "$COPIER" 2>/dev/null

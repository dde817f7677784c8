#!/usr/bin/env bash
# The held-out GPU (issue 44): one engine start of vLLM's defaults on the Llama-3-8B shape (random
# weights) on an H100, the `chat` preset with Poisson arrivals, 8 s of arrivals per rate, one
# window per rate, every window stored as a trial of study h100-8b-chat-1206@<rate>rps.
#
# The first four rates (8, 24, 40, 64 req/s) are the calibration probe; the last four (12, 36,
# 52, 72 req/s) are the scored points. The predictions are made from the probe windows ONLY
# (docs/benchmarks/h100-heldout-2026-12-06/predict.py --probe-rates 8,24,40,64), by code and
# rates committed before this ran; a CPU re-run of that script on the returned export gives the
# same predictions, so they cannot depend on the scored windows.
#
# Run through the device tool on nvidia-h100-x1, carrying .vllm-h200, .whl and a folder holding
# this script (and, for the server-log copy, nothing else):
#
#   set -o pipefail; bash <folder>/h100_heldout_2026_12_06.sh 2>&1 | tee $OUT/log-heldout.txt
#
# Results in $OUT: trials-heldout.jsonl (the store, exported), raw.tar.gz (the crosscheck
# report, the server's raw /metrics after the first window, the engine's log, nvidia-smi).
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
STUDY=h100-8b-chat-1206
finish() {
  python3 -m advisor knowledge export -o "$OUT/trials-heldout.jsonl" || true
  nvidia-smi > /tmp/raw/nvidia-smi.txt 2>&1
  tar -czf "$OUT/raw.tar.gz" -C /tmp raw
  echo "TOTAL_S $(( $(date +%s) - T0 ))"
}
trap finish EXIT
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
# The engine's log lives in the trial's scratch folder, removed when the server stops: copy it.
( while sleep 2; do for f in /tmp/advisor-*/*.log; do [ -f "$f" ] && cp "$f" /tmp/raw/; done; done
) >/dev/null 2>&1 &
COPIER=$!
# The device tool kills a command at its limit without traps: stop the measurement first.
( sleep "${DEADLINE_S:-290}"; pkill -TERM -f "advisor crosscheck" ) >/dev/null 2>&1 &
GUARD=$!
R0=20
python3 -m advisor crosscheck --target vllm --workload chat --model llama-3-8b \
  --workload-param "arrival={\"process\":\"poisson\",\"rate_rps\":$R0}" \
  --workload-param n_requests=$(( R0 * 8 )) --workload-param drain_limit_s=15 \
  --rate 8 --rate 24 --rate 40 --rate 64 --rate 12 --rate 36 --rate 52 --rate 72 \
  --repeats 1 --reference-repeats 0 --store-as "$STUDY" \
  --metrics-sample /tmp/raw/metrics-sample.txt -o /tmp/raw/crosscheck-heldout.jsonl
echo "CROSSCHECK_S $(( $(date +%s) - T0 ))"
kill "$COPIER" "$GUARD" 2>/dev/null

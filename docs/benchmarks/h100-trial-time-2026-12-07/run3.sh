#!/usr/bin/env bash
# Issue 44 item 3 on the H100, third call (what was left of the session's GPU time): one trial
# of run2.sh's "after" arm on a fresh machine (so its start is cold), with the validity gate
# that no longer compares a settled window's streamed-token count (e9ab7d0): does the settled
# 80 req/s window now pass the gate? Not a timing comparison (nothing to compare it with here).
#
#   bash docs/benchmarks/h100-trial-time-2026-12-07/run3.sh > $OUT/log3.txt 2>&1
# Results in $OUT: trials3.jsonl (the store, exported), log3.txt.
set -uo pipefail
cd "$(dirname "$0")/../../.."  # the repository root
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T0=$(date +%s)
LIMIT_S=${LIMIT_S:-300}
# shellcheck disable=SC1091
source .vllm-h200/activate.sh
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site \
  .whl/*.whl || { echo "wheel install failed"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD:${PYTHONPATH:-} ADVISOR_DB_URL=sqlite:////tmp/advisor-h100.db
export ADVISOR_IMPORT_SHIPPED=0 ADVISOR_CACHE_DIR=/tmp/advisor-cache PYTHONUNBUFFERED=1 COLUMNS=200
export ADVISOR_ENGINE_CACHE_DIR=/tmp/engine-cache
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
finish() {
  python3 -m advisor knowledge export -o "$OUT/trials3.jsonl" || true
  echo "TOTAL_S $(( $(date +%s) - T0 ))"
}
trap finish EXIT
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
R0=45
timeout --foreground -s TERM -k 15 $(( LIMIT_S - ($(date +%s) - T0) - 20 )) \
  python3 -m advisor tune --target vllm --model llama-3-8b --workload chat \
    --workload-param "arrival={\"process\":\"poisson\",\"rate_rps\":$R0}" \
    --workload-param n_requests=$(( R0 * 8 )) --workload-param drain_limit_s=15 \
    --slo "ttft_p95_ms<=300,tpot_p95_ms<=40" --trials 1 --also-rate 15 --also-rate 30 \
    --also-rate 80 --no-warm-start --paired-repeats 0 --no-failure-gate --trial-timeout 280 \
    --name gate-check
echo "TUNE_RC $?"
python3 - <<'PY'
import json, os
from knowledge import TrialStore
for t in TrialStore(os.environ["ADVISOR_DB_URL"]).list_trials():
    d = t.details
    print("TRIAL", t.workload_spec.get("name"), t.status, d.get("validity"),
          (d.get("settled") or {}).get("at_s"), d.get("validity_reasons"),
          [n["workload"] for n in d.get("not_measured") or []])
PY

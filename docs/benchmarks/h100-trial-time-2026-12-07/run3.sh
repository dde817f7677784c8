#!/usr/bin/env bash
# Issue 44 item 3 on the H100, third call (what was left of the session's GPU time): one trial
# of run2.sh's "after" arm on a fresh machine (so its start is cold), with the validity gate
# that no longer compares a settled window's streamed-token count (e9ab7d0): does the settled
# 80 req/s window now pass the gate? Not a timing comparison (nothing to compare it with here).
#
#   bash docs/benchmarks/h100-trial-time-2026-12-07/run3.sh > $OUT/log3.txt 2>&1
# Results in $OUT: trials-gate-check.jsonl (the store, exported), nvidia-smi-gate-check.txt,
# log3.txt. The set-up is scripts/device/h200_env.sh's.
set -uo pipefail
cd "$(dirname "$0")/../../.."  # the repository root
OUT=${OUT:-/tmp/out}
PHASE=gate-check
T0=$(date +%s)
LIMIT_S=${LIMIT_S:-300}
# shellcheck source=scripts/device/h200_env.sh
source scripts/device/h200_env.sh
export ADVISOR_ENGINE_CACHE_DIR=/tmp/engine-cache
finish() { export_phase; echo "TOTAL_S $(( $(date +%s) - T0 ))"; }
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
import os
from knowledge import TrialStore
for t in TrialStore(os.environ["ADVISOR_DB_URL"]).list_trials():
    d = t.details
    print("TRIAL", t.workload_spec.get("name"), t.status, d.get("validity"),
          (d.get("settled") or {}).get("at_s"), d.get("validity_reasons"),
          [n["workload"] for n in d.get("not_measured") or []])
PY

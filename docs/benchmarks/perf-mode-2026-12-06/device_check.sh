#!/usr/bin/env bash
# Device check of issue 44 item 3 (run through the device tool on nvidia-h100-x1 or nvidia-h200,
# carrying .vllm-h200 and .whl):
#   bash docs/benchmarks/perf-mode-2026-12-06/device_check.sh > $OUT/log-device-check.txt 2>&1
# 1. check_parser.py: our argv of each performance mode through vLLM 0.26's own serve parser.
# 2. Start cost with the shared engine cache: two `advisor crosscheck` runs of vLLM's defaults on
#    the 8B shape, back to back on a fresh machine, one `chat` window each (36 req/s, 8 s of
#    arrivals). The first starts with an empty cache (cold: torch.compile and Triton compile);
#    the second reuses what the first wrote. Each stored trial records startup_s and
#    engine_cache_warm; the wall time of each run is printed.
set -uo pipefail
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/out}
PHASE=device-check
WINDOW=8
# shellcheck source=scripts/device/h200_env.sh
source scripts/device/h200_env.sh
trap export_phase EXIT
export ADVISOR_ENGINE_CACHE_DIR=/tmp/engine-cache
rm -rf "$ADVISOR_ENGINE_CACHE_DIR"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 docs/benchmarks/perf-mode-2026-12-06/check_parser.py 2>&1 | tail -20
stop_before_limit 470 TERM "advisor crosscheck"
for run in cold warm; do
  t0=$(date +%s)
  # shellcheck disable=SC2046
  python3 -m advisor crosscheck $(chat_workload llama-3-8b 36) --rate 36 --repeats 1 \
    --reference-repeats 0 --store-as "start-$run" -o "$OUT/crosscheck-$run.jsonl"
  echo "RUN_S $run $(( $(date +%s) - t0 ))"
done
python3 - <<'PY'
import os
from knowledge import TrialStore
store = TrialStore(os.environ["ADVISOR_DB_URL"])
for t in store.list_trials():
    d = t.details
    print("TRIAL", t.id, d.get("startup_s"), d.get("engine_cache_warm"), d.get("engine_cache_dir"))
PY

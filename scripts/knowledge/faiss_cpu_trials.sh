#!/usr/bin/env bash
# Measure the shipped FAISS knowledge (knowledge/data/cpu-faiss-<date>.jsonl) on this machine:
# TPE studies over five workloads (stdlib docstrings at N = 2k, 4k, 6k, 8k; synthetic N = 50k,
# d = 128) under the SLOs below, plus the default config on the 8k corpus four more times for the
# noise floor. Run it on a quiet machine: other processes on the cores are measured too.
# Arguments after the output file are passed to every `advisor tune` (e.g. --search-sweep: each
# sampled build sweeps nprobe / efSearch and stores every setting it times as a trial).
#
# FAISS_DB=PATH keeps the store there (default: a new temporary one) and FAISS_STUDIES="name ..."
# runs only those studies; every study resumes where an interrupted run of the same store left it.
# ADVISOR is the command that runs the CLI (default .venv/bin/advisor; e.g. "python3 -m advisor").
#
#   bash scripts/knowledge/faiss_cpu_trials.sh knowledge/data/cpu-faiss-$(date +%F).jsonl
#   bash scripts/knowledge/faiss_cpu_trials.sh knowledge/data/cpu-faiss-sweep-$(date +%F).jsonl \
#       --search-sweep
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT_FILE=${1:?usage: faiss_cpu_trials.sh OUTPUT.jsonl [advisor tune options...]}
shift
EXTRA=("$@")
read -ra ADVISOR <<< "${ADVISOR:-.venv/bin/advisor}"
DB=${FAISS_DB:-$(mktemp -d)/faiss.db}
export ADVISOR_DB_URL="sqlite:///$DB" ADVISOR_IMPORT_SHIPPED=0
echo "store: $DB"
tune() {  # tune --name NAME ...: skipped unless NAME is in FAISS_STUDIES (when that is set)
  if [ -n "${FAISS_STUDIES:-}" ] && [[ " $FAISS_STUDIES " != *" $2 "* ]]; then return; fi
  "${ADVISOR[@]}" tune --target faiss --sampler tpe --resume "$@" ${EXTRA[@]+"${EXTRA[@]}"} \
    > /dev/null
  echo "$(date +%T) done: $*"
}
for r in 1 2 3 4; do
  tune --name "faiss-noise-default-8k-r$r" --workload stdlib-docs-8k --trials 1 --seed "$r" \
    --slo "p95_latency_ms<=0.25,recall_at_10>=0.95"
done
tune --name faiss-stdlib-8k --workload stdlib-docs-8k --trials 40 --seed 0 \
  --slo "p95_latency_ms<=0.25,recall_at_10>=0.95"
tune --name faiss-stdlib-2k --workload stdlib-docs-2k --trials 30 --seed 1 \
  --slo "p95_latency_ms<=0.25,recall_at_10>=0.95"
tune --name faiss-stdlib-4k --workload stdlib-docs-8k --workload-param n_base=4000 \
  --workload-param n_queries=500 --trials 30 --seed 2 --slo "p95_latency_ms<=0.5,recall_at_10>=0.9"
tune --name faiss-synth-50k-d128 --workload synthetic-1m --workload-param dim=128 \
  --workload-param n_base=50000 --workload-param n_clusters=256 --workload-param n_queries=500 \
  --trials 30 --seed 3 --slo "p95_latency_ms<=1,recall_at_10>=0.9"
tune --name faiss-stdlib-8k-b --workload stdlib-docs-8k --trials 60 --seed 10 \
  --slo "p95_latency_ms<=0.1,recall_at_10>=0.9"
tune --name faiss-stdlib-6k --workload stdlib-docs-8k --workload-param n_base=6000 \
  --workload-param n_queries=500 --trials 40 --seed 12 --slo "p95_latency_ms<=0.2,recall_at_10>=0.95"
tune --name faiss-stdlib-2k-b --workload stdlib-docs-2k --trials 40 --seed 11 \
  --slo "p95_latency_ms<=0.1,recall_at_10>=0.95"
"${ADVISOR[@]}" knowledge export -o "$OUT_FILE"

#!/usr/bin/env bash
# Run `advisor tune` studies on a device machine (no network) and bring the trials back as JSONL.
# Used with the device tool from the repository root, carrying .whl (optuna, sqlmodel, ... wheels
# for Python 3.12) and, for vLLM, .vllm-h200 (the payload built by shared/vllm-h200):
#
#   bash scripts/device/run_study.sh "<advisor tune args>" ["<advisor tune args>" ...]
#
# Each argument is one study's `advisor tune` arguments. Trials go to a SQLite store under /tmp;
# whatever finished is exported to $OUT/trials.jsonl even when a study fails or time runs out
# (the export runs on EXIT), with the machine's nvidia-smi report beside it.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
if [ -f .vllm-h200/activate.sh ]; then
  # shellcheck disable=SC1091
  source .vllm-h200/activate.sh
fi
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl \
  || { echo "wheel install failed" >&2; exit 1; }
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
export ADVISOR_DB_URL=${ADVISOR_DB_URL:-sqlite:////tmp/advisor-device.db}
export ADVISOR_CACHE_DIR=${ADVISOR_CACHE_DIR:-/tmp/advisor-cache}
export ADVISOR_IMPORT_SHIPPED=0 PYTHONUNBUFFERED=1 COLUMNS=160

export_trials() {
  python3 -m advisor knowledge export -o "$OUT/trials.jsonl" || true
  nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
}
trap export_trials EXIT

for args in "$@"; do
  echo "=== advisor tune $args"
  # shellcheck disable=SC2086
  python3 -m advisor tune $args || echo "study exited with $?"
done

#!/usr/bin/env bash
# Run `advisor tune` studies on a device machine (no network) and bring the trials back as JSONL.
# Used with the device tool from the repository root, carrying .whl (optuna, sqlmodel, ... wheels
# for Python 3.12) and, for vLLM, .vllm-h200 (the payload built by shared/vllm-h200):
#
#   bash scripts/device/run_study.sh "[GPU=<i>] <advisor tune args>" ...
#
# Each argument is one study's `advisor tune` arguments, or `!<shell command>` for another job that
# must have the GPU to itself (a cross-check, say); it runs with the GPU's environment. Studies
# that name a GPU run on that GPU only (CUDA_VISIBLE_DEVICES), studies on different GPUs run in
# parallel, studies on the same GPU one after another: no two measurements ever share a GPU. Each GPU's trials go to their own
# SQLite store; everything that finished is exported to $OUT/trials-gpu<i>.jsonl when the script
# ends, also when a study fails or the time runs out (SIGTERM), with nvidia-smi's report beside it.
#
# A GPU run that measures LLM trials starts with `advisor crosscheck` (the client against
# `vllm bench serve` and the server's metrics, docs/benchmarks.md): CROSSCHECK="<crosscheck args>"
# (e.g. CROSSCHECK="--target vllm --model llama-3-8b --rate 15 --rate 45") runs it on each GPU
# before that GPU's studies, its report in $OUT/crosscheck-gpu<i>.jsonl. CROSSCHECK=none skips it
# (say why in the run's notes).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
if [ -f .vllm-h200/activate.sh ] && command -v nvidia-smi >/dev/null; then
  # shellcheck disable=SC1091
  source .vllm-h200/activate.sh
fi
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site \
    .whl/*.whl || { echo "wheel install failed" >&2; exit 1; }
fi
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
export ADVISOR_CACHE_DIR=${ADVISOR_CACHE_DIR:-/tmp/advisor-cache}
export ADVISOR_IMPORT_SHIPPED=0 PYTHONUNBUFFERED=1 COLUMNS=160
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

declare -A QUEUE=()
for spec in "$@"; do
  gpu=0
  if [[ $spec == GPU=* ]]; then gpu=${spec%% *}; gpu=${gpu#GPU=}; spec=${spec#* }; fi
  QUEUE[$gpu]+="$spec"$'\n'
done

run_gpu() {  # run one GPU's studies in order, after the cross-check
  local gpu=$1 studies=$2
  export CUDA_VISIBLE_DEVICES=$gpu ADVISOR_DB_URL="sqlite:////tmp/advisor-gpu$gpu.db"
  if [ -z "${CROSSCHECK:-}" ]; then
    echo "[gpu $gpu] warning: no cross-check before these trials (set CROSSCHECK=...)" >&2
  elif [ "$CROSSCHECK" != none ]; then
    echo "=== [gpu $gpu] advisor crosscheck $CROSSCHECK"
    # shellcheck disable=SC2086
    python3 -m advisor crosscheck $CROSSCHECK -o "$OUT/crosscheck-gpu$gpu.jsonl" 2>&1 \
      | sed -u "s/^/[gpu $gpu] /" || echo "[gpu $gpu] crosscheck failed"
  fi
  while IFS= read -r args; do
    [ -n "$args" ] || continue
    [ -e "$STOP_FLAG" ] && break  # out of time: start nothing new
    if [[ $args == !* ]]; then
      echo "=== [gpu $gpu] ${args#!}"
      bash -c "${args#!}" 2>&1 | sed -u "s/^/[gpu $gpu] /" || echo "[gpu $gpu] command failed"
      continue
    fi
    echo "=== [gpu $gpu] advisor tune $args"
    # shellcheck disable=SC2086
    python3 -m advisor tune $args 2>&1 | sed -u "s/^/[gpu $gpu] /" || echo "[gpu $gpu] study failed"
  done <<< "$studies"
}

export_all() {
  for gpu in "${!QUEUE[@]}"; do
    ADVISOR_DB_URL="sqlite:////tmp/advisor-gpu$gpu.db" \
      python3 -m advisor knowledge export -o "$OUT/trials-gpu$gpu.jsonl" || true
  done
  nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
}
STOP_FLAG=$(mktemp -u /tmp/run_study.stop.XXXXXX)
stop_all() {
  touch "$STOP_FLAG"
  pkill -TERM -f "advisor tune" 2>/dev/null
  sleep 5
  # A `!` job's server runs in its own session; never leave one holding a GPU.
  pkill -KILL -f "entrypoints.cli.main serve" 2>/dev/null
  exit 143
}
trap export_all EXIT
trap stop_all TERM INT
# The device tool kills a command at its limit without running traps: stop ourselves first, so
# the trials that finished are always exported.
( sleep "${ADVISOR_DEVICE_DEADLINE_S:-540}"; kill -TERM $$ ) &

pids=()
for gpu in "${!QUEUE[@]}"; do
  run_gpu "$gpu" "${QUEUE[$gpu]}" &
  pids+=($!)
done
wait "${pids[@]}"

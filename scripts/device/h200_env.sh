# The set-up every H200 device script of 2026-12-01 on shares: sourced (not run) from the
# repository root with OUT set, inside a device-tool call that carries .vllm-h200 (the vLLM 0.26.0
# payload that ../shared/vllm-h200/build_payload.sh writes) and .whl (optuna, sqlalchemy,
# sqlmodel, ... wheels for Python 3.12, which the device image lacks).
#
# The device tool carries at most 64 MiB with the tracked tree: on 2026-12-05 the payload (51 MB),
# the tree (~11 MB) and these wheels only fit with greenlet left out (SQLAlchemy needs it for
# asyncio only) and SQLAlchemy's wheel repacked without its compiled speedups (its pure-Python
# fallback runs the same; drop the *.so entries and their RECORD lines).
#
# DEVICE_DB (default /tmp/advisor-h200.db) is the store; DEVICE_IMPORT_SHIPPED (default 0)
# whether it starts with the shipped knowledge.
mkdir -p "$OUT"
# shellcheck disable=SC1091
source .vllm-h200/activate.sh
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site \
  .whl/*.whl || { echo "wheel install failed" >&2; exit 1; }
export PYTHONPATH=/tmp/site:$PWD:$PYTHONPATH
export ADVISOR_DB_URL=sqlite:///${DEVICE_DB:-/tmp/advisor-h200.db}
export ADVISOR_IMPORT_SHIPPED=${DEVICE_IMPORT_SHIPPED:-0}
export ADVISOR_CACHE_DIR=/tmp/advisor-cache PYTHONUNBUFFERED=1 COLUMNS=200
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

# stop_before_limit SECONDS SIGNAL PATTERN: the device tool kills a command at its limit without
# running traps, so the script stops its own long command first (ADVISOR_DEVICE_DEADLINE_S
# overrides SECONDS) and its EXIT trap still exports what was measured.
stop_before_limit() {
  ( sleep "${ADVISOR_DEVICE_DEADLINE_S:-$1}"; pkill "-$2" -f "$3" ) &
}

# export_phase: the store and the GPU's state into $OUT, named after $PHASE (an EXIT trap).
export_phase() {
  python3 -m advisor knowledge export -o "$OUT/trials-$PHASE.jsonl" || true
  nvidia-smi > "$OUT/nvidia-smi-$PHASE.txt" 2>&1 || true
}

poisson() { echo "arrival={\"process\":\"poisson\",\"rate_rps\":$1}"; }

# chat_workload MODEL R0: crosscheck arguments for the `chat` preset, Poisson arrivals at R0
# req/s, WINDOW seconds of them (R0 * WINDOW requests).
chat_workload() {
  local model=$1 r0=$2
  echo "--target vllm --workload chat --model $model --workload-param $(poisson "$r0")" \
       "--workload-param n_requests=$(( r0 * WINDOW )) --workload-param drain_limit_s=15"
}

# enqueue_phase YAML: the configs listed under $PHASE in YAML (phase -> list of configs) as the
# JSON `advisor tune --enqueue @/tmp/enqueue-$PHASE.json` reads; prints how many there are.
enqueue_phase() {
  python3 - "$1" "$PHASE" > "/tmp/enqueue-$PHASE.json" <<'PY' || return 2
import json, sys, yaml
print(json.dumps(yaml.safe_load(open(sys.argv[1]))[sys.argv[2]]))
PY
  python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))))" "/tmp/enqueue-$PHASE.json"
}

# shape_crosscheck CONFIG STUDY REPEATS RATE...: one `advisor crosscheck` of vLLM's defaults on
# the shape of the config.json CONFIG (--model-config: random weights), the `chat` preset with
# Poisson arrivals, WINDOW seconds of them per RATE, REPEATS rounds, no reference harness, every
# measurement stored as a trial of study STUDY@<rate>rps; the report to
# $OUT/crosscheck-$PHASE.jsonl. Prints the GPU and the shape first (a bad config fails here,
# not on the GPU).
shape_crosscheck() {
  local config=$1 study=$2 repeats=$3 r0=15 rates=()
  shift 3
  for r in "$@"; do rates+=(--rate "$r"); done
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import sys; from advisor.model_config import describe, shape_option; \
print(describe(shape_option(None, sys.argv[1])))" "$config" || return 2
  python3 -m advisor crosscheck --target vllm --workload chat --model-config "$config" \
    --workload-param "$(poisson $r0)" --workload-param n_requests=$(( r0 * WINDOW )) \
    --workload-param drain_limit_s=15 "${rates[@]}" \
    --repeats "$repeats" --reference-repeats 0 --store-as "$study" \
    -o "$OUT/crosscheck-$PHASE.jsonl"
}

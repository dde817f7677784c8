#!/usr/bin/env bash
# Cross-check of the advisor's streaming client against `vllm bench serve` on one running vLLM
# server (H200, Llama-3.2-1B shape, random weights, vLLM defaults). For each Poisson rate both
# tools send the same kind of traffic to the same server: fixed 512-token prompts, exactly 128
# output tokens (EOS ignored), a RATE*WINDOW-request run. vLLM's numbers come from
# `vllm bench serve --save-result`; the advisor's from `advisor tune --target openai` measuring
# the endpoint as it is (max_concurrency none, request_rate_scale 1). Results land in
# $OUT/crosscheck-bench.jsonl (one vLLM result per line) and $OUT/crosscheck-trials.jsonl;
# scripts/device/compare_crosscheck.py prints them side by side.
#
#   GPU=1 RATES="30 90 150" bash docs/benchmarks/h200-client-crosscheck/h200_client_crosscheck_2026_11_30.sh
#
# Needs .vllm-h200 (shared/vllm-h200) and .whl carried; runs after `run_study.sh` has installed
# the wheels, or installs them itself.
set -uo pipefail
cd "$(dirname "$0")/../../.."  # the repository root
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
# shellcheck disable=SC1091
source .vllm-h200/activate.sh
if [ ! -d /tmp/site/optuna ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site \
    .whl/*.whl || { echo "wheel install failed" >&2; exit 1; }
fi
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export CUDA_VISIBLE_DEVICES=${GPU:-${CUDA_VISIBLE_DEVICES:-0}} ADVISOR_DB_URL=sqlite:////tmp/advisor-crosscheck.db
export ADVISOR_IMPORT_SHIPPED=0 ADVISOR_CACHE_DIR=/tmp/advisor-cache-crosscheck
RATES=${RATES:-30 90 150}
WINDOW=${WINDOW:-8}
PORT=${PORT:-8011}
MODEL_DIR=/tmp/crosscheck-llama-3.2-1b
SERVED=llama-3.2-1b
python3 -c "from pathlib import Path; from objectives.llm.models import write_model_dir; \
write_model_dir('llama-3.2-1b', Path('$MODEL_DIR'))" || exit 1

setsid python3 -m vllm.entrypoints.cli.main serve "$MODEL_DIR" --load-format dummy \
  --max-model-len 4096 --seed 0 --port "$PORT" --host 127.0.0.1 --served-model-name "$SERVED" \
  --disable-uvicorn-access-log > "$OUT/crosscheck-server.log" 2>&1 < /dev/null &
SERVER=$!
stop_server() { kill -TERM -- "-$SERVER" 2>/dev/null; sleep 3; kill -KILL -- "-$SERVER" 2>/dev/null; }
trap stop_server EXIT
for _ in $(seq 1 240); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
  kill -0 "$SERVER" 2>/dev/null || { echo "vllm serve exited"; tail -40 "$OUT/crosscheck-server.log"; exit 1; }
  sleep 1
done
echo "server healthy after ${SECONDS}s"

: > "$OUT/crosscheck-bench.jsonl"
for rate in $RATES; do
  n=$(python3 -c "print(int(round($rate * $WINDOW)))")
  echo "=== rate $rate req/s, $n requests: vllm bench serve"
  python3 -m vllm.entrypoints.cli.main bench serve --backend vllm \
    --base-url "http://127.0.0.1:$PORT" --endpoint /v1/completions --model "$SERVED" \
    --tokenizer "$MODEL_DIR" --dataset-name random --random-input-len 512 \
    --random-output-len 128 --random-range-ratio 0 --num-prompts "$n" --request-rate "$rate" \
    --ignore-eos --seed "$rate" --percentile-metrics ttft,tpot,itl,e2el \
    --metric-percentiles 50,90,95,99 --save-result --result-dir /tmp/bench \
    --result-filename "bench-$rate.json" 2>&1 | tail -30
  python3 -c "import json,sys; d=json.load(open('/tmp/bench/bench-$rate.json')); \
d['crosscheck_rate_rps']=$rate; print(json.dumps(d))" >> "$OUT/crosscheck-bench.jsonl"
  echo "=== rate $rate req/s, $n requests: advisor (openai target)"
  python3 -m advisor tune --target openai --workload chat --trials 1 --include-default \
    --name "crosscheck-1b-$rate" --timeout 300 \
    --workload-param "base_url=http://127.0.0.1:$PORT" --workload-param "served_model=$SERVED" \
    --workload-param "model=llama-3.2-1b" --workload-param "n_requests=$n" \
    --workload-param "arrival={\"process\":\"poisson\",\"rate_rps\":$rate}" \
    --workload-param "prompt_len=512" --workload-param "output_len=128" \
    --workload-param "seed=$rate" 2>&1 | tail -15
done
python3 -m advisor knowledge export -o "$OUT/crosscheck-trials.jsonl"

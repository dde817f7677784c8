#!/usr/bin/env bash
# Exploratory, after both studies missed at 60 req/s with `frontend_delay`: does a second vLLM API
# server process lift the frontend the H100 hosts hit at ~6,000-7,000 tokens/s?
#
# vLLM's defaults twice on one H100, side by side at 0.45 of the memory each: server 1 with the
# single API server vLLM starts by default, server 2 with `--api-server-count 2` (vLLM's own
# flag: more API server processes in front of the one engine core). `api_server_count` is not a
# knob of search_spaces/vllm.yaml, so the servers are started here with the advisor's own argv
# (objectives/targets/vllm_target.py build_argv) plus that flag, and the advisor's client
# measures each as it runs (`advisor crosscheck --base-url`): `chat` at 60 req/s (8 s of
# arrivals), 3 interleaved rounds, every window through the validity gate. One device call:
#   bash docs/benchmarks/h100-new-gpu-2026-12-07/frontend.sh > $OUT/log-frontend.txt 2>&1
set -uo pipefail
cd "$(dirname "$0")/../../.."  # the repository root
OUT=${OUT:-/tmp/out}
T0=$(date +%s)
LIMIT_S=${LIMIT_S:-320}
RATE=60
SLO="ttft_p95_ms<=300,tpot_p95_ms<=40"
export DEVICE_DB=/tmp/frontend.db DEVICE_IMPORT_SHIPPED=0
# shellcheck source=scripts/device/h200_env.sh
source scripts/device/h200_env.sh
left() { echo $(( LIMIT_S - ($(date +%s) - T0) )); }
pids=()
finish() {
  for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null; done
  sleep 3
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  python3 -m advisor knowledge export -o "$OUT/trials-frontend.jsonl" || true
  nvidia-smi > "$OUT/nvidia-smi-frontend.txt" 2>&1 || true
  echo "TOTAL_S $(( $(date +%s) - T0 ))"
}
trap finish EXIT
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

python3 - > /tmp/argv.json <<'PY'
import json
from pathlib import Path
from objectives.llm.models import write_model_dir
from objectives.targets.vllm_target import build_argv
model = write_model_dir("llama-3-8b", Path("/tmp/m8b"))
argv = {p: build_argv({"gpu_memory_utilization": 0.45}, model_dir=model, port=p,
                      engine_version="0.26.0", max_model_len=2560, seed=0,
                      served_model_name="llama-3-8b") for p in (8101, 8102)}
argv[8102] += ["--api-server-count", "2"]
print(json.dumps(argv))
PY
for port in 8101 8102; do
  mapfile -t args < <(python3 -c "import json,sys; [print(a) for a in json.load(open('/tmp/argv.json'))[sys.argv[1]]]" "$port")
  echo "START $port: ${args[*]}"
  VLLM_SERVER_DEV_MODE=1 python3 -m vllm.entrypoints.cli.main serve "${args[@]}" \
    > "$OUT/server-$port.log" 2>&1 &
  pids+=($!)
done
for port in 8101 8102; do
  until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do
    if [ "$(left)" -lt 60 ]; then echo "NOT_READY $port"; exit 1; fi
    sleep 2
  done
  echo "READY $port after $(( $(date +%s) - T0 )) s"
done
for round in 1 2 3; do
  for port in 8101 8102; do
    [ "$(left)" -lt 25 ] && { echo "OUT_OF_TIME"; exit 0; }
    timeout -s INT "$(( $(left) - 10 ))" python3 -m advisor crosscheck --target vllm \
      --base-url "http://127.0.0.1:$port" --served-model llama-3-8b --workload chat \
      --model llama-3-8b --workload-param "$(poisson $RATE)" \
      --workload-param n_requests=$(( RATE * 8 )) --workload-param drain_limit_s=15 \
      --rate $RATE --repeats 1 --reference-repeats 0 --slo "$SLO" \
      --store-as "h100-8b-chat-1207-api$(( port - 8100 ))" -o "$OUT/cc-$port-r$round.jsonl" \
      2>&1 | grep -E "advisor .*req/s|rows within|Error|error" | head -5
    echo "ROUND $round port $port done at $(( $(date +%s) - T0 )) s"
  done
done

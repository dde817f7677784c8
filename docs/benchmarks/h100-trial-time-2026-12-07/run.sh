#!/usr/bin/env bash
# Issue 44 item 3 on the H100: what an 8B vLLM trial (one engine start, 4 rates) costs before and
# after the trial shortcuts, interleaved on one machine, and where its time goes.
#
#   one `advisor tune` study per trial, each of one trial: vLLM's defaults on the Llama-3-8B
#   shape (random bf16 weights), `chat` (Poisson, 8 s of arrivals per rate, drain limit 15 s)
#   at 45 req/s (the study's rate) and --also-rate 15, 30, 80, SLO
#   ttft_p95_ms<=300,tpot_p95_ms<=40, no warm start, no paired repeats, the failure gate off;
#   the arms alternate: ADVISOR_TRIAL_SHORTCUTS=0 ("before": every window whole, warm-up before
#   every rate, client processes chosen afresh per rate) and =1 ("after", the default).
#   The first study of the call primes the shared engine cache (a cold start: torch.compile,
#   Triton) and is reported apart; every later start is warm, as in a study.
#   Last, if time is left: one warm `vllm serve` start of the same model under py-spy.
#
# Run through the device tool on nvidia-h100-x1, carrying .vllm-h200 and .whl:
#   bash docs/benchmarks/h100-trial-time-2026-12-07/run.sh > $OUT/log.txt 2>&1; tail -40 $OUT/log.txt
# Results in $OUT: trials.jsonl (the store, exported), times.tsv (one line per study: arm, wall
# seconds of the `advisor tune` process), the engines' logs (raw.tar.gz), py-spy's profile,
# nvidia-smi.txt, log.txt.
set -uo pipefail
cd "$(dirname "$0")/../../.."  # the repository root
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" /tmp/raw
T0=$(date +%s)
LIMIT_S=${LIMIT_S:-585}
# shellcheck disable=SC1091
source .vllm-h200/activate.sh
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site \
  .whl/*.whl || { echo "wheel install failed"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD:${PYTHONPATH:-} ADVISOR_DB_URL=sqlite:////tmp/advisor-h100.db
export ADVISOR_IMPORT_SHIPPED=0 ADVISOR_CACHE_DIR=/tmp/advisor-cache PYTHONUNBUFFERED=1 COLUMNS=200
export ADVISOR_ENGINE_CACHE_DIR=/tmp/engine-cache
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
finish() {
  kill "${COPIER:-}" 2>/dev/null
  python3 -m advisor knowledge export -o "$OUT/trials.jsonl" || true
  cp /tmp/times.tsv "$OUT/times.tsv" 2>/dev/null
  nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
  tar -czf "$OUT/raw.tar.gz" -C /tmp raw
  echo "TOTAL_S $(( $(date +%s) - T0 ))"
}
trap finish EXIT
gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader)
echo "$gpu"; nproc; python3 --version
case "$gpu" in *H100*) ;; *) echo "not an H100: stopping" >&2; exit 3;; esac
python3 -c "import importlib.metadata as m; print('vllm', m.version('vllm'), 'torch', m.version('torch'))" || true
# The engine's log lives in the trial's scratch folder, removed when the server stops: copy it.
( while sleep 1; do for f in /tmp/advisor-*/*.log; do [ -f "$f" ] && cp "$f" /tmp/raw/; done; done
) >/dev/null 2>&1 &
COPIER=$!
left() { echo $(( LIMIT_S - ($(date +%s) - T0) )); }
SLO="ttft_p95_ms<=300,tpot_p95_ms<=40"
R0=45
WL=(--workload chat --workload-param "arrival={\"process\":\"poisson\",\"rate_rps\":$R0}"
    --workload-param n_requests=$(( R0 * 8 )) --workload-param drain_limit_s=15)
study() {  # study NAME SHORTCUTS: one study of one trial (the engine default), timed
  local name=$1 shortcuts=$2 t0 rc
  t0=$EPOCHREALTIME
  ADVISOR_TRIAL_SHORTCUTS=$shortcuts timeout --foreground -s TERM -k 20 "$(left)" \
    python3 -m advisor tune --target vllm --model llama-3-8b "${WL[@]}" --slo "$SLO" \
      --trials 1 --also-rate 15 --also-rate 30 --also-rate 80 --no-warm-start \
      --paired-repeats 0 --no-failure-gate --trial-timeout 300 --name "$name"
  rc=$?
  printf '%s\t%s\t%.1f\t%s\n' "$name" "$shortcuts" "$(python3 -c "print($EPOCHREALTIME - $t0)")" "$rc" \
    | tee -a /tmp/times.tsv
  for _ in $(seq 30); do  # the GPU free again before the next start
    [ -z "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader)" ] && break; sleep 1
  done
}
study prime-cold 1
# Each pair needs ~2 x 90 s at most; stop pairing when less than that is left.
for round in 1 2 3; do
  if [ "$round" = 2 ]; then first=1 second=0; else first=0 second=1; fi
  [ "$(left)" -gt 200 ] || { echo "no time for round $round"; break; }
  study "r$round-a$first" "$first"
  [ "$(left)" -gt 100 ] || { echo "no time for the second half of round $round"; break; }
  study "r$round-a$second" "$second"
done
# Where a warm start's time goes: one `vllm serve` of the same model under py-spy (if time).
if [ "$(left)" -gt 75 ] && command -v /tmp/site/bin/py-spy >/dev/null; then
  model=/tmp/advisor-cache/models/llama-3-8b
  timeout -s INT "$(( $(left) - 15 ))" /tmp/site/bin/py-spy record --subprocesses --idle \
    --rate 50 --format speedscope -o "$OUT/pyspy-warm-start.json" -- \
    python3 -m vllm.entrypoints.cli.main serve "$model" --load-format dummy --port 18123 \
    --host 127.0.0.1 --max-model-len 2560 > /tmp/raw/pyspy-serve.log 2>&1 &
  SPY=$!
  for _ in $(seq 120); do curl -sf http://127.0.0.1:18123/health >/dev/null && break; sleep 1; done
  echo "PYSPY_READY_S $(( $(date +%s) - T0 ))"
  pkill -INT -f "serve $model" ; wait "$SPY"
fi

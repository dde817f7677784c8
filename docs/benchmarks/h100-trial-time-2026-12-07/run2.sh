#!/usr/bin/env bash
# Issue 44 item 3 on the H100, second call: the cuts the first call's breakdown pointed at,
# before and after interleaved on one machine (run.sh is the first call; README.md says both).
#
#   the trial of run.sh (vLLM's defaults, 8B shape, `chat` at 45 req/s with --also-rate 15, 30,
#   80, SLO ttft_p95_ms<=300,tpot_p95_ms<=40), one study of one trial per arm:
#   before: ADVISOR_TRIAL_SHORTCUTS=0, ADVISOR_CLIENT_TOKENS_PER_PROCESS=4000 (the old figure),
#           vLLM and the wheels imported from a copy made before anything was byte-compiled,
#           with PYTHONDONTWRITEBYTECODE=1: every process compiles their sources, as every
#           start on the device did until now (the image's own torch keeps its bytecode);
#   after:  the shortcuts on, 2,000 tokens/s per client process, the payload and the wheels
#           byte-compiled once at the start of the call (scripts/device/h200_env.sh did that for
#           a while; it stopped once this call showed no gain). This checkout is compiled by
#           neither arm.
#   A prime study first (the after arm, one rate) fills the shared engine cache (cold start).
#
# Run through the device tool on nvidia-h100-x1, carrying .vllm-h200 and .whl:
#   bash docs/benchmarks/h100-trial-time-2026-12-07/run2.sh > $OUT/log2.txt 2>&1; tail -40 $OUT/log2.txt
# Results in $OUT: trials2.jsonl (the store, exported), times2.tsv (study, arm, wall s, exit
# code), the engines' logs (raw2.tar.gz), nvidia-smi2.txt.
set -uo pipefail
cd "$(dirname "$0")/../../.."  # the repository root
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" /tmp/raw
T0=$(date +%s)
LIMIT_S=${LIMIT_S:-585}
env | grep -E '^PYTHON' | sort
# shellcheck disable=SC1091
source .vllm-h200/activate.sh
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site \
  .whl/*.whl || { echo "wheel install failed"; exit 1; }
t=$(date +%s)
rm -rf /tmp/vllm_site_src /tmp/site_src
cp -a /tmp/vllm_site /tmp/vllm_site_src && cp -a /tmp/site /tmp/site_src
find /tmp/vllm_site_src /tmp/site_src -name __pycache__ -prune -exec rm -rf {} +
echo "COPY_S $(( $(date +%s) - t ))"; t=$(date +%s)
python3 -m compileall -q -j 0 /tmp/vllm_site /tmp/site >/dev/null 2>&1
echo "COMPILEALL_S $(( $(date +%s) - t ))"
BEFORE_PATH=/tmp/site_src:$PWD:${PYTHONPATH/\/tmp\/vllm_site/\/tmp\/vllm_site_src}
export PYTHONPATH=/tmp/site:$PWD:${PYTHONPATH:-} ADVISOR_DB_URL=sqlite:////tmp/advisor-h100.db
export ADVISOR_IMPORT_SHIPPED=0 ADVISOR_CACHE_DIR=/tmp/advisor-cache PYTHONUNBUFFERED=1 COLUMNS=200
export ADVISOR_ENGINE_CACHE_DIR=/tmp/engine-cache
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
finish() {
  kill "${COPIER:-}" 2>/dev/null
  python3 -m advisor knowledge export -o "$OUT/trials2.jsonl" || true
  cp /tmp/times.tsv "$OUT/times2.tsv" 2>/dev/null
  nvidia-smi > "$OUT/nvidia-smi2.txt" 2>&1
  tar -czf "$OUT/raw2.tar.gz" -C /tmp raw
  echo "TOTAL_S $(( $(date +%s) - T0 ))"
}
trap finish EXIT
gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader)
echo "$gpu"; nproc; python3 --version
case "$gpu" in *H100*|*H200*) ;; *) echo "not an H100 or H200: stopping" >&2; exit 3;; esac
# Each start's log lives in the trial's scratch folder, removed when the server stops: copy it
# under the study's name.
( while sleep 1; do for f in /tmp/advisor-*/*.log; do
    [ -f "$f" ] && cp "$f" "/tmp/raw/$(cat /tmp/current-study 2>/dev/null || echo x)-$(basename "$f")"
  done; done ) >/dev/null 2>&1 &
COPIER=$!
left() { echo $(( LIMIT_S - ($(date +%s) - T0) )); }
SLO="ttft_p95_ms<=300,tpot_p95_ms<=40"
R0=45
WL=(--workload chat --workload-param "arrival={\"process\":\"poisson\",\"rate_rps\":$R0}"
    --workload-param n_requests=$(( R0 * 8 )) --workload-param drain_limit_s=15)
study() {  # study NAME ARM [RATES...]: one study of one trial (the engine default), timed
  local name=$1 arm=$2 t0 rc; shift 2
  local rates=() arm_env=()
  for r in "$@"; do rates+=(--also-rate "$r"); done
  if [ "$arm" = before ]; then
    arm_env=(ADVISOR_TRIAL_SHORTCUTS=0 ADVISOR_CLIENT_TOKENS_PER_PROCESS=4000
             PYTHONPATH="$BEFORE_PATH" PYTHONDONTWRITEBYTECODE=1)
  fi
  echo "$name" > /tmp/current-study
  t0=$EPOCHREALTIME
  env "${arm_env[@]}" timeout --foreground -s TERM -k 20 "$(left)" \
    python3 -m advisor tune --target vllm --model llama-3-8b "${WL[@]}" --slo "$SLO" \
      --trials 1 "${rates[@]}" --no-warm-start \
      --paired-repeats 0 --no-failure-gate --trial-timeout 300 --name "$name"
  rc=$?
  printf '%s\t%s\t%s\t%s\n' "$name" "$arm" "$(python3 -c "print(round($EPOCHREALTIME - $t0, 1))")" "$rc" \
    | tee -a /tmp/times.tsv
  for _ in $(seq 30); do  # the GPU free again before the next start
    [ -z "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader)" ] && break; sleep 1
  done
}
study prime after
echo "BEFORE_PATH=$BEFORE_PATH"
for arms in "before after" "after before" "before after"; do
  for arm in $arms; do
    need=$([ "$arm" = before ] && echo 140 || echo 100)
    [ "$(left)" -gt "$need" ] || { echo "no time for another $arm"; break 2; }
    study "$arm-$(date +%s)" "$arm" 15 30 80
  done
done
echo "bytecode in the before arm's copies at the end: $(find /tmp/vllm_site_src /tmp/site_src -name '*.pyc' | wc -l)"

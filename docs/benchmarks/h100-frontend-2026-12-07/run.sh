#!/usr/bin/env bash
# Issue 44 on the H100, the second campaign: a user with a GPU the knowledge has never seen
# calibrates, the advisor predicts, and (1) the predictions are scored against windows measured
# after them on the same lease, (2) the whole way to a verified answer is timed: calibration +
# a short study warm-started from the calibrated answer + the paired verification. New since
# the first campaign (docs/benchmarks/h100-new-gpu-2026-12-07/), committed before this one
# measured anything: the simulator models vLLM's prefix cache, and the API server processes
# (`--api-server-count`, the knob of role frontend_processes) are in the search space, the
# calibrated answer giving N processes 1/N of the calibrated frontend cost per token. The first
# campaign's studies missed at 60 req/s with every window `frontend_delay`.
#
# The store holds the H200's vLLM knowledge and nothing of the H100 (the shipped H100 files are
# left out), so the advisor knows this GPU only from what this script measures on it.
# The question: the Llama-3-8B shape (random bf16 weights), vLLM 0.26.0, `chat` at 60 req/s,
# SLO ttft_p95_ms<=300,tpot_p95_ms<=40.
#
# Phases, one device call each on nvidia-h100-x1 (carrying .vllm-h200, .whl, .device-carry),
# back to back on one warm machine (its /tmp keeps the store and the predictions between calls):
#   PHASE=answer bash docs/benchmarks/h100-frontend-2026-12-07/run.sh > $OUT/log-answer.txt 2>&1
#   PHASE=verify bash docs/benchmarks/h100-frontend-2026-12-07/run.sh > $OUT/log-verify.txt 2>&1
#   PHASE=score  bash docs/benchmarks/h100-frontend-2026-12-07/run.sh > $OUT/log-score.txt 2>&1
# answer: a fresh store with the H200's knowledge; `advisor calibrate` with its defaults (timed:
#         the first part of the way to an answer); predict.py on the profile it wrote
#         (predictions.json, its sha256 and the time logged BEFORE any window it predicts);
#         the calibrated answer to the question; `advisor tune --trials 3`, the engine defaults
#         first, then the warm start's configs (nothing sampled), failure gate on, stopped after
#         STUDY_S seconds; the measured answer.
# verify: the study's pick (`advisor recommend --measured`) against the defaults,
#         `advisor crosscheck --co-resident --memory-share 0.46`, 3 interleaved rounds with the
#         advisor's client and `vllm bench serve`; then, in the call's time left, the scored
#         windows below.
# score:  the scored windows of vLLM's defaults (a store of their own): `chat` at predict.py's
#         four rates, 3 rounds (fewer where the call's time runs out), then `rag-long-prompt` at
#         its four, 1 round (dropped where the time runs out).
# Results in $OUT: trials-<phase>.jsonl (the store), profile.json, predictions.json,
# answer-*.json, crosscheck-*.jsonl, times-<phase>.tsv, nvidia-smi-<phase>.txt.
set -uo pipefail
cd "$(dirname "$0")/../../.."  # the repository root
HERE=docs/benchmarks/h100-frontend-2026-12-07
OUT=${OUT:-/tmp/out}
PHASE=${PHASE:?set PHASE=answer, verify or score}
T0=$(date +%s)
LIMIT_S=${LIMIT_S:-570}   # the call's own limit, with the export's time kept back
STUDY_S=${STUDY_S:-330}
RATE=60
SLO="ttft_p95_ms<=300,tpot_p95_ms<=40"
KEEP=/tmp/frontend          # survives between calls on a warm machine
mkdir -p "$KEEP"
DB=$KEEP/answer.db  # the user's store: calibration, study, verification
SCORE_DB=$KEEP/score.db  # the scored windows
export DEVICE_DB=$DB DEVICE_IMPORT_SHIPPED=0
# shellcheck source=scripts/device/h200_env.sh
source scripts/device/h200_env.sh
export ADVISOR_ENGINE_CACHE_DIR=/tmp/engine-cache
left() { echo $(( LIMIT_S - ($(date +%s) - T0) )); }
stamp() { echo "$1	$(( $(date +%s) - T0 ))	$(date -u +%H:%M:%S)" | tee -a "$OUT/times-$PHASE.tsv"; }
finish() {
  export_phase
  cp "$DB" "$OUT/advisor-$PHASE.db" 2>/dev/null
  echo "TOTAL_S $(( $(date +%s) - T0 ))"
}
trap finish EXIT
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
if [ ! -f "$KEEP/profile.json" ] && [ -f .device-carry/profile.json ]; then
  echo "a fresh machine: the profile, predictions and answer store of the calls before, carried"
  cp .device-carry/profile.json "$KEEP/profile.json"
  cp .device-carry/predictions.json "$KEEP/predictions.json" 2>/dev/null
  [ -f .device-carry/answer.db ] && cp .device-carry/answer.db "$KEEP/answer.db"
fi

ask() {  # ask NAME [--measured]: the store's answer to the question into $OUT/answer-NAME.json
  python3 -m advisor recommend --target vllm --hardware h100 --model llama-3-8b \
    --rate-rps $RATE --slo "$SLO" ${2:-} --json > "$OUT/answer-$1.json"
  python3 - "$OUT/answer-$1.json" <<'PY'
import json, sys
a = json.load(open(sys.argv[1]))
print("ANSWER", a["status"], a["basis"], json.dumps(a.get("config")), a["summary"][:400])
PY
}

fresh_store() {  # the H200's vLLM knowledge only: no H100 file
  rm -f "$DB"
  python3 -m advisor knowledge import knowledge/data/h200-vllm-*.jsonl.gz > /dev/null || exit 2
}

scored() {  # scored WORKLOAD STUDY: the defaults at predict.py's rates for WORKLOAD
  local wl=$1 study=$2 rates rounds params
  rates=$(python3 -c "import json,sys; w=json.load(open(sys.argv[1]))['workloads'][sys.argv[2]]; print(' '.join(f'{r:g}' for r in w['rates']))" "$KEEP/predictions.json" "$wl")
  rounds=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['workloads'][sys.argv[2]]['rounds'])" "$KEEP/predictions.json" "$wl")
  mapfile -t params < <(python3 -c "import json,sys; [print(p) for p in json.load(open(sys.argv[1]))['workloads'][sys.argv[2]]['base_params']]" "$KEEP/predictions.json" "$wl")
  local args=() r
  for p in "${params[@]}"; do args+=(--workload-param "$p"); done
  for r in $rates; do args+=(--rate "$r"); done
  echo "SCORED $wl at $rates req/s, $rounds round(s)"
  ADVISOR_DB_URL=sqlite:///$SCORE_DB timeout -s INT "$(( $(left) - 15 ))" \
    python3 -m advisor crosscheck --target vllm \
    --workload "$wl" "${args[@]}" --repeats "$rounds" --reference-repeats 0 \
    --slo "$SLO" --store-as "$study" -o "$OUT/crosscheck-$wl.jsonl"
  echo "CROSSCHECK_RC $?"
}

score_windows() {  # the scored windows, in the call's time left (module comment)
  if [ "$(left)" -gt 150 ]; then scored chat h100-8b-chat-1207c-scored
  else echo "CHAT_SKIPPED $(left) s left"; fi
  stamp chat
  if [ "$(left)" -gt 150 ]; then scored rag-long-prompt h100-8b-rag-1207c-scored
  else echo "RAG_SKIPPED $(left) s left"; fi
  stamp rag
  ADVISOR_DB_URL=sqlite:///$SCORE_DB python3 -m advisor knowledge export \
    -o "$OUT/trials-scored.jsonl" || true
}

case $PHASE in
  answer)
    fresh_store
    stamp calibrate-start
    t=$(date +%s)
    python3 -m advisor calibrate --target vllm --model llama-3-8b \
      --store-as h100-8b-chat-1207c-probe -o "$OUT/profile.json" || exit 1
    echo "CALIBRATE_S $(( $(date +%s) - t ))"
    stamp calibrate-end
    cp "$OUT/profile.json" "$KEEP/profile.json"
    python3 "$HERE/predict.py" "$OUT/profile.json" -o "$OUT/predictions.json" || exit 1
    echo "PREDICTIONS $(sha256sum "$OUT/predictions.json" | cut -c1-64) at $(date -u +%FT%TZ)"
    cp "$OUT/predictions.json" "$KEEP/predictions.json"
    stamp predicted
    ask before-study
    stamp study-start
    ( sleep "$STUDY_S"; pkill -INT -f "advisor tune" ) & stopper=$!
    python3 -m advisor tune --target vllm --model llama-3-8b --workload chat \
      --workload-param "$(poisson $RATE)" --workload-param n_requests=$(( RATE * 8 )) \
      --workload-param drain_limit_s=15 --slo "$SLO" --name h100-8b-chat-1207c-quick \
      --trials 3 --paired-repeats 0 --trial-timeout 200 --seed 44
    echo "TUNE_RC $?"
    kill "$stopper" 2>/dev/null
    stamp study-end
    ask after-study --measured
    ;;
  score)
    score_windows
    ;;
  verify)
    ask verify-before --measured
    pick=$(python3 - "$OUT/answer-verify-before.json" <<'PY'
import json, sys
from objectives.registry import get_target
a = json.load(open(sys.argv[1]))
space = get_target("vllm").space()
default = space.default_config()
config = a.get("config") if a["status"] in ("recommended", "keep_defaults") else None
if config and space.validate_config({**default, **config}) != default:
    print(json.dumps({k: v for k, v in config.items() if default.get(k) != v}))
PY
)
    common=(--target vllm --workload chat --model llama-3-8b
      --workload-param "$(poisson $RATE)" --workload-param n_requests=$(( RATE * 8 ))
      --workload-param drain_limit_s=15 --rate $RATE --repeats 3 --reference-repeats 3
      --slo "$SLO" --store-as h100-8b-chat-1207c-quick-verify -o "$OUT/crosscheck-verify.jsonl")
    status=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['status'])" \
      "$OUT/answer-verify-before.json")
    stamp verify-start
    if [ "$status" != recommended ] && [ "$status" != keep_defaults ]; then
      echo "NOTHING_TO_VERIFY: the measured answer is $status"
    elif [ -n "$pick" ]; then
      echo "VERIFY the pick $pick against the defaults, co-resident"
      timeout -s INT "$(( $(left) - 15 ))" python3 -m advisor crosscheck "${common[@]}" \
        --config "pick=$pick" --config "defaults={}" --co-resident --memory-share 0.46
    else
      echo "VERIFY the pick is the defaults: the defaults alone"
      timeout -s INT "$(( $(left) - 15 ))" python3 -m advisor crosscheck "${common[@]}"
    fi
    echo "CROSSCHECK_RC $?"
    stamp verify-end
    ask verify-after --measured
    score_windows
    ;;
esac

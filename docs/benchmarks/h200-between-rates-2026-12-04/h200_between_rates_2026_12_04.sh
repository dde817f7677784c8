#!/usr/bin/env bash
# The nine configs of the 2026-12-04 knob-curve study (docs/benchmarks/h200-knobs-2026-12-04/h200_knob_curves_2026_12_04.sh,
# measured there at 15, 30, 45, 60 and 75 req/s), now at the rates between those:
# 22.5, 37.5, 52.5 and 67.5 req/s, so that each load curve gets points that no curve fit has seen
# (a held-out-rate test of the load-curve model, issue 18). Through the device tool on nvidia-h200
# (one GPU), carrying .vllm-h200 (the vLLM 0.26.0 payload) and .whl (optuna, sqlalchemy, sqlmodel,
# ... wheels for Python 3.12), like the 12-04 script.
#
#   PHASE=a bash docs/benchmarks/h200-between-rates-2026-12-04/h200_between_rates_2026_12_04.sh > $OUT/log-a.txt 2>&1   (then b, c)
#
# One `advisor tune` study per phase: the phase's configs of h200_knob_curves_2026_12_04.yaml (the
# same three per phase as 12-04) enqueued (no engine default, no warm start, no sampled trial, no
# paired repeats), each measured on one engine start at 37.5 req/s and, as co-measured trials
# (--also-rate), at 22.5, 52.5 and 67.5 req/s: the `chat` preset as the 12-04 study ran it (prompts
# up to its 2,048-token cap, median 256), Poisson arrivals, WINDOW seconds of arrivals per rate
# (37.5 x 8 = 300 requests; the co-measured rates scale it to 180, 420 and 540), every measurement
# gated against the server's own metrics, as every shipped H200 trial. One change: the workload
# seed starts at 5 (the preset's is 0), so the four rates draw seeds 5-8. The 12-04 study drew
# seeds 0-4 (45 req/s 0, then 15, 30, 60, 75 req/s 1-4); with the default seed 37.5 req/s would
# replay the first 300 prompts and the stretched arrival gaps of 12-04's 45 req/s window, and
# 22.5 / 52.5 / 67.5 req/s the prompts of 15 / 30 / 60 req/s: a held-out-rate test would share its
# prompt noise with the curve it tests. The seed is no workload feature: the trials join the same curves.
#
# Results land in $OUT: trials-<phase>.jsonl (the store, exported), nvidia-smi-<phase>.txt. The
# deadline below (DEADLINE_S, default 555 s) interrupts the study before the device tool's limit,
# so the trials measured so far are exported. The store sits in /tmp (DEVICE_DB moves it, e.g. into
# $OUT so that it comes back even if the call is killed) and a warm machine keeps it between calls,
# so a phase's export holds the earlier phases' trials too; a machine gone cold between calls
# starts an empty store (on 2026-12-04 every phase did: docs/benchmarks/h200-between-rates-2026-12-04).
set -uo pipefail
cd "$(dirname "$0")/../../.."  # the repository root
OUT=${OUT:-/tmp/out}
PHASE=${PHASE:?set PHASE=a, b or c}
WINDOW=${WINDOW:-8}
# shellcheck source=scripts/device/h200_env.sh
source scripts/device/h200_env.sh
trap export_phase EXIT
stop_before_limit "${DEADLINE_S:-555}" INT "advisor tune"

# Fractional rates: bash arithmetic is integer only, so n_requests comes from python3, which
# refuses a window that gives a fractional count.
R0=37.5
n0=$(python3 -c "import sys; n = float(sys.argv[1]) * float(sys.argv[2]); assert n == int(n), n; print(int(n))" \
  "$R0" "$WINDOW") || { echo "rate $R0 x window $WINDOW s is not a whole number of requests" >&2; exit 2; }

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
n=$(enqueue_phase docs/benchmarks/h200-knobs-2026-12-04/h200_knob_curves_2026_12_04.yaml) || exit 2
python3 -m advisor tune --target vllm --workload chat --model llama-3-8b \
  --workload-param "$(poisson "$R0")" --workload-param "n_requests=$n0" \
  --workload-param drain_limit_s=15 --workload-param seed=5 \
  --also-rate 22.5 --also-rate 52.5 --also-rate 67.5 \
  --slo "ttft_p95_ms<=300,tpot_p95_ms<=40" --objective maximize:output_tokens_per_s \
  --enqueue "@/tmp/enqueue-$PHASE.json" --trials "$n" --no-include-default --no-warm-start \
  --paired-repeats 0 --trial-timeout 420 --name "h200-8b-chat-1204-between-$PHASE"

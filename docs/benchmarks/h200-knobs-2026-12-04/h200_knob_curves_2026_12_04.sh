#!/usr/bin/env bash
# Load curves of chosen vLLM configs on the 8B shape (issue 18: a knob-level model of the curves
# needs configs measured at several rates), through the device tool on nvidia-h200 (one GPU),
# carrying .vllm-h200 (the vLLM 0.26.0 payload) and .whl (optuna, sqlalchemy, sqlmodel, ... wheels
# for Python 3.12), like docs/benchmarks/h200-2026-12-03/h200_curve_rates_2026_12_03.sh.
#
#   PHASE=a bash docs/benchmarks/h200-knobs-2026-12-04/h200_knob_curves_2026_12_04.sh > $OUT/log-a.txt 2>&1   (then b, c)
#
# One `advisor tune` study per phase: the phase's configs of h200_knob_curves_2026_12_04.yaml
# enqueued (no engine default, no warm start, no sampled trial, no paired repeats), each measured on
# one engine start at 45 req/s and, as co-measured trials (--also-rate), at 15, 30, 60 and 75 req/s:
# the `chat` preset as the 12-03 gate study ran it (prompts up to its 2,048-token cap, median 256;
# the 12-01 crosscheck clamped some sessions to 1,024, which moves no workload feature), Poisson
# arrivals, WINDOW seconds of arrivals per rate, every measurement gated against the server's own
# metrics, as every shipped H200 trial.
# Five rates give a config a curve of its own shape (docs/knowledge.md, load curves).
#
# Results land in $OUT: trials-<phase>.jsonl (the store, exported), nvidia-smi-<phase>.txt. The
# deadline below interrupts the study before the device tool's limit, so the trials measured so far
# are exported. The store sits in /tmp and a warm machine keeps it between calls: each phase's
# export holds the earlier phases' trials too.
set -uo pipefail
cd "$(dirname "$0")/../../.."  # the repository root
OUT=${OUT:-/tmp/out}
PHASE=${PHASE:?set PHASE=a, b or c}
WINDOW=${WINDOW:-8}
# shellcheck source=scripts/device/h200_env.sh
source scripts/device/h200_env.sh
trap export_phase EXIT
stop_before_limit "${DEADLINE_S:-555}" INT "advisor tune"

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
n=$(enqueue_phase docs/benchmarks/h200-knobs-2026-12-04/h200_knob_curves_2026_12_04.yaml) || exit 2
python3 -m advisor tune --target vllm --workload chat --model llama-3-8b \
  --workload-param "$(poisson 45)" --workload-param "n_requests=$(( 45 * WINDOW ))" \
  --workload-param drain_limit_s=15 \
  --also-rate 15 --also-rate 30 --also-rate 60 --also-rate 75 \
  --slo "ttft_p95_ms<=300,tpot_p95_ms<=40" --objective maximize:output_tokens_per_s \
  --enqueue "@/tmp/enqueue-$PHASE.json" --trials "$n" --no-include-default --no-warm-start \
  --paired-repeats 0 --trial-timeout 420 --name "h200-8b-chat-1204-knobs-$PHASE"

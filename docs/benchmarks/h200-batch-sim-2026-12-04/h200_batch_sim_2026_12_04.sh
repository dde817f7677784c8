#!/usr/bin/env bash
# Three vLLM configs of the 8B shape never measured before (h200_batch_sim_2026_12_04.yaml: they
# move only max_num_seqs and max_num_batched_tokens from vLLM's defaults), measured as a prospective
# test of the continuous-batching simulator (knowledge/batch_sim.py, issue 18), whose predictions
# for them (docs/benchmarks/h200-batch-sim-2026-12-04/predictions.json) were committed before this
# measurement. Through the device tool on nvidia-h200 (one GPU), carrying .vllm-h200 (the vLLM
# 0.26.0 payload) and .whl (optuna, sqlalchemy, sqlmodel, ... wheels for Python 3.12), like the
# 12-04 between-rates script (docs/benchmarks/h200-between-rates-2026-12-04/h200_between_rates_2026_12_04.sh).
#
#   PHASE=a bash docs/benchmarks/h200-batch-sim-2026-12-04/h200_batch_sim_2026_12_04.sh > $OUT/log-a.txt 2>&1   (then b)
#
# One `advisor tune` study per phase: the phase's configs of h200_batch_sim_2026_12_04.yaml (two in
# a, one in b) enqueued (no engine default, no warm start, no sampled trial, no paired repeats),
# each measured on one engine start at 30 req/s and, as co-measured trials (--also-rate), at 15, 45
# and 60 req/s: the `chat` preset as the 12-04 studies ran it (prompts up to its 2,048-token cap,
# median 256), Poisson arrivals, WINDOW seconds of arrivals per rate (30 x 8 = 240 requests; the
# co-measured rates scale it to 120, 360 and 480), drain limit 15 s, every measurement gated
# against the server's own metrics, as every shipped H200 trial. The workload seed is 9 (the
# preset's is 0): --also-rate's i-th rate draws the main seed + i (objectives/llm/workload.py
# at_rate, seed_offset = i + 1 in advisor/cli.py _co_measured), so 30 req/s draws seed 9, 15 req/s
# seed 10, 45 req/s seed 11 and 60 req/s seed 12. The 12-04 knob-curve study drew seeds 0-4 and the
# between-rates study 5-8, so no rate here replays another 12-04 window's prompts or arrival gaps.
# The seed is no workload feature: the trials join the same curves.
#
# Results land in $OUT: trials-<phase>.jsonl (the store, exported), nvidia-smi-<phase>.txt. The
# deadline below (DEADLINE_S, default 555 s) interrupts the study before the device tool's limit,
# so the trials measured so far are exported. The store sits in /tmp (DEVICE_DB moves it, e.g. into
# $OUT so that it comes back even if the call is killed) and a warm machine keeps it between calls,
# so a phase's export holds the earlier phase's trials too; a machine gone cold between calls
# starts an empty store.
set -uo pipefail
cd "$(dirname "$0")/../../.."  # the repository root
OUT=${OUT:-/tmp/out}
PHASE=${PHASE:?set PHASE=a or b}
WINDOW=${WINDOW:-8}
# shellcheck source=scripts/device/h200_env.sh
source scripts/device/h200_env.sh
trap export_phase EXIT
stop_before_limit "${DEADLINE_S:-555}" INT "advisor tune"

R0=30
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
n=$(enqueue_phase docs/benchmarks/h200-batch-sim-2026-12-04/h200_batch_sim_2026_12_04.yaml) || exit 2
python3 -m advisor tune --target vllm --workload chat --model llama-3-8b \
  --workload-param "$(poisson "$R0")" --workload-param "n_requests=$(( R0 * WINDOW ))" \
  --workload-param drain_limit_s=15 --workload-param seed=9 \
  --also-rate 15 --also-rate 45 --also-rate 60 \
  --slo "ttft_p95_ms<=300,tpot_p95_ms<=40" --objective maximize:output_tokens_per_s \
  --enqueue "@/tmp/enqueue-$PHASE.json" --trials "$n" --no-include-default --no-warm-start \
  --paired-repeats 0 --trial-timeout 420 --name "h200-8b-chat-1204-batchsim-$PHASE"

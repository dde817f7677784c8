#!/usr/bin/env bash
# A prospective test of the unmeasured-shape answers (issue 18 item 3): Qwen2.5-7B, a shape no
# shipped trial has, measured on the H200 after the shipped knowledge's answers for it were
# written and committed (docs/benchmarks/h200-qwen7b-2026-12-04/shape_prospective.py predict ->
# docs/benchmarks/h200-qwen7b-2026-12-04/predictions.json). Run through the device tool on
# nvidia-h200 (one GPU), carrying .vllm-h200 (the vLLM 0.26.0 payload) and .whl (optuna,
# sqlalchemy, sqlmodel, ... wheels for Python 3.12), like docs/benchmarks/h200-2026-12-03/h200_third_shape_2026_12_03.sh,
# whose measurement this repeats for another shape: one `advisor crosscheck` of vLLM's defaults
# (random weights, --load-format dummy) with the `chat` preset, Poisson arrivals, WINDOW seconds
# of arrivals per rate, 6 rates (the four answered, 15-60 req/s, and 75 / 90 req/s, which the
# answers refused as above the predicted capacity of 75 req/s), 2 repeats each, every measurement
# gated against the server's own metrics and stored as a trial of study
# h200-qwen-7b-chat-1204@<rate>rps. Results land in $OUT: crosscheck-qwen-7b.jsonl,
# trials-qwen-7b.jsonl (the store, exported), log-qwen-7b.txt, nvidia-smi-qwen-7b.txt.
#
#   bash docs/benchmarks/h200-qwen7b-2026-12-04/h200_qwen7b_2026_12_04.sh > $OUT/log-qwen-7b.txt 2>&1
#
# Qwen/Qwen2.5-7B's config.json (docs/examples/model-configs/qwen2.5-7b): 7.62B parameters, 28
# layers, 28 heads / 4 KV heads of 128 (56 KiB of bf16 KV cache per token), q/k/v biases; between
# the shipped 3B and 8B Llama shapes in parameters, another family.
#
# Time: one device call of at most 570 s: vLLM's start 70-190 s, 12 windows of 8 s arrivals +
# warm-up + at most 15 s of drain 250-350 s. The deadline below stops the crosscheck first, so
# the trials measured so far are exported.
set -uo pipefail
cd "$(dirname "$0")/../../.."  # the repository root
OUT=${OUT:-/tmp/out}
PHASE=qwen-7b
WINDOW=${WINDOW:-8}
CONFIG=docs/examples/model-configs/qwen2.5-7b/config.json
# shellcheck source=scripts/device/h200_env.sh
source scripts/device/h200_env.sh
trap export_phase EXIT
stop_before_limit 570 TERM "advisor crosscheck"

shape_crosscheck "$CONFIG" "h200-$PHASE-chat-1204" 2 15 30 45 60 75 90

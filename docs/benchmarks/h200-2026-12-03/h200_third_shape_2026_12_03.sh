#!/usr/bin/env bash
# The third shape on the H200 (issue 18 item 3, "any dense decoder shape"): a mid-size dense
# decoder given by its published config.json, measured so that an extrapolation over shapes can be
# held against a shape that was measured but held out (e.g. predict the 1B from the 8B and this
# one). Run through the device tool on nvidia-h200 (one GPU), carrying .vllm-h200 (the vLLM 0.26.0
# payload) and .whl (optuna, sqlalchemy, sqlmodel, ... wheels for Python 3.12), like
# docs/benchmarks/h200-crosscheck-2026-12-01/h200_crosscheck_2026_12_01.sh, whose phases this one follows: one
# `advisor crosscheck` of vLLM's defaults (random weights, --load-format dummy) with the `chat`
# preset clamped to prompts <= 1,024 tokens, Poisson arrivals, WINDOW seconds of arrivals per rate,
# 5 rates from light load to past the knee, 3 repeats each, every measurement gated against the
# server's own metrics (no reference harness: the 12-01 phases already checked the client against
# `vllm bench serve`) and stored as a trial of study h200-<shape>-chat-1203-knee@<rate>rps.
# The model is given as --model-config, so the trials are keyed by the shape's canonical name and
# carry its features (objectives/llm/shapes.py). Results land in $OUT: crosscheck-<phase>.jsonl,
# trials-<phase>.jsonl (the store, exported), log-<phase>.txt, nvidia-smi-<phase>.txt.
#
#   PHASE=llama-3b bash docs/benchmarks/h200-2026-12-03/h200_third_shape_2026_12_03.sh > $OUT/log-llama-3b.txt 2>&1
#   PHASE=qwen-3b  bash docs/benchmarks/h200-2026-12-03/h200_third_shape_2026_12_03.sh ...
#
# llama-3b (the default): meta-llama/Llama-3.2-3B's config.json
#     (docs/examples/model-configs/llama-3.2-3b): 3.21B parameters, 28 layers, 24 heads / 8 KV
#     heads of 128, 112 KiB of bf16 KV cache per token; between the shipped 1B (1.24B, 32 KiB) and
#     8B (8.03B, 128 KiB), same family, so a fit over shapes sees size, not architecture, change.
#     Rates 15..135 req/s: the 8B's knee was near 90-105 req/s and the 1B's above 150.
# qwen-3b: Qwen/Qwen2.5-3B's config.json (docs/examples/model-configs/qwen2.5-3b), the same
#     rates: another family (q/k/v biases, 2 KV heads: 36 KiB/token) if a second call is lent.
#
# Time: one device call of at most 570 s. vLLM's start (profile, CUDA graphs) took 70-190 s in
# earlier calls; 15 windows of 8 s arrivals + warm-up + at most 15 s of drain take 200-350 s.
# The deadline below stops the crosscheck first, so the trials measured so far are exported.
set -uo pipefail
cd "$(dirname "$0")/../../.."  # the repository root
OUT=${OUT:-/tmp/out}
PHASE=${PHASE:-llama-3b}
WINDOW=${WINDOW:-8}
case $PHASE in
  llama-3b) CONFIG=docs/examples/model-configs/llama-3.2-3b/config.json ;;
  qwen-3b) CONFIG=docs/examples/model-configs/qwen2.5-3b/config.json ;;
  *) echo "unknown PHASE $PHASE (llama-3b or qwen-3b)" >&2; exit 2 ;;
esac
# shellcheck source=scripts/device/h200_env.sh
source scripts/device/h200_env.sh
trap export_phase EXIT
stop_before_limit 570 TERM "advisor crosscheck"

shape_crosscheck "$CONFIG" "h200-$PHASE-chat-1203-knee" 3 15 45 75 105 135

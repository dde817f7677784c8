#!/usr/bin/env bash
# Short against long measurement windows on one vLLM server (issue 18: where the TTFT p95 spread
# of repeats comes from), through the device tool on nvidia-h200 (one GPU), carrying .vllm-h200
# and .whl like the other scripts here. See docs/benchmarks/h200-window-2026-12-03/h200_window_noise_2026_12_03.py.
#
#   PHASE=8b-window     bash docs/benchmarks/h200-window-2026-12-03/h200_window_noise_2026_12_03.sh > $OUT/log-8b-window.txt 2>&1
#   PHASE=8b-window-mid bash docs/benchmarks/h200-window-2026-12-03/h200_window_noise_2026_12_03.sh > $OUT/log-8b-window-mid.txt 2>&1
#
# 8b-window: vLLM's defaults on the 8B shape at 15 and 60 req/s (light load, and near the knee
#     the 8-s windows place at ~67 req/s), 8-s and 30-s windows alternating (run twice).
# 8b-window-mid: the same at 45 and 52 req/s, where the two windows' readings part.
#
# Results land in $OUT: window-noise-<phase>.jsonl (one line per measurement), nvidia-smi-<phase>.txt.
set -uo pipefail
cd "$(dirname "$0")/../../.."  # the repository root
OUT=${OUT:-/tmp/out}
PHASE=${PHASE:?set PHASE=8b-window or 8b-window-mid}
# shellcheck source=scripts/device/h200_env.sh
source scripts/device/h200_env.sh
trap 'nvidia-smi > "$OUT/nvidia-smi-$PHASE.txt" 2>&1 || true' EXIT
stop_before_limit 575 TERM "h200_window_noise"

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
case $PHASE in
  8b-window)
    python3 docs/benchmarks/h200-window-2026-12-03/h200_window_noise_2026_12_03.py --model llama-3-8b \
      --rate 15 --rate 60 --window 8 --window 30 --deadline-s "${DEADLINE_S:-535}" \
      -o "$OUT/window-noise-$PHASE.jsonl"
    ;;
  8b-window-mid)
    python3 docs/benchmarks/h200-window-2026-12-03/h200_window_noise_2026_12_03.py --model llama-3-8b \
      --rate 45 --rate 52 --window 8 --window 30 --deadline-s "${DEADLINE_S:-535}" \
      -o "$OUT/window-noise-$PHASE.jsonl"
    ;;
  *) echo "unknown PHASE $PHASE" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# Does vLLM 0.26 still refuse prompts near a full context for their length in characters? Its
# check (vllm/renderers/params.py `_text_len_check`) refuses a prompt of more characters than
# (max_model_len - max_tokens) x the vocabulary's longest token text. The model directories'
# word-level tokenizer had `<pad>`/`t128255` (7 characters) as its longest texts while a prompt
# word `t<id>` with its space takes up to 8: on 2026-12-04 one chat request (index 63 of the
# 60 req/s, seed-12 stream: 2,048 prompt tokens, 487 output, 14,594 characters against 14,511)
# was refused with HTTP 400 (docs/benchmarks/h200-batch-sim-2026-12-04/README.md). The padding
# token's text is now 21 characters long (objectives/llm/models.py PAD_TOKEN).
#
# Two `advisor crosscheck`s of vLLM's defaults on the Llama-3.2-1B shape (its vocabulary and
# context are the 8B's; it starts faster), no reference harness, each measurement gated against
# the server's metrics:
#   chat-seed12  the `chat` preset, 480 requests at 60 req/s, seed 12: the stream with the refused
#                request (the old tokenizer: 1 refused);
#   full-context fixed 2,040-token prompts and 512 output tokens, 240 requests at 30 req/s: under
#                the old tokenizer vLLM's bound refuses every one of them (computed from the
#                check above: 14,484-14,631 characters against 14,336).
# Written on 2026-12-04 (no device was lent that day), run on 2026-12-05: every request of both
# streams served (docs/benchmarks/h200-char-bound-2026-12-05/). Run through the device tool on
# nvidia-h200, carrying .vllm-h200 and .whl (h200_env.sh):
#
#   bash docs/benchmarks/h200-char-bound-2026-12-05/h200_char_bound_2026_12_04.sh > $OUT/log-char-bound.txt 2>&1
#
# Results in $OUT: crosscheck-chat-seed12.jsonl, crosscheck-full-context.jsonl. Time: two vLLM
# starts of the 1B (70-190 s each) and two 8-s windows with warm-up and drain: at most 570 s.
set -uo pipefail
cd "$(dirname "$0")/../../.."  # the repository root
OUT=${OUT:-/tmp/out}
PHASE=char-bound
# shellcheck source=scripts/device/h200_env.sh
source scripts/device/h200_env.sh
trap export_phase EXIT
stop_before_limit 570 TERM "advisor crosscheck"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

# --rate's first rate draws the workload's seed + 1 (objectives/llm/workload.py at_rate).
python3 -m advisor crosscheck --target vllm --workload chat --model llama-3.2-1b \
  --workload-param "$(poisson 60)" --workload-param n_requests=480 \
  --workload-param drain_limit_s=15 --workload-param seed=11 --rate 60 \
  --reference-repeats 0 -o "$OUT/crosscheck-chat-seed12.jsonl"
python3 -m advisor crosscheck --target vllm --workload chat --model llama-3.2-1b \
  --workload-param "$(poisson 30)" --workload-param n_requests=240 \
  --workload-param drain_limit_s=15 \
  --workload-param 'prompt_len={"dist":"fixed","value":2040}' \
  --workload-param 'output_len={"dist":"fixed","value":512}' --rate 30 \
  --reference-repeats 0 -o "$OUT/crosscheck-full-context.jsonl"

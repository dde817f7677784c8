#!/usr/bin/env bash
# Set up slo-advisor in ./.venv and run the main job on the embedded defaults: a FAISS tuning
# study on this machine's CPU (real corpus, MiniLM embeddings, real faiss indexes), followed by
# two answers for the default SLO: the best measured config, and the surrogate models' answer over
# every stored trial. `--setup-only` stops after installing.
#
# 20 trials: with the target's textbook starting points queued first, 20 found configs as good as
# 30 did, in about 0.6x the time (docs/benchmarks.md, "Quickstart: 20 trials").
#
# Environment: PYTHON (interpreter, default python3), ADVISOR_QUICKSTART_TRIALS (default 20),
# TORCH_SPEC (default torch==2.13.0, a CPU build: keeps a multi-GB CUDA build out).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
TRIALS=${ADVISOR_QUICKSTART_TRIALS:-20}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}

if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv"
  "$PYTHON" -m venv .venv
fi
VPY=.venv/bin/python
if ! "$VPY" -c "import torch" 2>/dev/null; then
  echo "==> installing PyTorch (CPU): $TORCH_SPEC"
  "$VPY" -m pip install -q "$TORCH_SPEC"
fi
echo "==> installing slo-advisor with the faiss, embed, llm, postgres, api, ray, dashboard and dev extras"
"$VPY" -m pip install -q -e ".[faiss,embed,llm,postgres,api,ray,dashboard,dev]"

# The llamacpp target's extra, for the tests (--setup-only, what CI runs): llama-cpp-python is an
# sdist only, so pip builds llama.cpp from source, with its tools on so the same install gives
# llama-server (objectives/targets/llamacpp_target.py:CMAKE_ARGS, which a test keeps equal to
# this). Once: pip caches the built wheel, and an install that works is left alone.
LLAMACPP_CMAKE_ARGS="-DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_TOOLS_INSTALL=ON -DLLAVA_BUILD=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF"
llamacpp_ready() {
  "$VPY" -c "from objectives.targets.llamacpp_target import LlamaCppTarget as T
t = T(); t.check_available(); assert t.installed_version() == '0.3.36'" 2>/dev/null
}
if [ "${1:-}" = "--setup-only" ] && ! llamacpp_ready; then
  echo "==> installing the llamacpp extra (builds llama.cpp from source: 5-10 min on 2 cores, once)"
  began=$SECONDS
  CMAKE_ARGS="$LLAMACPP_CMAKE_ARGS" "$VPY" -m pip install -q -e ".[llamacpp]"
  if ! llamacpp_ready; then  # a cached or earlier build without llama-server: build it again
    CMAKE_ARGS="$LLAMACPP_CMAKE_ARGS" "$VPY" -m pip install -q --force-reinstall --no-deps \
      --no-cache-dir "llama-cpp-python==0.3.36"
  fi
  echo "==> llamacpp extra installed in $((SECONDS - began)) s"
fi

if [ "${1:-}" = "--setup-only" ]; then
  echo "==> set up; run the tests with: bash scripts/test.sh"
  exit 0
fi

# The default SLO and the study's corpus size N: without N a recommendation may answer from a
# shipped trial measured on another corpus (it names that workload, but the quickstart asks about
# its own).
read -r SLO N < <("$VPY" -c "from objectives.registry import get_target; t = get_target('faiss')
print(t.default_slo, t.default_workload().params['n_base'])")
echo "==> tuning faiss on this machine: SLO $SLO, maximize qps, $TRIALS trials"
.venv/bin/advisor tune --target faiss --trials "$TRIALS" --seed 0 --resume
# Exit code 1 from recommend is an answer too ("no config meets it" / "none I can vouch for").
recommend() {
  local code=0
  .venv/bin/advisor recommend --target faiss --slo "$SLO" --n-vectors "$N" "$@" || code=$?
  if [ "$code" -ne 0 ] && [ "$code" -ne 1 ]; then
    exit "$code"
  fi
}
echo "==> recommendation for $SLO: the best measured config"
recommend --measured
echo "==> recommendation for $SLO: predicted by the surrogate models from every stored trial"
recommend

#!/usr/bin/env bash
# The shipped FAISS trials of the device machine's CPU (16 cores of the H200 host), measured by
# scripts/knowledge/faiss_cpu_trials.sh with the search sweep on. That machine has no optuna,
# sqlalchemy, faiss or MiniLM and no network, so the call carries, from the repository root here:
#   .whl/     the wheels of faiss-cpu, optuna, SQLAlchemy, sqlmodel, alembic, colorlog, Mako,
#             pydantic(-core, -settings), python-dotenv, platformdirs, typer, annotated-types,
#             typing-inspection, typing-extensions for CPython 3.12 (pip download --only-binary)
#   .devdata/datasets/  the embedded stdlib-docs datasets as this machine's cache holds them
#             (~/.cache/slo-advisor/datasets/<key>: the 2k, 4k and 8k corpora; MiniLM embeddings
#             of CPython 3.11.7's docstrings — the device's Python has another stdlib, so the
#             directories are renamed to the keys its Python computes; their contents, provenance
#             and data hashes are unchanged)
# and runs, in one call of at most 10 minutes (the store is written to $OUT, so an interrupted
# call keeps its trials, and a second call carrying it back as .devdata/faiss.db resumes):
#   bash scripts/device/faiss_cpu_trials_host.sh "study names..."
set -euo pipefail
cd "$(dirname "$0")/../.."
STUDIES=${1:?usage: faiss_cpu_trials_host.sh "study names"}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD ADVISOR_CACHE_DIR=/tmp/advcache
mkdir -p "$ADVISOR_CACHE_DIR/datasets"
cp -r .devdata/datasets/. "$ADVISOR_CACHE_DIR/datasets/"
python3 - <<'PY'
import json, os, pathlib, shutil
from objectives.datasets.vectors import _cache_key, dataset_params
root = pathlib.Path(os.environ["ADVISOR_CACHE_DIR"]) / "datasets"
for d in list(root.iterdir()):
    key = _cache_key(dataset_params(json.loads((d / "provenance.json").read_text())["params"]))
    if d.name != key:  # a warm machine may hold it from an earlier call
        shutil.rmtree(d) if (root / key).exists() else d.rename(root / key)
PY
if [ -f .devdata/faiss.db ]; then cp .devdata/faiss.db "$OUT/faiss.db"; fi
echo "$(nproc) cores: $(lscpu | sed -n 's/^Model name: *//p'); load: $(cut -d' ' -f1-3 /proc/loadavg)"
FAISS_DB="$OUT/faiss.db" FAISS_STUDIES="$STUDIES" ADVISOR="python3 -m advisor" PYTHONUNBUFFERED=1 \
  timeout "${BUDGET_S:-540}" bash scripts/knowledge/faiss_cpu_trials.sh "$OUT/cpu-faiss-sweep.jsonl" \
  --search-sweep 2>&1 | grep -E "done:|exported|rror|Traceback" || true
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

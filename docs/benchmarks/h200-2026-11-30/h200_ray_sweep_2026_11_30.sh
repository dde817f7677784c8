#!/usr/bin/env bash
# The multi-GPU sweep run of docs/sweeps.md on an nvidia-h200-x2 machine: a real Ray head with
# both GPUs, `advisor sweep run sweeps/h200-x2-ray.yaml` (one transformers trial per GPU), and
# everything written to $OUT. A second call on the same (warm) machine resumes the same run
# (the store is in /tmp, which a warm machine keeps).
#
# Carried: .whl (optuna, sqlmodel, pydantic, jsonschema ... wheels for Python 3.12) and .raypkg
# (Ray 2.60.0's wheel contents without its Java jars, RLlib and source maps, as tar.xz: the wheel
# itself is over the 64 MiB a call may carry).
#   run: bash docs/benchmarks/h200-2026-11-30/h200_ray_sweep_2026_11_30.sh > $OUT/log.txt 2>&1 < /dev/null
set -uo pipefail
cd "$(dirname "$0")/../../.."  # the repository root
DEADLINE_S=${DEADLINE_S:-500}
if [ ! -d /tmp/site/ray ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  tar -xJf .raypkg/ray-slim.tar.xz -C /tmp/site || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
export ADVISOR_DB_URL=sqlite:////tmp/advisor-sweep.db ADVISOR_CACHE_DIR=/tmp/advisor-cache
export ADVISOR_IMPORT_SHIPPED=false COLUMNS=200
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
python3 -c "import ray, torch, transformers, optuna; print('ray', ray.__version__, 'torch', \
torch.__version__, 'transformers', transformers.__version__, 'optuna', optuna.__version__)"
# A head left by an earlier call is not reused: probing one whose processes are gone hung the
# second call of 2026-11-30 until its limit. Stop whatever is left, start a fresh head, and bound
# every probe with a timeout.
timeout 60 python3 -m ray.scripts.scripts stop --force > /dev/null 2>&1
rm -f /tmp/ray/ray_current_cluster
timeout 120 python3 -m ray.scripts.scripts start --head --port=6379 --num-gpus=2 --num-cpus=16 \
  --include-dashboard=false --disable-usage-stats || exit 1
timeout 60 python3 -c "import ray; ray.init(address='auto'); print('cluster', ray.cluster_resources())" \
  || exit 1
python3 -m advisor sweep plan sweeps/h200-x2-ray.yaml
start=$(date +%s)
timeout -s TERM "$DEADLINE_S" python3 -m advisor sweep run sweeps/h200-x2-ray.yaml \
  --ray-address auto --json --report-dir "$OUT" > "$OUT/sweep-stdout.json"
echo "sweep exit code $? after $(( $(date +%s) - start )) s"
python3 -m advisor sweep list
python3 -m advisor trials --target transformers --limit 100
python3 -m advisor knowledge export --target transformers -o "$OUT/h200-ray-sweep.jsonl"
python3 - <<'PY' > "$OUT/concurrency.txt"
"""When each trial ran and on which GPU (Ray sets CUDA_VISIBLE_DEVICES per trial)."""
from knowledge import TrialStore
store = TrialStore("sqlite:////tmp/advisor-sweep.db")
for s in store.list_studies():
    for t in store.trials_of_study(s.id or 0):
        print(s.name, t.number, t.status, t.started_at.isoformat(), t.finished_at and
              t.finished_at.isoformat(), round(t.duration_s or 0, 1), t.pid, t.hardware_key,
              t.details.get("role"), t.error_type)
PY
cat "$OUT/concurrency.txt"

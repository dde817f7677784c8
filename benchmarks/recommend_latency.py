"""How fast `advisor recommend` answers once the models are fitted: the in-process call
(``recommend(store, query, models=...)``, what the REST service runs per request) and the whole CLI
command (process start, imports, loading the cached models, answering).

    PYTHONPATH=. python benchmarks/recommend_latency.py            # on the shipped knowledge

Fits the models once into a temporary store and cache dir, then prints median and p95 answer
times per query over ``--repeats`` calls.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from advisor.answers.model_based import RecommendationQuery, recommend
from knowledge import TrialStore
from knowledge.cache import ModelCache
from knowledge.transfer import import_shipped_knowledge

QUERIES = [
    RecommendationQuery(target="faiss", slo="p95_latency_ms<=0.2,recall_at_10>=0.95",
                        hardware="cpu", workload={"n_vectors": 8000}),
    RecommendationQuery(target="faiss", slo="recall_at_10>=0.9", hardware="cpu",
                        workload={"n_vectors": 5000}),
    RecommendationQuery(target="vllm", slo="ttft_p95_ms<=1000,tpot_p95_ms<=40",
                        hardware="h200", model="llama-3-8b", workload={"rate_rps": 60}),
    RecommendationQuery(target="vllm", slo="ttft_p95_ms<=500,tpot_p95_ms<=30",
                        hardware="h200", model="llama-3.2-1b", workload={"rate_rps": 100}),
]


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--cli-repeats", type=int, default=5)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp())
    url, cache_dir = f"sqlite:///{tmp / 'bench.db'}", tmp / "cache"
    store = TrialStore(url)
    import_shipped_knowledge(store)
    started = time.perf_counter()
    models = ModelCache(store, cache_dir).get()
    print(f"fitted {len(models.contexts)} contexts from {models.data.trials} trials in "
          f"{time.perf_counter() - started:.1f} s (one-off: `advisor knowledge fit`)")
    print(f"{'query (wall-clock ms; CPU ms = process time, robust to a busy machine)':72} "
          f"{'status':20} {'median ms':>9} {'p95 ms':>7} {'CPU ms':>7}")
    for q in QUERIES:
        times, cpu = [], []
        for _ in range(args.repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            rec = recommend(store, q, models=models)
            times.append((time.perf_counter() - t0) * 1000)
            cpu.append((time.process_time() - c0) * 1000)
        label = f"{q.target} {q.slo} {q.model or ''} {q.workload}"
        print(f"in-process  {label[:60]:60} {rec.status:20} {statistics.median(times):9.1f} "
              f"{pct(times, 95):7.1f} {statistics.median(cpu):7.1f}")
    env = {**os.environ, "ADVISOR_DB_URL": url, "ADVISOR_CACHE_DIR": str(cache_dir)}
    cli = [sys.executable, "-m", "advisor", "recommend", "--target", "vllm", "--hardware",
           "h200", "--model", "llama-3-8b", "--slo", "ttft_p95_ms<=1000,tpot_p95_ms<=40",
           "--rate-rps", "60", "--json"]
    times = []
    for _ in range(args.cli_repeats):
        t0 = time.perf_counter()
        subprocess.run(cli, env=env, capture_output=True, check=False)
        times.append((time.perf_counter() - t0) * 1000)
    print(f"CLI (whole process: interpreter start, imports, cached models, answer): median "
          f"{statistics.median(times):.0f} ms over {args.cli_repeats} runs")


if __name__ == "__main__":
    main()

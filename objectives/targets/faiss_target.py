"""The faiss target: approximate nearest-neighbour search with faiss-cpu, measured per query.

A trial builds (or loads from the on-disk build cache) one index family — IVF-Flat, IVF-PQ, HNSW
or IVF with an HNSW coarse quantizer — sets the search knobs, and measures single-query latency,
batched throughput and recall@k against exact ground truth. Only build-stage knobs key the build
cache, so a study that varies nprobe or efSearch builds each index once. Both timed passes cycle
over the queries until ``MIN_MEASURE_TIME_S`` has been measured, so a fast config is not timed
over a few milliseconds; the details record how many queries and passes each took.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from advisor.errors import ConfigRejectedError, EngineUnavailableError, WorkloadError
from objectives.datasets.corpus import holds as corpus_holds
from objectives.datasets.corpus import load_passages
from objectives.datasets.vectors import (
    RECALL_CUTOFFS,
    VectorDataset,
    build_or_load_dataset,
    dataset_params,
    load_dataset,
)
from objectives.measurement import Measurement
from objectives.metrics import VECTOR_SEARCH
from objectives.search_sweep import explore_by_quality, power_ladder
from objectives.slo import SLO
from objectives.target import ProgressFn, Target
from objectives.workload import Workload, canonical_json
from search_spaces import SearchSpace

__all__ = ["FaissTarget"]

KIND = "vector-search"
#: Single queries run before measuring, so page faults and thread start-up are not measured.
WARMUP_QUERIES = 50
#: The single-query pass stops after this long (with at least MIN_MEASURED queries) so that a slow
#: config on a large workload cannot eat the trial's whole timeout; the count used is recorded.
SINGLE_QUERY_BUDGET_S = 5.0
BATCHED_BUDGET_S = 20.0
MIN_MEASURED = 200
#: Each pass is repeated over the queries until it has measured at least this long: one batched
#: pass over 1,000 queries takes ~10 ms, and its qps swung 3x between repeats of the same config
#: on a quiet machine (47k-141k qps); a p95 over one short single-query pass is noisy the same way.
MIN_MEASURE_TIME_S = 0.5
#: Scores this close to the k-th exact score count as ties (float32 sums differ between kernels).
TIE_EPS = 1e-5
#: Search-time knobs one trial sweeps over its built index (objectives/search_sweep.py).
SWEPT_KNOBS = ("nprobe", "ef_search")
#: Recall levels a sweep times the cheapest setting of (with the study's own recall bound): the
#: cheat-sheet's quality tiers; a setting between two levels is slower for no gain at either.
RECALL_LEVELS = (0.8, 0.9, 0.95, 0.99)
#: Settings one sweep measures at most: with two swept knobs (ivf_hnsw) the ladders' product
#: can pass 70, and each setting is timed for >= 2 x MIN_MEASURE_TIME_S.
MAX_SWEPT_POINTS = 12
_BUILD_CACHE_FORMAT = 1


def _factory_string(config: Mapping[str, Any]) -> str:
    kind = config["index_type"]
    if kind == "ivf_flat":
        return f"IVF{config['nlist']},Flat"
    if kind == "ivf_pq":
        return f"IVF{config['nlist']},PQ{config['pq_m']}x{config['pq_nbits']}"
    if kind == "hnsw":
        return f"HNSW{config['hnsw_m']},Flat"
    if kind == "ivf_hnsw":
        return f"IVF{config['nlist']}_HNSW{config['hnsw_m']},Flat"
    raise ConfigRejectedError(f"unknown index_type {kind!r}")


def _check_feasible(config: Mapping[str, Any], n_base: int, dim: int) -> None:
    """Reject configs faiss would fail on (or abort the process for), with the reason."""
    nlist = config.get("nlist")
    if nlist is not None and nlist > n_base:
        raise ConfigRejectedError(
            f"nlist={nlist} needs at least {nlist} training vectors, but the dataset has "
            f"n_base={n_base}; k-means cannot make more lists than points"
        )
    if config["index_type"] == "ivf_pq":
        m, nbits = config["pq_m"], config["pq_nbits"]
        if dim % m:
            raise ConfigRejectedError(
                f"pq_m={m} must divide the vector dimension d={dim} (PQ splits vectors into m "
                f"equal sub-vectors); divisors of {dim} in range: "
                f"{[c for c in (8, 16, 24, 32, 48, 64, 96) if dim % c == 0]}"
            )
        if 2**nbits > n_base:
            raise ConfigRejectedError(
                f"pq_nbits={nbits} needs at least {2**nbits} training vectors per sub-quantizer, "
                f"but the dataset has n_base={n_base}"
            )


class FaissTarget(Target):
    """faiss-cpu indexes over a cached vector dataset (stdlib docstrings or synthetic)."""

    name: ClassVar[str] = "faiss"
    engine: ClassVar[str] = "faiss"
    workload_kind: ClassVar[str] = KIND
    metric_families: ClassVar[tuple[str, ...]] = (VECTOR_SEARCH,)
    trial_time_estimate_s: ClassVar[float] = 5.0
    #: The CPU build: a trial on a GPU host measures its CPU.
    uses_accelerator: ClassVar[bool] = False
    description: ClassVar[str] = (
        "Approximate nearest-neighbour search with faiss-cpu (IVF-Flat, IVF-PQ, HNSW, IVF-HNSW)"
    )
    default_objective: ClassVar[str] = "maximize:qps"
    default_slo: ClassVar[str] = "p95_latency_ms<=0.25,recall_at_10>=0.95"
    install_hint: ClassVar[str] = "pip install 'slo-advisor[faiss]'"
    # HNSW graphs (and IVF-HNSW quantizers) are filled by OpenMP threads, whose insertion order
    # can differ between builds; k-means is seeded, but its float sums follow the thread split.
    rebuild_varying_metrics: ClassVar[frozenset[str]] = frozenset(
        f"recall_at_{cutoff}" for cutoff in RECALL_CUTOFFS)

    def __init__(self) -> None:
        self._space: SearchSpace | None = None

    def space(self) -> SearchSpace:
        # Parsed once per instance: run() consults it for every trial's validation and cache key.
        if self._space is None:
            self._space = super().space()
        return self._space

    # -- availability and versions --------------------------------------------------------------

    def check_available(self) -> None:
        try:
            import faiss  # noqa: F401
        except ImportError as exc:
            raise EngineUnavailableError(
                f"the faiss target needs faiss-cpu, which cannot be imported ({exc}); "
                f"install it with: {self.install_hint}"
            ) from None

    def engine_versions(self) -> dict[str, str]:
        self.check_available()
        import faiss

        return {"faiss": faiss.__version__, "numpy": np.__version__}

    # -- workloads --------------------------------------------------------------------------------

    def default_workload(self) -> Workload:
        # The stdlib corpus of Python 3.11 holds ~9.4k passages of >= 8 words: 8k base vectors
        # plus 1k held-out queries fits every 3.11+ interpreter with room to spare.
        return Workload(KIND, "stdlib-docs-8k", {
            "dataset": "stdlib-docs", "n_base": 8000, "n_queries": 1000, "k": 10, "seed": 0,
        })

    def named_workloads(self) -> dict[str, Workload]:
        default = self.default_workload()
        return {
            default.name: default,
            "stdlib-docs-2k": Workload(KIND, "stdlib-docs-2k", {
                "dataset": "stdlib-docs", "n_base": 2000, "n_queries": 100, "k": 10, "seed": 0,
            }),
            # Synthetic (labelled so in every measurement): real corpora this large need hours of
            # CPU embedding; the clustered mixture keeps IVF's trade-offs recognisable.
            "synthetic-1m": Workload(KIND, "synthetic-1m", {
                "dataset": "synthetic", "n_base": 1_000_000, "n_queries": 1000, "k": 10,
                "seed": 0, "dim": 384, "n_clusters": 1024,
            }),
        }

    def check_workload(self, workload: Workload) -> None:
        _check_kind(workload)
        clean = dataset_params(workload.params)  # ranges, and the vectors against the memory
        if clean["dataset"] == "stdlib-docs":  # what prepare checks: the corpus is large enough
            n_total = clean["n_base"] + clean["n_queries"]
            # Only as much of the stdlib is parsed as the check needs (all of it: 1.3 s of CPU on
            # a 2-core machine).
            if not corpus_holds(n_total):
                n = len(load_passages())
                raise WorkloadError(f"n_base + n_queries = {n_total} passages asked for, but "
                                    f"the corpus has only {n}; lower n_base or n_queries")

    def prepare(self, workload: Workload, cache_dir: Path, progress: ProgressFn | None = None
                ) -> dict[str, Any]:
        _check_kind(workload)
        dataset = build_or_load_dataset(workload.params, cache_dir, progress)
        return dict(dataset.provenance)

    # -- one trial --------------------------------------------------------------------------------

    def run(self, config: Mapping[str, Any], workload: Workload, cache_dir: Path) -> Measurement:
        started = time.perf_counter()
        clean, dataset, index, build = self._built(config, workload, cache_dir)
        return self._measured(index, clean, dataset, build, started)

    def starting_points(self, workload: Workload) -> list[dict[str, Any]]:
        """The factories FAISS's own guidelines and ``ParameterSpace.explore`` start from:
        HNSW32 and HNSW16 (efConstruction 40, faiss's default) at efSearch 16 and 32, and
        IVF sqrt(N),Flat probing 8 lists; the rest stays at the engine defaults."""
        n_base = int(workload.params.get("n_base", 0) or 0)
        points: list[dict[str, Any]] = [
            {"index_type": "hnsw", "hnsw_m": 32, "ef_construction": 40, "ef_search": 16},
            {"index_type": "hnsw", "hnsw_m": 32, "ef_construction": 40, "ef_search": 32},
            {"index_type": "hnsw", "hnsw_m": 16, "ef_construction": 40, "ef_search": 16},
        ]
        if n_base > 0:
            knob = self.space().knob("nlist")
            nlist = round(n_base ** 0.5)
            if knob.low is not None:
                nlist = max(nlist, int(knob.low))
            if knob.high is not None:
                nlist = min(nlist, int(knob.high))
            points.append({"index_type": "ivf_flat", "nlist": nlist, "nprobe": min(8, nlist)})
        return points

    def swept_knobs(self) -> frozenset[str]:
        # Both only change how a built index searches; recall rises and speed falls with each.
        return frozenset(SWEPT_KNOBS)

    def run_sweep(self, config: Mapping[str, Any], workload: Workload, cache_dir: Path, *,
                  knobs: frozenset[str], budget_s: float, slo: SLO | None = None,
                  include_own: bool = True) -> list[tuple[dict[str, Any], Measurement]]:
        """Build (or load) the index once; compute recall (one untimed search pass) for the
        nprobe / efSearch settings of a power-of-two ladder (with ``config``'s own values),
        cheapest first, up to the first reaching 1.0; then time, as any trial, the cheapest
        setting reaching each recall level that matters (the SLO's recall bound, the tiers
        0.8 / 0.9 / 0.95 / 0.99, the best recall reached) and, with ``include_own``,
        ``config``'s own setting."""
        clean, dataset, index, build = self._built(config, workload, cache_dir)
        ladders = self._ladders(clean, knobs & set(SWEPT_KNOBS), include_own)
        if not ladders:
            return [(clean, self._measured(index, clean, dataset, build, time.perf_counter()))]
        cutoff = max(c for c in RECALL_CUTOFFS if c <= dataset.k)

        def measure(setting: dict[str, Any]) -> Measurement:
            point_started = time.perf_counter()
            return self._measured(index, {**clean, **setting}, dataset, build, point_started)

        queries = np.ascontiguousarray(dataset.queries)

        def probe(setting: dict[str, Any]) -> float:
            _apply_search_params(index, {**clean, **setting})
            _, found = index.search(queries, dataset.k)
            return _recall(found, dataset, cutoff)

        metric = f"recall_at_{cutoff}"
        levels = [*RECALL_LEVELS, *(b.threshold for b in (slo.bounds if slo else ())
                                    if b.metric == metric and b.op == ">=")]
        result = explore_by_quality(
            ladders, measure, probe, quality_levels=levels,
            include={k: clean[k] for k in ladders} if include_own else None,
            quality_ceiling=1.0,
            max_points=MAX_SWEPT_POINTS, budget_s=budget_s)
        points = []
        for position, (setting, m) in enumerate(result.points):
            # Each point's duration is its own measuring time; the build (or cache load) and
            # process start are the trial's, recorded with the trial's own outcome.
            details = {**m.details, "search_sweep": {"point": position, **result.summary()}}
            points.append(({**clean, **setting}, dataclasses.replace(m, details=details)))
        return points

    def _ladders(self, config: Mapping[str, Any], knobs: frozenset[str], include_own: bool
                 ) -> dict[str, list[int]]:
        """The values of each active knob of ``knobs`` to try: powers of two within its bounds
        for this config (nprobe at most nlist), with the config's own value if asked."""
        ladders = {}
        for knob in self.space().active_knobs(config):
            if knob.name in knobs:
                low, high = knob.bounds(config)
                own = [int(config[knob.name])] if include_own else []
                ladders[knob.name] = power_ladder(int(low), int(high), own)
        return ladders

    def _built(self, config: Mapping[str, Any], workload: Workload, cache_dir: Path
               ) -> tuple[dict[str, Any], VectorDataset, Any, dict[str, Any]]:
        """The checked config, the dataset and the built (or cached) index for ``config``."""
        self.check_available()
        import faiss

        _check_kind(workload)
        clean = self.validate_config(config)
        dataset = load_dataset(workload.params, cache_dir)
        _check_feasible(clean, dataset.base.shape[0], dataset.dim)
        faiss.omp_set_num_threads(int(clean["threads"]))
        index, build = self._index(clean, dataset, Path(cache_dir))
        return clean, dataset, index, build

    def _measured(self, index: Any, clean: Mapping[str, Any], dataset: VectorDataset,
                  build: Mapping[str, Any], started: float) -> Measurement:
        """Set ``clean``'s search knobs on the built ``index`` and measure it."""
        import faiss

        applied = _apply_search_params(index, clean)
        metrics, counts = _measure(index, dataset, int(clean["batch_size"]))
        metrics["index_memory_mb"] = build["index_bytes"] / 2**20
        metrics["build_time_s"] = build["build_time_s"]
        versions = {"faiss": faiss.__version__, "numpy": np.__version__,
                    **dataset.provenance.get("embedder_versions", {})}
        details = {
            **counts,
            "factory": build["factory"],
            "build_cached": build["cached"],
            "build_key": build["key"],
            "search_params": applied,
            "threads": faiss.omp_get_max_threads(),
            "batch_size": int(clean["batch_size"]),
            "k": dataset.k,
            "data_hash": dataset.data_hash,
            "synthetic": dataset.synthetic,
            "dataset": dict(dataset.provenance),
        }
        return Measurement(metrics=metrics, engine_versions=versions, details=details,
                           duration_s=time.perf_counter() - started)

    def _index(self, config: Mapping[str, Any], dataset: VectorDataset, cache_dir: Path
               ) -> tuple[Any, dict[str, Any]]:
        """The trained, filled index for ``config``'s build knobs, from the build cache if there."""
        import faiss

        build_knobs = {k.name: config[k.name] for k in self.space().active_knobs(config)
                       if k.stage == "build"}
        key = hashlib.sha256(canonical_json({
            "format": _BUILD_CACHE_FORMAT, "faiss": faiss.__version__,
            "data_hash": dataset.data_hash, "build": build_knobs,
        }).encode()).hexdigest()[:16]
        directory = cache_dir / "indexes" / dataset.data_hash
        index_path, meta_path = directory / f"{key}.faiss", directory / f"{key}.json"
        if self.reuse_builds and index_path.is_file() and meta_path.is_file():
            meta = json.loads(meta_path.read_text())
            return faiss.read_index(str(index_path)), {**meta, "cached": True, "key": key}
        index, build_time_s = _build(config, dataset)
        meta = {"factory": _factory_string(config), "build_knobs": build_knobs,
                "build_time_s": build_time_s}
        if not self.reuse_builds:
            # A build of its own (a rebuild check): the cache is neither read nor written, so the
            # cached build other trials share stays the one they measured.
            meta["index_bytes"] = int(faiss.serialize_index(index).size)
            return index, {**meta, "cached": False, "key": key}
        directory.mkdir(parents=True, exist_ok=True)
        # Sidecar first: a reader needs both files, so a kill between the two replaces is harmless.
        _atomic_write(meta_path, lambda p: p.write_text(json.dumps(meta, sort_keys=True)))
        _atomic_write(index_path, lambda p: faiss.write_index(index, str(p)))
        # The file holds exactly faiss.serialize_index's bytes; its size avoids a second copy.
        meta["index_bytes"] = index_path.stat().st_size
        _atomic_write(meta_path, lambda p: p.write_text(json.dumps(meta, sort_keys=True)))
        return index, {**meta, "cached": False, "key": key}

    # -- reproduction -----------------------------------------------------------------------------

    def launch_command(self, config: Mapping[str, Any], workload: Workload | None = None) -> str:
        clean = self.validate_config(config)
        dim = int(workload.params.get("dim", 384)) if workload is not None else 384
        k = int(workload.params.get("k", 10)) if workload is not None else 10
        kind = clean["index_type"]
        lines = [
            "import faiss",
            f"faiss.omp_set_num_threads({clean['threads']})",
            f'index = faiss.index_factory({dim}, "{_factory_string(clean)}", '
            "faiss.METRIC_INNER_PRODUCT)",
        ]
        if kind == "ivf_pq":
            lines.append("index.do_polysemous_training = False  # unused at search; slow to train")
        if kind == "hnsw":
            lines.append(f"index.hnsw.efConstruction = {clean['ef_construction']}")
        if kind == "ivf_hnsw":
            lines += [
                "quantizer = faiss.downcast_index(faiss.extract_index_ivf(index).quantizer)",
                f"quantizer.hnsw.efConstruction = {clean['ef_construction']}",
            ]
        lines += [f"index.train(xb)  # xb: float32 [N, {dim}], rows L2-normalised",
                  "index.add(xb)"]
        if "nprobe" in clean:
            lines.append(f"faiss.extract_index_ivf(index).nprobe = {clean['nprobe']}")
        if kind == "hnsw":
            lines.append(f"index.hnsw.efSearch = {clean['ef_search']}")
        if kind == "ivf_hnsw":
            lines.append(f"quantizer.hnsw.efSearch = {clean['ef_search']}")
        lines.append(f"D, I = index.search(xq, {k})  # xq: normalised queries, "
                     f"{clean['batch_size']} per call")
        return "\n".join(lines)


def _check_kind(workload: Workload) -> None:
    if workload.kind != KIND:
        raise WorkloadError(
            f"the faiss target runs workloads of kind {KIND!r}, got {workload.kind!r}"
        )


def _atomic_write(path: Path, write: Any) -> None:
    """Write via ``write(tmp_path)`` then rename over ``path``: readers never see a partial file."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _build(config: Mapping[str, Any], dataset: VectorDataset) -> tuple[Any, float]:
    """Create, train and fill the index; returns it with the train + add time in seconds."""
    import faiss

    index: Any = faiss.index_factory(dataset.dim, _factory_string(config),
                                     faiss.METRIC_INNER_PRODUCT)
    # efConstruction only matters while the graph is built, so it is set before train/add.
    if config["index_type"] == "ivf_pq":
        # index_factory turns on polysemous training (code reordering for Hamming pre-filtering),
        # which multiplies train time ~8x; searches here never use it (polysemous_ht stays 0).
        index.do_polysemous_training = False
    elif config["index_type"] == "hnsw":
        index.hnsw.efConstruction = int(config["ef_construction"])
    elif config["index_type"] == "ivf_hnsw":
        _quantizer(index).hnsw.efConstruction = int(config["ef_construction"])
    base = np.ascontiguousarray(dataset.base)  # faiss needs a real array, not a memmap view
    started = time.perf_counter()
    try:
        index.train(base)
        index.add(base)
    except RuntimeError as exc:
        # faiss raises RuntimeError for invalid parameters it checks itself (FAISS_THROW_IF_NOT).
        raise ConfigRejectedError(f"faiss rejected {_factory_string(config)}: {exc}") from None
    return index, time.perf_counter() - started


def _quantizer(index: Any) -> Any:
    import faiss

    return faiss.downcast_index(faiss.extract_index_ivf(index).quantizer)


def _apply_search_params(index: Any, config: Mapping[str, Any]) -> dict[str, int]:
    """Set nprobe / efSearch on ``index``; returns what was set, for the record."""
    import faiss

    applied: dict[str, int] = {}
    kind = config["index_type"]
    if "nprobe" in config:
        faiss.extract_index_ivf(index).nprobe = int(config["nprobe"])
        applied["nprobe"] = int(config["nprobe"])
    if kind == "hnsw":
        index.hnsw.efSearch = int(config["ef_search"])
        applied["efSearch"] = int(config["ef_search"])
    elif kind == "ivf_hnsw":
        _quantizer(index).hnsw.efSearch = int(config["ef_search"])
        applied["quantizer_efSearch"] = int(config["ef_search"])
    return applied


def _percentiles(prefix: str, latencies_ns: np.ndarray) -> dict[str, float]:
    ms = latencies_ns.astype(np.float64) / 1e6
    p50, p90, p95, p99 = np.percentile(ms, [50, 90, 95, 99])
    return {f"{prefix}p50_latency_ms": p50, f"{prefix}p90_latency_ms": p90,
            f"{prefix}p95_latency_ms": p95, f"{prefix}p99_latency_ms": p99}


def _single_query_pass(index: Any, queries: np.ndarray, k: int) -> tuple[np.ndarray, int]:
    """Per-query latency (ns) with one search call per query, as an online retriever issues them.

    Cycles over the queries until ``MIN_MEASURE_TIME_S`` has been measured (and every query ran
    once), stopping at ``SINGLE_QUERY_BUDGET_S`` once ``MIN_MEASURED`` queries ran. Returns the
    latencies and the number of passes started.
    """
    latencies: list[int] = []
    measured = 0
    n = queries.shape[0]
    if n == 0:
        return np.asarray(latencies, dtype=np.int64), 0
    deadline = time.perf_counter_ns() + int(SINGLE_QUERY_BUDGET_S * 1e9)
    i = 0
    while True:
        query = queries[i % n:i % n + 1]
        t0 = time.perf_counter_ns()
        index.search(query, k)
        t1 = time.perf_counter_ns()
        latencies.append(t1 - t0)
        measured += t1 - t0
        i += 1
        if t1 > deadline and len(latencies) >= MIN_MEASURED:
            break
        if i >= n and measured >= MIN_MEASURE_TIME_S * 1e9:
            break
    return np.asarray(latencies, dtype=np.int64), -(-i // n)


def _batched_pass(index: Any, queries: np.ndarray, k: int, batch_size: int
                  ) -> tuple[np.ndarray, np.ndarray, int, int, int]:
    """Search in batches, over the queries again and again until ``MIN_MEASURE_TIME_S`` has been
    measured (or ``BATCHED_BUDGET_S`` has passed with ``MIN_MEASURED`` queries answered).

    Returns the ids found by the first pass (for recall; later passes find the same), per-query
    latency (ns: the batch's wall time) of every batch, the total measured time (ns), the
    number of queries answered and the number of passes started.
    """
    ids, latencies, total, answered, passes = [], [], 0, 0, 0
    deadline = time.perf_counter_ns() + int(BATCHED_BUDGET_S * 1e9)
    while True:
        passes += 1
        for start in range(0, queries.shape[0], batch_size):
            batch = queries[start:start + batch_size]
            t0 = time.perf_counter_ns()
            _, found = index.search(batch, k)
            t1 = time.perf_counter_ns()
            total += t1 - t0
            answered += batch.shape[0]
            if passes == 1:
                ids.append(found)
            latencies.extend([t1 - t0] * batch.shape[0])
            if t1 > deadline and answered >= MIN_MEASURED:
                break
        # Past the deadline (the inner loop's stop too) or measured long enough: done.
        if total >= MIN_MEASURE_TIME_S * 1e9 or time.perf_counter_ns() >= deadline:
            break
    return (np.concatenate(ids), np.asarray(latencies, dtype=np.int64), total, answered,
            passes)


def _recall(found: np.ndarray, dataset: VectorDataset, cutoff: int) -> float:
    """Mean over queries of |ANN top-c ∩ exact top-c| / c, counting exact ties as hits.

    A returned vector whose true score equals the c-th exact score is as good an answer as the one
    the exact search happened to list, so it counts (the big-ann-benchmarks convention); without
    this, float rounding differences between kernels could make an exhaustive search score < 1.
    """
    n = found.shape[0]
    ann, exact = found[:, :cutoff], np.asarray(dataset.gt_ids[:n, :cutoff])
    hit = (ann[:, :, None] == exact[:, None, :]).any(axis=2)
    rows, cols = np.nonzero(~hit & (ann >= 0))
    if rows.size:
        queries = np.asarray(dataset.queries[:n])
        ids = ann[rows, cols]
        order = np.argsort(ids)  # sorted reads are kinder to a memory-mapped base
        vectors = np.empty((ids.size, dataset.dim), dtype=np.float32)
        vectors[order] = dataset.base[ids[order]]
        scores = np.einsum("nd,nd->n", queries[rows], vectors)
        kth = np.asarray(dataset.gt_scores[:n, cutoff - 1])[rows]
        hit[rows, cols] = scores >= kth - TIE_EPS
    return float(hit.sum() / (n * cutoff))


def _measure(index: Any, dataset: VectorDataset, batch_size: int
             ) -> tuple[dict[str, float], dict[str, int]]:
    queries = np.ascontiguousarray(dataset.queries)
    k = dataset.k
    warmup = min(WARMUP_QUERIES, queries.shape[0])
    for i in range(warmup):
        index.search(queries[i:i + 1], k)
    index.search(queries[:batch_size], k)

    single, single_passes = _single_query_pass(index, queries, k)
    found, batch_latency, batch_total_ns, answered, batch_passes = _batched_pass(
        index, queries, k, batch_size)
    metrics: dict[str, float] = {
        **_percentiles("", single),
        "mean_latency_ms": float(single.mean() / 1e6),
        "single_qps": float(single.size / (single.sum() / 1e9)),
        **_percentiles("batch_", batch_latency),
        "qps": float(answered / (batch_total_ns / 1e9)),
    }
    for cutoff in RECALL_CUTOFFS:
        if cutoff <= k:
            metrics[f"recall_at_{cutoff}"] = _recall(found, dataset, cutoff)
    counts = {"n_queries": int(found.shape[0]), "single_query_count": int(single.size),
              "single_query_passes": single_passes, "batched_queries": answered,
              "batched_passes": batch_passes, "warmup_queries": warmup}
    return {name: float(value) for name, value in metrics.items()}, counts

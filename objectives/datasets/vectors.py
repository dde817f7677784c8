"""Vector-search datasets: base vectors, held-out queries and exact ground truth, cached on disk.

``build_or_load_dataset`` runs in the study driver (``Target.prepare``) and may take minutes the
first time (embedding, exact search); ``load_dataset`` runs in every trial child and only maps the
cached ``.npy`` files. A cache directory is written under a temporary name and renamed into place,
so a killed build never leaves a half-written dataset behind.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from advisor.errors import DataError, EngineUnavailableError, WorkloadError
from objectives.datasets.corpus import corpus_provenance, load_passages
from objectives.datasets.synthetic import MixtureSpec, synthetic_vectors
from objectives.workload import canonical_json

__all__ = [
    "DATASETS",
    "RECALL_CUTOFFS",
    "VectorDataset",
    "build_or_load_dataset",
    "dataset_params",
    "load_dataset",
]

logger = logging.getLogger(__name__)

ProgressFn = Callable[[str], None]

DATASETS = ("stdlib-docs", "synthetic")
#: recall@k cut-offs the metric catalogue defines; the workload's k must be one of them.
RECALL_CUTOFFS = (1, 5, 10, 20, 50, 100)
#: Bumped whenever the cached layout or the way data is derived changes (invalidates caches).
_FORMAT = 2
_COMMON = {"dataset": "stdlib-docs", "n_base": 8000, "n_queries": 1000, "k": 10, "seed": 0}
_SYNTHETIC = {"dim": 384, "n_clusters": 1024}
_FILES = ("base", "queries", "gt_ids", "gt_scores")
_EMBED_BATCH = 2048  # passages embedded between progress reports / cache extensions


@dataclass(frozen=True)
class VectorDataset:
    """Unit-norm float32 vectors with exact inner-product ground truth.

    ``gt_ids[i]`` lists the ``k`` base rows with the highest inner product with ``queries[i]``,
    best first, and ``gt_scores[i]`` their scores (needed to treat exact ties fairly in recall).
    """

    base: np.ndarray
    queries: np.ndarray
    gt_ids: np.ndarray
    gt_scores: np.ndarray
    provenance: Mapping[str, Any]

    @property
    def dim(self) -> int:
        return int(self.base.shape[1])

    @property
    def k(self) -> int:
        return int(self.gt_ids.shape[1])

    @property
    def data_hash(self) -> str:
        return str(self.provenance["data_hash"])

    @property
    def synthetic(self) -> bool:
        return bool(self.provenance.get("synthetic", False))


#: The most each integer parameter may be: far above any dataset worth building here, low
#: enough that no product of them overflows (the memory estimate below bounds their product).
_INT_LIMITS = {"n_base": 10**9, "n_queries": 10**7, "k": 100, "seed": 2**32 - 1,
               "dim": 65_536, "n_clusters": 10**7}
#: A dataset's vectors may take at most this share of the machine's memory.
_MEMORY_SHARE = 0.5


def _int_param(params: Mapping[str, Any], name: str, low: int) -> int:
    value = params[name]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise WorkloadError(f"workload parameter {name!r} must be an integer, got {value!r}")
    if isinstance(value, float) and not value.is_integer():
        raise WorkloadError(f"workload parameter {name!r} must be an integer, got {value!r}")
    high = _INT_LIMITS[name]
    if not low <= value <= high:
        shown = value if abs(value) < 10**15 else f"a {len(str(int(abs(value))))}-digit number"
        raise WorkloadError(f"workload parameter `{low} <= {name} <= {high}` must hold, got "
                            f"{name}={shown}")
    return int(value)


def _check_memory(clean: Mapping[str, Any]) -> None:
    """Refuse a dataset whose float32 vectors alone would not fit in half this machine's memory
    (the index and the ground truth come on top)."""
    import psutil

    dim = clean.get("dim", 384)
    need = (clean["n_base"] + clean["n_queries"]) * dim * 4
    have = psutil.virtual_memory().total
    if need > _MEMORY_SHARE * have:
        raise WorkloadError(
            f"the dataset's vectors need {need / 2**30:,.1f} GiB ((n_base + n_queries) x dim x "
            f"4 bytes), more than half of this machine's {have / 2**30:,.1f} GiB; lower n_base "
            "or dim")


def dataset_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """Validate vector-search workload ``params`` and fill defaults: the dataset's identity."""
    dataset = params.get("dataset", _COMMON["dataset"])
    if dataset not in DATASETS:
        raise WorkloadError(f"unknown dataset {dataset!r}; choose one of {list(DATASETS)}")
    defaults = {**_COMMON, **(_SYNTHETIC if dataset == "synthetic" else {})}
    unknown = sorted(set(params) - set(defaults))
    if unknown:
        raise WorkloadError(
            f"unknown vector-search parameters {unknown} for dataset {dataset!r}; "
            f"allowed: {sorted(defaults)}"
        )
    merged = {**defaults, **params}
    clean: dict[str, Any] = {"dataset": dataset}
    for name, low in (("n_base", 1), ("n_queries", 1), ("k", 1), ("seed", 0)):
        clean[name] = _int_param(merged, name, low)
    if clean["k"] not in RECALL_CUTOFFS:
        raise WorkloadError(f"k must be one of {list(RECALL_CUTOFFS)} (the recall@k metrics), "
                            f"got {clean['k']}")
    if clean["k"] > clean["n_base"]:
        raise WorkloadError(
            f"`k <= n_base` must hold, got k={clean['k']}, n_base={clean['n_base']}"
        )
    if dataset == "synthetic":
        clean["dim"] = _int_param(merged, "dim", 1)
        clean["n_clusters"] = _int_param(merged, "n_clusters", 1)
    _check_memory(clean)
    return clean


def _cache_key(clean: Mapping[str, Any]) -> str:
    """Directory name of a dataset: its parameters plus what else decides its contents."""
    identity: dict[str, Any] = {"format": _FORMAT, **clean}
    if clean["dataset"] == "stdlib-docs":
        # The corpus is this Python's stdlib; hashing it would cost every trial child a parse.
        identity["python"] = platform.python_version()
    return hashlib.sha256(canonical_json(identity).encode()).hexdigest()[:16]


def _dataset_dir(params: Mapping[str, Any], cache_dir: Path) -> tuple[dict[str, Any], Path]:
    clean = dataset_params(params)
    return clean, Path(cache_dir) / "datasets" / _cache_key(clean)


def load_dataset(params: Mapping[str, Any], cache_dir: Path) -> VectorDataset:
    """Map an already-built dataset from the cache (fast; used by trial children).

    Raises :class:`DataError` when it was not built: call :func:`build_or_load_dataset`
    (``Target.prepare``) first.
    """
    clean, directory = _dataset_dir(params, cache_dir)
    if not (directory / "provenance.json").is_file():
        raise DataError(
            f"dataset {clean} is not built under {directory}; prepare the workload first "
            "(Target.prepare / build_or_load_dataset)"
        )
    try:
        provenance = json.loads((directory / "provenance.json").read_text())
        arrays = {name: np.load(directory / f"{name}.npy", mmap_mode="r") for name in _FILES}
    except (OSError, ValueError) as exc:
        raise DataError(f"cached dataset under {directory} is unreadable: {exc}; delete it to "
                        "rebuild") from None
    return VectorDataset(provenance=provenance, **arrays)


def build_or_load_dataset(params: Mapping[str, Any], cache_dir: Path,
                          progress: ProgressFn | None = None) -> VectorDataset:
    """Load the dataset for ``params`` from the cache, building and caching it first if needed."""
    clean, directory = _dataset_dir(params, cache_dir)
    if (directory / "provenance.json").is_file():
        return load_dataset(params, cache_dir)
    say = progress or (lambda message: logger.info("%s", message))
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{directory.name}-", dir=directory.parent))
    try:
        started = time.perf_counter()
        if clean["dataset"] == "stdlib-docs":
            provenance = _write_stdlib_docs(clean, tmp, Path(cache_dir), say)
        else:
            provenance = _write_synthetic(clean, tmp, say)
        provenance.update(_write_ground_truth(tmp, clean["k"], say))
        provenance.update(params=clean, build_s=round(time.perf_counter() - started, 3))
        provenance["data_hash"] = _data_hash(tmp, clean)
        (tmp / "provenance.json").write_text(json.dumps(provenance, indent=2, sort_keys=True))
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache may be shared between users
        _publish(tmp, directory)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return load_dataset(params, cache_dir)


def _publish(tmp: Path, directory: Path) -> None:
    """Move a finished build into place; a concurrent build that won the race is kept."""
    try:
        os.rename(tmp, directory)
    except OSError:
        if not (directory / "provenance.json").is_file():
            raise
        logger.info("dataset %s was built concurrently; using that copy", directory.name)


def _write_stdlib_docs(clean: Mapping[str, Any], out: Path, cache_dir: Path, say: ProgressFn
                       ) -> dict[str, Any]:
    n_total = clean["n_base"] + clean["n_queries"]
    passages = load_passages(None)
    if n_total > len(passages):
        raise DataError(
            f"n_base + n_queries = {n_total} passages asked for, but the stdlib corpus of Python "
            f"{platform.python_version()} has only {len(passages)}; lower n_base or n_queries"
        )
    corpus = corpus_provenance()
    embeddings = _corpus_embeddings(passages[:n_total], corpus["sha256"], cache_dir, say)
    # Queries are held out of the base set, so no query finds itself at distance zero.
    order = np.random.default_rng(clean["seed"]).permutation(n_total)
    query_rows, base_rows = order[: clean["n_queries"]], order[clean["n_queries"]:]
    np.save(out / "base.npy", np.ascontiguousarray(embeddings[np.sort(base_rows)]))
    np.save(out / "queries.npy", np.ascontiguousarray(embeddings[query_rows]))
    from objectives.datasets.embed import MODEL_NAME, embedder_versions

    return {"synthetic": False, "corpus": corpus, "embedder": MODEL_NAME,
            "embedder_versions": embedder_versions()}


def _corpus_embeddings(passages: list[str], corpus_sha: str, cache_dir: Path, say: ProgressFn
                       ) -> np.ndarray:
    """Embeddings of the first ``len(passages)`` corpus passages, cached per corpus.

    The cache holds a prefix of the corpus and only grows, so changing ``n_base`` embeds only the
    passages not embedded before.
    """
    from objectives.datasets.embed import embed_passages

    path = cache_dir / "embeddings" / f"{corpus_sha}.npy"
    cached = np.load(path) if path.is_file() else np.zeros((0, 0), dtype=np.float32)
    if cached.shape[0] >= len(passages):
        return cached[: len(passages)]
    missing = passages[cached.shape[0]:]
    say(f"embedding {len(missing)} passages with MiniLM on CPU (cached after the first run)")
    parts = [cached] if cached.shape[0] else []
    started = time.perf_counter()
    for start in range(0, len(missing), _EMBED_BATCH):
        parts.append(embed_passages(missing[start:start + _EMBED_BATCH]))
        done = min(start + _EMBED_BATCH, len(missing))
        say(f"embedded {done}/{len(missing)} passages ({time.perf_counter() - started:.0f} s)")
    embeddings = np.concatenate(parts)
    _atomic_save(path, embeddings)
    return embeddings


def _atomic_save(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}-", suffix=".npy", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            np.save(f, array)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_synthetic(clean: Mapping[str, Any], out: Path, say: ProgressFn) -> dict[str, Any]:
    spec = MixtureSpec(dim=clean["dim"], n_clusters=clean["n_clusters"], seed=clean["seed"])
    say(f"generating {clean['n_base']} synthetic vectors (d={spec.dim}, "
        f"{spec.n_clusters} clusters, seed {spec.seed})")
    # Written straight into the .npy file: at 1M x 384 a second in-memory copy would cost 1.5 GB.
    base = np.lib.format.open_memmap(out / "base.npy", mode="w+", dtype=np.float32,
                                     shape=(clean["n_base"], spec.dim))
    _, queries = synthetic_vectors(clean["n_base"], clean["n_queries"], spec, base_out=base)
    base.flush()
    del base
    np.save(out / "queries.npy", queries)
    return spec.provenance()


def _write_ground_truth(out: Path, k: int, say: ProgressFn) -> dict[str, Any]:
    """Exact top-``k`` by inner product (cosine, as rows are unit-norm) with faiss.IndexFlatIP."""
    try:
        import faiss
    except ImportError:
        raise EngineUnavailableError(
            "exact ground truth needs faiss; pip install 'slo-advisor[faiss]'"
        ) from None
    base = np.load(out / "base.npy", mmap_mode="r")
    queries = np.load(out / "queries.npy")
    say(f"computing exact top-{k} ground truth for {len(queries)} queries over {len(base)} vectors")
    index = faiss.IndexFlatIP(base.shape[1])
    for start in range(0, base.shape[0], 262_144):
        index.add(np.ascontiguousarray(base[start:start + 262_144]))
    scores, ids = index.search(queries, k)
    np.save(out / "gt_ids.npy", ids.astype(np.int64))
    np.save(out / "gt_scores.npy", scores.astype(np.float32))
    return {"ground_truth": f"exact faiss.IndexFlatIP top-{k}", "faiss": faiss.__version__}


def _data_hash(directory: Path, clean: Mapping[str, Any]) -> str:
    """sha256 of the vectors and ground truth (plus parameters), 16 hex digits."""
    digest = hashlib.sha256(canonical_json(dict(clean)).encode())
    for name in _FILES:
        array = np.load(directory / f"{name}.npy", mmap_mode="r")
        digest.update(f"{name}{array.dtype}{array.shape}".encode())
        for start in range(0, array.shape[0], 65_536):
            digest.update(np.ascontiguousarray(array[start:start + 65_536]).tobytes())
    return digest.hexdigest()[:16]

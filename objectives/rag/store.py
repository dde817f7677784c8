"""The RAG document store: stdlib docstring passages cut into fixed-size chunks and embedded with
MiniLM, once per chunk size, plus the held-out queries and the word-level token ids the prompt is
assembled from.

The store's passages (the first ``corpus_passages`` of :mod:`objectives.datasets.corpus`) are
joined in corpus order into one word stream and cut every ``chunk_size`` words, as fixed-size
chunking of a long document does. Queries are the first ``query_words`` words of the passages that
follow, so no query is in the store. The random-weight LLM has a word-level vocabulary, so a word
becomes one token id by a stable hash (``crc32``): prompt lengths are those of the real text at
one token per word.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from advisor.errors import DataError, WorkloadError
from objectives.atomic_files import atomic_write_text
from objectives.datasets.corpus import corpus_provenance, load_passages
from objectives.datasets.vectors import VectorDataset, _atomic_save
from objectives.llm.models import N_SPECIAL_TOKENS
from objectives.workload import canonical_json

__all__ = ["CHUNK_SIZES", "ChunkStore", "StoreSpec", "build_stores", "load_store", "word_ids"]

#: The chunk sizes of search_spaces/rag.yaml; prepare embeds the store once for each.
CHUNK_SIZES: tuple[int, ...] = (32, 64, 128)
_FORMAT = 1


def word_ids(text: str, vocab_size: int) -> tuple[int, ...]:
    """One token id per whitespace-separated word, stable across runs and machines."""
    span = vocab_size - N_SPECIAL_TOKENS
    return tuple(N_SPECIAL_TOKENS + zlib.crc32(w.encode()) % span for w in text.split())


@dataclass(frozen=True)
class StoreSpec:
    """The workload parameters that decide the store's contents."""

    corpus_passages: int
    n_queries: int
    query_words: int

    @classmethod
    def from_params(cls, params: Mapping[str, Any], n_queries: int) -> StoreSpec:
        def positive(name: str, default: int, maximum: int) -> int:
            value = params.get(name, default)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise WorkloadError(f"`{name}` must be a positive integer, got {value!r}")
            if value > maximum:
                raise WorkloadError(f"`{name} <= {maximum}` must hold (the stdlib corpus and "
                                    f"MiniLM's input bound it), got a larger {name}")
            return value

        return cls(positive("corpus_passages", 1000, 1_000_000), n_queries,
                   positive("query_words", 24, 256))

    def key(self) -> str:
        data = {"format": _FORMAT, "corpus": corpus_provenance()["sha256"][:16],
                "passages": self.corpus_passages, "queries": self.n_queries,
                "query_words": self.query_words}
        return hashlib.sha256(canonical_json(data).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ChunkStore:
    """One chunk size's chunks (texts and unit-norm MiniLM vectors) and the workload's queries."""

    chunk_size: int
    chunks: tuple[str, ...]
    vectors: np.ndarray
    queries: tuple[str, ...]
    provenance: Mapping[str, Any]

    def dataset(self) -> VectorDataset:
        """The chunk vectors as a faiss-target dataset (for its index build and cache); queries
        and ground truth are the trial's own, so they are empty here."""
        empty = np.zeros((0, self.vectors.shape[1]), dtype=np.float32)
        return VectorDataset(base=self.vectors, queries=empty,
                             gt_ids=np.zeros((0, 1), dtype=np.int64),
                             gt_scores=np.zeros((0, 1), dtype=np.float32),
                             provenance=self.provenance)


def _chunks(passages: Iterable[str], size: int) -> list[str]:
    words = [w for p in passages for w in p.split()]
    return [" ".join(words[i:i + size]) for i in range(0, len(words), size)]


def _texts(spec: StoreSpec) -> tuple[list[str], list[str]]:
    try:
        passages = load_passages(spec.corpus_passages + spec.n_queries)
    except DataError as exc:
        raise WorkloadError(f"the RAG store needs corpus_passages + queries passages: {exc}"
                            ) from None
    store, held_out = passages[:spec.corpus_passages], passages[spec.corpus_passages:]
    queries = [" ".join(p.split()[:spec.query_words]) for p in held_out]
    return store, queries


def build_stores(spec: StoreSpec, cache_dir: Path,
                 embed: Callable[[Sequence[str]], np.ndarray],
                 say: Callable[[str], None]) -> dict[str, Any]:
    """Embed the store for every chunk size (cached under ``cache_dir/rag``); returns provenance."""
    directory = Path(cache_dir) / "rag" / spec.key()
    store, queries = _texts(spec)
    facts: dict[str, Any] = {"corpus": corpus_provenance(store), "n_queries": len(queries),
                             "store_key": spec.key(), "chunks": {}}
    directory.mkdir(parents=True, exist_ok=True)
    for size in CHUNK_SIZES:
        vectors_path = directory / f"chunks-{size}.npy"
        chunks = _chunks(store, size)
        if not vectors_path.is_file():
            say(f"embedding {len(chunks)} chunks of {size} words with MiniLM (cached after this)")
            # Texts first: the vectors file is the marker that both are there.
            atomic_write_text(directory / f"chunks-{size}.json", json.dumps(chunks))
            _atomic_save(vectors_path, embed(chunks))
        facts["chunks"][str(size)] = len(chunks)
    meta = directory / "store.json"
    if not meta.is_file():
        atomic_write_text(meta, json.dumps({"queries": queries, **facts}))
    return facts


def load_store(spec: StoreSpec, cache_dir: Path, chunk_size: int) -> ChunkStore:
    """The prepared store for ``chunk_size`` (raises :class:`DataError` when not prepared)."""
    if chunk_size not in CHUNK_SIZES:
        raise WorkloadError(f"chunk_size must be one of {list(CHUNK_SIZES)}, got {chunk_size}")
    directory = Path(cache_dir) / "rag" / spec.key()
    try:
        meta = json.loads((directory / "store.json").read_text())
        vectors = np.load(directory / f"chunks-{chunk_size}.npy")
        chunks = tuple(json.loads((directory / f"chunks-{chunk_size}.json").read_text()))
    except (OSError, ValueError) as exc:
        raise DataError(f"the RAG store is not prepared under {directory} ({exc}); run the "
                        "target's prepare (advisor tune does) first") from None
    if vectors.shape[0] != len(chunks):
        raise DataError(f"cached chunk vectors ({vectors.shape[0]}) do not match the "
                        f"{len(chunks)} chunks of {chunk_size} words; delete {directory}")
    digest = hashlib.sha256(f"{spec.key()}-{chunk_size}".encode())
    digest.update(np.ascontiguousarray(vectors).tobytes())
    provenance = {"data_hash": digest.hexdigest()[:16], "synthetic": False,
                  "corpus": meta["corpus"], "chunk_size": chunk_size, "n_chunks": len(chunks)}
    return ChunkStore(chunk_size, chunks, vectors, tuple(meta["queries"]), provenance)

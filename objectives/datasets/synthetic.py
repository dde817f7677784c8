"""Seeded synthetic vectors for scale tests: a clustered Gaussian mixture on the unit sphere.

Real embeddings are clustered and have a low intrinsic dimension, which is what makes IVF
partitioning and graph search pay off; i.i.d. Gaussian vectors have neither. The mixture below has
both (clusters grouped under super-clusters, per-cluster spread, a decaying noise spectrum), tuned
so IVF recall climbs with nprobe much as it does on MiniLM embeddings of real text. It serves sizes
(1M+) where embedding a real corpus on a CPU is impractical, and everything built from it is
labelled synthetic so no one mistakes its numbers for measurements on real data.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from advisor.errors import WorkloadError

__all__ = ["CHUNK_ROWS", "GENERATOR_NAME", "MixtureSpec", "synthetic_vectors"]

GENERATOR_NAME = "hierarchical-gaussian-mixture-on-sphere"
#: Rows generated per step; fixed so the output does not depend on memory settings.
CHUNK_ROWS = 65_536


@dataclass(frozen=True, slots=True)
class MixtureSpec:
    """Parameters of the mixture.

    ``n_clusters`` centres sit around ``ceil(sqrt(n_clusters))`` super-centres (offset of norm
    ``super_spread``). A point is ``centre + s * noise``, renormalised, where ``s`` is the cluster's
    spread (log-uniform in ``[std_min, std_max]``) and ``noise`` has unit expected norm with the
    variance of axis ``j`` proportional to ``(j + 1) ** -(2 * spectrum_decay)`` (axes shuffled), so
    most of it lies in a few dozen directions, as in sentence embeddings.
    """

    dim: int = 384
    n_clusters: int = 1024
    std_min: float = 1.0
    std_max: float = 3.0
    spectrum_decay: float = 0.8
    super_spread: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.dim < 1 or self.n_clusters < 1:
            raise WorkloadError(
                f"synthetic `dim >= 1` and `n_clusters >= 1` must hold, but got "
                f"(dim={self.dim}, n_clusters={self.n_clusters})"
            )
        if not 0 < self.std_min <= self.std_max:
            raise WorkloadError(
                f"synthetic `0 < std_min <= std_max` must hold, but got "
                f"(std_min={self.std_min}, std_max={self.std_max})"
            )

    def provenance(self) -> dict[str, Any]:
        """What to record with anything built from this spec; always labelled synthetic."""
        return {"synthetic": True, "generator": GENERATOR_NAME, "generator_params": asdict(self),
                "seed": self.seed}


@dataclass(frozen=True, slots=True)
class _Mixture:
    centres: np.ndarray  # [n_clusters, dim], unit rows
    spreads: np.ndarray  # [n_clusters]
    spectrum: np.ndarray  # [dim], unit norm


def _normalise_rows(x: np.ndarray) -> None:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    np.maximum(norms, np.float32(1e-12), out=norms)
    x /= norms


def _mixture(spec: MixtureSpec, rng: np.random.Generator) -> _Mixture:
    d = spec.dim
    supers = rng.standard_normal((math.ceil(math.sqrt(spec.n_clusters)), d), dtype=np.float32)
    _normalise_rows(supers)
    offsets = rng.standard_normal((spec.n_clusters, d), dtype=np.float32)
    offsets *= np.float32(spec.super_spread / math.sqrt(d))
    centres = supers[rng.integers(0, supers.shape[0], size=spec.n_clusters)] + offsets
    _normalise_rows(centres)
    spreads = np.exp(rng.uniform(math.log(spec.std_min), math.log(spec.std_max),
                                 size=spec.n_clusters)).astype(np.float32)
    spectrum = (np.arange(d, dtype=np.float64) + 1.0) ** -spec.spectrum_decay
    spectrum = (spectrum / np.linalg.norm(spectrum))[rng.permutation(d)].astype(np.float32)
    return _Mixture(centres, spreads, spectrum)


def _fill(out: np.ndarray, mixture: _Mixture, rng: np.random.Generator) -> None:
    """Fill ``out`` with mixture samples, one chunk at a time (bounded scratch memory)."""
    n_clusters, dim = mixture.centres.shape
    for start in range(0, out.shape[0], CHUNK_ROWS):
        stop = min(start + CHUNK_ROWS, out.shape[0])
        labels = rng.integers(0, n_clusters, size=stop - start)
        chunk = rng.standard_normal((stop - start, dim), dtype=np.float32)
        chunk *= mixture.spectrum
        chunk *= mixture.spreads[labels, None]
        chunk += mixture.centres[labels]
        _normalise_rows(chunk)
        out[start:stop] = chunk


def synthetic_vectors(n_base: int, n_queries: int, spec: MixtureSpec,
                      base_out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(base [n_base, dim], queries [n_queries, dim])``, float32 with unit-norm rows.

    Queries come from the same mixture through an independent stream, so they are not copies of
    base vectors. ``base_out`` (e.g. a ``np.lib.format.open_memmap``) receives the base vectors
    in place, so a 1M x 384 set can be written to disk without a second in-memory copy.
    """
    if n_base < 1 or n_queries < 1:
        raise WorkloadError(
            f"`n_base >= 1` and `n_queries >= 1` must hold, but got ({n_base=}, {n_queries=})"
        )
    mixture_seq, base_seq, query_seq = np.random.SeedSequence(spec.seed).spawn(3)
    mixture = _mixture(spec, np.random.default_rng(mixture_seq))
    if base_out is None:
        base_out = np.empty((n_base, spec.dim), dtype=np.float32)
    elif base_out.shape != (n_base, spec.dim) or base_out.dtype != np.float32:
        raise ValueError(
            f"base_out must be float32 of shape {(n_base, spec.dim)}, "
            f"got {base_out.dtype} {base_out.shape}"
        )
    _fill(base_out, mixture, np.random.default_rng(base_seq))
    queries = np.empty((n_queries, spec.dim), dtype=np.float32)
    _fill(queries, mixture, np.random.default_rng(query_seq))
    return base_out, queries

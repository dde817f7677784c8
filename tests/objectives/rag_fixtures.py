"""A RAG workload small enough for a few-second trial on 2 cores (150 passages, 6 requests)."""

from __future__ import annotations

from objectives import Workload

TINY_RAG_OVERRIDES = {
    "n_requests": 6, "warmup_requests": 2, "corpus_passages": 150,
    "arrival": {"process": "poisson", "rate_rps": 12.0},
    "output_len": {"dist": "uniform", "low": 4, "high": 8},
}


def tiny_rag_workload() -> Workload:
    from objectives.targets.rag_target import rag_workload

    return rag_workload("rag-tiny-cpu", **TINY_RAG_OVERRIDES)

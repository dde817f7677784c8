"""The declared workload kinds (objectives/vocabulary.py says what a declaration holds).

Order matters where the generic layers merge every kind's answer (a query's workload features
carry no kind): their features come out in this order.
"""

from __future__ import annotations

from objectives.kinds.llm_serving import LLM_SERVING
from objectives.kinds.rag import RAG
from objectives.kinds.vector_search import VECTOR_SEARCH
from objectives.vocabulary import WorkloadKind

__all__ = ["LLM_SERVING", "RAG", "VECTOR_SEARCH", "WORKLOAD_KINDS"]

WORKLOAD_KINDS: tuple[WorkloadKind, ...] = (LLM_SERVING, VECTOR_SEARCH, RAG)

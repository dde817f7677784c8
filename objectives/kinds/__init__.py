"""The declared workload kinds and their lookup (objectives/vocabulary.py says what a
declaration holds): the generic layers find a kind by name or by target here.

Order matters where the generic layers merge every kind's answer (a query's workload features
carry no kind): their features come out in this order.
"""

from __future__ import annotations

from advisor.errors import UnknownTargetError
from objectives.kinds.llm_serving import LLM_SERVING
from objectives.kinds.rag import RAG
from objectives.kinds.vector_search import VECTOR_SEARCH
from objectives.registry import target_class
from objectives.vocabulary import DEFAULT_KIND, WorkloadKind

__all__ = ["LLM_SERVING", "RAG", "VECTOR_SEARCH", "WORKLOAD_KINDS", "kind_for_target",
           "workload_kind", "workload_kinds"]

WORKLOAD_KINDS: tuple[WorkloadKind, ...] = (LLM_SERVING, VECTOR_SEARCH, RAG)


def workload_kinds() -> tuple[WorkloadKind, ...]:
    """Every declared workload kind, in declaration order."""
    return WORKLOAD_KINDS


def workload_kind(name: str) -> WorkloadKind:
    """The kind declared as ``name``; an unknown name raises ``KeyError`` naming the known ones."""
    for kind in workload_kinds():
        if kind.name == name:
            return kind
    raise KeyError(f"unknown workload kind {name!r}; declared kinds: "
                   f"{', '.join(k.name for k in workload_kinds())}")


def kind_for_target(target: str) -> WorkloadKind:
    """The workload kind the target registered as ``target`` runs
    (:data:`~objectives.vocabulary.DEFAULT_KIND` for an unregistered name, as for a target that
    declares none)."""
    try:
        name = target_class(target).workload_kind
    except UnknownTargetError:
        name = DEFAULT_KIND
    return workload_kind(name)

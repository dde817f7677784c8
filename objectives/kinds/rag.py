"""The ``rag`` workload kind: LLM requests, each answered from passages retrieved for its query.

Its workload is an ``llm-serving`` spec plus the pipeline's own parameters, so its features and
cost features are those of LLM serving (the generic layers merge every kind's); it has tiers
(end-to-end latency and retrieval recall) and pipeline stages of its own, and the audits and
rules of thumb of LLM serving.
"""

from __future__ import annotations

from objectives.kinds.llm_serving import LLM_RULES, llm_audit_slos
from objectives.rag.pipeline import STAGES
from objectives.vocabulary import Tier, WorkloadKind

__all__ = ["RAG", "RAG_TIERS"]

RAG_TIERS = (
    Tier("interactive", "ttft_p95_ms<=500,e2e_p95_ms<=2000,recall_at_5>=0.9",
         "maximize:goodput_requests_per_s",
         "RAG answers that start within 0.5 s and finish within 2 s of the query, recall@5 >= 0.9"),
    Tier("standard", "ttft_p95_ms<=2000,e2e_p95_ms<=10000,recall_at_5>=0.9",
         "maximize:goodput_requests_per_s",
         "RAG with some queueing: first token within 2 s, answer within 10 s, recall@5 >= 0.9"),
    Tier("throughput", "recall_at_5>=0.8", "maximize:output_tokens_per_s",
         "batch RAG: the most answer tokens per second at recall@5 >= 0.8"),
)

RAG = WorkloadKind(name="rag", tiers=RAG_TIERS, audit_slos=llm_audit_slos,
                   rules_of_thumb=LLM_RULES, stages=STAGES)

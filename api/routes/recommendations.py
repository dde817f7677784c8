"""``POST /v1/recommendations``: an SLO and its context in, a config (or why none) out."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from api.deps import KnowledgeDep, ReadAccess
from api.schemas import ErrorPublic, RecommendationCreate, RecommendationPublic

router = APIRouter(prefix="/v1", tags=["recommendations"], dependencies=[ReadAccess])

_EXAMPLE: dict[str, Any] = {
    "status": "recommended", "basis": "model", "target": "faiss",
    "slo": "p95_latency_ms<=0.25,recall_at_10>=0.95", "objective": "maximize:qps",
    "config": {"index_type": "hnsw", "hnsw_m": 34, "ef_construction": 412, "ef_search": 17,
               "batch_size": 22, "threads": 1},
    "predicted": {"p95_latency_ms": {"value": 0.066, "low": 0.051, "high": 0.081}},
    "evidence": {"trials": 30}, "launch_command": "import faiss ...", "confidence": "high",
    "tune_command": None,
}


@router.post("/recommendations", response_model=RecommendationPublic,
             responses={200: {"content": {"application/json": {"example": _EXAMPLE}}},
                        422: {"model": ErrorPublic, "description": "unknown target, bad SLO"}})
def recommend(body: RecommendationCreate, knowledge: KnowledgeDep) -> dict[str, Any]:
    """The config meeting the SLO with the most headroom, with predicted metrics and intervals,
    the evidence and a launch command; or an explicit `no_feasible_config` / `not_covered` answer
    naming the `advisor tune` study that would cover the question."""
    return knowledge.recommend(target=body.target, slo=body.slo, objective=body.objective,
                               hardware=body.hardware, model=body.model,
                               workload=body.workload)

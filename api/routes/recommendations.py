"""``POST /v1/recommendations``: an SLO and its context in, a config (or why none) out."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from fastapi.concurrency import run_in_threadpool

from api.deps import KnowledgeDep, ReadAccess
from api.schemas import ErrorPublic, RecommendationCreate, RecommendationPublic

router = APIRouter(prefix="/v1", tags=["recommendations"], dependencies=[ReadAccess])

_EXAMPLE: dict[str, Any] = {
    "status": "recommended", "answer": "config", "basis": "model", "target": "faiss",
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
async def recommend(body: RecommendationCreate, knowledge: KnowledgeDep) -> Response:
    """The config meeting the SLO with the most headroom, with predicted metrics and intervals,
    the evidence and a launch command; or an explicit `no_feasible_config` / `not_covered` answer
    naming the `advisor tune` study that would cover the question. Every answer is compared with
    the engine default at the same workload: `answer` is `keep_defaults` (and `config` the
    default) when the default meets the SLO and no candidate beats it beyond the noise."""
    query = body.model_dump()
    # A repeated question is answered on the event loop from the cache; anything that needs the
    # store or the models runs in the thread pool.
    answer = knowledge.cached_recommendation(query)
    if answer is None:
        answer = await run_in_threadpool(knowledge.recommend, query)
    return Response(answer, media_type="application/json")

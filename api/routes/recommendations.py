"""``POST /v1/recommendations``: an SLO and its context in, a config (or why none) out."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.concurrency import run_in_threadpool

from api.deps import KnowledgeDep, ReadAccess
from api.schemas import ErrorPublic, RecommendationCreate, RecommendationPublic

router = APIRouter(prefix="/v1", tags=["recommendations"], dependencies=[ReadAccess])

@router.post("/recommendations", response_model=RecommendationPublic,
             responses={422: {"model": ErrorPublic,
                               "description": "unknown target, bad SLO, unknown workload "
                                              "feature"}})
async def recommend(body: RecommendationCreate, knowledge: KnowledgeDep) -> Response:
    """One answer document for every outcome (`recommended`, `keep_defaults`,
    `no_feasible_config`, `undecided`, `not_covered`; `basis` model / measured / extrapolation /
    calibration), the same bytes
    `advisor recommend --json` prints. The engine default is candidate #1 and is judged by the
    same rule as every candidate: measured windows at the workload first (k of n), predictions
    where none exist. `measured: true` answers from stored trials only."""
    query = body.model_dump()
    # A repeated question is answered on the event loop from the cache; anything that needs the
    # store or the models runs in the thread pool.
    answer = knowledge.cached_recommendation(query)
    if answer is None:
        answer = await run_in_threadpool(knowledge.recommend, query)
    return Response(answer, media_type="application/json")

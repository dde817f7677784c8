"""Liveness, readiness and Prometheus metrics (unversioned, for probes and scrapers)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response, status
from sqlalchemy import text

from advisor import __version__
from advisor.errors import StoreError
from api.deps import ReadAccess, StoreDep
from api.metrics import CONTENT_TYPE

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, Any]:
    """Liveness: the process answers."""
    return {"status": "ok", "version": __version__}


@router.get("/readyz", responses={503: {"description": "the trial store does not answer, or "
                                                     "the models are still being fitted"}})
def readyz(store: StoreDep, request: Request, response: Response) -> dict[str, Any]:
    """Readiness: the trial store answers a query and the knowledge models are fitted (a fresh
    `advisor serve` fits them in the background; `/healthz` answers meanwhile)."""
    try:
        with store.session() as s:
            s.exec(text("SELECT 1"))  # type: ignore[call-overload]
    except StoreError as exc:
        response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
        return {"status": "unavailable", "reason": str(exc)}
    if request.app.state.knowledge.warming:
        response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
        response.headers["Retry-After"] = "5"
        return {"status": "starting", "reason": "the knowledge models are being fitted"}
    return {"status": "ready"}


@router.get("/metrics", dependencies=[ReadAccess],
            responses={200: {"content": {CONTENT_TYPE: {}}, "description": "Prometheus text"}})
def metrics(request: Request) -> Response:
    """Prometheus metrics: requests and latency by route, jobs by status, trials in the store."""
    return Response(request.app.state.metrics.render(), media_type=CONTENT_TYPE)

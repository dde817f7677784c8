"""``GET /v1/trials``: stored trials, paged and filtered."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from api.deps import ReadAccess, StoreDep
from api.redact import redact_paths
from api.schemas import Page, TrialPublic
from knowledge import TrialFilter, TrialRecord
from knowledge.queries import page_trials
from knowledge.validity import validity_of

router = APIRouter(prefix="/v1", tags=["trials"], dependencies=[ReadAccess])

_Name = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


def trial_public(t: TrialRecord) -> TrialPublic:
    """The public view of a trial: the host's absolute paths (log tails, local model
    directories) shortened to their last part (api/redact.py)."""
    return TrialPublic(
        id=t.id or 0, study_id=t.study_id, number=t.number, target=t.target, status=t.status,
        validity=validity_of(t.details), config=t.config, metrics=t.metrics, feasible=t.feasible,
        objective_value=t.objective_value, error_type=t.error_type, error=redact_paths(t.error),
        workload=redact_paths(t.workload_spec), workload_hash=t.workload_hash,
        hardware_key=t.hardware_key,
        engine_versions=t.engine_versions, started_at=t.started_at, finished_at=t.finished_at,
        duration_s=t.duration_s, swept_from=t.swept_from)


@router.get("/trials", response_model=Page[TrialPublic])
def list_trials(
    store: StoreDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
    target: Annotated[str | None, Query(max_length=64, pattern=_Name)] = None,
    study: Annotated[str | None, Query(max_length=200, pattern=_Name,
                                       description="study name")] = None,
    status: Annotated[str | None, Query(
        pattern="^(running|complete|failed|interrupted|invalid)$")] = None,
    feasible: Annotated[bool | None, Query(description="met / missed their study's SLO")
                        ] = None,
    hardware: Annotated[str | None, Query(max_length=200, pattern=_Name,
                                          description="hardware key contains this")] = None,
) -> dict[str, Any]:
    """Stored trials (failed ones with their reason), oldest first."""
    rows, total = page_trials(store, TrialFilter(
        target=target, study=study, status=status, feasible=feasible, hardware_key=hardware,
        limit=limit, offset=offset))
    return {"items": [trial_public(t) for t in rows], "total": total, "limit": limit,
            "offset": offset}

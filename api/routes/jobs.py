"""Jobs: the status and progress of studies started over the API, and cancelling them."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query

from api.deps import JobsDep, ReadAccess, StoreDep, WriteAccess
from api.redact import redact_paths
from api.schemas import ErrorPublic, JobProgress, JobPublic, Page
from knowledge import TrialStatus, TrialStore
from knowledge.models import JobRecord
from knowledge.queries import best_feasible

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

JobId = Annotated[str, Path(pattern=r"^[0-9a-f]{32}$", description="job id")]


def _progress(job: JobRecord, store: TrialStore) -> tuple[int | None, JobProgress | None]:
    study = store.get_study(job.study_name)
    if study is None:
        return None, None
    trials = store.trials_of_study(study.id or 0)
    complete = [t for t in trials if t.status == TrialStatus.COMPLETE]
    feasible = [t for t in complete if t.feasible and t.objective_value is not None]
    best = best_feasible(trials, study.objective_direction)
    failed = sum(t.status == TrialStatus.FAILED for t in trials)
    invalid = sum(t.status == TrialStatus.INVALID for t in trials)
    return study.id, JobProgress(
        trials_finished=len(complete) + failed + invalid, trials_total=study.n_trials,
        trials_complete=len(complete), trials_failed=failed, trials_meeting_slo=len(feasible),
        best_objective_value=best.objective_value if best else None,
        best_trial_id=best.id if best else None, best_config=best.config if best else None)


def job_public(job: JobRecord, store: TrialStore) -> JobPublic:
    study_id, progress = _progress(job, store)
    return JobPublic(
        id=job.uid, status=job.status, study_name=job.study_name,  # type: ignore[arg-type]
        study_id=study_id, target=job.target, request=job.request,
        cancel_requested=job.cancel_requested, error=redact_paths(job.error),
        created_at=job.created_at,
        started_at=job.started_at, finished_at=job.finished_at, progress=progress)


@router.get("", response_model=Page[JobPublic], dependencies=[ReadAccess])
def list_jobs(store: StoreDep, jobs: JobsDep,
              limit: Annotated[int, Query(ge=1, le=200)] = 50,
              offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
              status: Annotated[str | None, Query(
                  pattern="^(queued|running|succeeded|failed|cancelled)$")] = None,
              ) -> dict[str, Any]:
    """Jobs, newest first."""
    rows, total = jobs.page(status=status, limit=limit, offset=offset)
    return {"items": [job_public(j, store) for j in rows], "total": total, "limit": limit,
            "offset": offset}


@router.get("/{job_id}", response_model=JobPublic, dependencies=[ReadAccess],
            responses={404: {"model": ErrorPublic}})
def get_job(job_id: JobId, store: StoreDep, jobs: JobsDep) -> JobPublic:
    """A job's status and progress: trials finished of the total, best feasible so far."""
    return job_public(jobs.get(job_id), store)


@router.post("/{job_id}/cancel", response_model=JobPublic, dependencies=[WriteAccess],
             responses={401: {"model": ErrorPublic}, 403: {"model": ErrorPublic},
                        404: {"model": ErrorPublic}, 409: {"model": ErrorPublic}})
def cancel_job(job_id: JobId, store: StoreDep, jobs: JobsDep) -> JobPublic:
    """Cancel a job. A queued job is cancelled at once; a running one stops within seconds (its
    running trial is killed and recorded as interrupted, the study as interrupted, so it can be
    resumed). Cancelling a finished job answers 409."""
    return job_public(jobs.request_cancel(job_id), store)

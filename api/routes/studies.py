"""Studies: list and read stored studies; start one as a background job (``POST``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, status

from advisor.errors import NotFoundError, StudyError
from advisor.jobs import API_DOOR, job_request
from advisor.pairing import PROVENANCE_KEY
from advisor.study_request import StudyRequest, plan_study
from api.deps import JobsDep, ReadAccess, StoreDep, WriteAccess
from api.routes.jobs import job_public
from api.schemas import ErrorPublic, JobPublic, Page, StudyCreate, StudyPublic
from knowledge import StudyRecord
from knowledge.queries import StudyCounts, page_studies, study_counts

router = APIRouter(prefix="/v1/studies", tags=["studies"])

Limit = Annotated[int, Query(ge=1, le=500, description="page size")]
Offset = Annotated[int, Query(ge=0, le=1_000_000, description="items to skip")]
_Name = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


def study_public(study: StudyRecord, counts: StudyCounts) -> StudyPublic:
    return StudyPublic(
        id=study.id or 0, name=study.name, target=study.target, slo=study.slo,
        objective=f"{study.objective_direction}:{study.objective_metric}", status=study.status,
        workload=study.workload_spec, sampler=study.sampler, seed=study.seed,
        trials_requested=study.n_trials, trials=counts.trials, trials_complete=counts.complete,
        trials_failed=counts.failed, trials_meeting_slo=counts.feasible,
        trials_invalid=counts.invalid, hardware_key=study.hardware_key,
        paired_comparison=study.data_provenance.get(PROVENANCE_KEY), created_at=study.created_at,
        updated_at=study.updated_at)


@router.get("", response_model=Page[StudyPublic], dependencies=[ReadAccess])
def list_studies(store: StoreDep, limit: Limit = 50, offset: Offset = 0,
                 target: Annotated[str | None, Query(max_length=64, pattern=_Name)] = None,
                 status: Annotated[str | None, Query(
                     pattern="^(running|finished|interrupted|imported)$")] = None,
                 ) -> dict[str, Any]:
    """Stored studies, oldest first, with trial counts."""
    rows, total = page_studies(store, target=target, status=status, limit=limit, offset=offset)
    counts = study_counts(store, [s.id or 0 for s in rows])
    items = [study_public(s, counts.get(s.id or 0, StudyCounts())) for s in rows]
    return {"items": items, "total": total, "limit": limit, "offset": offset}


@router.get("/{study_id}", response_model=StudyPublic, dependencies=[ReadAccess],
            responses={404: {"model": ErrorPublic}})
def get_study(store: StoreDep, study_id: Annotated[int, Path(ge=1, le=2**31 - 1)]
              ) -> StudyPublic:
    """One stored study with its trial counts."""
    study = store.get_study_by_id(study_id)
    if study is None:
        raise NotFoundError(f"no study with id {study_id}")
    return study_public(study, study_counts(store, [study_id]).get(study_id, StudyCounts()))


@router.post("", status_code=status.HTTP_202_ACCEPTED, response_model=JobPublic,
             dependencies=[WriteAccess],
             responses={401: {"model": ErrorPublic}, 403: {"model": ErrorPublic},
                        409: {"model": ErrorPublic}, 422: {"model": ErrorPublic}})
def start_study(body: StudyCreate, store: StoreDep, jobs: JobsDep) -> JobPublic:
    """Start a tuning study as a background job run by the worker (never inside the request).

    The target must be registered, fixed knob values must lie in its search space, the workload
    must be one of its presets. Answers 202 with the job; poll `GET /v1/jobs/{id}`, stop it with
    `POST /v1/jobs/{id}/cancel`."""
    request = study_request(body)
    plan = plan_study(request, store)
    job = jobs.create(study_name=plan.spec.name, target=plan.spec.target,
                      request=job_request(plan, request))
    return job_public(job, store)


def study_request(body: StudyCreate) -> StudyRequest:
    """``body`` as the study request every front door plans (advisor/study_request.py)."""
    if body.resume and (body.enqueue or body.startup_trials is not None):
        # A job runs later, so whether the study will exist by then is not known here: options
        # that only apply when a study starts never go with a resume over the API.
        field = "`enqueue`" if body.enqueue else "`startup_trials`"
        raise StudyError(f"{field} applies when a study starts; it cannot go with `resume`")
    # A field the body leaves out is the study's own on a resume (its default for a new one).
    given = body.model_fields_set
    return StudyRequest(
        target=body.target, slo=body.slo, objective=body.objective,
        workload=body.workload.preset, workload_params=body.workload.params, from_client=True,
        trials=body.trials if "trials" in given else None,
        sampler=body.sampler if "sampler" in given else None, seed=body.seed,
        startup_trials=body.startup_trials, include_default=body.include_default,
        fixed=body.fixed, enqueued=tuple(body.enqueue), paired_repeats=body.paired_repeats,
        search_sweep=body.search_sweep if "search_sweep" in given else None,
        warm_start=body.warm_start, name=body.name, resume=body.resume, door=API_DOOR)

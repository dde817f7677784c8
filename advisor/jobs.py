"""Studies requested over the REST API: how a job stores its planned study, and the job process
that runs one study under the worker.

A request is planned by advisor/study_request.py like every other front door's (from_client:
presets only, parameters may only change values the preset already has, with the same type;
strings must be plain names). Nothing a client sends becomes a command, a flag or a path.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import sys
from collections.abc import Mapping
from types import FrameType
from typing import Any

from advisor import recovery
from advisor.driver import StudyDriver, StudySpec
from advisor.errors import AdvisorError, StoreError
from advisor.objective import Objective
from advisor.settings import Settings
from advisor.study_request import Door, StudyPlan, StudyRequest
from advisor.warm_start import pending_warm_start, warm_start_hook
from knowledge import StudyRecord, TrialRecord, TrialStore
from knowledge.jobs import JobStore
from knowledge.models import JobStatus
from objectives import parse_slo
from objectives.workload import Workload

__all__ = ["API_DOOR", "JobCancelled", "job_request", "run_job", "spec_from_job_request"]

log = logging.getLogger(__name__)


class JobCancelled(KeyboardInterrupt):
    """Raised inside the job process when its job was cancelled. A KeyboardInterrupt, so the
    driver treats it as Ctrl-C: the running trial is killed and recorded as interrupted, the
    study as interrupted."""


#: How the REST API spells a study request's fields in the errors :func:`plan_study` raises.
API_DOOR = Door(resume="`resume`", name="`name`", continue_hint="send resume=true to continue it",
                enqueue="`enqueue`", startup_trials="`startup_trials`", also_rate="`also_rate`",
                trials="`trials`", sampler="`sampler`", seed="`seed`",
                search_sweep="`search_sweep`", paired_repeats="`paired_repeats`",
                failure_gate="`failure_gate`", failure_threshold="`failure_threshold`")


def job_request(plan: StudyPlan, request: StudyRequest) -> dict[str, Any]:
    """The planned study as a job stores it (JSON): every default resolved, so the job process
    runs what was checked here even if the server's defaults change before it starts."""
    spec = plan.spec
    return {
        "target": spec.target, "slo": str(spec.slo), "objective": str(spec.objective),
        "workload": spec.workload.spec, "fixed": dict(spec.fixed),
        "enqueue": [dict(c) for c in spec.enqueued], "trials": spec.n_trials,
        "sampler": spec.sampler, "startup_trials": spec.startup_trials, "seed": spec.seed,
        "include_default": spec.include_default, "name": spec.name, "resume": request.resume,
        "paired_repeats": spec.paired_repeats, "warm_start": plan.warm_start,
        "search_sweep": spec.search_sweep,
    }


def spec_from_job_request(request: Mapping[str, Any]) -> tuple[StudySpec, bool]:
    """The driver's spec from a stored, already normalised job request."""
    spec = StudySpec(
        name=request["name"], target=request["target"], slo=parse_slo(request["slo"]),
        objective=Objective.parse(request["objective"]),
        workload=Workload.from_spec(request["workload"]), n_trials=int(request["trials"]),
        sampler=request["sampler"], seed=request["seed"],
        startup_trials=request.get("startup_trials"),
        include_default=bool(request["include_default"]), fixed=dict(request.get("fixed") or {}),
        enqueued=tuple(dict(c) for c in request.get("enqueue") or ()),
        paired_repeats=request.get("paired_repeats"),
        # Requests stored before `search_sweep` existed get the API's default.
        search_sweep=bool(request.get("search_sweep", False)),
        # Requests stored before `warm_start` existed get the API's default.
        warm_start=bool(request.get("warm_start", True)))
    return spec, bool(request.get("resume"))


class _JobReporter:
    """Heartbeats the job and stops the study between trials once a cancel is requested."""

    def __init__(self, jobs: JobStore, uid: str) -> None:
        self.jobs, self.uid = jobs, uid

    def _check(self) -> None:
        try:
            job = self.jobs.get(self.uid)
            self.jobs.heartbeat(self.uid)
        except StoreError as exc:
            # A busy store must not fail the study between two trials (the next trial's own
            # writes wait on it, with their own timeout); the cancel is read at the next check.
            log.warning("job %s: the store did not answer a progress check (%s); going on",
                        self.uid, exc)
            return
        if job.cancel_requested:
            _cancel()

    def preparing(self, message: str) -> None:
        log.info(message)
        self._check()

    def started(self, study: StudyRecord, done: int, total: int) -> None:
        self._check()

    def trial_finished(self, trial: TrialRecord, done: int, best: TrialRecord | None) -> None:
        self._check()

    def finished(self, result: Any) -> None:
        pass


def _cancel() -> None:
    """Raise :class:`JobCancelled`, once: the worker's SIGTERM is ignored from here on, so it
    cannot raise a second time inside the database calls that record the cancel (on PostgreSQL
    that left the pooled connection unusable and the job never marked cancelled)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise JobCancelled


def _raise_cancelled(signum: int, frame: FrameType | None) -> None:
    _cancel()


def run_job(uid: str, settings: Settings) -> int:
    """Run job ``uid`` (already claimed by a worker) to its end; returns the process exit code.

    SIGTERM (sent by the worker on cancel) stops the running trial at once: its child process
    group is killed, the trial is recorded as interrupted and the study as interrupted.
    """
    store = TrialStore(settings.db_url)
    jobs = JobStore(store)
    job = jobs.get(uid)
    jobs.set_pid(uid, os.getpid())
    signal.signal(signal.SIGTERM, _raise_cancelled)
    status, error = JobStatus.FAILED, None
    spec_name = job.study_name
    try:
        spec, resume = spec_from_job_request(job.request)
        driver = StudyDriver(store, settings, _JobReporter(jobs, uid))
        if resume and store.get_study(spec.name) is not None:
            # The planned budget and repeats: the study's own unless the request changed them.
            driver.resume(spec.name, spec.n_trials, paired_repeats=spec.paired_repeats,
                          on_opened=pending_warm_start(driver))
        else:
            driver.run(spec, on_created=warm_start_hook(driver, spec)
                       if spec.warm_start else None)
        status = JobStatus.SUCCEEDED
    except KeyboardInterrupt:  # JobCancelled included
        if jobs.get(uid).cancel_requested:
            status, error = JobStatus.CANCELLED, "cancelled on request"
        else:
            error = ("stopped because its worker shut down; the study is interrupted: start a "
                     "new job with resume=true to continue it")
    except AdvisorError as exc:
        error = str(exc)
    except Exception as exc:  # the job's failure is recorded; the worker carries on
        log.exception("job %s crashed", uid)
        error = f"{type(exc).__name__}: {exc}"
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with contextlib.suppress(AdvisorError):
            recovery.leave_consistent(store, spec_name, owned=recovery.this_process,
                                      reason="the study's job was cancelled",
                                      only_when_idle=False)
        jobs.finish(uid, status, error)
        store.close()
    return 0 if status == JobStatus.SUCCEEDED else 1


def main(argv: list[str] | None = None) -> None:
    """``python -m advisor.jobs JOB_ID``: the worker's child process for one job (settings from
    the environment)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not re.fullmatch(r"[0-9a-f]{32}", args[0]):
        raise SystemExit("usage: python -m advisor.jobs JOB_ID")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    sys.exit(run_job(args[0], Settings()))


if __name__ == "__main__":
    main()

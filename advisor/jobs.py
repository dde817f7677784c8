"""Studies requested over the REST API: validation of the request, and the job process that runs
one study under the worker.

Every field of a request is data checked against what is registered: the target against the
target registry, the SLO and objective against the target's metrics, fixed knob values against the
target's search space, the workload against the target's named presets (parameters may only
change values the preset already has, with the same type; strings must be plain names). Nothing a
client sends becomes a command, a flag or a path.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from types import FrameType
from typing import Any

from advisor.driver import DEFAULT_SAMPLER, SAMPLERS, StudyDriver, StudySpec, complete_enqueued
from advisor.errors import (
    AdvisorError,
    InputError,
    SearchSpaceError,
    StoreError,
    StudyError,
    WorkloadError,
)
from advisor.inputs import MAX_TRIALS, check_numbers, check_study_name, requested_slo
from advisor.objective import Objective
from advisor.settings import Settings
from advisor.warm_start import warm_start_hook
from knowledge import StudyRecord, TrialRecord, TrialStatus, TrialStore
from knowledge.jobs import JobStore
from knowledge.models import JobStatus, StudyStatus
from objectives import parse_slo
from objectives.registry import get_target
from objectives.workload import Workload
from search_spaces import SearchSpace

__all__ = ["JobCancelled", "ValidatedStudy", "run_job", "validate_study_request"]

log = logging.getLogger(__name__)

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class JobCancelled(KeyboardInterrupt):
    """Raised inside the job process when its job was cancelled. A KeyboardInterrupt, so the
    driver treats it as Ctrl-C: the running trial is killed and recorded as interrupted, the
    study as interrupted."""


@dataclass(frozen=True)
class ValidatedStudy:
    """A study request after validation: the driver's spec plus how to start it."""

    spec: StudySpec
    resume: bool
    request: dict[str, Any]  # the normalised request, as stored with the job


def _check_fixed(space: SearchSpace, fixed: Mapping[str, Any]) -> dict[str, Any]:
    """Fixed knob values, each checked against its knob's type and static range."""
    problems: list[str] = []
    clean: dict[str, Any] = {}
    for name, value in fixed.items():
        if name not in space:
            problems.append(f"unknown knob {name!r}")
            continue
        knob = space.knob(name)
        if knob.type == "int" and isinstance(value, float) and value.is_integer():
            value = int(value)
        why = knob.check_value(value, {})
        if why:
            problems.append(f"{name}: {why}")
        clean[name] = value
    if problems:
        raise SearchSpaceError(f"invalid fixed knobs for target {space.target!r}: "
                               + "; ".join(problems) + ". Its knobs: "
                               + ", ".join(k.name for k in space))
    return clean


def _check_param(key: str, base: Any, value: Any) -> Any:
    """One workload parameter override, checked against the preset's own value."""
    if isinstance(base, bool) or isinstance(value, bool):
        if not (isinstance(base, bool) and isinstance(value, bool)):
            raise WorkloadError(f"workload param {key!r} must be a boolean like the preset's")
        return value
    if isinstance(base, int | float):
        check_numbers(value, f"workload param {key!r}")
        if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            raise WorkloadError(f"workload param {key!r} must be a finite number >= 0")
        if isinstance(base, int) and not (isinstance(value, int) or float(value).is_integer()):
            raise WorkloadError(f"workload param {key!r} must be an integer")
        return int(value) if isinstance(base, int) else float(value)
    if isinstance(base, str):
        if not isinstance(value, str) or not _NAME_RE.match(value):
            raise WorkloadError(f"workload param {key!r} must be a plain name (letters, digits, "
                                "'.', '_', '-'; no paths)")
        if key == "model":
            from objectives.llm.models import MODEL_SHAPES

            if value not in MODEL_SHAPES:
                raise WorkloadError(f"unknown model shape {value!r}; over the API choose one of "
                                    f"{', '.join(sorted(MODEL_SHAPES))}")
        return value
    if isinstance(base, Mapping):
        if not isinstance(value, Mapping):
            raise WorkloadError(f"workload param {key!r} must be an object like the preset's")
        return {**base, **{k: _check_param(f"{key}.{k}", base.get(k, _missing(key, k)), v)
                           for k, v in value.items()}}
    raise WorkloadError(f"workload param {key!r} cannot be changed over the API")


def _missing(key: str, sub: str) -> Any:
    raise WorkloadError(f"workload param {key!r} has no field {sub!r}")


def _resolve_workload(target: Any, preset: str | None, params: Mapping[str, Any]) -> Workload:
    presets = target.named_workloads()
    if preset is None:
        wl = target.default_workload()
    elif preset in presets:
        wl = presets[preset]
    else:
        raise WorkloadError(f"unknown workload {preset!r} for {target.name}; presets: "
                            f"{', '.join(sorted(presets))}")
    overrides: dict[str, Any] = {}
    for key, value in params.items():
        if key not in wl.params:
            raise WorkloadError(f"workload {wl.name!r} has no param {key!r}; its params: "
                                f"{', '.join(sorted(wl.params))}")
        overrides[key] = _check_param(key, wl.params[key], value)
    wl = wl.with_params(**overrides) if overrides else wl
    target.check_workload(wl)
    return wl


def default_study_name(target: str, wl: Workload, slo: str, objective: str) -> str:
    """The name ``advisor tune`` derives for the same study (so the CLI can ``--resume`` it)."""
    import hashlib

    digest = hashlib.sha256(f"{wl.spec_hash}|{slo}|{objective}".encode()).hexdigest()[:6]
    return f"{target}-{wl.name}-{digest}"


def validate_study_request(request: Mapping[str, Any]) -> ValidatedStudy:
    """Check a study request (the fields of ``POST /v1/studies``) and build the driver's spec.

    Raises an :class:`AdvisorError` subclass naming the broken field.
    """
    target_name = str(request["target"])
    target = get_target(target_name)
    reported = target.reported_metrics()
    slo = requested_slo(request.get("slo") or target.default_slo)
    slo.check_metrics(target_name, reported)
    objective = Objective.parse(request.get("objective") or target.default_objective)
    if objective.metric not in reported:
        raise StudyError(f"target {target_name!r} does not report the objective metric "
                         f"{objective.metric!r}; its metrics: {', '.join(sorted(reported))}")
    workload = request.get("workload") or {}
    wl = _resolve_workload(target, workload.get("preset"), workload.get("params") or {})
    fixed = _check_fixed(target.space(), request.get("fixed") or {})
    enqueued = complete_enqueued(target.space(), fixed, request.get("enqueue") or [])
    if enqueued and request.get("resume"):
        raise StudyError("`enqueue` applies when a study starts; it cannot go with `resume`")
    n_trials = int(request.get("trials", 30))
    if not 1 <= n_trials <= MAX_TRIALS:
        raise StudyError(f"`1 <= trials <= {MAX_TRIALS}` must hold, but got trials={n_trials}")
    sampler = str(request.get("sampler", DEFAULT_SAMPLER))
    if sampler not in SAMPLERS:
        raise StudyError(f"unknown sampler {sampler!r}; choose one of {', '.join(SAMPLERS)}")
    name = request.get("name") or default_study_name(target_name, wl, str(slo), str(objective))
    if request.get("name"):
        check_study_name(name)
    seed = request.get("seed")
    startup = request.get("startup_trials")
    if startup is not None and request.get("resume"):
        raise StudyError("`startup_trials` applies when a study starts; it cannot go with "
                         "`resume`")
    paired = request.get("paired_repeats")
    warm = request.get("warm_start", True)
    if not isinstance(warm, bool):
        raise InputError(f"`warm_start` must be true or false, but got {warm!r}")
    sweep = request.get("search_sweep", False)
    if not isinstance(sweep, bool):
        raise InputError(f"`search_sweep` must be true or false, but got {sweep!r}")
    spec = StudySpec(name=name, target=target_name, slo=slo, objective=objective, workload=wl,
                     n_trials=n_trials, sampler=sampler, seed=None if seed is None else int(seed),
                     startup_trials=None if startup is None else int(startup),
                     include_default=bool(request.get("include_default", True)), fixed=fixed,
                     enqueued=tuple(enqueued),
                     paired_repeats=None if paired is None else int(paired), search_sweep=sweep)
    normalised = {
        "target": target_name, "slo": str(slo), "objective": str(objective),
        "workload": wl.spec, "fixed": fixed, "enqueue": enqueued, "trials": n_trials,
        "sampler": sampler, "startup_trials": spec.startup_trials,
        "seed": spec.seed, "include_default": spec.include_default, "name": name,
        "resume": bool(request.get("resume", False)), "paired_repeats": spec.paired_repeats,
        "warm_start": warm, "search_sweep": sweep,
    }
    return ValidatedStudy(spec, bool(request.get("resume", False)), normalised)


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
        search_sweep=bool(request.get("search_sweep", False)))
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


def _leave_consistent(store: TrialStore, study_name: str) -> None:
    """After a cancel or crash of this job process: no trial of the study it ran stays running,
    and the study is marked interrupted (``advisor tune --resume`` continues it)."""
    study = store.get_study(study_name)
    if study is None:
        return
    for rec in store.trials_of_study(study.id or 0, [TrialStatus.RUNNING]):
        if rec.pid == os.getpid():
            store.fail_trial(rec.id or 0, status=TrialStatus.INTERRUPTED,
                             error_type="interrupted", error="the study's job was cancelled")
    current = store.get_study_by_id(study.id or 0)
    if current is not None and current.status == StudyStatus.RUNNING:
        store.set_study_status(study.id or 0, StudyStatus.INTERRUPTED)


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
            driver.resume(spec.name, spec.n_trials, paired_repeats=spec.paired_repeats)
        else:
            # Requests stored before `warm_start` existed get the API's default.
            warm = job.request.get("warm_start", True)
            driver.run(spec, on_created=warm_start_hook(driver, spec) if warm else None)
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
            _leave_consistent(store, spec_name)
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

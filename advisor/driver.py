"""The study driver: Optuna ask/tell over isolated trials, every trial stored, resumable.

One loop, written once: ask Optuna for a config, record the trial as running, run it in a child
process, store the measurement with its SLO margins, hand the margins to the sampler as
constraints (``<= 0`` means met) and tell the objective — all Optuna calls through
advisor/optuna_bridge.py. A killed driver leaves at most one running trial; ``resume`` fails it as
interrupted and re-queues its config (advisor/recovery.py). The study's settings are one stored
document (advisor/study_spec.py), read back the same way by every process that opens it.
One driver runs a study at a time: it holds the study's lease (knowledge/leases.py) from before
the study is created or recovered until it stops, so recovery never touches a live driver's trial.

When the search's budget is spent and a feasible best other than the engine default exists, the
study re-measures the two interleaved (``paired_repeats`` times each, advisor/pairing.py) and
stores their paired comparison with the study; a measurement whose validity label is unusable
(knowledge/validity.py) is stored ``invalid`` and told to Optuna as failed.

A study may name co-measured studies (``StudySpec.co_measured``): each trial's config is also
measured under their workloads in the same trial process — for a server target, on the same engine
start, which is what a trial mostly costs — and recorded as a trial of that study. The study's own
sampler chooses every config; the co-measured studies only record, and are resumed through it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import optuna
from optuna.exceptions import StorageInternalError
from sqlalchemy.exc import SQLAlchemyError

from advisor import __version__, pairing, recovery
from advisor.budget import SEARCH, BudgetTally
from advisor.disk_reserve import DiskReserve
from advisor.errors import (
    AdvisorError,
    StoreError,
    StudyError,
    TrialTakenError,
)
from advisor.failure_gate import PROVENANCE_KEY as _GATE_KEY
from advisor.failure_gate import FailureGate
from advisor.isolation import SKIPPED, SweepRequest, TrialOutcome, run_isolated
from advisor.optuna_bridge import (
    DASHBOARD_CONSTRAINTS_KEY,
    OptunaBridge,
    describe_optuna_study,
    optuna_storage,
    tell_constraints,
    trial_details,
)
from advisor.samplers import DEFAULT_SAMPLER, SAMPLERS, STARTUP_TRIALS
from advisor.sampling import suggest_config, swept_params
from advisor.settings import Settings
from advisor.study_spec import (
    CO_STUDIES_KEY,
    CO_WITH_KEY,
    WARM_START_PENDING,
    CoMeasured,
    StoredStudy,
    StudySpec,
    co_studies_of,
    complete_enqueued,
    gate_settings,
)
from advisor.swept_trials import chosen_point
from advisor.trial_records import FRESH_BUILD, config_hash, new_trial_record, trial_hardware_key
from knowledge import SLOMarginRecord, StudyRecord, TrialRecord, TrialStatus, TrialStore
from knowledge.failures import DEFAULT_THRESHOLD, PREDICTED_FAILURE
from knowledge.leases import StudyLease
from knowledge.models import StudyStatus
from knowledge.queries import best_feasible
from knowledge.validity import invalid_reason, is_usable
from objectives import SLO, Workload
from objectives.hardware import fingerprint
from objectives.registry import get_target
from objectives.target import Target
from objectives.workload import canonical_json

__all__ = ["DASHBOARD_CONSTRAINTS_KEY", "DEFAULT_SAMPLER", "SAMPLERS", "CoMeasured", "JoinResult",
           "StorageFailure", "StudyDriver", "StudyReporter", "StudyResult", "StudySpec",
           "complete_enqueued", "describe_optuna_study", "failure_streak", "is_storage_error",
           "optuna_storage", "tell_constraints"]

log = logging.getLogger(__name__)
_DEFAULT_ROLE = "engine-default"
_ENQUEUED_ROLE = "enqueued"
#: Share of the trial timeout a search sweep may spend starting new settings.
_SWEEP_BUDGET_SHARE = 0.5
#: Times a shared-study worker asks again when the trial it was handed is another worker's.
_CLAIM_ATTEMPTS = 20


#: What a full disk or a broken store raises, through the store or through Optuna's storage.
_STORAGE_ERRORS: tuple[type[BaseException], ...] = (
    StoreError, SQLAlchemyError, optuna.exceptions.StorageInternalError)
#: OS errors that mean the store's disk cannot take writes.
_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO})


class StorageFailure(StoreError):
    """The store failed mid-study; the message says what was left and how to continue."""


def is_storage_error(exc: BaseException) -> bool:
    """Whether ``exc`` says the store (or its disk) failed, rather than a trial or a bug."""
    return isinstance(exc, _STORAGE_ERRORS) or (
        isinstance(exc, OSError) and exc.errno in _DISK_ERRNOS)


#: SQLAlchemy's code for "Can't reconnect until invalid transaction is rolled back": raised on a
#: connection whose server went away inside a transaction, once it is used again.
_PENDING_ROLLBACK_CODE = "8s2b"


def _first_line(exc: BaseException) -> str:
    """The cause of a storage error in one line (SQLAlchemy's messages carry the statement)."""
    cause: BaseException = exc
    while cause.__cause__ is not None and isinstance(cause, StoreError | StorageInternalError):
        cause = cause.__cause__
    if getattr(cause, "code", None) == _PENDING_ROLLBACK_CODE:
        # Its own text asks the caller to roll back; what the user needs is what happened (seen
        # when PostgreSQL ended every connection to a database made read-only mid-study).
        return "the connection to the store was lost inside a transaction"
    orig = getattr(cause, "orig", None)  # the driver's own error, without SQLAlchemy's framing
    text = str(orig if orig is not None else cause).strip().splitlines()
    return (text[0] if text else type(cause).__name__).removeprefix("trial store error: ")


@dataclass
class StudyResult:
    """Summary of a study after the driver stopped."""

    study: StudyRecord
    trials: list[TrialRecord] = field(default_factory=list)
    best: TrialRecord | None = None
    default_trial: TrialRecord | None = None
    #: The results of the studies measured alongside this one.
    co_measured: list[StudyResult] = field(default_factory=list)
    #: Its trials against its search budget: search trials, closing repeats, gate skips.
    tally: BudgetTally | None = None

    def count(self, status: str) -> int:
        return sum(t.status == status for t in self.trials)

    @property
    def n_feasible(self) -> int:
        return sum(bool(t.feasible) for t in self.trials if t.status == TrialStatus.COMPLETE)


@dataclass(frozen=True)
class JoinResult:
    """What one worker did in a shared study: trials it ran, and why it stopped
    (``"budget"``: every slot taken; ``"failing"``: the study's recent trials all failed)."""

    trials_run: int
    stopped_because: str


def failure_streak(store: TrialStore, study_id: int) -> int:
    """How many of the study's most recently finished trials failed in a row. A config the
    failure gate skipped neither counts nor breaks the streak: it says nothing about whether the
    engine still starts."""
    finished = [t for t in store.trials_of_study(study_id, list(TrialStatus.FINISHED))
                if t.finished_at is not None and t.error_type != PREDICTED_FAILURE]
    finished.sort(key=lambda t: t.finished_at, reverse=True)  # type: ignore[arg-type,return-value]
    streak = 0
    for t in finished:
        if t.status != TrialStatus.FAILED:
            break
        streak += 1
    return streak


class StudyReporter(Protocol):
    """Progress callbacks (the CLI draws a progress bar from them). ``started`` gets the search
    trials done and the search budget (advisor/budget.py); ``trial_finished`` the trials this
    run has finished so far, every kind counted (search, paired repeats, gate skips)."""

    def preparing(self, message: str) -> None: ...
    def started(self, study: StudyRecord, done: int, total: int) -> None: ...
    def trial_finished(self, trial: TrialRecord, done: int, best: TrialRecord | None) -> None: ...
    def finished(self, result: StudyResult) -> None: ...


class _SilentReporter:
    def preparing(self, message: str) -> None:
        log.info(message)

    def started(self, study: StudyRecord, done: int, total: int) -> None:
        pass

    def trial_finished(self, trial: TrialRecord, done: int, best: TrialRecord | None) -> None:
        pass

    def finished(self, result: StudyResult) -> None:
        pass


@dataclass(frozen=True)
class _Companion:
    """A co-measured study while the driver runs: its spec, stored row and Optuna study."""

    spec: StudySpec
    study: StudyRecord
    ostudy: optuna.Study


def default_agrees(default: Mapping[str, Any], fixed: Mapping[str, Any]) -> bool:
    """Whether the engine default is consistent with a study's fixed knobs (only then is it
    measured in that study): every fixed knob the default sets has the fixed value."""
    return all(default.get(k, v) == v for k, v in fixed.items())


class StudyDriver:
    """Runs and resumes studies against a :class:`TrialStore`."""

    def __init__(self, store: TrialStore, settings: Settings,
                 reporter: StudyReporter | None = None) -> None:
        self.store, self.settings = store, settings
        self.reporter: StudyReporter = reporter or _SilentReporter()
        self._leases: list[StudyLease] = []
        #: The failure gate of each study this driver runs trials of, by study name.
        self._gates: dict[str, FailureGate] = {}
        #: Everything this driver says to Optuna goes through it.
        self.bridge = OptunaBridge(store.url)
        #: The knobs each trial of a study sweeps (its stored settings), by study name.
        self._swept: dict[str, tuple[str, ...]] = {}
        #: The trial being run: asked of Optuna, and its store row once written (so a storage
        #: error can leave it interrupted in both).
        self._asked: tuple[optuna.Study, optuna.Trial] | None = None
        self._running: TrialRecord | None = None
        #: Space held beside a SQLite store, freed to close a study when its disk fills.
        self._reserve = DiskReserve(store.url)
        optuna.logging.set_verbosity(optuna.logging.WARNING)

    # entry points ----------------------------------------------------------------------------

    def run(self, spec: StudySpec, *,
            on_created: Callable[[StudyRecord], None] | None = None) -> StudyResult:
        """Start a new study named ``spec.name`` and run it to ``spec.n_trials`` trials, holding
        its lease (:meth:`lease`) throughout. ``on_created`` is called once the study exists
        with its engine default and enqueued configs queued, before the first trial: what it
        queues (a warm start) runs right behind them."""
        with self.lease(spec.name):
            study, target, ostudy, companions = self._start(spec)
            if on_created is not None:
                on_created(study)
            return self._loop(spec, study, target, ostudy, companions)

    @contextlib.contextmanager
    def lease(self, name: str) -> Iterator[StudyLease]:
        """Hold the lease on study ``name`` (knowledge/leases.py) while the block runs: one
        driver per study. :meth:`run` and :meth:`resume` take it themselves; whoever creates,
        recovers or enqueues into a study that workers then :meth:`join` (a sweep cell) takes it
        around all of that. Raises :class:`StudyBusyError` naming the live holder."""
        with StudyLease(self.store, name, ttl_s=self.settings.study_lease_ttl_s) as held:
            self._reserve.hold()
            self._leases.append(held)
            try:
                yield held
            finally:
                self._leases.remove(held)

    def _check_leases(self) -> None:
        """Stop when a lease this driver holds was taken over (it was frozen past its TTL)."""
        for held in self._leases:
            held.check()

    def create(self, spec: StudySpec) -> StudyRecord:
        """Create the study ``spec.name`` with its queued configs (engine default, enqueued ones)
        and its workload prepared, without running a trial: workers then :meth:`join` it."""
        if spec.co_measured:
            raise StudyError("a study run by several workers cannot have co-measured studies")
        return self._start(spec)[0]

    def _start(self, spec: StudySpec
               ) -> tuple[StudyRecord, Target, optuna.Study, list[_Companion]]:
        if (existing := self.store.get_study(spec.name)) is not None:
            n = len(self.store.trials_of_study(existing.id or 0))
            raise StudyError(f"a study named {spec.name!r} already exists ({n} trials); pass "
                             "--resume to continue it, or choose another --name")
        for co in spec.co_measured:
            if self.store.get_study(co.name) is not None:
                raise StudyError(f"a study named {co.name!r} already exists; choose another "
                                 "--name for the study it would be measured alongside")
        target = self._check_target(spec)
        # Checked before anything is stored: a bad config fails the command, not a trial.
        enqueued = complete_enqueued(target.space(), spec.fixed, spec.enqueued)
        provenance = self._prepare(target, spec.workload)
        co_provenance = [self._prepare(target, co.workload) for co in spec.co_measured]
        # The provenance keys and Optuna attributes below are views of the study's settings
        # document for the CLI, the failure model and optuna-dashboard.
        if spec.co_measured:
            provenance = {**provenance, CO_STUDIES_KEY: [co.name for co in spec.co_measured]}
        provenance = {**provenance, _GATE_KEY: gate_settings(spec)}
        # Fixed knobs are never swept; co-measured workloads and a sweep do not mix in a trial.
        sweepable = sorted(target.swept_knobs() - set(spec.fixed))
        swept = tuple(sweepable) if spec.search_sweep and not spec.co_measured else ()
        # Every setting is resolved now and kept by the study: a resume runs on what it started
        # with, whatever the environment's defaults are by then.
        spec = dataclasses.replace(
            spec, startup_trials=spec.startup_trials or STARTUP_TRIALS,
            paired_repeats=(self.settings.paired_repeats if spec.paired_repeats is None
                            else spec.paired_repeats))
        # A warm start is pending from the study's creation until its configs are queued
        # (advisor/warm_start.py): a process killed in between leaves it for the resume.
        stored = StoredStudy(spec, swept, tuple(co.name for co in spec.co_measured),
                             search_trials=spec.n_trials,
                             warm_start=WARM_START_PENDING if spec.warm_start else None)
        study = self._create_study(stored, provenance)
        companions = []
        for co, facts in zip(spec.co_measured, co_provenance, strict=True):
            co_spec = dataclasses.replace(spec, name=co.name, workload=co.workload,
                                          co_measured=())
            co_study = self._create_study(StoredStudy(co_spec, measured_with=spec.name),
                                          {**facts, CO_WITH_KEY: spec.name})
            companions.append(_Companion(co_spec, co_study,
                                         self.bridge.recording_study(co_spec)))
        ostudy = self._sampling_study(spec, study)
        self.bridge.show_settings(ostudy, stored)
        self._swept[spec.name] = swept
        default = target.space().default_config()
        # With fixed knobs the engine default is measured only where it agrees with them.
        if spec.include_default and default_agrees(default, spec.fixed):
            # default_config() holds exactly the active knobs, which is what the sampler replays.
            self.bridge.enqueue(ostudy, default, _DEFAULT_ROLE)
        for config in enqueued:
            self.bridge.enqueue(ostudy, config, _ENQUEUED_ROLE)
        return study, target, ostudy, companions

    def _create_study(self, stored: StoredStudy, provenance: dict[str, Any]) -> StudyRecord:
        spec = stored.spec
        return self.store.create_study(StudyRecord(
            name=spec.name, target=spec.target, slo=str(spec.slo),
            objective_metric=spec.objective.metric, objective_direction=spec.objective.direction,
            workload_spec=spec.workload.spec, workload_hash=spec.workload.spec_hash,
            sampler=spec.sampler, seed=spec.seed, n_trials=spec.n_trials,
            hardware_key=trial_hardware_key(spec.target, fingerprint()),
            advisor_version=__version__, data_provenance=provenance, spec=stored.to_document(),
        ))

    def _stored(self, study: StudyRecord) -> StoredStudy:
        """The settings of ``study``; a study an earlier release created (no settings document)
        gets one, from its row, provenance and Optuna attributes, on this first read."""
        if study.spec is None:
            stored = StoredStudy.of(study, self.bridge.user_attrs(study.name) or {})
            study = self.store.adopt_study_spec(study.id or 0, stored.to_document())
        stored = StoredStudy.of(study)
        self._swept[study.name] = stored.swept
        return stored

    def resume(self, name: str, n_trials: int | None = None, *,
               paired_repeats: int | None = None, failure_gate: bool | None = None,
               failure_threshold: float | None = None,
               on_opened: Callable[[StudyRecord], None] | None = None) -> StudyResult:
        """Continue the study ``name``: recover trials a killed driver left running, then run on
        until its search budget is spent (``n_trials`` search trials; None: the study's own) and
        its closing paired repeats are measured (advisor/budget.py). ``paired_repeats``,
        ``failure_gate`` and ``failure_threshold`` change the study's recorded settings from
        here on (None: keep them). ``on_opened`` is called once the study is recovered, before
        its first trial (a warm start left pending by a killed creation is queued there)."""
        with self.lease(name):
            spec, study, target, ostudy, companions = self._open(name, n_trials)
            changes: dict[str, Any] = {}
            provenance: dict[str, Any] = {}
            if paired_repeats is not None and paired_repeats != spec.paired_repeats:
                spec = dataclasses.replace(spec, paired_repeats=paired_repeats)
                changes["paired_repeats"] = paired_repeats
            if failure_gate is not None or failure_threshold is not None:
                spec = dataclasses.replace(
                    spec, failure_gate=spec.failure_gate if failure_gate is None
                    else failure_gate, failure_threshold=failure_threshold
                    if failure_threshold is not None else spec.failure_threshold)
                changes[_GATE_KEY] = provenance[_GATE_KEY] = gate_settings(spec)
            if changes:
                study = self.store.update_study_spec(study.id or 0, changes,
                                                     provenance=provenance or None)
            if on_opened is not None:
                on_opened(study)
            return self._loop(spec, study, target, ostudy, companions)

    def recover(self, name: str, n_trials: int | None = None) -> StudyRecord:
        """Recover the study ``name`` after a killed driver or worker (what :meth:`resume` does
        before its loop), optionally setting its search budget; no trial is run. The caller
        holds the study's :meth:`lease`."""
        return self._open(name, n_trials)[1]

    def reconcile(self, name: str) -> bool:
        """Reconcile Optuna with the store for the idle study ``name`` whose process died (what
        :meth:`resume` does first, without preparing its workload or running a trial): trials
        Optuna still says are running are told, their configs re-queued when never measured,
        their rows interrupted. Returns whether there was anything to reconcile; raises
        :class:`StudyBusyError` when a live driver holds the study, :class:`StudyError` when a
        trial of it still runs."""
        study = self.store.get_study(name)
        if study is None or study.status == StudyStatus.IMPORTED or (
                not self.bridge.running_count(name)
                and not self.store.count_trials(study.id or 0, [TrialStatus.RUNNING])):
            return False
        with self.lease(name):
            stored = self._stored(study)
            if stored.measured_with is not None:
                return False  # reconciled with the study it is measured alongside
            spec = stored.resume_spec()
            ostudy = self._sampling_study(spec, study)
            for co_study in [self.store.get_study(co) for co in stored.co_studies]:
                if co_study is not None:
                    co_spec = self._stored(co_study).resume_spec()
                    recovery.recover_recording(self.store, self.bridge,
                                               self.bridge.recording_study(co_spec), co_study)
            recovery.recover_study(self.store, self.bridge, ostudy, study, spec.slo,
                                   heartbeat_interval_s=self.settings.heartbeat_interval_s)
            if study.status == StudyStatus.RUNNING:
                self.store.set_study_status(study.id or 0, StudyStatus.INTERRUPTED)
            return True

    def search_budget(self, study: StudyRecord) -> int:
        """The search budget of ``study`` (its settings' ``search_trials``; for a document
        written before that was kept, its budget less the paired repeats it measured)."""
        stored = StoredStudy.of(study) if study.spec is not None else None
        if stored is not None and stored.search_trials is not None:
            return stored.search_trials
        trials = self.store.trials_of_study(study.id or 0, list(TrialStatus.FINISHED))
        return max(1, study.n_trials - sum(pairing.is_paired(t) for t in trials))

    def tally(self, study: StudyRecord) -> BudgetTally:
        """How the study's finished trials count against its search budget."""
        return BudgetTally.of(self.search_budget(study),
                              self.store.trials_of_study(study.id or 0,
                                                         list(TrialStatus.FINISHED)))

    def _open(self, name: str, n_trials: int | None
              ) -> tuple[StudySpec, StudyRecord, Target, optuna.Study, list[_Companion]]:
        study = self.store.get_study(name)
        if study is None:
            raise StudyError(f"no study named {name!r} to resume; run without --resume to start it")
        if study.status == StudyStatus.IMPORTED:
            raise StudyError(f"study {name!r} was imported from another store and cannot be "
                             "resumed here (its Optuna history stayed there); start a new study")
        stored = self._stored(study)
        if (leader := stored.measured_with) is not None:
            raise StudyError(f"study {name!r} is measured alongside study {leader!r}; resume "
                             f"{leader!r} and both go on")
        spec = stored.resume_spec()
        target = self._check_target(spec)
        self._prepare(target, spec.workload)
        companions = []
        for co_name in stored.co_studies:
            co_study = self.store.get_study(co_name)
            if co_study is None:
                raise StudyError(f"study {name!r} is measured with study {co_name!r}, which is "
                                 "missing from this store")
            co_spec = self._stored(co_study).resume_spec()
            self._prepare(target, co_spec.workload)
            companion = _Companion(co_spec, co_study, self.bridge.recording_study(co_spec))
            recovery.recover_recording(self.store, self.bridge, companion.ostudy, co_study)
            companions.append(companion)
        spec = dataclasses.replace(spec, co_measured=tuple(
            CoMeasured(c.spec.name, c.spec.workload) for c in companions))
        ostudy = self._sampling_study(spec, study)
        recovery.recover_study(self.store, self.bridge, ostudy, study, spec.slo,
                               heartbeat_interval_s=self.settings.heartbeat_interval_s)
        if n_trials is not None and n_trials != self.search_budget(study):
            study = self.store.update_study_spec(study.id or 0, {"search_trials": n_trials})
        study = self._sync_budget(study, ostudy)
        companions = [c if c.study.n_trials == study.n_trials else dataclasses.replace(
            c, study=self._update_n_trials(c.study, study.n_trials)) for c in companions]
        return dataclasses.replace(spec, n_trials=study.n_trials), study, target, ostudy, \
            companions

    def _sync_budget(self, study: StudyRecord, ostudy: optuna.Study) -> StudyRecord:
        """Make the study's store budget (the column claims read) its search budget plus the
        slots its repeats (measured and queued) and free skips take."""
        tally = self.tally(study)
        waiting = pairing.pending(self.bridge.waiting_attrs(ostudy))
        total = tally.search_trials + tally.repeats_done + tally.skipped_free + waiting
        return study if total == study.n_trials else self._update_n_trials(study, total)

    def join(self, name: str, *, worker: int = 0, max_consecutive_failures: int | None = None
             ) -> JoinResult:
        """Run trials of the existing study ``name`` beside other workers until its budget is
        taken (trials finished or running anywhere) or it keeps failing.

        Workers share the study through the database: each trial claims a slot of the budget in
        the store (:meth:`TrialStore.claim_trial`) before it runs, so the budget is never
        overshot; Optuna's sampler sees every worker's trials through the shared storage. Nothing
        is recovered here: whoever starts the workers calls :meth:`recover` first, so a worker
        never fails a trial that another worker is running.
        """
        spec, study, ostudy = self.shared_study(name, worker=worker)
        target = self._check_target(spec)
        self._prepare(target, spec.workload)
        space = target.space()
        ran = 0
        self.store.set_study_status(study.id or 0, StudyStatus.RUNNING)
        while True:
            taken = self.store.count_trials(study.id or 0,
                                            [*TrialStatus.FINISHED, TrialStatus.RUNNING])
            if taken >= study.n_trials:
                return JoinResult(ran, "budget")
            if (max_consecutive_failures is not None
                    and failure_streak(self.store, study.id or 0) >= max_consecutive_failures):
                return JoinResult(ran, "failing")
            rec = self._run_one(spec, study, target, space, ostudy, [], budget=study.n_trials)
            if rec is None:
                return JoinResult(ran, "budget")
            if rec.error_type == PREDICTED_FAILURE:  # a free skip adds its slot back
                study = self._sync_budget(study, ostudy)
            ran += 1
            self.reporter.trial_finished(rec, ran, None)

    def shared_study(self, name: str, *, worker: int = 0
                     ) -> tuple[StudySpec, StudyRecord, optuna.Study]:
        """The spec, stored row and Optuna study of the existing study ``name`` for one of
        several samplers sharing it (each ``worker`` gets its own seed, so samplers that start
        together do not replay one sequence side by side)."""
        study = self.store.get_study(name)
        if study is None:
            raise StudyError(f"no study named {name!r}")
        stored = self._stored(study)
        if stored.co_studies or stored.measured_with:
            raise StudyError(f"study {name!r} has co-measured studies; it runs in one driver")
        spec = stored.resume_spec()
        if spec.seed is not None:
            spec = dataclasses.replace(spec, seed=spec.seed + 7919 * worker)
        return spec, study, self._sampling_study(spec, study)

    def enqueue(self, name: str, configs: Sequence[Mapping[str, Any]], *, role: str,
                attrs: Mapping[str, Any] | None = None, extend_budget: bool = False
                ) -> StudyRecord:
        """Queue ``configs`` in the existing study ``name`` (checked against its space; partial
        ones completed with the engine defaults). With ``extend_budget`` its trial budget grows
        by as many, so they run in addition to the trials it has (a sweep's repeat runs);
        otherwise they are measured first within it (a sweep's warm start). ``attrs`` (keys
        ``advisor_*``) are stored in each trial's details without the prefix."""
        study = self.store.get_study(name)
        if study is None:
            raise StudyError(f"no study named {name!r}")
        spec = self._stored(study).resume_spec()
        target = self._check_target(spec)
        ostudy = self._sampling_study(spec, study)
        # A config that contradicts the study's fixed knobs is refused, never run half-fixed.
        checked = complete_enqueued(target.space(), spec.fixed, configs)
        for config in checked:
            self.bridge.enqueue(ostudy, config, role, attrs)
        return (self._update_n_trials(study, study.n_trials + len(checked)) if extend_budget
                else study)

    def held_configs(self, name: str) -> set[str]:
        """The configs study ``name`` holds, queued or tried (canonical JSON), so a late queue
        (a warm start finished on resume) adds none twice."""
        study = self.store.get_study(name)
        if study is None:
            raise StudyError(f"no study named {name!r}")
        ostudy = self._sampling_study(self._stored(study).resume_spec(), study)
        return ({canonical_json(t.config) for t in self.store.trials_of_study(study.id or 0)}
                | {canonical_json(c) for c in self.bridge.waiting_configs(ostudy)})

    # setup -----------------------------------------------------------------------------------

    def _check_target(self, spec: StudySpec) -> Target:
        target = get_target(spec.target)
        reported = target.reported_metrics()
        spec.slo.check_metrics(spec.target, reported)
        if spec.objective.metric not in reported:
            raise StudyError(f"target {spec.target!r} does not report the objective metric "
                             f"{spec.objective.metric!r}")
        return target

    def _prepare(self, target: Target, workload: Workload) -> dict[str, Any]:
        target.check_available()
        self.reporter.preparing(f"preparing workload {workload.name!r} for {target.name}")
        return target.prepare(workload, self.settings.cache_dir, self.reporter.preparing)

    def _sampling_study(self, spec: StudySpec, study: StudyRecord) -> optuna.Study:
        # On resume, offset the seed so the sampler does not replay its start-up sequence.
        done = len(self.store.trials_of_study(study.id or 0))
        return self.bridge.sampling_study(spec, seed_offset=done)

    @staticmethod
    def _spec_of(study: StudyRecord, n_trials: int | None) -> StudySpec:
        """The spec a resume of ``study`` runs on, from its stored settings (for a study an
        earlier release created and no driver opened since: those of its row and provenance)."""
        return StoredStudy.of(study).resume_spec(n_trials)

    def _update_n_trials(self, study: StudyRecord, n_trials: int) -> StudyRecord:
        return self.store.update_study_spec(study.id or 0, {"n_trials": n_trials})

    # the loop --------------------------------------------------------------------------------

    def _loop(self, spec: StudySpec, study: StudyRecord, target: Target,
              ostudy: optuna.Study, companions: list[_Companion]) -> StudyResult:
        """Run search trials until the search budget is spent (gate skips free up to their
        share, advisor/budget.py), then the closing paired repeats; the store budget follows."""
        space = target.space()
        tally = self.tally(study)
        done = tally.slots_used
        best = best_feasible(self.store.trials_of_study(study.id or 0, [TrialStatus.COMPLETE]),
                             spec.objective.direction, exclude=pairing.is_paired)
        self.reporter.started(study, tally.search_done, tally.search_trials)
        studies = [study, *(c.study for c in companions)]
        for one in studies:
            self.store.set_study_status(one.id or 0, StudyStatus.RUNNING)
        try:
            while True:
                while (tally.search_done < tally.search_trials
                       or pairing.pending(self.bridge.waiting_attrs(ostudy))):
                    self._check_leases()
                    rec = self._run_one(spec, study, target, space, ostudy, companions)
                    assert rec is not None  # no budget claim: always runs
                    done += 1
                    if tally.add(rec) == SEARCH:
                        best = best_feasible([*([best] if best else []), rec],
                                             spec.objective.direction)
                    study = self._sync_budget(study, ostudy)
                    self.reporter.trial_finished(rec, done, best)
                # The search is over: re-measure its best beside the default (once per block).
                study = self._queue_paired(spec, study, target, ostudy, done)
                if not pairing.pending(self.bridge.waiting_attrs(ostudy)):
                    break
            for c in companions:
                if c.study.n_trials != study.n_trials:
                    self._update_n_trials(c.study, study.n_trials)
            self._store_paired(study, companions)
        except BaseException as exc:
            for one in studies:
                # A store that just failed may refuse this too: the error that stopped the
                # study is the one to report (a resume repairs the status).
                with contextlib.suppress(*_STORAGE_ERRORS):
                    self.store.set_study_status(one.id or 0, StudyStatus.INTERRUPTED)
            if is_storage_error(exc) and not isinstance(exc, StorageFailure):
                raise self._storage_failed(spec, study, exc) from exc
            raise
        for one in studies:
            self.store.set_study_status(one.id or 0, StudyStatus.FINISHED)
        result = self.result(study.name)
        self.reporter.finished(result)
        return result

    def _queue_paired(self, spec: StudySpec, study: StudyRecord, target: Target,
                      ostudy: optuna.Study, done: int) -> StudyRecord:
        """After the search: queue the incumbent best and the engine default interleaved,
        ``paired_repeats`` times each, unless that block is already queued or measured; then
        make the budget cover every queued re-measurement. Records why when nothing is paired."""
        repeats = (self.settings.paired_repeats if spec.paired_repeats is None
                   else spec.paired_repeats)
        fixed = spec.fixed
        default = target.space().default_config()
        trials = self.store.trials_of_study(study.id or 0)
        best = pairing.incumbent(trials, spec.objective)
        engine_default = next((t for t in trials if t.details.get("role") == _DEFAULT_ROLE),
                              None)
        skip: str | None = None
        if repeats == 0:
            skip = "paired re-measurement is off (paired_repeats=0)"
        elif best is None:
            skip = "no measured config met the SLO"
        elif best.config == default:
            skip = "the best feasible config is the engine default"
        elif not default_agrees(default, fixed):
            skip = f"the engine default contradicts the study's fixed knobs {dict(fixed)}"
        elif engine_default is not None and engine_default.status == TrialStatus.FAILED:
            skip = f"the engine default failed ({engine_default.error_type})"
        if skip is not None:
            if pairing.latest_block(trials, [pairing.BEST, pairing.DEFAULT]) is None:
                study = self.store.update_provenance(study.id or 0, {pairing.PROVENANCE_KEY: {
                    "status": "skipped", "x": pairing.BEST, "y": pairing.DEFAULT,
                    "reason": skip}})
        else:
            assert best is not None
            arms = [pairing.Arm(pairing.BEST, best.config), pairing.Arm(pairing.DEFAULT, default)]
            queued = pairing.queue_interleaved(self, study.name, arms, repeats,
                                               extend_budget=False)
            if queued.queued:
                self.reporter.preparing(
                    f"re-measuring the best config (trial #{best.number}) and the engine "
                    f"default {repeats}x each, interleaved, for a paired comparison")
        return self._sync_budget(study, ostudy)

    def _store_paired(self, study: StudyRecord, companions: Sequence[_Companion]) -> None:
        """Store the best-vs-default comparison of the study's latest block, and of each
        co-measured study from its records of the same trials."""
        for one in [study, *(c.study for c in companions)]:
            trials = self.store.trials_of_study(one.id or 0)
            block = pairing.latest_block(trials, [pairing.BEST, pairing.DEFAULT])
            if block is None:
                continue
            current = self.store.get_study_by_id(one.id or 0) or one
            result = pairing.outcome(trials, current, block=block)
            if one is not study:
                result["context"] = {**result.get("context", {}), "best_of_study": study.name}
            self.store.update_provenance(one.id or 0, {pairing.PROVENANCE_KEY: result})

    def _run_one(self, spec: StudySpec, study: StudyRecord, target: Target, space: Any,
                 ostudy: optuna.Study, companions: list[_Companion], budget: int | None = None
                 ) -> TrialRecord | None:
        """Ask, run, store and tell one trial. With ``budget`` the trial first claims a slot of
        it in the store (shared studies); ``None`` when none is left."""
        for _ in range(_CLAIM_ATTEMPTS):
            try:
                return self._ask_and_run(spec, study, target, space, ostudy, companions, budget)
            except TrialTakenError as exc:
                # Another worker was handed the same queued trial and runs it: leave the
                # Optuna trial to it and ask for another.
                log.info("%s; asking for another", exc)
            except Exception as exc:
                if not is_storage_error(exc) or isinstance(exc, StorageFailure):
                    raise
                raise self._storage_failed(spec, study, exc) from exc
            finally:
                self._asked = self._running = None
        raise StudyError(f"{_CLAIM_ATTEMPTS} trials in a row were claimed by other workers "
                         f"of study {spec.name!r} before this one could claim them")

    def _ask_and_run(self, spec: StudySpec, study: StudyRecord, target: Target, space: Any,
                     ostudy: optuna.Study, companions: list[_Companion], budget: int | None
                     ) -> TrialRecord | None:
        otrial = ostudy.ask()
        self._asked, self._running = (ostudy, otrial), None
        # A repeat (a paired comparison's round) measures exactly its config, never a sweep.
        repeat = otrial.user_attrs.get(pairing.BLOCK_ATTR) is not None
        swept = (frozenset(self._swept.get(spec.name, ()))
                 if not companions and not repeat else frozenset())
        config = suggest_config(otrial, space, swept)
        # The machine as this target's trials are filed (a CPU-only engine: the CPU's key).
        hw = {**fingerprint(), "key": trial_hardware_key(spec.target, fingerprint())}
        # Its role, the trial it re-measures, where a warm start found the config, ...
        details = trial_details(otrial.user_attrs)
        role, requeued = details.get("role"), details.get("requeued_from_trial")
        # The study's paired re-measurement builds afresh where a build can change quality: its
        # repeats are then rebuilds too, which the recommender's quality headroom is measured
        # from. A sweep's repeats (drift against the previous run) keep the cached build.
        fresh_build = (repeat and role != pairing.SWEEP_REPEAT_ROLE
                       and bool(target.rebuild_varying_metrics))
        if fresh_build:
            details[FRESH_BUILD] = True
        # A config someone asked for (queued, re-queued) is a measured fact: never skipped.
        verdict = self._gate(spec, target, str(hw["key"])).check(
            config, hw, queued=bool(role) or requeued is not None)
        if verdict is not None:  # kept with every trial the gate judged, run or not
            details[_GATE_KEY] = verdict.to_dict()
        record = new_trial_record(
            study_id=study.id or 0, number=otrial.number, optuna_trial_id=otrial._trial_id,
            target=spec.target, config=config, workload=spec.workload, hardware=hw,
            details=details)
        if budget is None:
            rec = self._running = self.store.start_trial(record)
        elif (claimed := self.store.claim_trial(record, budget)) is not None:
            rec = self._running = claimed
        else:
            # Another worker took the last slot between our count and our claim: hand a queued
            # config back to the queue so it is not lost, and close the asked trial.
            self.bridge.tell_failed(ostudy, otrial)
            if role:
                self.bridge.requeue(ostudy, otrial.params, otrial.user_attrs)
            return None
        if verdict is not None and verdict.skip:
            log.info("trial %s skipped: predicted to fail (p=%.2f)", otrial.number,
                     verdict.probability)
            stored = self.store.fail_trial(rec.id or 0, error_type=PREDICTED_FAILURE,
                                           error=verdict.reason, duration_s=verdict.seconds)
            self.bridge.tell_failed(ostudy, otrial)
            return stored
        try:
            outcome = self._run_isolated(
                spec, rec, config, companions,
                sweep=SweepRequest(swept, _SWEEP_BUDGET_SHARE * self.settings.trial_timeout_s,
                                   str(spec.slo), include_own=bool(role)) if swept else None,
                fresh_build=fresh_build, repeat=repeat)
        except KeyboardInterrupt:
            self.bridge.tell_failed(ostudy, otrial)
            raise
        outcome = _with_slo(target, outcome, spec.slo)
        self._check_leases()  # a driver that lost the study stores nothing more in it
        if outcome.swept:
            own = {k: config[k] for k in swept if k in config} if role else None
            return self._record_sweep(spec, ostudy, otrial, rec, outcome, details, target,
                                      space, own)
        stored = self._record(spec, ostudy, otrial, rec, outcome, details)
        co_details = {**details, "co_measured_with": {"study": spec.name, "trial": otrial.number}}
        for companion, co_outcome in zip(companions, outcome.co_measured, strict=True):
            if co_outcome.status == SKIPPED:
                # Nothing was measured: no trial of the companion (a failed one would read as a
                # config that cannot run); the leading trial's details name it and why.
                log.info("trial %s not measured for study %s: %s", otrial.number,
                         companion.spec.name, co_outcome.reason)
                continue
            self._record_co_measured(companion, space, dict(otrial.params), config, hw,
                                     _with_slo(target, co_outcome, spec.slo), co_details)
        return stored

    def _storage_failed(self, spec: StudySpec, study: StudyRecord, exc: BaseException
                        ) -> StorageFailure:
        """The store failed mid-trial (a full disk, a lost connection): leave the trial being
        run interrupted in the store and failed in Optuna with its config queued again, as far
        as the store still takes writes (what it refuses, ``--resume`` repairs: recovery.py),
        and return the one-line error to stop the study with. Finished trials are untouched."""
        why = _first_line(exc)
        # A full disk refuses the writes below too: give back the space held for them.
        self._reserve.release()
        rec, asked = self._running, self._asked
        number = rec.number if rec is not None else asked[1].number if asked else None
        log.info("study %s: storage error during trial %s: %s", spec.name, number, why)
        stored = None
        if rec is not None:
            with contextlib.suppress(*_STORAGE_ERRORS):
                stored = self.store.get_trial(rec.id or 0)
                if stored is not None and stored.status == TrialStatus.RUNNING:
                    stored = recovery.interrupt(self.store, rec, f"the store failed: {why}")
        if asked is not None:
            ostudy, otrial = asked
            with contextlib.suppress(*_STORAGE_ERRORS):
                if self.bridge.is_finished(otrial._trial_id):
                    pass
                elif stored is not None and stored.status in TrialStatus.FINISHED:
                    # Stored, not told yet: Optuna hears what the store holds.
                    self.bridge.tell_stored(ostudy, otrial._trial_id, otrial.number, spec.slo,
                                            stored)
                else:
                    # Queued again before it is told: a failure in between loses no config.
                    self.bridge.requeue(ostudy, otrial.params, otrial.user_attrs,
                                        from_number=otrial.number)
                    self.bridge.tell_failed(ostudy, otrial)
        kept = stored is not None and stored.status in TrialStatus.FINISHED
        if kept:
            number = None  # the trial it stopped at is stored as it finished
        where = f" during trial #{number}" if number is not None else ""
        left = "with that trial interrupted and " if number is not None else "with "
        return StorageFailure(f"the trial store failed{where} ({why}); study {spec.name!r} stopped "
                              f"{left}every finished trial kept. Once the store takes writes "
                              "again (free disk space, check the database), continue with: "
                              f"advisor tune --target {spec.target} --name {spec.name} --resume")

    def _gate(self, spec: StudySpec, target: Target, hardware_key: str) -> FailureGate:
        """The study's failure gate (built once per study and driver); says once, and again
        when it changes, whether it may skip anything here."""
        gate = self._gates.get(spec.name)
        if gate is None or (gate.enabled, gate.threshold) != (
                spec.failure_gate, spec.failure_threshold or DEFAULT_THRESHOLD):
            gate = self._gates[spec.name] = FailureGate(
                self.store, target, spec.workload, enabled=spec.failure_gate,
                threshold=spec.failure_threshold or DEFAULT_THRESHOLD)
        if gate.enabled and (line := gate.announce(hardware_key)) is not None:
            self.reporter.preparing(line)
        return gate

    def _run_isolated(self, spec: StudySpec, rec: TrialRecord, config: Mapping[str, Any],
                      companions: Sequence[_Companion] = (), *,
                      sweep: SweepRequest | None = None, fresh_build: bool = False,
                      repeat: bool = False) -> TrialOutcome:
        """Run the trial's child process, beating the store's heartbeat; an interrupt (Ctrl-C,
        or SIGTERM turned into one) records the trial as interrupted and propagates. The child
        sees the study's SLO (a window may stop once its miss is settled), except in a
        ``repeat`` of a paired comparison, which measures its config exactly as before."""
        last_beat = time.monotonic()

        def beat() -> None:
            nonlocal last_beat
            if time.monotonic() - last_beat >= self.settings.heartbeat_interval_s:
                self.store.heartbeat(rec.id or 0)
                last_beat = time.monotonic()

        try:
            return run_isolated(
                spec.target, dict(config), spec.workload, self.settings.cache_dir,
                timeout_s=self.settings.trial_timeout_s,
                memory_limit_mb=self.settings.trial_memory_limit_mb, on_tick=beat,
                co_workloads=[c.spec.workload for c in companions],
                sweep=sweep, fresh_build=fresh_build, slo=None if repeat else str(spec.slo),
            )
        except KeyboardInterrupt as exc:
            # `advisor tune` turns SIGTERM into KeyboardInterrupt("SIGTERM"); Ctrl-C has no text.
            recovery.interrupt(self.store, rec, f"stopped by {exc}" if str(exc)
                               else "interrupted by the user")
            raise

    def _record_sweep(self, spec: StudySpec, ostudy: optuna.Study, otrial: optuna.Trial,
                      rec: TrialRecord, outcome: TrialOutcome, details: Mapping[str, Any],
                      target: Target, space: Any, own: Mapping[str, Any] | None
                      ) -> TrialRecord:
        """Store a trial that swept its search knobs (advisor/swept_trials.py): the asked trial
        keeps its own or the best setting; every other setting becomes a trial of its own."""
        # The target's own account of the sweep (settings measured, pruned, not reached) moves
        # from each measurement's details into the trial's "search_sweep" record.
        told = {k: v for k, v in outcome.swept[0][1].details.get("search_sweep", {}).items()
                if k != "point"}
        points = [(config, target.apply_slo(dataclasses.replace(m, details={
            k: v for k, v in m.details.items() if k != "search_sweep"}), spec.slo))
            for config, m in outcome.swept]
        keep = chosen_point(points, spec.slo, spec.objective, own)
        names = sorted({k for config, _ in points for k in config} & set(
            self._swept.get(spec.name, ())))
        summary = {"swept": names, **told}
        kept_config, kept = points[keep]
        stored = self._store_outcome(
            spec, rec, dataclasses.replace(outcome, measurement=kept, swept=()),
            {**details, "search_sweep": {**summary, "kept": keep}},
            config=(kept_config, config_hash(kept_config)))
        self.bridge.set_params(otrial, swept_params(space, kept_config, names))
        self.bridge.tell_stored(ostudy, otrial._trial_id, otrial.number, spec.slo, stored)
        sampled = {k: (v, otrial.distributions[k]) for k, v in otrial.params.items()
                   if k not in names}
        for position, (config, m) in enumerate(points):
            if position == keep:
                continue
            point_details = {k: v for k, v in details.items() if k not in ("role", "source")}
            point_details["search_sweep"] = {**summary, "point": position,
                                             "trial": otrial.number}
            metrics_ok = (is_usable({**point_details, **m.details})
                          and all(m.metrics.get(x) is not None
                                  for x in (spec.objective.metric, *spec.slo.metrics)))
            trial_id, number = self.bridge.add_finished(
                ostudy, {**sampled, **swept_params(space, config, names)},
                value=float(m.metrics[spec.objective.metric]) if metrics_ok else None,
                slo=spec.slo, metrics=m.metrics if metrics_ok else None,
                user_attrs={"advisor_swept_from": otrial.number})
            point = self.store.start_trial(new_trial_record(
                study_id=rec.study_id, number=number, optuna_trial_id=trial_id,
                target=spec.target, config=config, workload=spec.workload,
                hardware=rec.hardware, details=point_details, swept_from=otrial.number))
            self._store_outcome(spec, point, TrialOutcome("complete", m, duration_s=m.duration_s),
                                point_details)
        return stored

    def _record_co_measured(self, companion: _Companion, space: Any, params: dict[str, Any],
                            config: dict[str, Any], hw: Mapping[str, Any],
                            outcome: TrialOutcome, details: Mapping[str, Any]) -> TrialRecord:
        """Record one co-measured outcome as a trial of ``companion`` (Optuna and the store)."""
        spec, ostudy = companion.spec, companion.ostudy
        otrial = self.bridge.ask_replaying(ostudy, params)
        suggest_config(otrial, space)  # replays the enqueued params into the trial
        rec = self.store.start_trial(new_trial_record(
            study_id=companion.study.id or 0, number=otrial.number,
            optuna_trial_id=otrial._trial_id, target=spec.target, config=config,
            workload=spec.workload, hardware=hw, details=details))
        return self._record(spec, ostudy, otrial, rec, outcome, details)

    def _record(self, spec: StudySpec, ostudy: optuna.Study, otrial: optuna.Trial,
                rec: TrialRecord, outcome: TrialOutcome, details: Mapping[str, Any]
                ) -> TrialRecord:
        stored = self._store_outcome(spec, rec, outcome, details)
        self.bridge.tell_stored(ostudy, otrial._trial_id, otrial.number, spec.slo, stored)
        return stored

    def _store_outcome(self, spec: StudySpec, rec: TrialRecord, outcome: TrialOutcome,
                       details: Mapping[str, Any],
                       config: tuple[Mapping[str, Any], str] | None = None) -> TrialRecord:
        """Write a trial's outcome to the store: measured with its SLO margins (``invalid`` when
    its validity label is unusable, knowledge/validity.py), or failed."""
        m = outcome.measurement
        if outcome.ok and m is not None:
            required = [spec.objective.metric, *spec.slo.metrics]
            if missing := [name for name in required if m.metrics.get(name) is None]:
                outcome = TrialOutcome(
                    "failed", error_type="missing_metric", duration_s=outcome.duration_s,
                    reason=f"the target did not report {', '.join(missing)}")
        if not outcome.ok or m is None:
            return self.store.fail_trial(
                rec.id or 0, error_type=outcome.error_type or "error", error=outcome.reason or "",
                duration_s=outcome.duration_s)
        margins = _margin_records(spec.slo, m.metrics)
        merged = {**details, **m.details}
        # An unusable measurement is kept with its figures and reason (provenance) but is never
        # feasible, and the caller tells Optuna it failed: it must not steer the search.
        usable = is_usable(merged)
        if not usable:
            log.warning("trial %s is invalid (%s): stored, not used", rec.number,
                        invalid_reason(merged))
        return self.store.complete_trial(
            rec.id or 0, metrics=m.metrics, engine_versions=m.engine_versions,
            details=merged, margins=margins,
            feasible=usable and all(mr.margin <= 0 for mr in margins),
            objective_value=float(m.metrics[spec.objective.metric]), duration_s=outcome.duration_s,
            status=TrialStatus.COMPLETE if usable else TrialStatus.INVALID, config=config)

    def execute(self, study_name: str, *, number: int, optuna_trial_id: int,
                config: Mapping[str, Any], details: Mapping[str, Any]) -> TrialRecord | None:
        """Run and store one trial that another process asked Optuna for (a Ray Tune trial):
        claim its slot of the study's budget in the store, run it isolated with heartbeats,
        store the outcome. The caller tells Optuna. A trial already stored under ``number`` is a
        retry of it: a finished one is returned as it is, a running one (its previous worker
        died) is restarted. ``None`` when it must not run: a sweep's recovery already closed the
        Optuna trial before it was ever stored (its config was re-queued there: running it now
        would measure that config twice), or the budget is taken. Tune counts trials in its own
        experiment state, which a killed driver saved some time before it died: a restored
        experiment may ask for more trials than the study has room for, and the store, not Tune,
        decides."""
        study = self.store.get_study(study_name)
        if study is None:
            raise StudyError(f"no study named {study_name!r}")
        spec = self._stored(study).resume_spec()
        existing = self.store.trial_by_number(study.id or 0, number)
        if existing is not None and existing.status != TrialStatus.RUNNING:
            return existing
        if self.bridge.is_finished(optuna_trial_id):
            if existing is not None:
                recovery.interrupt(self.store, existing, "closed by the sweep's recovery before "
                                                         "Ray restored it; its config was "
                                                         "re-queued")
            return None
        if existing is not None:
            rec = self.store.restart_trial(existing.id or 0)
        else:
            hw = {**fingerprint(), "key": trial_hardware_key(spec.target, fingerprint())}
            claimed = self.store.claim_trial(new_trial_record(
                study_id=study.id or 0, number=number, optuna_trial_id=optuna_trial_id,
                target=spec.target, config=config, workload=spec.workload, hardware=hw,
                details=details), study.n_trials)
            if claimed is None:
                log.info("study %s: trial %d not run, the budget of %d is taken", study_name,
                         number, study.n_trials)
                return None
            rec = claimed
        try:  # on a worker machine the target may be missing: a failed trial, with its reason
            target = self._check_target(spec)
            self._prepare(target, spec.workload)
        except AdvisorError as exc:
            return self.store.fail_trial(rec.id or 0, error_type="worker_setup",
                                         error=f"{type(exc).__name__}: {exc}")
        outcome = self._run_isolated(spec, rec, config, repeat=pairing.is_paired(rec))
        return self._store_outcome(spec, rec, _with_slo(target, outcome, spec.slo),
                                   rec.details)

    # results ---------------------------------------------------------------------------------

    def result(self, name: str) -> StudyResult:
        """The stored state of study ``name`` as a :class:`StudyResult`."""
        study = self.store.get_study(name)
        if study is None:
            raise StudyError(f"no study named {name!r}")
        trials = self.store.trials_of_study(study.id or 0)
        default = next((t for t in trials if t.details.get("role") == _DEFAULT_ROLE
                        and t.status == TrialStatus.COMPLETE), None)
        co = [self.result(n) for n in co_studies_of(study) if self.store.get_study(n) is not None]
        # The best is a search trial's: the closing repeats re-measure it, they do not compete.
        best = best_feasible(trials, study.objective_direction, exclude=pairing.is_paired)
        tally = BudgetTally.of(self.search_budget(study), trials)
        return StudyResult(study, trials, best, default, co, tally)


def _with_slo(target: Target, outcome: TrialOutcome, slo: SLO) -> TrialOutcome:
    """``outcome`` with its SLO-dependent metrics recomputed for ``slo`` (Target.apply_slo)."""
    if outcome.ok and outcome.measurement is not None:
        return dataclasses.replace(outcome,
                                   measurement=target.apply_slo(outcome.measurement, slo))
    return outcome


def _margin_records(slo: SLO, metrics: Mapping[str, float]) -> list[SLOMarginRecord]:
    """Typed margin rows; the caller has checked every SLO metric is present."""
    return [
        SLOMarginRecord(trial_id=0, metric=b.metric, op=b.op, threshold=b.threshold,
                        value=float(metrics[b.metric]), margin=b.margin(float(metrics[b.metric])))
        for b in slo.bounds
    ]


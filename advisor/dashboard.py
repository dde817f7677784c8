"""``advisor dashboard``: optuna-dashboard on the trial store, with the best *feasible* trial.

optuna-dashboard (0.21) picks a single-objective study's "Best Trial" with
``storage.get_best_trial``, which ignores constraints: a trial that missed the SLO is marked best
when its objective is highest. It reads everything else this project writes for it (see
:func:`advisor.optuna_bridge.tell_constraints` and
:func:`advisor.optuna_bridge.describe_optuna_study`): the constraint list greys infeasible trials
out in its plots; metric names, SLO and margins are shown by name. This module wraps the
dashboard's WSGI app and rewrites only the ``best_trials`` of its study-detail answer to Optuna's
own definition (:func:`advisor.optuna_bridge.best_feasible_trial`): the best trial among those
whose constraints are all ``<= 0`` (none when no trial met the SLO).

Imported studies (shipped knowledge, ``advisor knowledge import``) have no Optuna history: their
trials were run against another database. :func:`backfill_optuna_studies` builds one from the
stored trials (configs, objective, SLO margins, failures), so the dashboard shows them too.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import FrozenTrial, TrialState

from advisor.errors import AdvisorError
from advisor.objective import Objective
from advisor.optuna_bridge import (
    DASHBOARD_CONSTRAINTS_KEY,
    best_feasible_trial,
    describe_optuna_study,
)
from knowledge import StudyRecord, TrialRecord, TrialStatus, TrialStore
from knowledge.models import StudyStatus
from knowledge.validity import invalid_reason
from objectives import SLO, Workload, parse_slo
from objectives.registry import get_target
from search_spaces import Knob, SearchSpace

__all__ = ["PENDING_ATTR", "backfill_optuna_studies", "dashboard_app"]

_STUDY_DETAIL = re.compile(r"/api/studies/(\d+)")
#: Any answer about one study (its detail, plots, importances): its trials must exist first.
_STUDY_PAGE = re.compile(r"/api/studies/(\d+)(?:/|$)")
#: Study user attribute of an imported study whose trials are not yet built (see
#: :func:`backfill_optuna_studies` with ``defer_trials``).
PENDING_ATTR = "advisor_trials_pending"
Environ = dict[str, Any]
StartResponse = Callable[..., Any]
WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]


class _FeasibleBest:
    """WSGI middleware: the dashboard's answer for one study, with ``best_trials`` recomputed;
    an imported study whose trials are still to be built gets them before it is shown."""

    def __init__(self, app: WSGIApp, storage: optuna.storages.BaseStorage,
                 pending: _PendingTrials | None = None) -> None:
        self.app, self.storage, self.pending = app, storage, pending

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        if self.pending is not None and (
                opened := _STUDY_PAGE.match(environ.get("PATH_INFO", ""))):
            self.pending.build(int(opened.group(1)))
        match = _STUDY_DETAIL.fullmatch(environ.get("PATH_INFO", ""))
        if match is None or environ.get("REQUEST_METHOD") != "GET":
            return self.app(environ, start_response)
        seen: dict[str, Any] = {}

        def capture(status: str, headers: list[tuple[str, str]], exc_info: Any = None
                    ) -> Callable[[bytes], None]:
            seen.update(status=status, headers=headers)
            return lambda _: None

        body = b"".join(self.app(environ, capture))
        status, headers = seen["status"], seen["headers"]
        if status.startswith("200"):
            body = self._rewrite(int(match.group(1)), body)
        headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
        start_response(status, [*headers, ("Content-Length", str(len(body)))])
        return [body]

    def _rewrite(self, study_id: int, body: bytes) -> bytes:
        from optuna_dashboard._serializer import serialize_frozen_trial

        data = json.loads(body)
        directions = self.storage.get_study_directions(study_id)
        if len(directions) != 1 or data.get("is_preferential"):
            return body
        trials = self.storage.get_all_trials(study_id, deepcopy=False,
                                             states=(TrialState.COMPLETE,))
        best = best_feasible_trial(trials, directions[0])
        system_attrs = self.storage.get_study_system_attrs(study_id)
        data["best_trials"] = [] if best is None else [
            serialize_frozen_trial(study_id, best, system_attrs)]
        return json.dumps(data).encode()


def dashboard_app(storage: optuna.storages.BaseStorage, store: TrialStore | None = None
                  ) -> WSGIApp:
    """optuna-dashboard's WSGI app on ``storage``, its best trial the best feasible one. With
    ``store``, an imported study whose trials were deferred gets them when first opened."""
    try:
        from optuna_dashboard import wsgi
    except ImportError:
        from advisor.errors import EngineUnavailableError

        raise EngineUnavailableError("optuna-dashboard is not installed: pip install "
                                     "'slo-advisor[dashboard]'") from None
    pending = None if store is None else _PendingTrials(store, storage)
    return _FeasibleBest(wsgi(storage), storage, pending)


class _PendingTrials:
    """The imported studies whose Optuna trials are still to be built, and the building: once,
    under a lock (the page's requests and the background builder may ask together)."""

    def __init__(self, store: TrialStore, storage: optuna.storages.BaseStorage) -> None:
        self.store, self.storage = store, storage
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ids = {s._study_id for s in storage.get_all_studies()
                     if s.user_attrs.get(PENDING_ATTR)}

    def __len__(self) -> int:
        return len(self._ids)

    def build(self, study_id: int) -> None:
        if study_id not in self._ids:
            return
        with self._lock:
            if study_id not in self._ids:
                return
            name = self.storage.get_study_name_from_id(study_id)
            record = next(s for s in self.store.list_studies() if s.name == name)
            if _add_trials(self.store, self.storage, record, self._stop):
                self._ids.discard(study_id)

    def build_all(self, progress: Callable[[int, int, str], None] | None = None) -> None:
        """Build every pending study, in id order (run in a background thread), until
        :meth:`stop`: the ones left stay pending for the next start."""
        ids = sorted(self._ids)
        for done, study_id in enumerate(ids):
            if self._stop.is_set():
                return
            if progress is not None:
                progress(done, len(ids), str(study_id))
            self.build(study_id)

    def stop(self) -> None:
        """Stop :meth:`build_all` at the next few trials (the study under way stays pending and
        its next build adds only the rest): a dashboard stopped while it built held the store's
        writes, and the store's closing checkpoint waited on them (a SIGTERM took over 30 s to
        end the process)."""
        self._stop.set()


# -- imported studies ---------------------------------------------------------------------------


def backfill_optuna_studies(store: TrialStore, storage: optuna.storages.BaseStorage,
                            progress: Callable[[int, int, str], None] | None = None, *,
                            defer_trials: bool = False) -> int:
    """Create the Optuna study of every imported study that has none; returns how many.

    Each stored trial becomes an Optuna trial: a measured one complete, with its objective, its
    SLO margins as constraints and the same user attributes a tuned trial gets; a failed one
    failed, and so is an invalid one (measured, but it failed its validity check: the driver
    tells Optuna the same), with the reason as its ``invalid`` attribute. The Optuna study is
    marked ``imported`` and is a record only: imported studies are not resumed (their sampler
    history stayed in the database they were run against). ``progress(done, total, name)`` is
    called as each study begins: the shipped knowledge's 140 take minutes on 2 cores (Optuna
    writes each trial row by row). With ``defer_trials`` only the studies are created (seconds)
    and marked pending; :func:`dashboard_app` given the store adds a study's trials when it is
    first opened, and ``advisor dashboard`` builds the rest in the background.
    """
    existing = {s.study_name for s in storage.get_all_studies()}
    pending = [s for s in store.list_studies()
               if s.status == StudyStatus.IMPORTED and s.name not in existing]
    for done, study in enumerate(pending):
        if progress is not None:
            progress(done, len(pending), study.name)
        _build(store, storage, study, defer_trials=defer_trials)
    return len(pending)


def _build(store: TrialStore, storage: optuna.storages.BaseStorage, study: StudyRecord, *,
           defer_trials: bool = False) -> None:
    spec = _RecordedTerms.of(study)
    ostudy = optuna.create_study(storage=storage, study_name=study.name,
                                 direction=spec.objective.direction, load_if_exists=True)
    describe_optuna_study(ostudy, spec)
    ostudy.set_user_attr("imported", True)
    if defer_trials:
        ostudy.set_user_attr(PENDING_ATTR, True)
    else:
        _add_trials(store, storage, study)


def _add_trials(store: TrialStore, storage: optuna.storages.BaseStorage, study: StudyRecord,
                stop: threading.Event | None = None) -> bool:
    """The Optuna trials of imported ``study`` (whose Optuna study exists), from its records,
    a few at a time until ``stop`` is set; whether every trial is in."""
    spec = _RecordedTerms.of(study)
    try:
        space: SearchSpace | None = get_target(study.target).space()
    except AdvisorError:  # a target this install does not have: knobs become categorical
        space = None
    records = [r for r in store.trials_of_study(study.id or 0) if r.status in TrialStatus.FINISHED]
    # One distribution per knob for the whole study (Optuna refuses a categorical whose choices
    # change between trials), covering every value the trials hold.
    seen: dict[str, list[Any]] = {}
    for rec in records:
        for k, v in rec.config.items():
            if v not in seen.setdefault(k, []):
                seen[k].append(v)
    distributions = {k: _distribution(space, k, values) for k, values in seen.items()}
    frozen = [_frozen_trial(rec, spec.slo, distributions) for rec in records]
    ostudy = optuna.load_study(storage=storage, study_name=study.name)
    # Trials are added one by one, in order: a build cut short (the dashboard stopped) left the
    # first ones, and the next build adds only the rest.
    # A stop is seen between chunks: a big study's trials took over 20 s under load, and a
    # stopped dashboard waited for them.
    for start in range(len(ostudy.get_trials(deepcopy=False)), len(frozen), _CHUNK):
        if stop is not None and stop.is_set():
            return False
        ostudy.add_trials(frozen[start:start + _CHUNK])
    if ostudy.user_attrs.get(PENDING_ATTR):
        ostudy.set_user_attr(PENDING_ATTR, False)
    return True


#: Trials added to Optuna at once while building an imported study (a stop is seen between).
_CHUNK = 10


@dataclass(frozen=True)
class _RecordedTerms:
    """What an imported study tuned for (target, SLO, objective, workload), read from its record.

    Not a :class:`~advisor.study_spec.StudySpec`: a spec is something to *run*, and refuses what
    a record may hold (a shipped study measured by another study's trials asked for 0 trials of
    its own; an imported one names no sampler). The dashboard shows only these four terms."""

    target: str
    slo: SLO
    objective: Objective
    workload: Workload

    @classmethod
    def of(cls, study: StudyRecord) -> _RecordedTerms:
        doc = study.spec
        if doc is None:  # a study stored by an earlier release: its row holds the terms
            return cls(study.target, parse_slo(study.slo),
                       Objective(study.objective_metric, study.objective_direction),  # type: ignore[arg-type]
                       Workload.from_spec(study.workload_spec))
        return cls(doc["target"], parse_slo(doc["slo"]),
                   Objective(doc["objective"]["metric"], doc["objective"]["direction"]),
                   Workload.from_spec(doc["workload"]))


def _frozen_trial(rec: TrialRecord, slo: SLO, distributions: dict[str, BaseDistribution]
                  ) -> FrozenTrial:
    dists = {k: distributions[k] for k in rec.config}
    user_attrs: dict[str, Any] = {"store_trial_id": rec.id}  # `advisor trials` shows this id
    if role := rec.details.get("role"):
        user_attrs["advisor_role"] = role
    measured = rec.status == TrialStatus.COMPLETE and rec.objective_value is not None and all(
        rec.metrics.get(m) is not None for m in slo.metrics)
    if rec.status == TrialStatus.INVALID:  # measured, failed its validity check: never used
        user_attrs["invalid"] = invalid_reason(rec.details)
    elif not measured:
        user_attrs["error"] = f"{rec.error_type}: {(rec.error or '').splitlines()[0][:200]}" \
            if rec.error else str(rec.error_type)
        return _dated(rec, optuna.trial.create_trial(
            state=TrialState.FAIL, params=dict(rec.config), distributions=dists,
            user_attrs=user_attrs))
    margins = [b.margin(float(rec.metrics[b.metric])) for b in slo.bounds]
    user_attrs.update({m: float(rec.metrics[m]) for m in slo.metrics})
    user_attrs.update({f"margin {b}": m for b, m in zip(slo.bounds, margins, strict=True)})
    user_attrs["slo_met"] = all(m <= 0 for m in margins)
    return _dated(rec, optuna.trial.create_trial(
        value=float(rec.objective_value or 0.0), params=dict(rec.config), distributions=dists,
        user_attrs=user_attrs, system_attrs={DASHBOARD_CONSTRAINTS_KEY: margins}))


def _dated(rec: TrialRecord, trial: FrozenTrial) -> FrozenTrial:
    """The trial with the times it ran (not the time of the import), for the timeline."""
    trial.datetime_start = rec.started_at
    trial.datetime_complete = rec.finished_at or rec.started_at
    return trial


def _numbers(values: list[Any]) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def _distribution(space: SearchSpace | None, name: str, values: list[Any]) -> BaseDistribution:
    """The distribution a sampler draws knob ``name`` from (advisor/sampling.py), widened to hold
    every one of ``values`` when the knob space changed since the trials ran."""
    knob: Knob | None = next((k for k in space if k.name == name), None) if space else None
    if knob is not None and knob.type in ("int", "float") and _numbers(values):
        low, high = min(float(knob.low or 0.0), *values), max(float(knob.high or 0.0), *values)
        log = knob.log and low > 0
        if knob.type == "int" and all(isinstance(v, int) for v in values):
            step = int(knob.step) if knob.step and not log else 1
            if any((v - int(low)) % step for v in values):
                step = 1
            high = low + (int(high) - int(low)) // step * step
            return IntDistribution(int(low), int(high), log=log, step=step)
        return FloatDistribution(low, high, log=log)
    choices: list[Any] = []
    if knob is not None and knob.type == "categorical":
        choices = list(knob.choices)
    elif knob is not None and knob.type == "bool":
        choices = [False, True]
    return CategoricalDistribution([*choices, *(v for v in values if v not in choices)])

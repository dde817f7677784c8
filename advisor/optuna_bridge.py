"""Everything the advisor says to Optuna, in one place: which study and sampler, what is queued,
and how a finished trial is told (its objective value and its SLO margins as constraints).

The driver (in-process and shared studies), the Ray Tune searcher and recovery all go through
:class:`OptunaBridge`, so a trial is told the same way whichever path ran it: complete with its
value, its constraint list (one value per SLO bound, ``<= 0`` met, under
:data:`DASHBOARD_CONSTRAINTS_KEY`) and the user attributes optuna-dashboard shows; anything else
(failed, invalid, interrupted, refused) told failed, so it never steers the search.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState

from advisor.objective import Objective
from advisor.samplers import STARTUP_TRIALS, sampler_factory
from advisor.study_spec import FIXED_ATTR, STARTUP_ATTR, SWEPT_ATTR, StoredStudy, StudySpec
from advisor.swept_trials import constraint_attrs, swept_trial_template
from knowledge import TrialRecord, TrialStatus
from objectives import SLO, Workload

__all__ = ["DASHBOARD_CONSTRAINTS_KEY", "REQUEUED_ATTR", "ROLE_ATTR", "OptunaBridge",
           "best_feasible_trial", "describe_optuna_study", "optuna_storage", "tell_constraints",
           "trial_details"]

#: The trial system attribute optuna-dashboard (0.21) reads constraint values from: a list, one
#: value per constraint, <= 0 met. Optuna 5 reads the same list as constraints "0", "1", ...;
#: its own ``set_constraint`` writes ``constraints:<name>`` keys, which the dashboard does not
#: read. Writing both would make Optuna count every constraint twice, so only the list is
#: written; the names, in list order, are the study user attribute ``slo_constraints``.
DASHBOARD_CONSTRAINTS_KEY = "constraints"
#: Trial user attribute: why a queued config was queued (engine default, enqueued, warm start).
ROLE_ATTR = "advisor_role"
#: Trial user attribute: the number of the interrupted trial whose config this one re-measures.
REQUEUED_ATTR = "advisor_requeued_from"
#: Trial user attributes with this prefix travel into the stored trial's details.
_PREFIX = "advisor_"


def optuna_storage(url: str) -> optuna.storages.RDBStorage:
    """Optuna's RDB storage on the project database (so optuna-dashboard can open it)."""
    kwargs: dict[str, Any] = {"pool_pre_ping": True}
    if url.startswith("sqlite"):
        kwargs["connect_args"] = {"timeout": 60}
    return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)


def tell_constraints(otrial: optuna.Trial, slo: SLO, metrics: Mapping[str, float]) -> None:
    """Hand a measured trial's SLO margins to Optuna (its samplers and optuna-dashboard), before
    it is told complete: one constraint per SLO bound, in the SLO's order, ``<= 0`` means met.

    The measured SLO metrics, each bound's margin (``margin p95_latency_ms<=1``) and whether the
    SLO held also become user attributes: the dashboard uses the constraint list only to grey out
    infeasible trials in its plots, and shows user attributes by name in its trial table.
    Idempotent: recovery may tell a trial again.
    """
    margins, attrs = constraint_attrs(slo, metrics)
    otrial.storage.set_trial_system_attr(otrial._trial_id, DASHBOARD_CONSTRAINTS_KEY, margins)
    for key, value in attrs.items():
        otrial.set_user_attr(key, value)


class StudyTerms(Protocol):
    """What a study tunes for, as :func:`describe_optuna_study` records it: a :class:`StudySpec`,
    or the terms of a stored record that no driver will run (an imported study)."""

    @property
    def target(self) -> str: ...
    @property
    def slo(self) -> SLO: ...
    @property
    def objective(self) -> Objective: ...
    @property
    def workload(self) -> Workload: ...


def describe_optuna_study(ostudy: optuna.Study, spec: StudyTerms) -> None:
    """Record what the study tunes for where optuna-dashboard shows it: the objective metric's
    name (``set_metric_names``, else the dashboard says "Objective 0") and the SLO, objective,
    target and workload as study user attributes. Written only when they differ (resume)."""
    attrs = {
        "target": spec.target, "slo": str(spec.slo), "objective": str(spec.objective),
        "slo_constraints": [str(b) for b in spec.slo.bounds],
        "workload": spec.workload.name, "workload_hash": spec.workload.spec_hash,
    }
    current = ostudy.user_attrs
    for key, value in attrs.items():
        if current.get(key) != value:
            ostudy.set_user_attr(key, value)
    if ostudy.metric_names != [spec.objective.metric]:
        with warnings.catch_warnings():  # experimental since Optuna 3.2, stable in use
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            ostudy.set_metric_names([spec.objective.metric])


def trial_details(user_attrs: Mapping[str, Any]) -> dict[str, Any]:
    """What a trial's Optuna user attributes put in its stored details: its role, the trial it
    re-measures, and every other ``advisor_*`` attribute without the prefix (e.g. where a warm
    start found the config)."""
    details: dict[str, Any] = {}
    if role := user_attrs.get(ROLE_ATTR):
        details["role"] = role
    if (requeued := user_attrs.get(REQUEUED_ATTR)) is not None:
        details["requeued_from_trial"] = requeued
    for key, value in user_attrs.items():
        if key.startswith(_PREFIX) and key not in (ROLE_ATTR, REQUEUED_ATTR):
            details[key.removeprefix(_PREFIX)] = value
    return details


def best_feasible_trial(trials: Iterable[FrozenTrial], direction: optuna.study.StudyDirection
                        ) -> FrozenTrial | None:
    """The complete trial with the best value among those meeting every constraint, as
    ``optuna.Study.best_trial`` defines it for constrained studies; None when none does."""
    feasible = [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None
                and all(v <= 0 for v in t.constraints.values())]
    if not feasible:
        return None
    sign = 1.0 if direction == optuna.study.StudyDirection.MAXIMIZE else -1.0
    return max(feasible, key=lambda t: (sign * float(t.value or 0.0), -t.number))


class OptunaBridge:
    """The advisor's side of Optuna for one trial store: its studies, queue and tells."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._storage: optuna.storages.RDBStorage | None = None

    @property
    def storage(self) -> optuna.storages.RDBStorage:
        if self._storage is None:
            self._storage = optuna_storage(self.url)
        return self._storage

    # studies ---------------------------------------------------------------------------------

    def user_attrs(self, name: str) -> dict[str, Any] | None:
        """The user attributes of the Optuna study ``name``; None when it does not exist."""
        with contextlib.suppress(KeyError):
            return dict(optuna.load_study(study_name=name, storage=self.storage).user_attrs)
        return None

    def running_count(self, name: str) -> int:
        """How many trials of the Optuna study ``name`` are running (asked, never told); 0 when
        it does not exist. Reads the storage without building a study or its sampler."""
        try:
            study_id = self.storage.get_study_id_from_name(name)
        except KeyError:
            return 0
        return len(self.storage.get_all_trials(study_id, deepcopy=False,
                                               states=(TrialState.RUNNING,)))

    def sampling_study(self, spec: StudySpec, *, seed_offset: int) -> optuna.Study:
        """The Optuna study that samples ``spec``'s configs (created, or loaded on resume): the
        spec's sampler seeded with ``seed + seed_offset`` (so a resume does not replay its
        start-up sequence), its fixed knobs held by a ``PartialFixedSampler``."""
        seed = None if spec.seed is None else spec.seed + seed_offset
        startup = int(spec.startup_trials or STARTUP_TRIALS)
        sampler = sampler_factory(spec.sampler)(seed, startup)
        if spec.fixed:
            sampler = optuna.samplers.PartialFixedSampler(dict(spec.fixed), sampler)
        ostudy = optuna.create_study(
            storage=self.storage, study_name=spec.name, direction=spec.objective.direction,
            sampler=sampler, load_if_exists=True)
        describe_optuna_study(ostudy, spec)
        ostudy.set_user_attr(STARTUP_ATTR, startup)
        return ostudy

    def recording_study(self, spec: StudySpec) -> optuna.Study:
        """The Optuna study of a co-measured study: it never samples (its configs come from the
        study it is measured with), so a random sampler is enough."""
        ostudy = optuna.create_study(
            storage=self.storage, study_name=spec.name, direction=spec.objective.direction,
            sampler=optuna.samplers.RandomSampler(), load_if_exists=True)
        describe_optuna_study(ostudy, spec)
        return ostudy

    @staticmethod
    def show_settings(ostudy: optuna.Study, stored: StoredStudy) -> None:
        """Show a new study's fixed knobs and swept knobs as Optuna study attributes (for
        optuna-dashboard; the study's document is what the advisor reads)."""
        if stored.spec.fixed:
            ostudy.set_user_attr(FIXED_ATTR, dict(stored.spec.fixed))
        if stored.swept:
            ostudy.set_user_attr(SWEPT_ATTR, list(stored.swept))

    # the queue -------------------------------------------------------------------------------

    @staticmethod
    def enqueue(ostudy: optuna.Study, config: Mapping[str, Any], role: str,
                attrs: Mapping[str, Any] | None = None) -> None:
        """Queue ``config`` to be asked next (after what is queued already), with its role and
        ``attrs`` (``advisor_*`` keys, stored in the trial's details without the prefix)."""
        ostudy.enqueue_trial(dict(config), user_attrs={ROLE_ATTR: role, **(attrs or {})})

    @staticmethod
    def requeue(ostudy: optuna.Study, params: Mapping[str, Any],
                user_attrs: Mapping[str, Any], *, from_number: int | None = None) -> None:
        """Queue an asked trial's config again, as it was asked (its role kept); with
        ``from_number`` marked as the re-measurement of that interrupted trial."""
        attrs = dict(user_attrs)
        if from_number is not None:
            attrs[REQUEUED_ATTR] = from_number
        ostudy.enqueue_trial(dict(params), user_attrs=attrs)

    @staticmethod
    def ask_replaying(ostudy: optuna.Study, params: Mapping[str, Any]) -> optuna.Trial:
        """Ask a trial that replays ``params`` (a co-measured study records the config its
        leading study chose); suggesting the params in it fixes them."""
        ostudy.enqueue_trial(dict(params))
        return ostudy.ask()

    @staticmethod
    def waiting_attrs(ostudy: optuna.Study) -> list[dict[str, Any]]:
        """The user attributes of every queued, not yet asked trial."""
        return [t.user_attrs for t in ostudy.get_trials(deepcopy=False,
                                                         states=(TrialState.WAITING,))]

    @staticmethod
    def waiting_configs(ostudy: optuna.Study) -> list[dict[str, Any]]:
        """The configs of every queued, not yet asked trial."""
        return [dict(t.system_attrs.get("fixed_params", {}))
                for t in ostudy.get_trials(deepcopy=False, states=(TrialState.WAITING,))]

    # tells -----------------------------------------------------------------------------------

    @staticmethod
    def tell_complete(ostudy: optuna.Study, trial_id: int, number: int, slo: SLO,
                      metrics: Mapping[str, float], value: float) -> None:
        """Tell a measured, usable trial: its SLO margins as constraints, then its value."""
        tell_constraints(optuna.trial.Trial(ostudy, trial_id), slo, metrics)
        ostudy.tell(number, value)

    @classmethod
    def tell_stored(cls, ostudy: optuna.Study, trial_id: int, number: int, slo: SLO,
                    rec: TrialRecord | None) -> None:
        """Tell the outcome of a trial as the store holds it: complete when it measured a usable
        value (``rec.status`` complete), failed otherwise, and when nothing was stored."""
        if rec is not None and rec.status == TrialStatus.COMPLETE \
                and rec.objective_value is not None:
            cls.tell_complete(ostudy, trial_id, number, slo, rec.metrics, rec.objective_value)
        else:
            cls.tell_failed(ostudy, number)

    @staticmethod
    def tell_failed(ostudy: optuna.Study, trial: optuna.Trial | int) -> None:
        """Tell a trial that must not steer the search (failed, invalid, interrupted, refused)."""
        ostudy.tell(trial, state=TrialState.FAIL)

    def is_finished(self, trial_id: int) -> bool:
        """Whether the Optuna trial ``trial_id`` was told already (by anyone)."""
        return self.storage.get_trial(trial_id).state.is_finished()

    @staticmethod
    def unfinished(ostudy: optuna.Study) -> list[FrozenTrial]:
        """The study's asked trials nobody told: what a killed process left behind."""
        return list(ostudy.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))

    # search sweeps ---------------------------------------------------------------------------

    @staticmethod
    def set_params(otrial: optuna.Trial,
                   params: Mapping[str, tuple[Any, BaseDistribution]]) -> None:
        """Record ``params`` (value, distribution) as the asked trial's own parameters (a sweep's
        chosen setting of the knobs the sampler did not pick)."""
        for name, (value, dist) in params.items():
            otrial.storage.set_trial_param(otrial._trial_id, name, dist.to_internal_repr(value),
                                           dist)

    @staticmethod
    def add_finished(ostudy: optuna.Study, params: Mapping[str, tuple[Any, BaseDistribution]],
                     *, value: float | None, slo: SLO, metrics: Mapping[str, float] | None,
                     user_attrs: Mapping[str, Any]) -> tuple[int, int]:
        """Add a trial that was measured without being asked (a setting a sweep measured beside
        an asked trial), told like any other; returns its Optuna id and number."""
        template = swept_trial_template(params, value=value, slo=slo, metrics=metrics,
                                        user_attrs=user_attrs,
                                        constraints_key=DASHBOARD_CONSTRAINTS_KEY)
        storage = ostudy._storage
        trial_id = storage.create_new_trial(ostudy._study_id, template_trial=template)
        return trial_id, storage.get_trial_number_from_id(trial_id)

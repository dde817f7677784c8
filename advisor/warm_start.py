"""Warm start: the configs worth measuring first in a new study, from what the store already knows.

A study's question (target, SLO, objective, workload, model, hardware) may already have an answer
in the store. A new study therefore queues, after the engine default and the caller's own
enqueued configs and before the sampler takes over, the planner's answer to the question (the
one path every door asks, advisor/answers/planner.py: the fitted models where they cover it, on
a GPU known only from a calibration profile the calibrated simulator; the config it recommends,
or where its intervals straddle the SLO the first candidates it would measure to decide), on a
GPU known only from a calibration also the planner's measured answer to the same question on
the machine with the most trials of the model (its best config there, a guess the study checks
here), and the best measured configs on this hardware and workload that meet the SLO, then the
target's own starting points (its textbook settings, ``Target.starting_points``: e.g. a vector
index's HNSW32 / HNSW16 and IVF sqrt(N)), which need no knowledge at all. `advisor tune` and
the API's study jobs do this through :func:`warm_start_hook`; sweep cells add the previous run's
best on top (advisor/sweeps/warmstart.py).

The queued configs are ordinary trials: they count towards the study's budget and, once measured,
towards the model-based samplers' random start-up (Optuna counts every complete trial there,
enqueued or sampled), so the sampler models the known good region sooner.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from advisor.driver import StudyDriver, default_agrees
from advisor.errors import AdvisorError
from advisor.front_door import BEST_KNOWN
from advisor.objective import Objective
from advisor.settings import Settings
from advisor.study_spec import (
    WARM_START_PENDING,
    WARM_START_QUEUED,
    StoredStudy,
    StudySpec,
    complete_enqueued,
)
from knowledge import StudyRecord, TrialFilter, TrialRecord, TrialStatus, TrialStore
from knowledge.cache import KnowledgeModels, ModelCache
from knowledge.profiles import list_profiles
from knowledge.surrogates import workload_features
from objectives import SLO, Workload
from objectives.hardware import hardware_key as this_hardware
from objectives.registry import get_target
from objectives.workload import canonical_json
from search_spaces import SearchSpace

if TYPE_CHECKING:  # the planner loads in _ask: a study with no warm start skips it
    from advisor.answers.document import Answer
    from advisor.answers.planner import ModelsSource

__all__ = [
    "BEST_KNOWN",
    "ROLE",
    "TEXTBOOK",
    "UNDECIDED_QUEUED",
    "StudyQuestion",
    "WarmStartConfig",
    "best_measured",
    "elsewhere_config",
    "fitted_models",
    "knowledge_configs",
    "most_measured_elsewhere",
    "pending_warm_start",
    "planned_configs",
    "queue_warm_start",
    "study_warm_start",
    "summary_line",
    "unique_configs",
    "warm_start_hook",
]

log = logging.getLogger(__name__)

#: The role a warm-start trial carries in its details (next to its ``source``).
ROLE = "warm-start"
#: The source of a target's own starting points (``Target.starting_points``).
TEXTBOOK = "textbook"


@dataclass(frozen=True)
class StudyQuestion:
    """What a study asks of the knowledge: a config of ``target`` meeting ``slo`` with the best
    ``objective`` at ``workload`` (serving ``model``, if any) on hardware ``hardware_key``."""

    target: str
    slo: SLO
    objective: Objective
    workload: Workload
    hardware_key: str
    model: str | None = None

    @classmethod
    def of(cls, spec: StudySpec, hardware_key: str) -> StudyQuestion:
        """The question a study spec asks; its model is the workload's ``model``, if any."""
        model = spec.workload.params.get("model")
        return cls(target=spec.target, slo=spec.slo, objective=spec.objective,
                   workload=spec.workload, hardware_key=hardware_key,
                   model=str(model) if model else None)

    def describe(self) -> str:
        return (f"{self.target} at {self.workload.name!r} under {self.slo} on "
                f"{self.hardware_key}")


@dataclass(frozen=True)
class WarmStartConfig:
    """A config to enqueue, and where it came from (stored with its trial as ``source``)."""

    config: dict[str, Any]
    #: "previous-run", "recommendation" (the planner's answer from measured trials and fitted
    #: models), "calibration" (its answer from a calibration profile), "elsewhere" (its
    #: measured answer on the machine with the most trials of the model, for a calibrated GPU),
    #: "best-known" or "textbook".
    source: str


def _met(trial: TrialRecord, slo: SLO) -> bool:
    values = trial.metrics
    return all(values.get(b.metric) is not None and b.margin(float(values[b.metric])) <= 0
               for b in slo.bounds)


def best_measured(trials: Iterable[TrialRecord], slo: SLO, objective: Objective, n: int
                  ) -> list[TrialRecord]:
    """Up to ``n`` complete trials with distinct configs that meet ``slo``, best ``objective``
    first (invalid and failed trials never count)."""
    met = [t for t in trials if t.status == TrialStatus.COMPLETE and _met(t, slo)
           and t.metrics.get(objective.metric) is not None]
    sign = -1.0 if objective.direction == "maximize" else 1.0
    met.sort(key=lambda t: sign * float(t.metrics[objective.metric]))
    seen: set[str] = set()
    out = []
    for t in met:
        if t.config_hash not in seen:
            seen.add(t.config_hash)
            out.append(t)
        if len(out) >= n:
            break
    return out


def unique_configs(found: Iterable[WarmStartConfig]) -> list[WarmStartConfig]:
    """``found`` without repeated configs, the first occurrence (and its source) kept."""
    unique: dict[str, WarmStartConfig] = {}
    for item in found:
        unique.setdefault(canonical_json(item.config), item)
    return list(unique.values())


#: Candidates of an ``undecided`` answer a new study queues, most promising first: their
#: intervals straddle the SLO, so the predictions cannot rank them and a study measures a few.
UNDECIDED_QUEUED = 2


def knowledge_configs(store: TrialStore, question: StudyQuestion, *, use_recommendation: bool,
                      best_known: int, models: ModelsSource, without: Sequence[str] = ()
                      ) -> list[WarmStartConfig]:
    """The planner's answer to ``question`` (when ``use_recommendation``; ``models`` as
    :func:`plan_recommendation` takes them) and then up to ``best_known`` best measured configs of
    the target on this hardware and workload meeting the SLO; no config twice. ``without``: the
    canonical JSON of configs the study queues already (its engine default, its --enqueue
    configs), passed over where the planner names them, so the next candidates take their
    place."""
    found: list[WarmStartConfig] = []
    if use_recommendation:
        found += planned_configs(store, question, models=models, without=without)
    if best_known:
        trials = store.list_trials(TrialFilter(
            target=question.target, status=TrialStatus.COMPLETE,
            hardware_key=question.hardware_key, workload_hash=question.workload.spec_hash))
        found += [WarmStartConfig(dict(t.config), "best-known")
                  for t in best_measured(trials, question.slo, question.objective, best_known)]
    return unique_configs(found)


def _ask(store: TrialStore, question: StudyQuestion, models: ModelsSource, *,
         hardware: str, measured: bool = False) -> Answer | None:
    """The planner's answer to ``question`` on ``hardware``, or None where it cannot answer
    (not an error: a new question may have no answer)."""
    # Here, not at import: the planner costs a tune that computes no warm start (--resume,
    # --no-warm-start, bad input) a fifth of a CPU-second.
    from advisor.answers.planner import plan_recommendation
    from advisor.answers.request import RecommendationRequest

    try:
        request = RecommendationRequest(
            target=question.target, slo=str(question.slo), objective=str(question.objective),
            hardware=hardware, model=question.model, measured=measured,
            workload=workload_features(question.workload.spec))
        return plan_recommendation(store, request, models=models)
    except (AdvisorError, ValidationError) as exc:
        log.info("no warm-start recommendation for %s on %s: %s", question.describe(),
                 hardware, exc)
        return None


def planned_configs(store: TrialStore, question: StudyQuestion, *, models: ModelsSource,
                    without: Sequence[str] = ()) -> list[WarmStartConfig]:
    """The config the planner answers ``question`` with, or, where its answer is ``undecided``
    (candidates' intervals straddle the SLO), the first :data:`UNDECIDED_QUEUED` candidates it
    would measure to decide, passing over those in ``without`` (canonical JSON): a study is that
    measurement. On a GPU the planner knows only from a calibration, also its measured answer on
    the machine with the most trials of the model (:func:`elsewhere_config`): after a config the
    calibration recommends, before the candidates of an undecided one. Empty when it recommends
    nothing or cannot answer yet."""
    answer = _ask(store, question, models, hardware=question.hardware_key)
    if answer is None:
        return []
    source = "calibration" if answer.basis == "calibration" else "recommendation"
    found: list[WarmStartConfig] = []
    if answer.found and answer.config is not None:
        found.append(WarmStartConfig(dict(answer.config), source))
    elif answer.status == "undecided":
        named = ((answer.details or {}).get("calibration") or {}).get("to_measure") or [
            (answer.closest or {}).get("config")]
        defaults = get_target(question.target).space().default_config()
        picked = [c for c in named if isinstance(c, Mapping)
                  and canonical_json({**defaults, **c}) not in without]
        found += [WarmStartConfig(dict(c), source) for c in picked[:UNDECIDED_QUEUED]]
    if answer.basis == "calibration":
        elsewhere = elsewhere_config(store, question, models)
        if elsewhere is not None:
            # A config the calibration recommends goes first. An undecided one only says that
            # its candidates' intervals straddle the SLO (on a calibrated GPU they often lie
            # within noise of each other): then the config measured best on another machine
            # goes first, a knob the calibration cannot carry may be what helps.
            found.insert(1 if answer.found else 0, elsewhere)
    return found


def most_measured_elsewhere(store: TrialStore, question: StudyQuestion) -> str | None:
    """The hardware other than ``question``'s with the most stored trials of its target serving
    its model (the planner's count, ``evidence_by_hardware``), or None."""
    from advisor.answers.planner import evidence_by_hardware

    if question.model is None:
        return None
    counts = evidence_by_hardware(store.list_studies(question.target), question.model)
    counts.pop(question.hardware_key, None)
    return max(counts, key=lambda k: (counts[k], k)) if counts else None


def elsewhere_config(store: TrialStore, question: StudyQuestion, models: ModelsSource
                     ) -> WarmStartConfig | None:
    """The config the planner recommends from measured windows alone (``--measured``) for the
    same question on the machine with the most trials of the model: a calibration carries only a
    few knobs to a new GPU, and the best config measured elsewhere is a guess worth one trial
    there. None where no other machine measured the model or its answer recommends nothing."""
    hardware = most_measured_elsewhere(store, question)
    if hardware is None:
        return None
    answer = _ask(store, question, models, hardware=hardware, measured=True)
    if answer is None or not answer.found or answer.config is None:
        return None
    return WarmStartConfig(dict(answer.config), "elsewhere")


def fitted_models(store: TrialStore, settings: Settings, target: str) -> KnowledgeModels | None:
    """The surrogate models a warm start asks the recommender with: the all-target set `advisor
    knowledge fit` saved when it is current, else ``target``'s own as cached, even when trials
    were stored since (fitted now only when there are none); None when they cannot be fitted.

    Stale models are good enough for a first guess, and a refit before every study would cost
    up to a minute each time; the best measured configs, which a warm start also queues, come
    from the store as it is. `advisor recommend` and `advisor knowledge fit` refresh the cache.
    """
    try:
        full = ModelCache(store, settings.cache_dir).peek()
        if full is not None:
            return full
        return ModelCache(store, settings.cache_dir, target=target,
                          shared_dir=settings.shared_model_dir).get(refit=False)
    except AdvisorError as exc:
        log.info("no models for %s yet: %s", target, exc)
        return None


def _calibrated(store: TrialStore, question: StudyQuestion) -> bool:
    """Whether a calibration profile of ``question``'s target describes its hardware: the
    planner can then answer from it before any trial was measured there (the models are fitted
    only if the planner needs them)."""
    return any(p.hardware_key == question.hardware_key
               for p in list_profiles(store, target=question.target))


def _queued_before(spec: StudySpec, space: SearchSpace) -> list[dict[str, Any]]:
    """The configs a new study queues before the warm start, by the driver's rules
    (``StudyDriver.run``): the engine default when included and consistent with the fixed
    knobs, then the enqueued ones completed."""
    default = space.default_config()
    queued = []
    if spec.include_default and default_agrees(default, spec.fixed):
        queued.append(default)
    return [*queued, *complete_enqueued(space, spec.fixed, spec.enqueued)]


def study_warm_start(store: TrialStore, settings: Settings, spec: StudySpec, *,
                     hardware_key: str | None = None, best_known: int = BEST_KNOWN,
                     say: Callable[[str], None] = log.info) -> list[WarmStartConfig]:
    """The warm start of the new study ``spec`` on ``hardware_key`` (default: this machine's):
    :func:`knowledge_configs`, then the target's starting points, completed with the engine
    defaults and checked against the space and the study's fixed knobs (one that fails is
    skipped, and said unless it is a starting point), without the configs the study already
    queues, at most ``best_known`` best-known ones, and no more than its budget leaves.

    The models are fitted only when the store holds complete trials of the target on this
    hardware: without them the recommender could not answer, and a fit can take a minute.
    """
    question = StudyQuestion.of(spec, hardware_key or this_hardware())
    target = get_target(spec.target)
    space = target.space()
    queued = _queued_before(spec, space)
    room = spec.n_trials - len(queued)
    if room <= 0:
        log.info("warm start of %s: the default and enqueued configs fill its %d trials",
                 spec.name, spec.n_trials)
        return []
    found: list[WarmStartConfig] = []
    on_hardware = store.count_matching(TrialFilter(
        target=spec.target, status=TrialStatus.COMPLETE, hardware_key=question.hardware_key))
    if on_hardware or _calibrated(store, question):

        def models() -> KnowledgeModels:
            fitted = fitted_models(store, settings, spec.target)
            if fitted is None:
                raise AdvisorError(f"no fitted models for {spec.target} yet")
            return fitted

        # Ask for more best-known configs than are kept: some may repeat a queued config.
        found = knowledge_configs(store, question, use_recommendation=True,
                                  best_known=best_known + len(queued) + 1, models=models,
                                  without=tuple(canonical_json(c) for c in queued))
    found += [WarmStartConfig(dict(c), TEXTBOOK) for c in target.starting_points(spec.workload)]
    seen = {canonical_json(c) for c in queued}
    kept: list[WarmStartConfig] = []
    for item in found:
        try:
            (config,) = complete_enqueued(space, spec.fixed, [item.config])
        except AdvisorError as exc:  # e.g. a knob the space no longer has, or a fixed-knob clash
            # A textbook point another family's fixed knobs rule out is expected, not news.
            (log.info if item.source == TEXTBOOK else say)(_skipped(item, exc))
            continue
        if canonical_json(config) in seen:
            continue
        known = sum(k.source == "best-known" for k in kept)
        if item.source == "best-known" and known >= best_known:
            continue
        seen.add(canonical_json(config))
        kept.append(WarmStartConfig(config, item.source))
    return kept[:room]


def queue_warm_start(driver: StudyDriver, name: str, configs: Sequence[WarmStartConfig], *,
                     say: Callable[[str], None] = log.info) -> list[WarmStartConfig]:
    """Enqueue ``configs`` in study ``name`` through the driver's checked enqueue path, each with
    role ``warm-start`` and its ``source``; one the study refuses is skipped and said. Returns
    the ones queued."""
    queued = []
    for item in configs:
        try:
            driver.enqueue(name, [item.config], role=ROLE, attrs={"advisor_source": item.source})
        except AdvisorError as exc:
            say(_skipped(item, exc))
            continue
        queued.append(item)
    return queued


def _skipped(item: WarmStartConfig, exc: AdvisorError) -> str:
    # complete_enqueued names the config's place in a list of one; here its source names it.
    why = re.sub(r"^enqueued config 1:? ", "", str(exc))
    return f"warm start: a {item.source} config skipped ({why})"


def summary_line(queued: Sequence[WarmStartConfig]) -> str:
    """One line: how many warm-start configs were queued, and from where."""
    if not queued:
        return "warm start: nothing to queue for this SLO, workload and hardware"
    counts: dict[str, int] = {}
    for item in queued:
        counts[item.source] = counts.get(item.source, 0) + 1
    sources = ", ".join(f"{n} {source}" for source, n in counts.items())
    return f"warm start: {len(queued)} config(s) queued ({sources})"


def warm_start_hook(driver: StudyDriver, spec: StudySpec, *, hardware_key: str | None = None,
                    say: Callable[[str], None] | None = None) -> Callable[[StudyRecord], None]:
    """The ``on_created`` callback of ``driver.run(spec)`` that warm-starts the new study: right
    after its engine default and enqueued configs, it queues :func:`study_warm_start`'s configs
    and says in one line how many, and from where (``say``: the driver reporter's
    ``preparing`` unless given). The study records the warm start pending from its creation
    (``spec.warm_start``) and queued once this returns, so a process killed in between (the
    model fit can take minutes) leaves it to :func:`pending_warm_start` on resume."""
    tell = say or driver.reporter.preparing

    def on_created(study: StudyRecord) -> None:
        _queue_pending(driver, study, spec, hardware_key=hardware_key, say=tell)

    return on_created


def pending_warm_start(driver: StudyDriver, *, hardware_key: str | None = None,
                       say: Callable[[str], None] | None = None
                       ) -> Callable[[StudyRecord], None]:
    """The ``on_opened`` callback of ``driver.resume``: a study whose creation was killed
    before its warm start was queued gets it now (configs it already holds are not queued
    twice); any other study is left as it is."""
    tell = say or driver.reporter.preparing

    def on_opened(study: StudyRecord) -> None:
        if (study.spec or {}).get("warm_start") != WARM_START_PENDING:
            return
        stored = StoredStudy.of(study)
        spec = dataclasses.replace(stored.spec, n_trials=driver.search_budget(study))
        tell("warm start: the study's creation was stopped before its warm start was queued; "
             "queueing it now")
        _queue_pending(driver, study, spec, hardware_key=hardware_key, say=tell)

    return on_opened


def _queue_pending(driver: StudyDriver, study: StudyRecord, spec: StudySpec, *,
                   hardware_key: str | None, say: Callable[[str], None]) -> None:
    """Find and queue the warm start of ``study`` (skipping configs it already holds, queued
    or measured), then record it queued."""
    found = study_warm_start(driver.store, driver.settings, spec, hardware_key=hardware_key,
                             say=say)
    held = driver.held_configs(study.name)
    found = [item for item in found if canonical_json(item.config) not in held]
    say(summary_line(queue_warm_start(driver, study.name, found, say=say)))
    driver.store.update_study_spec(study.id or 0, {"warm_start": WARM_START_QUEUED})

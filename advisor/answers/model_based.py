"""Recommenders: SLO + target + hardware + model + workload -> a config.

Two paths. :func:`recommend` is model-based: it predicts every candidate config's metrics at the
asked workload with the fitted surrogates (knowledge/surrogates/) and returns the config that
maximises the objective while the *conservative* end of every SLO metric's interval meets the SLO,
with the nearest measured trials as evidence, a confidence verdict, and the launch command. Where
none does, it refuses (``no_feasible_config``) only when every candidate misses, measured or even
at its intervals' optimistic ends; a candidate whose intervals straddle the SLO makes the answer
``undecided``, with the ``advisor tune`` command that measures that candidate. Outside
the data (other hardware, model, or a workload far from anything measured) it answers
``not_covered`` with the ``advisor tune`` command that would fill the gap.

:func:`recommend_measured` is the evidence path: the best *measured* trial meeting the SLO asked
now (not the SLO its study used). Only measured figures, no predictions.
"""

from __future__ import annotations

import functools
import json
import math
import statistics
import threading
import weakref
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from advisor.answers.document import Figure
from advisor.answers.headroom import (
    Headroom,
    bound_margin,
    margins_with_headroom,
    measured_headroom,
)
from advisor.answers.rule import (
    Verdict,
    measured_figures,
    measured_verdict,
    predicted_verdict,
    straddle_reason,
    undecided,
)
from advisor.answers.versus_default import Answer, DefaultComparison, decide, paired_between
from advisor.errors import AdvisorError, SLOParseError, WorkloadError
from advisor.failure_gate import failure_model
from advisor.inputs import check_label, check_numbers, requested_slo
from advisor.objective import Objective
from advisor.presets import known_model
from knowledge import TrialFilter, TrialRecord, TrialStatus, TrialStore
from knowledge.cache import KnowledgeModels, data_key
from knowledge.failures import StartFacts, start_workload_features
from knowledge.load_curve import HEAVY_LOAD
from knowledge.surrogates import (
    ContextModels,
    WorkloadPoint,
    launch_params,
    workload_distance,
    workload_features,
    workload_params,
)
from objectives import SLO
from objectives.hardware import hardware_matches
from objectives.llm.models import MODEL_SHAPES
from objectives.registry import get_target
from objectives.target import Target
from objectives.workload import Workload, canonical_json
from search_spaces import SearchSpace

__all__ = ["ModelRecommendation", "PredictedMetric", "Recommendation", "RecommendationQuery",
           "recommend", "recommend_measured", "trial_model"]


@dataclass(frozen=True)
class Recommendation:
    """The answer to one SLO question from measurements alone.

    ``trial`` is the best measured trial that meets the SLO, or None when no measured trial does;
    then ``closest`` is the trial that came nearest (smallest summed violation) and
    ``tune_command`` the command that would cover the gap (None when no command can: a model
    that is neither a known shape nor a local directory; ``reason`` says so). ``model`` and
    ``workload`` are what was asked; ``borrowed_workload`` names the measured workload the answer
    comes from when none was measured within 10 % of the asked one.
    """

    slo: SLO
    objective: Objective
    target: str
    hardware_key: str | None
    considered: int
    feasible_count: int
    trial: TrialRecord | None = None
    margins: dict[str, float] = field(default_factory=dict)
    closest: TrialRecord | None = None
    closest_margins: dict[str, float] = field(default_factory=dict)
    launch_command: str | None = None
    tune_command: str | None = None
    default_trial: TrialRecord | None = None
    #: ``config`` (``trial`` is the best measured config), ``keep_defaults`` (``trial`` is the
    #: engine default: it meets the SLO and the best is not better beyond the noise) or ``none``.
    answer: Answer = "none"
    #: The best config against the engine default under the same workload
    #: (advisor/answers/versus_default.py).
    baseline: DefaultComparison | None = None
    model: str | None = None
    workload: dict[str, float] = field(default_factory=dict)
    borrowed_workload: dict[str, Any] | None = None
    reason: str | None = None
    #: The margin kept on each quality bound whose metric can differ between builds of one
    #: config (advisor/answers/headroom.py): a trial meets the SLO only with that margin to spare.
    quality_headroom: dict[str, Headroom] = field(default_factory=dict)
    #: The answered config's windows at the workload (``trial`` is the one with the median
    #: objective among them), its verdict and figures by the one rule; the default's likewise.
    windows: tuple[TrialRecord, ...] = ()
    verdict: Verdict | None = None
    figures: dict[str, Figure] = field(default_factory=dict)
    default_windows: tuple[TrialRecord, ...] = ()
    default_verdict: Verdict | None = None
    default_figures: dict[str, Figure] = field(default_factory=dict)
    configs_considered: int = 0
    configs_meeting_slo: int = 0

    @property
    def found(self) -> bool:
        return self.trial is not None

    def to_dict(self) -> dict[str, Any]:
        def trial_dict(t: TrialRecord | None) -> dict[str, Any] | None:
            if t is None:
                return None
            return {"trial_id": t.id, "study_id": t.study_id, "number": t.number,
                    "config": t.config, "metrics": t.metrics, "hardware_key": t.hardware_key,
                    "model": trial_model(t), "workload": t.workload_spec,
                    "engine_versions": t.engine_versions}

        return {
            "found": self.found, "target": self.target, "slo": str(self.slo),
            "objective": str(self.objective), "hardware_key": self.hardware_key,
            "model": self.model, "workload_asked": self.workload,
            "basis": "measured",  # every figure below was measured, none predicted
            "trials_considered": self.considered, "trials_meeting_slo": self.feasible_count,
            "recommended": trial_dict(self.trial), "slo_margins": self.margins,
            "launch_command": self.launch_command,
            "closest": trial_dict(self.closest), "closest_margins": self.closest_margins,
            "engine_default": trial_dict(self.default_trial),
            "borrowed_workload": self.borrowed_workload, "reason": self.reason,
            "tune_command": self.tune_command,
            "answer": self.answer,
            "baseline": None if self.baseline is None else self.baseline.to_dict(),
            "quality_headroom": {m: h.to_dict() for m, h in self.quality_headroom.items()},
        }


def _violation(margins: dict[str, float]) -> float:
    return sum(max(m, 0.0) for m in margins.values())


def trial_model(trial: TrialRecord) -> str | None:
    """The model shape (or path) a trial served, from its workload spec; None for non-LLM."""
    model = (trial.workload_spec.get("params") or {}).get("model")
    return str(model) if model else None


def _nearest_workload(trials: list[TrialRecord], asked: Mapping[str, float]
                      ) -> tuple[list[TrialRecord], dict[str, Any] | None]:
    """The trials measured at the asked workload (every feature within 10 %), else those of the
    nearest measured workload together with what was borrowed (name, features, factor)."""
    if not asked or not trials:
        return trials, None
    dist = {t.id: workload_distance(asked, workload_features(t.workload_spec)) for t in trials}
    nearest = min(dist.values())
    if nearest <= SAME_WORKLOAD:
        return [t for t in trials if dist[t.id] <= SAME_WORKLOAD], None
    # The nearest workload: the one with most trials among those at the smallest distance.
    at_nearest = [t for t in trials if dist[t.id] <= nearest + 1e-12]
    counts: dict[str, int] = {}
    for t in at_nearest:
        counts[t.workload_hash] = counts.get(t.workload_hash, 0) + 1
    chosen = max(counts, key=lambda h: (counts[h], h))
    kept = [t for t in at_nearest if t.workload_hash == chosen]
    spec = kept[0].workload_spec
    return kept, {"name": spec.get("name"), "spec_hash": chosen,
                  "features": workload_features(spec), "factor": round(math.exp(nearest), 3),
                  "trials": len(kept)}


def recommend_measured(store: TrialStore, *, target: str, slo: SLO, objective: Objective,
                       hardware_key: str | None = None, workload_hash: str | None = None,
                       model: str | None = None, workload: Mapping[str, Any] | None = None,
                       launch_model: str | None = None) -> Recommendation:
    """The best measured trial of ``target`` meeting ``slo`` by ``objective``.

    The evidence is narrowed the way the model-based path narrows it: ``hardware_key`` (part of
    a key) to one machine, ``model`` to trials that served that model (no trial of another model
    ever answers), ``workload`` (features such as ``rate_rps``, ``n_vectors``) to trials measured
    within 10 % of it, else to the nearest measured workload, named in ``borrowed_workload``.
    ``workload_hash`` restricts to one exact workload.
    """
    check_workload_features(workload or {})
    engine = get_target(target)
    slo.check_metrics(target, engine.reported_metrics())
    asked = workload_features(dict(workload or {}))
    trials = _complete_trials(store, target, hardware_key, workload_hash)
    usable = [t for t in trials if t.metrics.get(objective.metric) is not None
              and all(t.metrics.get(m) is not None for m in slo.metrics)]
    answer = Recommendation(slo=slo, objective=objective, target=target,
                            hardware_key=hardware_key, considered=0, feasible_count=0,
                            model=model, workload=asked)
    tune = _tune_command(target, slo, objective, model=model, features=asked)
    if model is not None:
        measured_models = sorted({str(trial_model(t)) for t in usable})
        usable = [t for t in usable if trial_model(t) == model]
        if not usable:
            where = f"hardware {hardware_key!r}" if hardware_key else "any hardware"
            reason = (f"no measured {target} trial served model {model!r} on {where} (measured "
                      f"models: {', '.join(measured_models) or 'none'})")
            return replace(answer, reason=reason + _untunable(model), tune_command=tune)
    machines = Counter(t.hardware_key for t in usable)
    if len(machines) > 1:
        # A partial key matching several machines: windows of two machines are two workloads,
        # so the machine with the most trials answers, and is named.
        chosen = max(machines, key=lambda k: (machines[k], k))
        usable = [t for t in usable if t.hardware_key == chosen]
    if usable:
        answer = replace(answer, hardware_key=usable[0].hardware_key)
    usable, borrowed = _nearest_workload(usable, asked)
    headroom = measured_headroom(usable, _rebuild_varying(engine, slo))
    answer = replace(answer, quality_headroom=headroom)
    metrics = list(dict.fromkeys([objective.metric, *slo.metrics]))
    # One group of windows per config (the same config measured at this workload several
    # times), judged by the one rule; the default is found by its config, whatever role its
    # trials were recorded with.
    groups: dict[str, list[TrialRecord]] = {}
    for t in usable:
        # One config is one group per model: windows of two models are two workloads.
        groups.setdefault(json.dumps([trial_model(t), _same_config(target, t.config)]),
                          []).append(t)
    # The defaults of the machine the windows were measured on (a default such as "all cores"
    # is that machine's, not the asker's).
    default_config = _space(target).default_config(machine=usable[0].hardware if usable
                                                   else None)
    default_key = _default_key(groups, default_cfg_key := _config_key(default_config), model)
    judged = {k: measured_verdict(slo, [t.metrics for t in g], headroom, [t.id or 0 for t in g])
              for k, g in groups.items()}
    figures = {k: _measured_figures(g, metrics) for k, g in groups.items()}
    meeting = [k for k in groups if judged[k].meets]
    answer = replace(answer, considered=len(usable), borrowed_workload=borrowed,
                     feasible_count=sum(judged[k].windows_met for k in groups),
                     configs_considered=len(groups), configs_meeting_slo=len(meeting))

    def with_default(answer: Recommendation, key: str | None) -> Recommendation:
        if key is None:
            return replace(answer, default_windows=(), default_verdict=None,
                           default_figures={}, default_trial=None)
        return replace(answer, default_windows=tuple(groups[key]), default_verdict=judged[key],
                       default_figures=figures[key],
                       default_trial=_median_window(groups[key], objective))

    answer = with_default(answer, default_key)
    if not meeting:
        def violation(k: str) -> float:
            return _violation(judged[k].margins) if judged[k].margins else float("inf")
        nearest = min(groups, key=violation) if groups else None
        closest = None if nearest is None else _median_window(groups[nearest], objective)
        return replace(answer, closest=closest,
                       closest_margins=judged[nearest].margins if nearest else {},
                       tune_command=tune, reason=_untunable(model).removeprefix("; ") or None)
    sign = 1.0 if objective.direction == "maximize" else -1.0
    best_key = max(meeting, key=lambda k: (sign * figures[k][objective.metric].value
                                           if objective.metric in figures[k] else -math.inf,
                                           len(groups[k])))
    best = _median_window(groups[best_key], objective)
    # The default to compare with is the one measured on the best's model.
    default_key = _default_key(groups, default_cfg_key, trial_model(best))
    answer = with_default(answer, default_key)
    launch = _launch_or_none(engine, best, launch_model)
    answer = replace(answer, trial=best, margins=judged[best_key].margins, launch_command=launch,
                     windows=tuple(groups[best_key]), verdict=judged[best_key],
                     figures=figures[best_key])
    return _versus_default(store, engine, answer, default_key=default_key,
                           groups=groups, figures=figures, launch_model=launch_model)


def _launch_or_none(engine: Target, trial: TrialRecord, launch_model: str | None) -> str | None:
    """The launch command of ``trial``'s config, or None where this machine's engine cannot
    build one (a config measured elsewhere: 15 threads where this CPU has 2)."""
    try:
        return engine.launch_command(trial.config, _launch_workload(trial, launch_model))
    except AdvisorError:
        return None


def _launch_workload(trial: TrialRecord, launch_model: str | None) -> Workload:
    """``trial``'s workload, serving ``launch_model`` when given."""
    spec = dict(trial.workload_spec)
    if launch_model is not None:
        spec["params"] = {**(spec.get("params") or {}), "model": launch_model}
    return Workload.from_spec(spec)


#: The complete trials a measured answer reads, per store and filter, with the store's data key
#: they were read at: a repeated question (an audit asks hundreds) reads them once per version.
_TRIALS: dict[tuple[str, str, str | None, str | None], tuple[Any, list[TrialRecord]]] = {}
_TRIALS_LOCK = threading.Lock()


def _complete_trials(store: TrialStore, target: str, hardware_key: str | None,
                     workload_hash: str | None) -> list[TrialRecord]:
    version = data_key(store)
    key = (store.url, target, hardware_key, workload_hash)
    with _TRIALS_LOCK:
        hit = _TRIALS.get(key)
    if hit is not None and hit[0] == version:
        return hit[1]
    trials = store.list_trials(TrialFilter(target=target, status=TrialStatus.COMPLETE,
                                           hardware_key=hardware_key,
                                           workload_hash=workload_hash))
    with _TRIALS_LOCK:
        if len(_TRIALS) > 64:
            _TRIALS.clear()
        _TRIALS[key] = (version, trials)
    return trials


def _measured_figures(windows: list[TrialRecord], metrics: list[str]) -> dict[str, Figure]:
    return {m: Figure(value=v, low=lo, high=hi, basis="measured", windows=n)
            for m, (v, lo, hi, n) in measured_figures([t.metrics for t in windows],
                                                      metrics).items()}


def _median_window(windows: list[TrialRecord], objective: Objective) -> TrialRecord:
    """The window whose objective is the median of the group's (the latest among equals)."""
    ordered = sorted(windows, key=lambda t: (float(t.metrics.get(objective.metric, math.nan)
                                                   if isinstance(t.metrics.get(objective.metric),
                                                                 int | float) else math.inf),
                                             t.id or 0))
    return ordered[(len(ordered) - 1) // 2]


def _default_key(groups: Mapping[str, list[TrialRecord]], default_key: str,
                 model: str | None) -> str | None:
    """The group (``[model, config]`` keys) of the engine default's windows for ``model``
    (any model's, the most windows, when None)."""
    found = [k for k in groups if json.loads(k)[1] == default_key
             and (model is None or json.loads(k)[0] == model)]
    return max(found, key=lambda k: len(groups[k])) if found else None


#: Per fitted context (``id`` and a weak reference, so a refitted context is never mistaken for
#: an older one at the same address): its headroom per tuple of metrics.
_HEADROOM: dict[int, tuple[weakref.ref[ContextModels], dict[tuple[str, ...],
                                                          dict[str, Headroom]]]] = {}
_HEADROOM_LOCK = threading.Lock()


def _context_headroom(store: TrialStore, ctx: ContextModels, engine: Target, slo: SLO
                      ) -> dict[str, Headroom]:
    """The quality headroom over the trials the context's models were fitted on: read from the
    store once per fitted context and metrics (those trials are the fit's; a change to them
    makes a new fit), not on every answer."""
    metrics = tuple(_rebuild_varying(engine, slo))
    if not metrics:
        return {}
    with _HEADROOM_LOCK:
        ref, known = _HEADROOM.get(id(ctx), (None, {}))
        if ref is None or ref() is not ctx:
            for key in [k for k, (r, _) in _HEADROOM.items() if r() is None]:
                del _HEADROOM[key]
            known = {}
            _HEADROOM[id(ctx)] = (weakref.ref(ctx), known)
        if metrics in known:
            return known[metrics]
    ids = set(ctx.trial_ids)
    trials = store.list_trials(TrialFilter(target=engine.name, status=TrialStatus.COMPLETE,
                                           hardware_key=ctx.key.hardware_key))
    headroom = measured_headroom([t for t in trials if t.id in ids], metrics)
    with _HEADROOM_LOCK:
        known[metrics] = headroom
    return headroom


def _rebuild_varying(engine: Target, slo: SLO) -> list[str]:
    """The SLO's metrics that can differ between builds of one config on ``engine``."""
    return [m for m in dict.fromkeys(slo.metrics) if m in engine.rebuild_varying_metrics]


def _meets(slo: SLO, metrics: Mapping[str, float], headroom: Mapping[str, Headroom]) -> bool:
    return all(m <= 0 for m in margins_with_headroom(slo, metrics, headroom).values())


def _untunable(model: str | None) -> str:
    """Why no ``advisor tune`` command is suggested for ``model`` ('' when one is)."""
    if model is None or known_model(model):
        return ""
    return (f"; {model!r} is not a model shape advisor tune knows ({', '.join(MODEL_SHAPES)}): "
            "tune it from a local model directory holding its config.json (--model DIR)")


def _versus_default(store: TrialStore, engine: Target, answer: Recommendation, *,
                    default_key: str | None, groups: Mapping[str, list[TrialRecord]],
                    figures: Mapping[str, dict[str, Figure]],
                    launch_model: str | None = None) -> Recommendation:
    """``answer`` (the best measured config) against the engine default's windows at the same
    workload (advisor/answers/versus_default.py), the default judged by the same rule as the best.
    When the
    default meets the SLO and the best is not better beyond the noise, the answer is the
    default itself (``keep_defaults``)."""
    best = answer.trial
    assert best is not None
    metrics = list(dict.fromkeys([answer.objective.metric, *answer.slo.metrics]))
    defaults = list(groups[default_key]) if default_key is not None else []
    default = answer.default_trial
    default_figures = ({m: f.value for m, f in figures[default_key].items()}
                       if default_key is not None else {})
    best_key = json.dumps([trial_model(best), _same_config(answer.target, best.config)])
    verdict = decide(
        objective=answer.objective, slo=answer.slo, candidate_config=best.config,
        candidate_figures={m: f.value for m, f in figures[best_key].items() if m in metrics},
        default_config=None if default is None else default.config,
        default_figures=default_figures,
        default_meets_slo=(None if answer.default_verdict is None
                           else answer.default_verdict.meets),
        default_objective_values=[float(t.metrics[answer.objective.metric]) for t in defaults
                                  if t.metrics.get(answer.objective.metric) is not None],
        paired=None if default is None else paired_between(
            store, target=answer.target, hardware_key=best.hardware_key, candidate=best.config,
            default=default.config,
            same_workload=lambda s: s.workload_hash in {t.workload_hash for t in groups[
                best_key]}),
        default_figures_basis="measured" if default is not None else None,
        default_source=(f"measured at this workload ({len(defaults)} windows)"
                        if defaults else None),
        default_trials=[t.id or 0 for t in defaults],
        default_verdict=None if answer.default_verdict is None else answer.default_verdict.text())
    answer = replace(answer, answer=verdict.answer, baseline=verdict)
    # When the best is itself the default, it stays: it is the measurement that met the SLO.
    if verdict.answer == "keep_defaults" and default is not None and verdict.basis != "is_default":
        launch = _launch_or_none(engine, default, launch_model)
        answer = replace(answer, trial=default, launch_command=launch,
                         margins=(answer.default_verdict.margins if answer.default_verdict
                                  else {}),
                         windows=tuple(defaults), verdict=answer.default_verdict,
                         figures=answer.default_figures)
    return answer


# -- the model-based recommender ---------------------------------------------------------------

#: Workload distance (largest |log ratio| of a feature) under which a workload counts as measured.
SAME_WORKLOAD = math.log(1.1)
#: Beyond this distance from every measured workload, outside the measured range, the question
#: is not covered: a factor 2 in arrival rate or corpus size changes which configs are feasible.
FAR_WORKLOAD = math.log(2.0)
#: Candidate configs evaluated per query (measured configs first, then one-knob variations).
MAX_CANDIDATES = 600
#: Nearest measured trials returned as evidence.
EVIDENCE_TRIALS = 5
Status = Literal["recommended", "no_feasible_config", "undecided", "not_covered"]
Confidence = Literal["high", "medium", "low", "none"]


@dataclass(frozen=True)
class RecommendationQuery:
    """One question: which config of ``target`` meets ``slo`` on ``hardware`` for ``model`` at
    ``workload``?

    ``hardware`` is a hardware key or part of one (``h200``, ``cpu-amd-epyc-2c``); None means any
    measured hardware (the context with the most evidence is used, and named). ``workload`` holds
    workload features as the target's workload kind declares them (objectives/kinds/), e.g.
    ``rate_rps``, ``prompt_len`` and ``output_len`` medians (tokens) for LLM serving; ``n_vectors``,
    ``dim`` and ``k`` for vector search. Missing features are taken from the
    nearest measured workload. ``objective`` defaults to the target's (e.g. ``maximize:qps``).
    """

    target: str
    slo: str
    hardware: str | None = None
    model: str | None = None
    workload: dict[str, Any] = field(default_factory=dict)
    objective: str | None = None
    #: The features of ``model``'s shape (objectives.llm.shapes.ShapeFeatures.to_dict()) when
    #: the question gave a config.json (``--model-config``): what a model fitted over shapes needs
    #: to answer for a shape that was never measured.
    model_shape: dict[str, Any] | None = None
    #: What a launch command serves instead of the measured workload's model: the user's own
    #: model directory when they gave a config from one (never a random-weight directory).
    launch_model: str | None = None

    def __post_init__(self) -> None:
        for label, what in ((self.hardware, "the hardware"), (self.model, "the model")):
            if label is not None:
                check_label(label, what)
        check_workload_features(self.workload)


def check_workload_features(workload: Mapping[str, Any]) -> None:
    """Workload features of a question are finite, non-negative numbers of sane size (the CLI's
    flags and the API's ``workload`` both come here)."""
    check_numbers(dict(workload), "workload")
    for key, value in workload.items():
        if isinstance(value, int | float) and not isinstance(value, bool) and value < 0:
            raise WorkloadError(f"workload feature {key!r} must be >= 0, got {value}")


@dataclass(frozen=True)
class PredictedMetric:
    """A model prediction (never a measurement) with its 90 % interval."""

    value: float
    low: float
    high: float

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "low": self.low, "high": self.high, "basis": "predicted"}


@dataclass(frozen=True)
class EvidenceTrial:
    """A measured trial near the recommended config (in knob and workload space)."""

    trial_id: int
    study: str
    config: dict[str, Any]
    metrics: dict[str, float]
    workload: str
    workload_features: dict[str, float]
    meets_slo: bool
    same_config: bool
    distance: float

    def to_dict(self) -> dict[str, Any]:
        return {"trial_id": self.trial_id, "study": self.study, "config": self.config,
                "measured": self.metrics, "workload": self.workload,
                "workload_features": self.workload_features, "meets_slo": self.meets_slo,
                "same_config": self.same_config, "distance": round(self.distance, 4)}


@dataclass(frozen=True)
class ModelRecommendation:
    """The model-based answer to a :class:`RecommendationQuery`.

    ``status`` is ``recommended`` (``config`` set), ``no_feasible_config`` (the models cover the
    question, but every candidate misses the SLO, measured or even at the optimistic end of its
    intervals; ``closest`` is the nearest miss), ``undecided`` (no candidate meets by the rule,
    but ``closest``'s intervals straddle the SLO: ``tune_command`` measures it) or
    ``not_covered`` (the store has no knowledge for this hardware / model / workload;
    ``tune_command`` would produce it). ``predicted`` figures are model predictions with 90 %
    intervals; ``evidence`` holds measured trials.
    """

    status: Status
    target: str
    slo: SLO
    objective: Objective
    confidence: Confidence
    confidence_reason: str
    tune_command: str | None
    hardware_key: str | None = None
    model: str | None = None
    context: dict[str, Any] | None = None
    workload: dict[str, float] = field(default_factory=dict)
    config: dict[str, Any] | None = None
    predicted: dict[str, PredictedMetric] = field(default_factory=dict)
    conservative_margins: dict[str, float] = field(default_factory=dict)
    evidence: tuple[EvidenceTrial, ...] = ()
    launch_command: str | None = None
    borrowed_workload: dict[str, Any] | None = None
    model_quality: dict[str, dict[str, Any]] = field(default_factory=dict)
    candidates_considered: int = 0
    candidates_feasible: int = 0
    closest: dict[str, Any] | None = None
    notes: tuple[str, ...] = ()
    #: ``config`` (``config`` is the best candidate), ``keep_defaults`` (``config`` is the engine
    #: default: it meets the SLO and the best candidate is not better beyond the noise) or
    #: ``none`` (nothing recommended).
    answer: Answer = "none"
    #: The best candidate against the engine default at this workload
    #: (advisor/answers/versus_default.py).
    baseline: DefaultComparison | None = None
    #: The margin kept on quality bounds whose metric can differ between builds of one config,
    #: measured from rebuilds in the context's trials (advisor/answers/headroom.py).
    quality_headroom: dict[str, Headroom] = field(default_factory=dict)
    #: The answered config's verdict and figures by the one rule (advisor/answers/rule.py):
    #: measured at this workload where it has windows here, else predicted.
    verdict: Verdict | None = None
    figures: dict[str, Figure] = field(default_factory=dict)
    #: The engine default's, by the same rule.
    default_verdict: Verdict | None = None
    default_figures: dict[str, Figure] = field(default_factory=dict)

    @property
    def found(self) -> bool:
        return self.status == "recommended"

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status, "basis": "model", "target": self.target,
            "slo": str(self.slo), "objective": str(self.objective),
            "hardware_key": self.hardware_key, "model": self.model, "context": self.context,
            "workload": self.workload, "config": self.config,
            "predicted": {m: p.to_dict() for m, p in self.predicted.items()},
            "predicted_note": "model predictions with 90% intervals, not measurements; "
                              "'evidence' holds the measured trials",
            "conservative_slo_margins": self.conservative_margins,
            "evidence": [e.to_dict() for e in self.evidence],
            "launch_command": self.launch_command, "confidence": self.confidence,
            "confidence_reason": self.confidence_reason,
            "borrowed_workload": self.borrowed_workload, "tune_command": self.tune_command,
            "model_quality": self.model_quality,
            "candidates": {"considered": self.candidates_considered,
                           "conservatively_feasible": self.candidates_feasible},
            "closest": self.closest, "notes": list(self.notes),
            "answer": self.answer,
            "baseline": None if self.baseline is None else self.baseline.to_dict(),
            "quality_headroom": {m: h.to_dict() for m, h in self.quality_headroom.items()},
        }


def _conservative_margins(slo: SLO, pred: Mapping[str, tuple[Any, Any, Any]], i: int,
                          headroom: Mapping[str, Headroom] | None = None) -> dict[str, float]:
    """Margin per bound at the interval end that is worse for the bound (``<=``: high), that
    end moved further by the metric's quality headroom (a rebuild may come out that far off)."""
    out: dict[str, float] = {}
    for b in slo.bounds:
        _, lo, hi = pred[b.metric]
        out[str(b)] = bound_margin(b, float(hi[i] if b.op == "<=" else lo[i]), headroom or {})
    return out


@functools.lru_cache(maxsize=32)
def _engine(target: str) -> Target:
    """One target instance per process: targets cache their parsed knob space."""
    return get_target(target)


_MACHINES: dict[tuple[str, str, str], dict[str, Any] | None] = {}


def machine_of(store: TrialStore, target: str, hardware_key: str) -> dict[str, Any] | None:
    """The hardware fingerprint a stored trial of ``target`` recorded on ``hardware_key`` (None:
    no trial): what the space's machine-valued defaults (``cpu_count``) resolve from when the
    answer is about that machine. One machine per key, so one lookup per process."""
    key = (store.url, target, hardware_key)
    if key not in _MACHINES:
        found = store.list_trials(TrialFilter(target=target, hardware_key=hardware_key, limit=1))
        _MACHINES[key] = dict(found[0].hardware) if found and found[0].hardware else None
    return _MACHINES[key]


@functools.lru_cache(maxsize=32)
def _space(target: str) -> SearchSpace:
    """A target's knob space, parsed once per process (answers must not re-read YAML)."""
    return _engine(target).space()


def _same_config(target: str, config: Mapping[str, Any]) -> str:
    """The key under which a stored config's windows are grouped: its knobs over the space's
    defaults, so the forms one engine config was recorded in (before and after a knob was added
    to the space, which then ran at its default) are one config with all their windows."""
    return _config_key({**_space(target).default_config(), **config})


def _config_key(config: Mapping[str, Any]) -> str:
    return canonical_json(dict(config))


def _candidates(ctx: ContextModels, space: SearchSpace, seeds: list[dict[str, Any]],
                limit: int) -> list[dict[str, Any]]:
    """One-knob variations of ``seeds`` over the values measured in the context (the models are
    only trusted near measured data, so no value outside what was measured is proposed)."""
    values: dict[str, list[Any]] = {}
    for config in ctx.configs:
        for k, v in config.items():
            if v not in values.setdefault(k, []):
                values[k].append(v)
    for k, vs in values.items():
        if len(vs) > 8 and all(isinstance(v, int | float) and not isinstance(v, bool)
                               for v in vs):
            ordered = sorted(vs)
            values[k] = [ordered[round(i * (len(ordered) - 1) / 7)] for i in range(8)]
    out: dict[str, dict[str, Any]] = {}
    for seed in seeds:
        for k, vs in values.items():
            if k not in seed:
                continue
            for v in vs:
                if v == seed[k]:
                    continue
                candidate = {**seed, k: v}
                key = _config_key(candidate)
                if key in out:
                    continue
                try:
                    space.validate_config(candidate)
                except AdvisorError:
                    continue
                out[key] = candidate
                if len(out) >= limit:
                    return list(out.values())
    return list(out.values())


Predictions = dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]


def _predict_reusing(ctx: ContextModels, configs: list[dict[str, Any]],
                     features: Mapping[str, float], needed: list[str],
                     known: list[dict[str, Any]], known_pred: Predictions) -> Predictions:
    """``ctx.predict(configs, ...)``, but the configs among ``known`` (predicted as
    ``known_pred`` at the same workload and metrics) are not predicted again: the measured
    configs were predicted to rank the seeds, and each config's prediction does not depend on
    the others predicted with it."""
    where = {_config_key(c): i for i, c in enumerate(known)}
    # Each config's row in the known predictions followed by the fresh ones.
    rows: list[int] = []
    fresh: list[dict[str, Any]] = []
    for c in configs:
        i = where.get(_config_key(c))
        if i is None:
            i = len(known) + len(fresh)
            fresh.append(c)
        rows.append(i)
    fresh_pred = ctx.predict(fresh, features, needed) if fresh else {}
    take = np.asarray(rows, dtype=int)
    out: Predictions = {}
    for metric, known_arrays in known_pred.items():
        if fresh and metric not in fresh_pred:
            continue
        more = fresh_pred[metric] if fresh else (np.empty(0),) * 3
        a, b, h = (np.concatenate([np.asarray(k, dtype=float), np.asarray(f, dtype=float)])[take]
                   for k, f in zip(known_arrays, more, strict=True))
        out[metric] = (a, b, h)
    return out


def _pick_context(models: KnowledgeModels, query: RecommendationQuery
                  ) -> tuple[ContextModels | None, str, list[str]]:
    """The context answering ``query``, or None with the reason it is not covered."""
    notes: list[str] = []
    contexts = models.for_target(query.target)
    if not contexts:
        return None, f"no fitted knowledge for target {query.target!r} yet", notes
    if query.hardware:
        on_hw = [c for c in contexts if hardware_matches(query.hardware, c.key.hardware_key)]
        if not on_hw:
            known = sorted({c.key.hardware_key for c in contexts})
            return None, (f"no {query.target} trials on hardware {query.hardware!r} (measured: "
                          f"{', '.join(known)}); performance does not transfer between "
                          "machines"), notes
        contexts = on_hw
    if query.model:
        for_model = [c for c in contexts if c.key.model == query.model]
        if not for_model:
            known = sorted({str(c.key.model) for c in contexts})
            return None, (f"no {query.target} trials for model {query.model!r} on this "
                          f"hardware (measured: {', '.join(known)})"), notes
        contexts = for_model
    best = max(contexts, key=lambda c: (c.n_trials, c.key.engine_version or ""))
    if len(contexts) > 1:
        notes.append(f"{len(contexts)} contexts match; answered from {best.key.label()} "
                     f"({best.n_trials} trials, the most evidence)")
    return best, "", notes


def _resolve_workload(ctx: ContextModels, asked: Mapping[str, Any]
                      ) -> tuple[dict[str, float], WorkloadPoint, float, bool, list[str]]:
    """Query features completed from the nearest measured workload.

    Returns (features, nearest measured workload, distance to it, inside the measured range,
    notes)."""
    notes: list[str] = []
    given = workload_features(dict(asked)) if asked else {}
    known = {f for w in ctx.workloads for f in w.features}
    ignored = sorted(set(given) - known)
    if ignored:
        notes.append(f"workload features {', '.join(ignored)} were never varied in this "
                     "context's trials and are ignored")
    given = {f: v for f, v in given.items() if f in known}
    nearest = min(ctx.workloads, key=lambda w: (workload_distance(given, w.features), -w.trials))
    features = {**nearest.features, **given}
    distance = workload_distance(features, nearest.features)
    ranges = ctx.workload_ranges()
    inside = all(ranges[f][0] * 0.999 <= v <= ranges[f][1] * 1.001
                 for f, v in features.items() if f in ranges)
    return features, nearest, distance, inside, notes


def _evidence(ctx: ContextModels, config: Mapping[str, Any], features: Mapping[str, float],
              slo: SLO, metrics: list[str]) -> list[EvidenceTrial]:
    X = ctx.X_ if ctx.X_ is not None else ctx.encoder.transform(ctx.configs, ctx.features)
    query = ctx.encoder.transform([config], [dict(features)])[0]
    with np.errstate(all="ignore"):
        scale = np.nanstd(X, axis=0)
    scale[~np.isfinite(scale) | (scale == 0)] = 1.0
    diff = np.abs(X - query) / scale
    diff[np.isnan(diff)] = 3.0  # a knob set on one side only: as far as a 3-sigma difference
    dist = np.sqrt((diff ** 2).mean(axis=1))
    same = _same_config(ctx.key.target, config)
    # The config's own windows at this workload come first, all of them: they decide its
    # verdict, so an answer cites every one (then the nearest others).
    own = [i for i, c in enumerate(ctx.configs) if _same_config(ctx.key.target, c) == same
           and workload_distance(features, ctx.features[i]) <= SAME_WORKLOAD]
    order = [*own, *(int(i) for i in np.argsort(dist, kind="stable") if int(i) not in own)]
    out: list[EvidenceTrial] = []
    for i in order[:max(EVIDENCE_TRIALS, len(own))]:
        measured = ctx.measured[int(i)]
        out.append(EvidenceTrial(
            trial_id=ctx.trial_ids[int(i)],
            study=ctx.trial_studies[int(i)] if ctx.trial_studies else "",
            config=ctx.configs[int(i)],
            metrics={m: measured[m] for m in metrics if m in measured},
            workload=next((_workload_label(w) for w in ctx.workloads
                           if w.spec_hash == ctx.trial_workload[int(i)]), ""),
            workload_features=ctx.features[int(i)], meets_slo=slo.is_met(measured),
            same_config=_same_config(ctx.key.target, ctx.configs[int(i)]) == same,
            distance=float(dist[int(i)])))
    return out


def _workload_label(w: WorkloadPoint) -> str:
    """``chat @60 req/s`` / ``stdlib-docs-8k N=6000``: the preset name and what was varied."""
    f = w.features
    extra = (f" @{f['rate_rps']:g} req/s" if "rate_rps" in f
             else f" N={f['n_vectors']:g}" if "n_vectors" in f else "")
    return w.name.split("@", 1)[0] + extra


def _tune_command(target: str, slo: SLO, objective: Objective, *, model: str | None = None,
                  workload: str | None = None, features: Mapping[str, float] | None = None,
                  hardware: str | None = None,
                  enqueue: tuple[Mapping[str, Any], ...] | None = None) -> str | None:
    """The ``advisor tune`` command that would measure what is missing, built and checked by
    the study planner `tune` itself uses (advisor/study_request.suggested_tune_command), so
    `tune` accepts it as printed; None when `tune` would refuse every form of it (``model``
    neither a known shape nor a local model directory, a workload beyond its corpus).
    ``hardware`` adds a ``# run on ...`` comment. ``enqueue`` given (an undecided answer): the
    shortest study that measures those configs, each after the engine default (tune measures
    it first) and nothing more (``--trials`` just covers them)."""
    import yaml

    from advisor.study_request import suggested_tune_command

    if model and not known_model(model):
        return None
    params: dict[str, Any] = {}
    for param in workload_params(features or {}):
        key, _, text = param.partition("=")
        params[key] = yaml.safe_load(text)
    # Co-measured studies name their workload "<preset>@<rate>rps": the preset is the name. A
    # measured workload that is no preset (a file, a name a script gave it) falls back to the
    # target's default preset with the measured features.
    preset = workload.split("@", 1)[0] if workload else None
    command = None
    for name in dict.fromkeys([preset, None]):
        try:
            command = suggested_tune_command(
                target, slo=str(slo), objective=str(objective), model=model, workload=name,
                workload_params=params, trials=40 if enqueue is None else 1 + len(enqueue),
                enqueue=enqueue or ())
            break
        except AdvisorError:
            continue
    if command is None:
        return None
    check_label(command, "the suggested command")  # a newline would start another command
    return (f"{command}  # run on {check_label(hardware, 'the hardware')}" if hardware
            else command)


def _curve_quality(ctx: ContextModels, config: Mapping[str, Any],
                   features: Mapping[str, float], metrics: list[str]
                   ) -> dict[str, dict[str, Any]]:
    """:func:`_quality` of ``metrics`` with, for each that ``config``'s load curve predicts, the
    curves' own held-out error (rates held out one at a time, in the asked rate's load band) in
    place of the knob-level surrogate's (configs held out whole): the answer's figures come
    from the curve, so its accuracy is the curve's. A config with no curve whose figures come
    from the curve the knob-level curve model predicts quotes that model's held-out error."""
    curves = ctx.load_curves
    out = _quality(ctx, metrics)
    if curves is None:
        return out
    knob = getattr(ctx, "knob_curves", None)
    own = curves.curve(config, features) is not None
    for metric in metrics:
        held = curves.held_out_error(config, features, metric)
        if held is not None:
            out[metric] = {"mape": held[0], "n": held[1], "interval_coverage": None,
                           "basis": ("load curve blended with the engine simulator, each rate "
                                     "held out in turn" if curves.blended(metric)
                                     else "load curve, each rate held out in turn")}
        elif (not own and knob is not None and metric in knob.held_out_error_
              and knob.predict(config, features, metric) is not None):
            mape, n = knob.held_out_error_[metric]
            out[metric] = {"mape": mape, "n": n, "interval_coverage": None,
                           "basis": "load curve predicted from the knobs, each measured "
                                    "config's curve held out in turn"}
    return out


def _quality(ctx: ContextModels, metrics: list[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for m in metrics:
        mm = ctx.metrics.get(m)
        if mm is not None and mm.score is not None:
            out[m] = {"mape": mm.score.mape, "interval_coverage": mm.score.coverage,
                      "n": mm.score.n}
    return out


def recommend(store: TrialStore, query: RecommendationQuery, *,
              models: KnowledgeModels | None = None, drop_predicted_failures: bool = True,
              failure_cache_dir: Path | None = None) -> ModelRecommendation:
    """Answer ``query`` from the fitted models (fitted now from ``store`` when not given).

    Never returns a config whose conservative bound (interval end on the wrong side) violates a
    bound of the SLO, nor (``drop_predicted_failures``) one the failure model predicts to fail
    to start (advisor/failure_gate.py; kept in ``failure_cache_dir`` between processes when
    given); the notes say how many were dropped. Raises :class:`UnknownTargetError` /
    :class:`SLOParseError` for bad input.
    """
    engine = _engine(query.target)
    slo = requested_slo(query.slo)
    slo.check_metrics(query.target, engine.reported_metrics())
    objective = Objective.parse(query.objective or engine.default_objective)
    if objective.metric not in engine.reported_metrics():
        raise SLOParseError(f"target {query.target!r} does not report the objective metric "
                            f"{objective.metric!r}")
    if not isinstance(query.workload, Mapping):
        raise WorkloadError("`workload` must be a mapping of workload features")
    if models is None:
        models = KnowledgeModels.fit(store, target=query.target, score=False)
    needed = list(dict.fromkeys([objective.metric, *slo.metrics]))
    asked = workload_features(dict(query.workload))
    ctx, why, notes = _pick_context(models, query)

    def uncovered(reason: str, **extra: Any) -> ModelRecommendation:
        return ModelRecommendation(
            status="not_covered", target=query.target, slo=slo, objective=objective,
            confidence="none", confidence_reason=reason, hardware_key=query.hardware,
            model=query.model, workload=asked, notes=tuple(notes),
            tune_command=_tune_command(query.target, slo, objective, model=query.model,
                                       features=asked, hardware=query.hardware), **extra)

    if ctx is None:
        return uncovered(why)
    missing = [m for m in needed if m not in ctx.metrics]
    if missing:
        return uncovered(f"{ctx.key.label()} has no model for {', '.join(missing)} (not measured "
                         "in its trials)", context=ctx.key.to_dict())
    features, nearest, distance, inside, wl_notes = _resolve_workload(ctx, query.workload)
    notes.extend(wl_notes)
    borrowed: dict[str, Any] | None = None
    if distance > SAME_WORKLOAD:
        borrowed = {**nearest.to_dict(), "distance": round(distance, 4),
                    "factor": round(math.exp(distance), 3), "inside_measured_range": inside}
    tune = _tune_command(query.target, slo, objective, model=ctx.key.model,
                         workload=nearest.name or None, features=features)
    if distance > FAR_WORKLOAD and not inside:
        return uncovered(
            f"the workload {features} is {math.exp(distance):.2f}x away from the nearest measured "
            f"one ({nearest.name}, {nearest.features}) and outside the measured range "
            f"{ctx.workload_ranges()}; predictions there would be extrapolation",
            context=ctx.key.to_dict(), borrowed_workload=borrowed)

    above = _above_capacity(ctx, features)
    if above is not None:
        return uncovered(above, context=ctx.key.to_dict(), borrowed_workload=borrowed)
    space = _space(query.target)
    headroom = _context_headroom(store, ctx, engine, slo)
    failed = {_config_key(c) for c in ctx.failed_configs}
    # The engine default is always a candidate ("keep the defaults" is an answer), first.
    default = _default_as_measured(
        space.default_config(machine=machine_of(store, query.target, ctx.key.hardware_key)), ctx)
    measured = list({_config_key(c): c for c in [default, *ctx.configs]}.values())
    pred = measured_pred = ctx.predict(measured, features, needed)
    order = _rank(pred, slo, objective, len(measured), headroom)
    seeds = [measured[i] for i in order[:8]]
    extra = _candidates(ctx, space, seeds, MAX_CANDIDATES - len(measured))
    configs = [c for c in [*measured, *extra] if _config_key(c) not in failed]
    if drop_predicted_failures:
        configs, note = _without_predicted_failures(store, ctx, configs, features, nearest,
                                                    failure_cache_dir)
        notes.extend(note)
    pred = _predict_reusing(ctx, configs, features, needed, measured, pred)
    # One rule for every config, the default first among them: measured windows at this
    # workload decide; a prediction (widened where the config's own nearby measurements
    # contradict it) decides only where there is none (advisor/answers/rule.py).
    windows = _windows_by_config(ctx, features)
    pred, widened = _widen_by_nearby(ctx, configs, pred, features, needed)
    verdicts = [_verdict_of(ctx, c, pred, i, windows, slo, headroom)
                for i, c in enumerate(configs)]
    feasible = [i for i in range(len(configs)) if verdicts[i].meets]
    quality = _quality(ctx, needed)
    base: dict[str, Any] = {"target": query.target, "slo": slo, "objective": objective,
            "hardware_key": ctx.key.hardware_key, "model": ctx.key.model,
            "context": {**ctx.key.to_dict(), "trials": ctx.n_trials, "family": ctx.family},
            "workload": features, "borrowed_workload": borrowed, "model_quality": quality,
            "candidates_considered": len(configs), "candidates_feasible": len(feasible),
            "tune_command": tune, "quality_headroom": headroom}
    default_i = next((i for i, c in enumerate(configs) if _config_key(c) == _config_key(default)),
                     None)
    default_verdict = (verdicts[default_i] if default_i is not None
                       else _verdict_of(ctx, default, measured_pred, 0, windows, slo, headroom))
    default_figures = _figures_of(ctx, default, measured_pred if default_i is None else pred,
                                  0 if default_i is None else default_i, windows, needed)
    base["default_verdict"], base["default_figures"] = default_verdict, default_figures
    if not feasible:
        violation = [sum(max(m, 0.0) for m in verdicts[i].margins.values())
                     for i in range(len(configs))]
        straddling = undecided(verdicts, default_i)
        j = straddling[0] if straddling else int(np.argmin(violation))
        closest = {"config": configs[j],
                   "predicted": {m: p.to_dict() for m, p in _predicted(pred, j).items()},
                   "verdict": verdicts[j].to_dict(),
                   "conservative_slo_margins": _conservative_margins(slo, pred, j, headroom)}
        why = (f"none of {len(configs)} candidate configs meets the SLO here (measured windows "
               "at this workload where a config has them, else the conservative end of its 90% "
               "interval)")
        if straddling:
            changed = {k: v for k, v in configs[j].items()
                       if _config_key({k: v}) != _config_key({k: default.get(k)})}
            which = ("the engine default" if j == default_i else
                     "the config " + json.dumps(changed, sort_keys=True, default=str))
            why += ", " + straddle_reason(
                len(straddling), which, verdicts[j], slo,
                {m: (p_.value, p_.low, p_.high) for m, p_ in _predicted(pred, j).items()})
            base["tune_command"] = _tune_command(
                query.target, slo, objective, model=ctx.key.model,
                workload=nearest.name or None, features=features,
                enqueue=() if j == default_i else (changed,)) or tune
        return ModelRecommendation(
            status="undecided" if straddling else "no_feasible_config", confidence="none",
            confidence_reason=why,
            closest=closest, notes=(*notes, *(widened[i] for i in dict.fromkeys([j, default_i])
                                              if i in widened)),
            evidence=tuple(_evidence(ctx, configs[j], features, slo, needed)), **base)
    sign = 1.0 if objective.direction == "maximize" else -1.0
    cautious = {i: _cautious_objective(ctx, configs[i], pred, i, windows, objective)
                for i in feasible}
    best = max(feasible, key=lambda i: (sign * cautious[i], -i))
    config = configs[best]
    notes.extend(widened[i] for i in dict.fromkeys([best, default_i]) if i in widened)
    base["model_quality"] = quality = _curve_quality(ctx, config, features, needed)
    evidence = _evidence(ctx, config, features, slo, needed)
    confidence, reason = _confidence(ctx, evidence, quality, distance, inside, slo, needed)
    workload_spec = _workload_for_launch(nearest, features, query.launch_model)
    try:
        launch = engine.launch_command(config, Workload.from_spec(workload_spec))
    except AdvisorError as exc:
        launch, reason = None, f"{reason}; launch command unavailable: {exc}"
    answer = _model_versus_default(store, ctx, engine, ModelRecommendation(
        status="recommended", confidence=confidence, confidence_reason=reason, config=config,
        predicted=_predicted(pred, best), conservative_margins=_conservative_margins(
            slo, pred, best, headroom), evidence=tuple(evidence), launch_command=launch,
        notes=tuple(notes), verdict=verdicts[best],
        figures=_figures_of(ctx, config, pred, best, windows, needed), **base),
        default=default, default_pred=measured_pred if default_i is None else _row(pred, default_i),
        features=features, nearest=nearest, needed=needed, distance=distance, inside=inside,
        candidate_objective=cautious[best], windows=windows, launch_model=query.launch_model)
    # The notes on the load curve of the config answered (the default's, when it is kept).
    return replace(answer, notes=(*answer.notes,
                                  *_curve_notes(ctx, answer.config or {}, features)))


def _default_as_measured(default: Mapping[str, Any], ctx: ContextModels) -> dict[str, Any]:
    """The engine default as the context's trials record it, so it matches its own measurements
    (and its load curve). A stored config is the default when every knob it sets has its
    default value: a knob it lacks was added to the space after it was measured (it ran at the
    engine's default then) or is inactive under a condition knob the config sets, which then
    differs. Of several such forms (trials from before and after a knob was added), the one
    with the most trials; the space's default when none was measured."""
    def at_default(config: Mapping[str, Any]) -> bool:
        return all(k in default and _config_key({k: v}) == _config_key({k: default[k]})
                   for k, v in config.items())

    forms: dict[str, tuple[int, dict[str, Any]]] = {}
    for config in ctx.configs:
        if at_default(config):
            n, _ = forms.get(key := _config_key(config), (0, {}))
            forms[key] = (n + 1, dict(config))
    if not forms:
        return dict(default)
    return max(forms.values(), key=lambda f: f[0])[1]


def _above_capacity(ctx: ContextModels, features: Mapping[str, float]) -> str | None:
    """Why the asked rate lies outside the measured region when it is above the capacity of
    every config whose load curve shows one at this workload (a queue that grows for as long as
    the load lasts: no measured figure holds there), else None."""
    curves = ctx.load_curves
    if curves is None or curves.roles.rate not in features:
        return None
    rate = float(features[curves.roles.rate])
    caps = [(curve.capacity, curve) for config in ctx.configs
            if (curve := curves.curve(config, features)) is not None and curve.seen]
    if not caps:
        return None
    top, curve = max(caps, key=lambda x: x[0])
    # A rate some config was measured at lies inside the data, past its capacity or not: the
    # curves hold the backlog measured there, and the SLO decides.
    if rate <= top or rate <= max(max(c.rates) for _, c in caps):
        return None
    return (f"the asked rate {rate:g} req/s is above the capacity of every measured config at "
            "this workload, and above every rate measured there (highest capacity: about "
            f"{top:.0f} req/s offered, from a config measured at "
            f"{', '.join(f'{r:g}' for r in curve.rates)} req/s): past capacity the queue grows "
            "for as long as the load lasts, so no config meets a latency SLO there on one "
            "engine; measure configs built for more throughput at this rate")


def _curve_notes(ctx: ContextModels, config: Mapping[str, Any], features: Mapping[str, float]
                 ) -> list[str]:
    """A note naming the load curve that predicts ``config`` (where one does), or the
    simulator that its knob-level prediction is blended with (where that places it)."""
    curves = ctx.load_curves
    curve = None if curves is None else curves.curve(config, features)
    if curves is None:
        return []
    if curve is None:
        return _simulated_notes(curves, config, features)
    rate = features.get(curves.roles.rate)
    where = "seen in" if curve.seen else "borrowed from other configs; not reached in"
    notes = [f"predicted from this config's measured load curve: capacity about "
             f"{curve.capacity:.0f} req/s offered ({where} its measurements at "
             f"{', '.join(f'{r:g}' for r in curve.rates)} req/s)"
             + (f", utilisation {rate / curve.capacity:.0%} at {rate:g} req/s" if rate else "")]
    blended = [m for m in curves.metrics_ if curves.blended(m)]
    if blended:
        scores = curves.blend_.scores
        shown = [m for m in blended if "_p95" in m] or blended
        more = f" and {len(blended) - len(shown)} more figures" if len(blended) > len(shown) else ""
        notes.append(f"{', '.join(shown)}{more}: the geometric mean of this curve and the "
                     "engine simulator fitted on this context's trials, which predicted its "
                     "held-out rates better than the curve alone (MAPE " + "; ".join(
                         f"{m} {scores[m].curve_mape:.0%} -> {scores[m].blend_mape:.0%}"
                         for m in shown) + ")")
    if rate and rate >= HEAVY_LOAD * curve.capacity:
        # Measured: near capacity a longer run of the same arrivals reads a longer queue
        # (docs/knowledge.md, "Measurement windows"); the curve knows the short runs only.
        notes.append(f"near capacity ({rate / curve.capacity:.0%}): the measurements behind "
                     "this curve each offered their arrivals for a short window; a load "
                     "sustained for longer queues longer than they show, so the latency at "
                     "this rate may be higher than predicted (docs/knowledge.md, measurement "
                     "windows)")
    return notes


def _without_predicted_failures(store: TrialStore, ctx: ContextModels,
                                configs: list[dict[str, Any]], features: Mapping[str, float],
                                nearest: WorkloadPoint, cache_dir: Path | None
                                ) -> tuple[list[dict[str, Any]], list[str]]:
    """``configs`` less those the target's failure model predicts to fail to start on the
    context's hardware at the asked workload, and a note saying how many went; unchanged (and
    no note) where the model has too little data to skip anything there."""
    model = failure_model(store, ctx.key.target, cache_dir=cache_dir)
    hardware = model.hardware.get(ctx.key.hardware_key)
    if not configs or hardware is None or model.trusted_on(ctx.key.hardware_key) is not None:
        return configs, []
    workload = {**start_workload_features(nearest.spec),
                **{k: v for k, v in features.items() if k != "rate_rps"}}
    facts = StartFacts(workload, ctx.key.model, hardware, ctx.key.engine_version)
    p = model.predict(configs, facts)
    kept = [c for c, pi in zip(configs, p, strict=True) if pi < model.threshold]
    if len(kept) == len(configs):
        return configs, []
    return kept, [f"dropped {len(configs) - len(kept)} of {len(configs)} candidate configs that "
                  f"the failure model predicts to fail to start (p >= {model.threshold:g}; "
                  f"fitted on {model.starts} stored {ctx.key.target} starts, "
                  f"{model.failures} failed)"]


def _model_versus_default(store: TrialStore, ctx: ContextModels, engine: Target,
                          rec: ModelRecommendation, *, default: dict[str, Any],
                          default_pred: Predictions, features: Mapping[str, float],
                          nearest: WorkloadPoint, needed: list[str], distance: float,
                          inside: bool, candidate_objective: float, windows: Windows,
                          launch_model: str | None = None) -> ModelRecommendation:
    """``rec`` compared with the engine ``default`` (as the context stores it) at the same
    workload (advisor/answers/versus_default.py). Whether the default meets the SLO is the verdict
    of the one
    rule that judged every candidate (``rec.default_verdict``): its measured windows here, else
    its prediction's conservative end. When it meets the SLO and ``rec``'s config is not better
    beyond the noise, the answer is the default. ``candidate_objective`` is the candidate's
    objective as it was ranked (its windows' median here, else its interval's cautious end);
    the default's is its windows' median here, else its predicted point."""
    slo, objective = rec.slo, rec.objective
    pred = default_pred
    verdict_of_default = rec.default_verdict
    rows = windows.get(_same_config(ctx.key.target, default), [])
    measured = {m: f.value for m, f in rec.default_figures.items() if f.basis == "measured"}
    predicted = {m: float(c[0]) for m, (c, _, _) in pred.items()}

    def same_workload(study: Any) -> bool:
        params = study.workload_spec.get("params", {}) or {}
        return (workload_distance(features, workload_features(study.workload_spec))
                <= SAME_WORKLOAD and (ctx.key.model is None
                                      or str(params.get("model")) == ctx.key.model))

    candidate_figures = {m: f.value for m, f in rec.figures.items()}
    candidate_figures[objective.metric] = candidate_objective
    default_figures = {**predicted, **measured}
    equal_because = None
    if _load_bound(ctx, [default, rec.config or {}], features, objective.metric):
        # Below both configs' capacities each serves the offered rate, and a throughput is
        # that rate times the tokens of the workload's requests: a difference between the two
        # is the prompts each was measured with (another seed per co-measured rate), not the
        # config. At 15 req/s on the 8B shape an fp8 variant read +5.7 % output tokens/s over
        # five repeats of the defaults on one seed (spread 0.2 %).
        rec = replace(rec, notes=(*rec.notes, (
            f"below both configs' load-curve capacities the offered load sets "
            f"{objective.metric}; the two are compared on it as equal")))
        candidate_figures[objective.metric] = default_figures[objective.metric]
        equal_because = ("below both configs' load-curve capacities the offered load sets "
                         "it")
    verdict = decide(
        objective=objective, slo=slo, candidate_config=rec.config or {},
        candidate_figures=candidate_figures,
        default_config=default, default_figures=default_figures,
        default_meets_slo=None if verdict_of_default is None else verdict_of_default.meets,
        default_objective_values=[float(ctx.measured[i][objective.metric]) for i in rows
                                  if objective.metric in ctx.measured[i]],
        paired=paired_between(store, target=rec.target, hardware_key=ctx.key.hardware_key,
                              candidate=rec.config or {}, default=default,
                              same_workload=same_workload),
        default_figures_basis="measured" if rows else "predicted",
        default_source=(f"measured at this workload ({len(rows)} windows)" if rows
                        else "predicted by the same models"),
        default_trials=[ctx.trial_ids[i] for i in rows], equal_because=equal_because,
        default_verdict=None if verdict_of_default is None else verdict_of_default.text())
    if verdict.answer != "keep_defaults" or verdict.basis == "is_default":
        return replace(rec, answer=verdict.answer, baseline=verdict)
    evidence = _evidence(ctx, default, features, slo, needed)
    quality = _curve_quality(ctx, default, features, needed)
    confidence, reason = _confidence(ctx, evidence, quality, distance, inside, slo, needed)
    try:
        launch = engine.launch_command(default, Workload.from_spec(
            _workload_for_launch(nearest, features, launch_model)))
    except AdvisorError as exc:
        launch, reason = None, f"{reason}; launch command unavailable: {exc}"
    return replace(rec, answer="keep_defaults", baseline=verdict, config=default,
                   predicted=_predicted(pred, 0), conservative_margins=_conservative_margins(
                       slo, pred, 0, rec.quality_headroom),
                   evidence=tuple(evidence), launch_command=launch, confidence=confidence,
                   confidence_reason=reason, model_quality=quality,
                   verdict=verdict_of_default, figures=rec.default_figures)


def _simulated_notes(curves: Any, config: Mapping[str, Any], features: Mapping[str, float]
                     ) -> list[str]:
    """For a config without a load curve of its own that the context's simulator places: which
    figures blend the knob-level prediction with it, and what the quoted error is."""
    blend = getattr(curves, "blend_", None)
    if blend is None or not blend.metrics or not blend.places(config, features):
        return []
    shown = [m for m in blend.metrics if "_p95" in m] or list(blend.metrics)
    return [f"{', '.join(shown)}: this config has no load curve of its own; the knob-level "
            "prediction is blended with the engine simulator, which places it from measured "
            "configs like it (held out by config on the shipped trials the blend beat the "
            "knob-level prediction alone: docs/knowledge.md). Its intervals are as "
            "wide as the knob-level ones, and the held-out error quoted is the knob-level "
            "model's"]


def _load_bound(ctx: ContextModels, configs: list[Mapping[str, Any]],
                features: Mapping[str, float], metric: str) -> bool:
    """Whether ``metric`` is a throughput that the offered load, not the config, sets for every
    one of ``configs`` at ``features``: each has a load curve (its own, else the one its knobs
    predict) that puts the asked rate below :data:`HEAVY_LOAD` of its capacity."""
    curves = ctx.load_curves
    if curves is None or metric not in curves.roles_.throughputs:
        return False
    rate = features.get(curves.roles.rate)
    if not isinstance(rate, int | float):
        return False
    knob = getattr(ctx, "knob_curves", None)
    for config in configs:
        curve = curves.curve(config, features)
        capacity = (curve.capacity if curve is not None
                    else knob.capacity(config, features) if knob is not None else None)
        if capacity is None or rate >= HEAVY_LOAD * capacity:
            return False
    return True


#: A config's own measurements within this factor of the asked rate (beyond the 10 % that
#: counts as the same workload) bound its prediction: a prediction they fall outside of is
#: widened to them and flagged (fp8 on the 8B shape was predicted at TTFT p95 174 ms at
#: 65 req/s where it was measured at 442 ms at 67.5 req/s).
NEARBY_WORKLOAD = math.log(1.25)

Windows = dict[str, list[int]]


def _windows_by_config(ctx: ContextModels, features: Mapping[str, float]) -> Windows:
    """The context's rows measured at (within 10 % of) the asked workload, per config key."""
    out: Windows = {}
    for i, config in enumerate(ctx.configs):
        if workload_distance(features, ctx.features[i]) <= SAME_WORKLOAD:
            out.setdefault(_same_config(ctx.key.target, config), []).append(i)
    return out


def _row(pred: Predictions, i: int) -> Predictions:
    """Row ``i`` of ``pred`` as a one-row prediction."""
    return {m: (v[i:i + 1], lo[i:i + 1], hi[i:i + 1]) for m, (v, lo, hi) in pred.items()}


def _verdict_of(ctx: ContextModels, config: Mapping[str, Any], pred: Predictions, i: int,
                windows: Windows, slo: SLO, headroom: Mapping[str, Headroom]) -> Verdict:
    """``config``'s verdict by the one rule: its windows at this workload, else row ``i`` of
    ``pred`` at the conservative ends."""
    rows = windows.get(_same_config(ctx.key.target, config), [])
    if rows:
        return measured_verdict(slo, [ctx.measured[j] for j in rows], headroom,
                                [ctx.trial_ids[j] for j in rows])
    return predicted_verdict(slo, {m: (float(v[i]), float(lo[i]), float(hi[i]))
                                   for m, (v, lo, hi) in pred.items()}, headroom)


def _figures_of(ctx: ContextModels, config: Mapping[str, Any], pred: Predictions, i: int,
                windows: Windows, metrics: list[str]) -> dict[str, Figure]:
    """``config``'s figures: the median and range of its windows at this workload for each
    metric they measured, the prediction (row ``i``) for the rest."""
    rows = windows.get(_same_config(ctx.key.target, config), [])
    measured = measured_figures([ctx.measured[j] for j in rows], metrics)
    out: dict[str, Figure] = {}
    for m in metrics:
        if m in measured:
            value, low, high, n = measured[m]
            out[m] = Figure(value=value, low=low, high=high, basis="measured", windows=n)
        elif m in pred:
            v, lo, hi = pred[m]
            out[m] = Figure(value=float(v[i]), low=float(lo[i]), high=float(hi[i]),
                            basis="predicted")
    return out


def _cautious_objective(ctx: ContextModels, config: Mapping[str, Any], pred: Predictions,
                        i: int, windows: Windows, objective: Objective) -> float:
    """The objective a config is ranked by: the median of its windows at this workload, else
    its prediction's cautious end (low when maximising), so an unmeasured candidate never
    outranks a measured one on a looser standard."""
    rows = windows.get(_same_config(ctx.key.target, config), [])
    values = [float(ctx.measured[j][objective.metric]) for j in rows
              if objective.metric in ctx.measured[j]]
    if values:
        return float(np.median(values))
    _, lo, hi = pred[objective.metric]
    return float(lo[i] if objective.direction == "maximize" else hi[i])


def _widen_by_nearby(ctx: ContextModels, configs: list[dict[str, Any]], pred: Predictions,
                     features: Mapping[str, float], metrics: list[str]
                     ) -> tuple[Predictions, dict[int, str]]:
    """``pred`` with the interval of each config that has no window at the asked workload but
    was measured near it (:data:`NEARBY_WORKLOAD`) widened to include those measurements where
    they fall outside it, and a note per widened config (by its index in ``configs``).

    Each nearby workload point counts by the median of the config's windows there, as the rule
    judges a point (advisor/answers/rule.py): one unlucky window of five at a heavier rate, where
    the config meets the SLO by the rule, must not make it miss at a lighter one."""
    nearby: dict[str, dict[tuple[tuple[str, float], ...], list[int]]] = {}
    for j, config in enumerate(ctx.configs):
        d = workload_distance(features, ctx.features[j])
        if SAME_WORKLOAD < d <= NEARBY_WORKLOAD:
            point = tuple(sorted(ctx.features[j].items()))
            nearby.setdefault(_same_config(ctx.key.target, config), {}).setdefault(
                point, []).append(j)
    if not nearby:
        return pred, {}
    out = {m: (np.array(v, dtype=float), np.array(lo, dtype=float), np.array(hi, dtype=float))
           for m, (v, lo, hi) in pred.items()}
    notes: dict[int, str] = {}
    same = _windows_by_config(ctx, features)
    for i, config in enumerate(configs):
        key = _same_config(ctx.key.target, config)
        if key in same or key not in nearby:
            continue
        moved: list[str] = []
        for m in metrics:
            if m not in out:
                continue
            _, lo, hi = out[m]
            for point, rows in nearby[key].items():
                values = [float(v) for j in rows
                          if isinstance(v := ctx.measured[j].get(m), int | float)
                          and math.isfinite(float(v))]
                if not values:
                    continue
                value = statistics.median(values)
                if value > hi[i] or value < lo[i]:
                    where = ", ".join(f"{k}={v:g}" for k, v in point if features.get(k) != v)
                    moved.append(f"{m} measured {value:.4g} (median of {len(values)} "
                                 f"window(s), trials "
                                 f"{', '.join(str(ctx.trial_ids[j]) for j in rows)}"
                                 + (f", {where}" if where else "") + ")")
                    hi[i], lo[i] = max(hi[i], value), min(lo[i], value)
        if moved:
            notes[i] = (f"the prediction for {_short(config)} was widened: its own measurements "
                        f"near this workload fall outside the model's interval "
                        f"({'; '.join(moved)})")
    return out, notes


def _short(config: Mapping[str, Any]) -> str:
    text = ", ".join(f"{k}={v}" for k, v in config.items())
    return text if len(text) <= 120 else text[:117] + "..."


def _rank(pred: Mapping[str, tuple[Any, Any, Any]], slo: SLO, objective: Objective, n: int,
          headroom: Mapping[str, Headroom]) -> list[int]:
    """Indices ordered best first: conservatively feasible by objective, then by violation."""
    sign = 1.0 if objective.direction == "maximize" else -1.0

    def key(i: int) -> tuple[float, float]:
        violation = sum(max(m, 0.0) for m in
                        _conservative_margins(slo, pred, i, headroom).values())
        return (violation, -sign * float(pred[objective.metric][0][i]))

    return sorted(range(n), key=key)


def _predicted(pred: Mapping[str, tuple[Any, Any, Any]], i: int) -> dict[str, PredictedMetric]:
    return {m: PredictedMetric(float(c[i]), float(lo[i]), float(hi[i]))
            for m, (c, lo, hi) in pred.items()}


def _workload_for_launch(nearest: WorkloadPoint, features: Mapping[str, float],
                         launch_model: str | None = None) -> dict[str, Any]:
    """The nearest measured workload spec (its model, context length) for the launch command,
    serving ``launch_model`` when given."""
    spec = dict(nearest.spec)
    spec["params"] = launch_params(dict(spec.get("params", {})), features)
    if launch_model is not None:
        spec["params"]["model"] = launch_model
    return spec


def _confidence(ctx: ContextModels, evidence: list[EvidenceTrial],
                quality: Mapping[str, Mapping[str, Any]], distance: float, inside: bool,
                slo: SLO, metrics: list[str]) -> tuple[Confidence, str]:
    """high: this config was measured at this workload, met the SLO every time, and the models
    are accurate; medium: interpolation near measured data with decent models; low: the rest."""
    same = [e for e in evidence if e.same_config
            and workload_distance(e.workload_features, evidence[0].workload_features) <= 1e-9]
    mapes = [q["mape"] for m, q in quality.items() if q.get("mape") is not None]
    worst = max(mapes) if mapes else None
    facts: list[str] = []
    if same:
        met = all(e.meets_slo for e in same)
        facts.append(f"config measured {len(same)}x near this workload, "
                     f"{'meeting' if met else 'not always meeting'} the SLO")
    else:
        facts.append("this exact config was not measured; predicted from "
                     f"{ctx.n_trials} trials")
    facts.append("workload measured" if distance <= SAME_WORKLOAD else
                 f"workload borrowed from a measured one {math.exp(distance):.2f}x away"
                 + ("" if inside else " (outside the measured range)"))
    bases = {str(q.get("basis", "")) for q in quality.values()}
    predicted = any("from the knobs" in b for b in bases)
    curve = any(b and "from the knobs" not in b for b in bases)
    kind = ("held-out-config" if predicted else "held-out-rate" if curve
            else "cross-validated")
    facts.append(f"worst {kind} MAPE of {', '.join(metrics)}"
                 + (" (load curve predicted from the knobs)" if predicted
                    else " (load curve)" if curve else "") + ": "
                 + (f"{worst:.1%}" if worst is not None else "unknown"))
    reason = "; ".join(facts)
    good_models = worst is not None and worst <= 0.15
    if same and all(e.meets_slo for e in same) and distance <= SAME_WORKLOAD and good_models:
        return "high", reason
    if inside and (worst is not None and worst <= 0.3) and ctx.n_trials >= 15 and (
            not same or all(e.meets_slo for e in same)):
        return "medium", reason
    return "low", reason

"""Answers for a GPU known from a calibration (a hardware profile, knowledge/profiles.py) rather
than from measured trials of many configs: the evidence source the planner asks when the asked
hardware has a profile for the target and model and too little measured evidence to compare
configs (its trials of the model hold fewer than :data:`MIN_MEASURED_CONFIGS` configs).

Candidates are the engine defaults (first) and variants of the knobs the target's space marks as
batch limits (roles ``batch_slots`` and ``step_token_budget``) and as the server processes in
front of the engine (role ``frontend_processes``), which act through the continuous-batching
simulator with the profile's step costs and frontend cost (knowledge/calibrated.py), and the
configs that change only the knobs the target declares carried (``calibration_carried_knobs``):
their effect is the ratio against the defaults measured on the hardware with the most trials of
the model, its spread widening the interval. Every other knob stays at its default: its effect
does not transfer (docs/new-gpu.md says which carry and which do not). Each candidate is judged
by the one rule (advisor/answers/rule.py): its measured windows at the asked workload first,
else the calibrated prediction at the conservative end of its interval. Where none meets, the
answer refuses (``no_feasible_config``) only when every candidate misses, measured or even at its
intervals' optimistic ends; a candidate whose intervals straddle the SLO makes it ``undecided``,
naming that candidate and the cross-check that measures it. The capacity at the SLO
(the highest rate one GPU holds) of the answered config and of the defaults, and the replicas a
total rate needs, come with every such answer; a measured window of the config that missed the
SLO at a lower rate caps the predicted capacity there.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from advisor.answers.document import Figure
from advisor.answers.model_based import SAME_WORKLOAD
from advisor.answers.rule import (
    Verdict,
    measured_figures,
    measured_verdict,
    predicted_verdict,
    straddle_reason,
    undecided,
)
from advisor.calibrate import workload_streams
from advisor.errors import AdvisorError
from advisor.objective import Objective
from knowledge import TrialFilter, TrialRecord, TrialStatus, TrialStore
from knowledge.calibrated import (
    LABEL,
    Capacity,
    KnobEffect,
    Prediction,
    Replicas,
    capacity_at_slo,
    predict,
    replicas_for,
    spanning,
    spanning_capacity,
)
from knowledge.profiles import HardwareProfile, list_profiles, profiles_version
from knowledge.surrogates import workload_distance, workload_features
from objectives import SLO
from objectives.hardware import hardware_matches
from objectives.llm.simulation import caches_prefixes
from objectives.metrics import metric_spec
from objectives.target import Target
from objectives.workload import Workload, canonical_json

__all__ = [
    "BATCH_ROLES",
    "MIN_MEASURED_CONFIGS",
    "CalibratedAnswer",
    "Calibration",
    "CapacityAt",
    "CarriedConfig",
    "answer_from_calibration",
    "calibration_profile",
    "carried_knobs",
    "knob_effects",
    "missing_calibration",
    "shape_transferred",
]

#: A hardware whose trials of the model hold fewer configs than this cannot compare configs
#: from measurements (a calibration probe measures one: the defaults); a profile answers there.
MIN_MEASURED_CONFIGS = 2
#: The knob roles whose values act through the simulator (search_spaces/space.py KNOB_ROLES).
BATCH_ROLES = ("batch_slots", "step_token_budget")
#: The knob role whose value scales the simulator's frontend (knowledge/calibrated.py).
FRONTEND_ROLE = "frontend_processes"
#: Batch-limit variants tried: the default value times these factors, inside the knob's range.
VARIANT_FACTORS = (0.125, 0.25, 0.5, 1.0, 2.0)
#: Frontend variants tried: the default process count times these factors, inside the knob's
#: range. Only doubling: the simulator scales the frontend linearly with its processes, an
#: assumption no measurement backs beyond the first extra process (docs/new-gpu.md).
FRONTEND_FACTORS = (1, 2)
#: The capacity search spans the probe's rates widened by this factor each way.
CAPACITY_SPAN = 16.0


@dataclass(frozen=True)
class CapacityAt:
    """A config's capacity at the SLO, and the replicas the asked total rate needs with it."""

    capacity: Capacity
    replicas: Replicas | None = None
    #: Why the predicted capacity was capped (a measured window that missed at a lower rate).
    note: str | None = None


@dataclass(frozen=True)
class CalibratedAnswer:
    """What the calibration source found: the planner turns it into the answer document."""

    calibration: Calibration
    status: str
    answer: str
    workload: dict[str, float]
    config: dict[str, Any] | None
    launch_command: str | None
    figures: dict[str, Figure]
    verdict: Verdict | None
    default_config: dict[str, Any]
    default_figures: dict[str, Figure]
    default_verdict: Verdict
    considered: int
    feasible: int
    capacity: CapacityAt | None
    default_capacity: CapacityAt | None
    windows: tuple[TrialRecord, ...] = ()
    closest: dict[str, Any] | None = None
    #: Where the answer is ``undecided``: every candidate whose intervals straddle the SLO, most
    #: promising first (``closest`` is the first): what a study would measure, in order.
    to_measure: tuple[dict[str, Any], ...] = ()
    verify_command: str | None = None
    #: Why no config is recommended (``no_feasible_config`` and ``undecided``), else None.
    reason: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)


def _matches(profile: HardwareProfile, hardware: str) -> bool:
    return hardware.lower() == profile.hardware or hardware_matches(hardware,
                                                                     profile.hardware_key)


def _model_trials(store: TrialStore, target: str, hardware_key: str, model: str
                  ) -> tuple[TrialRecord, ...]:
    """The complete trials of ``model`` on ``hardware_key``, read once per store contents (its
    count of the target's complete trials): an answer reads them twice, and the cheat-sheet and
    the consistency audit ask dozens of answers of one store (reading and parsing them again
    was a third of a calibrated cheat-sheet's time)."""
    count = store.count_matching(TrialFilter(target=target, status=TrialStatus.COMPLETE))

    def read() -> tuple[TrialRecord, ...]:
        trials = store.list_trials(TrialFilter(target=target, status=TrialStatus.COMPLETE,
                                               hardware_key=hardware_key))
        return tuple(t for t in trials
                     if str((t.workload_spec.get("params") or {}).get("model")) == model)

    return _remembered(_TRIALS, (store.url, count, target, hardware_key, model), 64, read)


def _remembered(cache: dict[Any, Any], key: Any, limit: int, compute: Callable[[], Any]) -> Any:
    """``cache[key]``, computed once; the cache is emptied when it grows past ``limit`` (the
    process-wide memos below: a long-running server asks of many store contents)."""
    if key not in cache:
        if len(cache) > limit:
            cache.clear()
        cache[key] = compute()
    return cache[key]


#: Trials already read in this process (see :func:`_model_trials`).
_TRIALS: dict[tuple[Any, ...], tuple[TrialRecord, ...]] = {}


def _target_profiles(store: TrialStore, target: str) -> list[HardwareProfile]:
    """``list_profiles(store, target=target)`` (oldest first), read once per store contents (its
    profiles' count and newest id): every answer not asked as measured looks for a calibration,
    and reading and parsing the profiles' documents again was 5 % of the consistency audit."""
    memo = (store.url, profiles_version(store), target)
    return list(_remembered(_PROFILES, memo, 64,
                            lambda: tuple(list_profiles(store, target=target))))


#: Profiles already read in this process (see :func:`_target_profiles`).
_PROFILES: dict[tuple[Any, ...], tuple[HardwareProfile, ...]] = {}


@dataclass(frozen=True)
class Calibration:
    """The profile an answer predicts with, and how it was come by: the asked model's own
    calibration on the asked GPU, or another shape's carried to it (``transferred_from``) by the
    ratio of the two shapes' step costs on a GPU that calibrated both (``via``)."""

    profile: HardwareProfile
    label: str = LABEL
    source: str = ""
    transferred_from: str | None = None
    via: str | None = None


def _too_few_configs(store: TrialStore, engine: Target, hardware_key: str, model: str) -> bool:
    defaults = engine.space().default_config()
    configs = {canonical_json({**defaults, **t.config})
               for t in _model_trials(store, engine.name, hardware_key, model)}
    return len(configs) < MIN_MEASURED_CONFIGS


def calibration_profile(store: TrialStore, *, engine: Target, model: str | None,
                        hardware: str | None) -> Calibration | None:
    """The calibration answering for ``model`` on ``hardware`` (a key or part of it, ``h100``)
    when that hardware's measured trials of the model hold fewer than
    :data:`MIN_MEASURED_CONFIGS` configs (else None: measurements answer there): the newest
    profile of the model there, else one of another shape there carried to the model
    (:func:`shape_transferred`), else None."""
    if model is None or hardware is None:
        return None
    found = [p for p in _target_profiles(store, engine.name)
             if p.model == model and _matches(p, hardware)]
    if found:
        profile = found[-1]
        if not _too_few_configs(store, engine, profile.hardware_key, model):
            return None
        return Calibration(profile, LABEL, profile.name)
    carried = shape_transferred(store, engine=engine, model=model, hardware=hardware)
    if carried is None or not _too_few_configs(store, engine, carried.profile.hardware_key,
                                               model):
        return None
    return carried


def _ratio(value: float, base: float, fallback: float) -> float:
    return value / base if base > 0 else fallback


def shape_transferred(store: TrialStore, *, engine: Target, model: str, hardware: str
                      ) -> Calibration | None:
    """A profile of ``model`` on ``hardware`` carried from the newest profile of another shape
    there: its step costs times the ratio of ``model``'s to that shape's on another GPU that has
    profiles of both (the newest such pair), the offsets and the frontend kept (the same server);
    its error the three calibrations' errors added in quadrature (how far the ratio itself moves
    between GPUs is not measured). None where no such pair exists."""
    profiles = _target_profiles(store, engine.name)
    for base in reversed([p for p in profiles if _matches(p, hardware) and p.model != model]):
        pairs = [(a, b) for a in profiles for b in profiles
                 if a.hardware_key == b.hardware_key != base.hardware_key
                 and a.model == base.model and b.model == model]
        if not pairs:
            continue
        a, b = pairs[-1]
        speed = _ratio(base.fixed_ms, a.fixed_ms, 1.0)  # this GPU against the pair's

        def scaled(mine: float, theirs_a: float, theirs_b: float, speed: float = speed
                   ) -> float:
            return mine * theirs_b / theirs_a if theirs_a > 0 else theirs_b * speed

        metrics = set(base.error_log) | set(a.error_log) | set(b.error_log)
        error = {m: math.sqrt(sum(p.error_log.get(m, max(p.error_log.values(), default=0.0))
                                  ** 2 for p in (base, a, b))) for m in sorted(metrics)}
        profile = replace(
            base, model=model, model_shape=dict(b.model_shape),
            fixed_ms=scaled(base.fixed_ms, a.fixed_ms, b.fixed_ms),
            per_sequence_ms=scaled(base.per_sequence_ms, a.per_sequence_ms, b.per_sequence_ms),
            per_prefill_token_ms=scaled(base.per_prefill_token_ms, a.per_prefill_token_ms,
                                        b.per_prefill_token_ms),
            error_log=error, uid=f"{base.uid}>{model}")
        label = f"{LABEL} (shape-transferred from {base.model})"
        source = (f"{base.name} scaled by {b.model} / {base.model} step costs on "
                  f"{a.hardware_key} ({a.uid}, {b.uid})")
        return Calibration(profile, label, source, base.model, a.hardware_key)
    return None


def missing_calibration(store: TrialStore, *, engine: Target, model: str | None,
                        hardware: str | None) -> str | None:
    """Where ``hardware`` has calibrations of other shapes but none reaches ``model``: which
    calibration to run (a note for a not-covered answer); else None."""
    if model is None or hardware is None:
        return None
    here = sorted({p.model for p in _target_profiles(store, engine.name)
                   if _matches(p, hardware) and p.model != model})
    if not here:
        return None
    return (f"{hardware} is calibrated for {', '.join(here)} but not for {model}, and no GPU "
            f"has calibrations of both shapes to carry one to the other: run `advisor calibrate "
            f"--target {engine.name} --model {model}` on the {hardware} (one engine start, "
            "about 3 minutes)")


def _probe_params(profile: HardwareProfile) -> dict[str, Any]:
    """The probe's workload params (its lowest-rate window's): what predictions replay."""
    windows = sorted(profile.probe, key=lambda w: float(
        w["workload_spec"]["params"]["arrival"]["rate_rps"]))
    return dict(windows[0]["workload_spec"]["params"])


def _scaled_values(engine: Target, name: str | None, base: Any,
                   factors: Sequence[float]) -> list[Any]:
    """``base`` times each factor, rounded, inside knob ``name``'s range, ``base`` first
    (``[None]`` where the space marks no such knob)."""
    if name is None:
        return [None]
    knob = engine.space().knob(name)
    out = []
    for f in factors:
        v = round(base * f)
        if (knob.low is None or v >= knob.low) and (knob.high is None or v <= knob.high):
            out.append(v)
    return sorted(set(out), key=lambda v: (v != base, v))


def _variants(engine: Target, profile: HardwareProfile) -> list[dict[str, Any]]:
    """The defaults first, then every batch-limit variant inside the knobs' ranges (a step's
    token budget below its slot count cannot fill its slots, so none is tried), each with the
    defaults' frontend processes and with the frontend variants."""
    space = engine.space()
    defaults = {**space.default_config(), **profile.config}
    names = [space.knob_with_role(role) for role in (*BATCH_ROLES, FRONTEND_ROLE)]
    factors = (VARIANT_FACTORS, VARIANT_FACTORS, FRONTEND_FACTORS)
    values = [_scaled_values(engine, name, defaults.get(name), f)
              for name, f in zip(names, factors, strict=True)]
    slots_knob, budget_knob, frontend_knob = names
    configs = [dict(defaults)]
    for processes, slots, budget in itertools.product(values[2], values[0], values[1]):
        config = dict(defaults)
        for name, v in ((slots_knob, slots), (budget_knob, budget), (frontend_knob, processes)):
            if name is not None and v is not None:
                config[name] = v
        if slots_knob and budget_knob and config[budget_knob] < config[slots_knob]:
            continue
        if config not in configs:
            configs.append(config)
    return configs


def _limits(engine: Target, config: Mapping[str, Any]) -> tuple[int | None, int | None]:
    space = engine.space()
    slots, budget = (space.knob_with_role(role) for role in BATCH_ROLES)
    return (None if slots is None else int(config[slots]),
            None if budget is None else int(config[budget]))


def _frontend_processes(engine: Target, profile: HardwareProfile,
                        config: Mapping[str, Any]) -> float:
    """How many times the probe's server processes in front of the engine ``config`` runs (the
    knob whose role is :data:`FRONTEND_ROLE`; 1 where the space marks none, and where the
    profile's frontend costs nothing: the processes then share nothing, and a config differing
    only in them is the same simulation, read from the same cache)."""
    space = engine.space()
    name = space.knob_with_role(FRONTEND_ROLE)
    if name is None or not profile.frontend_token_ms > 0:
        return 1.0
    default = space.default_config().get(name)
    probed = profile.config.get(name, default)
    mine = config.get(name, default)
    if not isinstance(probed, int | float) or not isinstance(mine, int | float) or probed <= 0:
        return 1.0
    return float(mine) / float(probed)


def _intervals(p: Prediction) -> dict[str, tuple[float, float, float]]:
    return {m: (f.value, f.low, f.high) for m, f in p.figures.items()}


def _predicted_figures(p: Prediction, metrics: Sequence[str], note: str) -> dict[str, Figure]:
    return {m: Figure(value=p.figures[m].value, low=p.figures[m].low, high=p.figures[m].high,
                      basis="predicted", note=note) for m in metrics if m in p.figures}


def _measured(windows: Sequence[TrialRecord], metrics: Sequence[str]) -> dict[str, Figure]:
    return {m: Figure(value=v, low=lo, high=hi, basis="measured", windows=n)
            for m, (v, lo, hi, n) in measured_figures([t.metrics for t in windows],
                                                      metrics).items()}


def _interval_note(calibration: Calibration) -> str:
    """The label every calibrated figure carries, with what widened its interval."""
    profile = calibration.profile
    err = ", ".join(f"{m} x{math.exp(v):.2f}" for m, v in sorted(profile.error_log.items()))
    return (f"{calibration.label} ({calibration.source}); 90% interval widened by the "
            f"calibration's measured error ({err}) and the window-to-window noise of "
            f"{profile.noise_source}")


def _objective_bounds(objective: Objective, figures: Mapping[str, Figure]
                      ) -> tuple[float, float] | None:
    """(cautious, optimistic) objective of a config's figures, or None where unknown."""
    f = figures.get(objective.metric)
    if f is None:
        return None
    low = f.low if f.low is not None else f.value
    high = f.high if f.high is not None else f.value
    return (low, high) if objective.direction == "maximize" else (-high, -low)


def carried_knobs(engine: Target) -> tuple[str, ...]:
    """The knobs whose effect ``engine`` declares transferable to a calibrated GPU as a ratio
    against the defaults (a target attribute; none declared: none carried)."""
    return tuple(getattr(engine, "calibration_carried_knobs", ()))


@dataclass(frozen=True)
class CarriedConfig:
    """A config differing from the defaults only in carried knobs, and its measured effect."""

    config: dict[str, Any]
    changed: dict[str, Any]
    effect: KnobEffect


def _shape_only(features: Mapping[str, float]) -> dict[str, float]:
    return {k: v for k, v in features.items() if k != "rate_rps"}


#: Windows whose offered rates differ by at most this (log ratio) pair as one rate.
SAME_RATE = 0.01


def _rate_bound(metric: str) -> bool:
    """Whether ``metric`` is a rate the offered load sets (better higher: output tokens or
    requests per second). Below capacity every config serves what is offered, so its ratio
    between two configs is the windows' request draws and the past-the-knee rates pooled in,
    not a knob's effect: it is not carried (the knob acts through its latencies, which set
    the capacity)."""
    try:
        return metric_spec(metric).better == "higher"
    except (KeyError, AdvisorError):
        return False


def knob_effects(store: TrialStore, engine: Target, profile: HardwareProfile,
                 shape: Mapping[str, float], metrics: Sequence[str]) -> list[CarriedConfig]:
    """The carried knobs' effects, measured on the other hardware with the most trials of the
    profile's model: per config that changes only carried knobs, per figure, the ratio of each
    of its windows to the median of the defaults' windows at the same rate (the same request
    lengths ``shape``), pooled over the rates both measured (geometric mean; the log spread
    widens the interval). A config with fewer than two paired windows carries nothing."""
    knobs = set(carried_knobs(engine))
    if not knobs:
        return []
    defaults = engine.space().default_config()
    counts: dict[str, int] = {}
    trials = [t for t in store.list_trials(TrialFilter(target=engine.name,
                                                       status=TrialStatus.COMPLETE))
              if t.hardware_key != profile.hardware_key
              and str((t.workload_spec.get("params") or {}).get("model")) == profile.model]
    for t in trials:
        counts[t.hardware_key] = counts.get(t.hardware_key, 0) + 1
    if not counts:
        return []
    source = max(counts, key=lambda k: (counts[k], k))
    base: dict[float, list[TrialRecord]] = {}
    others: dict[str, tuple[dict[str, Any], list[TrialRecord]]] = {}
    for t in trials:
        features = workload_features(t.workload_spec)
        rate = features.get("rate_rps")
        if (t.hardware_key != source or rate is None
                or workload_distance(_shape_only(features), shape) > SAME_WORKLOAD):
            continue
        changed = {k: v for k, v in {**defaults, **t.config}.items() if defaults.get(k) != v}
        if not changed:
            base.setdefault(float(rate), []).append(t)
        elif set(changed) <= knobs:
            others.setdefault(canonical_json(changed), (changed, []))[1].append(t)
    out = []
    for changed, windows in others.values():
        logs: dict[str, list[float]] = {}
        rates = set()
        for t in windows:
            rate = float(workload_features(t.workload_spec)["rate_rps"])
            # The same offered rate only: a throughput ratio between windows 10 % apart in rate
            # is the rates' ratio, not the knob's effect.
            near = [r for r in base if abs(math.log(r / rate)) <= SAME_RATE]
            if not near:
                continue
            ref = base[min(near, key=lambda r: abs(math.log(r / rate)))]
            for m in metrics:
                if _rate_bound(m):
                    continue
                mine = t.metrics.get(m)
                theirs = [float(w.metrics[m]) for w in ref
                          if isinstance(w.metrics.get(m), int | float) and w.metrics[m] > 0]
                if isinstance(mine, int | float) and mine > 0 and theirs:
                    logs.setdefault(m, []).append(math.log(float(mine)
                                                           / statistics.median(theirs)))
                    rates.add(rate)
        usable = {m: v for m, v in logs.items() if len(v) >= 2}
        if not usable:
            continue
        effect = KnobEffect(
            ratios={m: math.exp(statistics.fmean(v)) for m, v in usable.items()},
            log_sd={m: statistics.stdev(v) for m, v in usable.items()},
            source=(f"{source}: {len(windows)} windows against the defaults at "
                    + ", ".join(f"{r:g}" for r in sorted(rates)) + " req/s"))
        out.append(CarriedConfig({**defaults, **profile.config, **changed}, changed, effect))
    return sorted(out, key=lambda c: canonical_json(c.changed))


#: Simulations and carried effects already computed in this process: an answer asks the same
#: ones for every SLO at a rate (the consistency audit asks hundreds of answers). Predictions
#: are kept per config (profile, batch limits, carried effect), then by rate.
_PREDICTIONS: dict[tuple[Any, ...], dict[float, Prediction]] = {}
_EFFECTS: dict[tuple[Any, ...], list[CarriedConfig]] = {}
#: Rates kept per config before its predictions are dropped (a server asked of many rates).
_RATES_KEPT = 4096


def _predictions_of(profile: HardwareProfile, slots: int | None, budget: int | None,
                    effect: KnobEffect | None, processes: float = 1.0
                    ) -> dict[float, Prediction]:
    """The predictions made in this process of one config on ``profile``, by arrival rate:
    an answer's own rate and every rate a capacity bisection tried. Each bisection of a config
    starts at the same rates whatever the SLO, and an answer at a rate is asked once per SLO;
    both read one simulation of a rate (every prediction here replays the profile's probe
    streams at that rate, :func:`answer_from_calibration`)."""
    by_rate = _remembered(_PREDICTIONS, (profile.uid, slots, budget, repr(effect), processes),
                          256, dict)
    if len(by_rate) > _RATES_KEPT:
        by_rate.clear()
    return by_rate


def _knob_effects_cached(store: TrialStore, engine: Target, profile: HardwareProfile,
                         shape: Mapping[str, float], metrics: Sequence[str]
                         ) -> list[CarriedConfig]:
    """:func:`knob_effects`, once per store contents (its count of the engine's trials),
    profile, shape and metrics."""
    count = store.count_matching(TrialFilter(target=engine.name, status=TrialStatus.COMPLETE))
    memo = (store.url, count, profile.uid, tuple(sorted(shape.items())), tuple(metrics))
    return _remembered(_EFFECTS, memo, 256,
                       lambda: knob_effects(store, engine, profile, shape, metrics))


def answer_from_calibration(store: TrialStore, calibration: Calibration, *, engine: Target,
                            slo: SLO, objective: Objective, workload: Mapping[str, float],
                            total_rate_rps: float | None = None) -> CalibratedAnswer | None:
    """The answer ``profile`` gives for ``workload`` (see the module docstring); None where the
    asked workload's lengths are not the probe's (the profile's streams would not be it)."""
    profile = calibration.profile
    params = {**_probe_params(profile), "model": profile.model}
    probe_features = workload_features({"params": params})
    asked = {**probe_features, **{k: float(v) for k, v in workload.items()}}
    shape = {k: v for k, v in asked.items() if k != "rate_rps"}
    if workload_distance(shape, probe_features) > SAME_WORKLOAD or "rate_rps" not in asked:
        return None
    rate = asked["rate_rps"]
    # The candidates change the batch limits and the carried knobs only: whether the engine
    # serves shared prompt prefixes from its cache is the probed config's for all of them.
    streams_at = workload_streams(params, prefix_cache=_caches_prefixes(engine, profile.config))
    streams = streams_at(rate)
    metrics = list(dict.fromkeys([objective.metric, *slo.metrics]))
    note = _interval_note(calibration)
    space = engine.space()
    defaults = space.default_config()

    def key(config: Mapping[str, Any]) -> str:
        return canonical_json({**defaults, **config})

    trials = _model_trials(store, engine.name, profile.hardware_key, profile.model)
    at_workload: dict[str, list[TrialRecord]] = {}
    for t in trials:
        if workload_distance(asked, workload_features(t.workload_spec)) <= SAME_WORKLOAD:
            at_workload.setdefault(key(t.config), []).append(t)

    configs = _variants(engine, profile)
    effects: list[KnobEffect | None] = [None] * len(configs)
    for carried in _knob_effects_cached(store, engine, profile, shape, metrics):
        configs.append(carried.config)
        effects.append(carried.effect)
    verdicts: list[Verdict] = []
    figures: list[dict[str, Figure]] = []
    intervals: list[dict[str, tuple[float, float, float]]] = []
    for config, effect in zip(configs, effects, strict=True):
        windows = at_workload.get(key(config), [])
        slots, budget = _limits(engine, config)
        processes = _frontend_processes(engine, profile, config)

        def simulated(n: float, slots: int | None = slots, budget: int | None = budget,
                      effect: KnobEffect | None = effect) -> Prediction:
            # One simulation per config and rate, whatever the SLO asked.
            return _remembered(
                _predictions_of(profile, slots, budget, effect, n), rate, _RATES_KEPT,
                functools.partial(predict, profile, streams, rate_rps=rate, slots=slots,
                                  token_budget=budget, effect=effect, frontend_processes=n))

        predicted = simulated(processes)
        if processes != 1:
            # The processes' share of the frontend is assumed, never measured: the interval
            # spans the prediction with the probe's processes, so only a measurement shows a
            # gain at the conservative end.
            predicted = spanning(predicted, simulated(1.0))
        said = note if effect is None else (
            f"{note}; the effect of "
            + ", ".join(f"{k}={v}" for k, v in sorted(config.items())
                        if defaults.get(k) != v and k in carried_knobs(engine))
            + f" carried as the ratio against the defaults measured on {effect.source}, its "
              "spread widening the interval")
        if windows:
            verdicts.append(measured_verdict(slo, [t.metrics for t in windows],
                                             trial_ids=[t.id or 0 for t in windows]))
            figures.append({**_predicted_figures(predicted, metrics, said),
                            **_measured(windows, metrics)})
        else:
            verdicts.append(predicted_verdict(slo, _intervals(predicted)))
            figures.append(_predicted_figures(predicted, metrics, said))
        intervals.append(_intervals(predicted))
    feasible = [i for i, v in enumerate(verdicts) if v.meets]
    notes = [f"{calibration.label} on {profile.hardware} ({calibration.source}; probe windows at "
             + ", ".join(f"{w['workload_spec']['params']['arrival']['rate_rps']:g}"
                         for w in profile.probe)
             + " req/s): the GPU's trials of this model measured fewer than "
             f"{MIN_MEASURED_CONFIGS} configs, so the simulator with the calibrated step costs "
             "answers where no window was measured at this workload",
             "from a calibration the batch limits vary through the simulator, and so do the "
             "server processes in front of the engine (they share the calibrated frontend cost "
             "per token, assumed to scale with their count: not measured, so their intervals "
             "span the prediction with the probe's processes), the knobs the "
             f"target carries ({', '.join(carried_knobs(engine)) or 'none'}) as their ratio "
             "against the defaults measured on the hardware with the most trials of this model; "
             "every other knob stays at its default: its effect does not transfer "
             "(docs/new-gpu.md)"]
    default_i = 0
    chosen: int | None
    straddling = [] if feasible else undecided(verdicts, default_i)
    reason = None
    if not feasible:
        chosen = None
        status, kind = ("undecided" if straddling else "no_feasible_config"), "none"
        reason = (f"none of {len(configs)} candidate configs meets the SLO here (measured "
                  "windows at this workload where a config has them, else the conservative end "
                  "of the calibrated 90% interval)")
    elif verdicts[default_i].meets:
        chosen, status, kind = default_i, "keep_defaults", "keep_defaults"
        mine = _objective_bounds(objective, figures[default_i])
        for i in feasible:
            other = _objective_bounds(objective, figures[i])
            best = _objective_bounds(objective, figures[chosen])
            if (i != default_i and other is not None and mine is not None
                    and best is not None and other[0] > mine[1] and other[0] > best[0]):
                chosen, status, kind = i, "recommended", "config"
    else:
        def cautious(i: int) -> float:
            b = _objective_bounds(objective, figures[i])
            return -math.inf if b is None else b[0]

        chosen = max(feasible, key=lambda i: (cautious(i), -i))
        status, kind = "recommended", "config"

    low_rps = min(float(w["workload_spec"]["params"]["arrival"]["rate_rps"])
                  for w in profile.probe) / CAPACITY_SPAN
    high_rps = max(float(w["workload_spec"]["params"]["arrival"]["rate_rps"])
                   for w in profile.probe) * CAPACITY_SPAN

    def capacity_of(i: int) -> CapacityAt:
        config = configs[i]
        slots, budget = _limits(engine, config)
        processes = _frontend_processes(engine, profile, config)
        # The capacity does not depend on the asked rate: one bisection per profile, config,
        # SLO and carried effect serves every rate asked of them (the audit asks dozens).
        def bisected(n: float) -> Capacity:
            memo = (profile.uid, canonical_json(dict(config)), str(slo), repr(effects[i]),
                    low_rps, high_rps, n)
            return _remembered(_CAPACITIES, memo, 4096, lambda: capacity_at_slo(
                profile, streams_at, dict(_slo_bounds(slo)), low_rps=low_rps,
                high_rps=high_rps, slots=slots, token_budget=budget, effect=effects[i],
                frontend_processes=n,
                predictions=_predictions_of(profile, slots, budget, effects[i], n)))

        cap = bisected(processes)
        if processes != 1:  # as its figures: the range spans the probe's processes
            cap = spanning_capacity(cap, bisected(1.0))
        cap, why = _capped(cap, slo, [t for t in trials if key(t.config) == key(config)],
                           shape)
        return CapacityAt(cap, None if total_rate_rps is None
                          else replicas_for(total_rate_rps, cap), why)

    default_capacity = capacity_of(default_i)
    capacity = (None if chosen is None else default_capacity if chosen == default_i
                else capacity_of(chosen))
    closest = None
    if chosen is None:
        j = straddling[0] if straddling else min(range(len(configs)), key=lambda i: (
            sum(max(m, 0.0) for m in verdicts[i].margins.values()), i))
        closest = {"config": configs[j], "verdict": verdicts[j].to_dict()}
        if straddling:
            which = ("the engine defaults" if j == default_i else "the config "
                     + json.dumps({k: v for k, v in configs[j].items() if defaults.get(k) != v},
                                  sort_keys=True))
            closest["figures"] = {m: f.model_dump(mode="json") for m, f in figures[j].items()}
            reason = f"{reason}, " + straddle_reason(len(straddling), which, verdicts[j], slo,
                                                     intervals[j])
    picked = None if chosen is None else configs[chosen]
    launch = None
    spec = {"kind": "llm-serving", "params": {**params, "arrival": {
        **params["arrival"], "rate_rps": rate}}}
    if picked is not None:
        try:
            launch = engine.launch_command(picked, Workload.from_spec(spec))
        except AdvisorError as exc:
            notes.append(f"launch command unavailable: {exc}")
    answered = (configs[straddling[0]] if straddling else configs[default_i]) if picked is None \
        else picked
    verify = _verify_command(engine, profile, rate, answered, defaults)
    cap_for = capacity or default_capacity
    if cap_for.note:
        notes.append(cap_for.note)
    notes.append("capacity from a calibration is an upper estimate: past the knee the server's "
                 "frontend can delay requests more than the simulator models; verify it at "
                 "that rate")
    cited = tuple(at_workload.get(key(answered), []))
    return CalibratedAnswer(
        calibration=calibration, status=status, answer=kind, workload=asked, config=picked,
        launch_command=launch, figures={} if chosen is None else figures[chosen],
        verdict=None if chosen is None else verdicts[chosen],
        default_config=configs[default_i], default_figures=figures[default_i],
        default_verdict=verdicts[default_i], considered=len(configs), feasible=len(feasible),
        capacity=capacity, default_capacity=default_capacity, windows=cited,
        closest=closest, to_measure=tuple(dict(configs[i]) for i in straddling),
        verify_command=verify, reason=reason, notes=tuple(notes))


def _caches_prefixes(engine: Target, config: Mapping[str, Any]) -> bool:
    """Whether ``config`` of ``engine`` turns on the knob whose role is the prefix cache."""
    space = engine.space()
    return caches_prefixes(space.knob_with_role("prefix_cache"), space.default_config(), config)


def _slo_bounds(slo: SLO) -> dict[str, float]:
    """The SLO as knowledge/calibrated.py reads it: metric -> bound (latency upper bounds,
    throughput lower bounds)."""
    return {b.metric: float(b.threshold) for b in slo.bounds}


#: Capacities already bisected in this process (see ``capacity_of``).
_CAPACITIES: dict[tuple[Any, ...], Capacity] = {}


def _capped(cap: Capacity, slo: SLO, windows: Sequence[TrialRecord],
            shape: Mapping[str, float]) -> tuple[Capacity, str | None]:
    """``cap`` with its value and high end held below the lowest rate at which the config's
    measured windows (the asked lengths) missed the SLO by the rule: measured first."""
    by_rate: dict[float, list[TrialRecord]] = {}
    for t in windows:
        features = workload_features(t.workload_spec)
        rate = features.get("rate_rps")
        if rate is None or workload_distance(
                {k: v for k, v in features.items() if k != "rate_rps"}, shape) > SAME_WORKLOAD:
            continue
        by_rate.setdefault(float(rate), []).append(t)
    missed = sorted(r for r, ws in by_rate.items()
                    if measured_verdict(slo, [t.metrics for t in ws]).meets is False)
    if not missed or missed[0] >= cap.high:
        return cap, None
    top = missed[0]
    met = [r for r, ws in by_rate.items() if r < top
           and measured_verdict(slo, [t.metrics for t in ws]).meets]
    value = min(cap.rate_rps, max(met)) if met else min(cap.rate_rps, cap.low, top)
    capped = Capacity(value, min(cap.low, value), min(cap.high, top), cap.label)
    return capped, (f"capped by measured windows: the config missed the SLO at {top:g} req/s"
                    + (f" and met it at {max(met):g} req/s" if met else "")
                    + f" (the calibration alone predicted {cap.rate_rps:.1f} req/s "
                      f"[{cap.low:.1f}, {cap.high:.1f}])")


def _verify_command(engine: Target, profile: HardwareProfile, rate: float,
                    config: Mapping[str, Any], defaults: Mapping[str, Any]) -> str:
    """The cross-check that measures the answer on the GPU: the answered config (and the
    defaults beside it where it differs) at the asked rate, its windows stored (``--store-as``)
    so that asking the same question again is answered by them."""
    changed = {k: v for k, v in config.items() if defaults.get(k) != v}
    parts = [f"advisor crosscheck --target {engine.name} --model {profile.model} "
             f"--rate {rate:g} --repeats 3 --store-as verify-{profile.model}"]
    if changed:
        parts.append("--config " + _quote("pick=" + json.dumps(changed, sort_keys=True)))
        parts.append("--config defaults={}")
    return " ".join(parts)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"

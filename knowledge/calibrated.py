"""Predictions on a machine known only from a calibration (a hardware profile,
knowledge/profiles.py): the continuous-batching simulator driven by the profile's step-time
model, each figure with an interval widened by the calibration's measured error and the
window-to-window noise; the highest arrival rate that meets an SLO; the replicas a total rate
needs. Every answer here is labelled :data:`LABEL`: predicted, never measured.

A config's batch limits (batch slots, the step's token budget) and the processes in front of
the engine act through the simulator itself: the frontend's calibrated cost per streamed token is
the probe's server's, and N times its processes share it as one frontend N times as fast (a
structural assumption, not a measured effect: docs/new-gpu.md; callers widen such a
prediction's interval to span the one without it, :func:`spanning`). Every other knob acts as a
:class:`KnobEffect`: the ratio its measured trials on another machine showed against that
machine's defaults (at the same share of capacity), with the log spread of that ratio widening
the interval; the caller decides which knobs transfer that way (docs/new-gpu.md says which do
and which do not).

The request streams are the caller's (a function of the arrival rate): nothing here knows a
workload's format.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field, replace
from statistics import NormalDist

from knowledge.batch_sim import BatchModel, Frontend, RequestStream
from knowledge.profiles import HardwareProfile

__all__ = ["LABEL", "Capacity", "Figure", "KnobEffect", "Prediction", "Replicas",
           "StreamsAt", "capacity_at_slo", "frontend_scaled", "predict", "replicas_for",
           "spanning", "spanning_capacity"]

#: How every answer from a calibration is labelled.
LABEL = "predicted from calibration"
#: The intervals' coverage (two-sided).
COVERAGE = 0.90
#: A stream source: the request streams replayed for an arrival rate (req/s).
StreamsAt = Callable[[float], Sequence[RequestStream]]
#: The figures whose lower values are better (latencies); the others (throughput) are better
#: higher. Capacity is judged on the SLO's figures, all latencies here.
_HIGHER_IS_BETTER = ("output_tokens_per_s", "requests_per_s")


@dataclass(frozen=True)
class KnobEffect:
    """A knob's effect measured elsewhere: per figure, the ratio config / defaults and the
    standard deviation of its log over the measurements it came from."""

    ratios: Mapping[str, float]
    log_sd: Mapping[str, float] = field(default_factory=dict)
    source: str = ""


@dataclass(frozen=True)
class Figure:
    """One predicted figure and its :data:`COVERAGE` interval."""

    value: float
    low: float
    high: float

    def contains(self, measured: float) -> bool:
        return self.low <= measured <= self.high


@dataclass(frozen=True)
class Prediction:
    """The client's figures of one config at one arrival rate, predicted from a profile."""

    rate_rps: float
    figures: Mapping[str, Figure]
    label: str = LABEL
    profile: str = ""


def frontend_scaled(model: BatchModel, processes: float) -> BatchModel:
    """``model`` with ``processes`` times its frontend: each streamed token costs the frontend
    1/``processes`` of the calibrated time (the processes split the requests between them, and
    the simulator's one frontend queue stands for them all)."""
    if not processes > 0:
        raise ValueError(f"frontend processes must be > 0, got {processes}")
    if processes == 1 or not model.frontend.active:
        return model
    return replace(model, frontend=Frontend(model.frontend.per_token_ms / processes))


def spanning(prediction: Prediction, other: Prediction) -> Prediction:
    """``prediction``'s values with intervals that also span ``other``'s: where a config's
    prediction rests on an assumption no measurement backs (more frontend processes), the
    interval keeps the prediction without it (``other``), so its conservative end assumes no
    gain and only a measurement can show one."""
    figures = {}
    for name, f in prediction.figures.items():
        o = other.figures.get(name)
        figures[name] = f if o is None else Figure(f.value, min(f.low, o.low),
                                                   max(f.high, o.high))
    return replace(prediction, figures=figures)


def spanning_capacity(capacity: Capacity, other: Capacity) -> Capacity:
    """``capacity`` with the range that also spans ``other`` (as :func:`spanning`)."""
    return replace(capacity, low=min(capacity.low, other.low),
                   high=max(capacity.high, other.high))


def _z() -> float:
    return NormalDist().inv_cdf(0.5 + COVERAGE / 2)


def _log_sd(profile: HardwareProfile, metric: str, effect: KnobEffect | None) -> float:
    """The log-scale spread of ``metric``: the calibration's error, the window noise and the
    knob effect's own spread, independent, added in quadrature. A figure the calibration never
    scored borrows the largest error it did score (never a narrower interval than measured)."""
    errors = dict(profile.error_log)
    err = errors.get(metric, max(errors.values(), default=0.0))
    noise = profile.noise_log.get(metric, max(profile.noise_log.values(), default=0.0))
    extra = effect.log_sd.get(metric, 0.0) if effect is not None else 0.0
    return math.sqrt(err ** 2 + noise ** 2 + extra ** 2)


def predict(profile: HardwareProfile, streams: Sequence[RequestStream], *, rate_rps: float,
            slots: int | None = None, token_budget: int | None = None,
            effect: KnobEffect | None = None, frontend_processes: float = 1.0) -> Prediction:
    """The figures of a config on ``profile``'s machine for ``streams`` (one or more replays of
    the workload at ``rate_rps``; each figure is the geometric mean over them), under the
    config's batch limits (the profile's where None), a knob effect carried from another
    machine (none: the profile's own config) and ``frontend_processes`` times the probe's
    server processes in front of the engine (:func:`frontend_scaled`)."""
    if not streams:
        raise ValueError("predict needs at least one request stream")
    model = frontend_scaled(profile.batch_model(), frontend_processes)
    slots = profile.slots if slots is None else slots
    budget = profile.token_budget if token_budget is None else token_budget
    logs: dict[str, list[float]] = {}
    for stream in streams:
        for name, value in model.predict(stream, slots, budget).items():
            if value > 0:
                logs.setdefault(name, []).append(math.log(value))
    z = _z()
    figures = {}
    for name, values in logs.items():
        if len(values) != len(streams):
            continue
        centre = sum(values) / len(values)
        if effect is not None and name in effect.ratios and effect.ratios[name] > 0:
            centre += math.log(effect.ratios[name])
        half = z * _log_sd(profile, name, effect)
        figures[name] = Figure(math.exp(centre), math.exp(centre - half), math.exp(centre + half))
    return Prediction(rate_rps, figures, profile=profile.name)


@dataclass(frozen=True)
class Capacity:
    """The highest arrival rate meeting an SLO: predicted, and the range its interval allows
    (``low``: every bound pessimistic; ``high``: every bound optimistic)."""

    rate_rps: float
    low: float
    high: float
    label: str = LABEL


def _meets(prediction: Prediction, slo: Mapping[str, float], side: str) -> bool:
    """Whether ``prediction`` meets ``slo`` (figure -> upper bound on a latency, lower bound on
    a throughput) reading each figure at ``side``: value, pessimistic or optimistic bound."""
    for metric, bound in slo.items():
        fig = prediction.figures.get(metric)
        if fig is None:
            return False
        higher_better = metric in _HIGHER_IS_BETTER
        if side == "value":
            x = fig.value
        elif side == "pessimistic":
            x = fig.low if higher_better else fig.high
        else:
            x = fig.high if higher_better else fig.low
        if (x < bound) if higher_better else (x > bound):
            return False
    return True


def capacity_at_slo(profile: HardwareProfile, streams_at: StreamsAt, slo: Mapping[str, float],
                    *, low_rps: float, high_rps: float, slots: int | None = None,
                    token_budget: int | None = None, effect: KnobEffect | None = None,
                    frontend_processes: float = 1.0, tolerance: float = 0.02,
                    predictions: MutableMapping[float, Prediction] | None = None) -> Capacity:
    """The highest rate in [``low_rps``, ``high_rps``] whose prediction meets ``slo``
    (bisection to ``tolerance`` relative; the figures rise with the rate), for the predicted
    values and for each interval bound. A side that fails already at ``low_rps`` reads
    ``low_rps``'s lower neighbour 0; one that holds at ``high_rps`` reads ``high_rps``.

    ``predictions``: the predictions by rate of this profile, stream source, batch limits,
    effect and frontend processes made so far, read and added to; a caller bisecting several
    SLOs of one config passes one mapping to them all (every bisection starts at the same
    rates)."""
    if not 0 < low_rps < high_rps:
        raise ValueError(f"`0 < low_rps < high_rps` must hold, got {low_rps}, {high_rps}")
    cache: MutableMapping[float, Prediction] = {} if predictions is None else predictions

    def at(rate: float) -> Prediction:
        if rate not in cache:
            cache[rate] = predict(profile, streams_at(rate), rate_rps=rate, slots=slots,
                                  token_budget=token_budget, effect=effect,
                                  frontend_processes=frontend_processes)
        return cache[rate]

    def highest(side: str) -> float:
        if not _meets(at(low_rps), slo, side):
            return 0.0
        if _meets(at(high_rps), slo, side):
            return high_rps
        lo, hi = low_rps, high_rps
        while hi / lo > 1 + tolerance:
            mid = math.sqrt(lo * hi)
            lo, hi = (mid, hi) if _meets(at(mid), slo, side) else (lo, mid)
        return lo

    return Capacity(highest("value"), highest("pessimistic"), highest("optimistic"))


@dataclass(frozen=True)
class Replicas:
    """Replicas of one GPU serving a total rate at the SLO: ceil(rate / capacity), and the
    range the capacity's interval gives (None where a capacity bound is 0: no count does)."""

    count: int | None
    low: int | None
    high: int | None
    label: str = LABEL


def replicas_for(total_rps: float, capacity: Capacity) -> Replicas:
    """How many replicas serve ``total_rps`` at the SLO ``capacity`` was judged on."""
    if not total_rps > 0:
        raise ValueError(f"the total rate must be > 0, got {total_rps}")

    def n(cap: float) -> int | None:
        return math.ceil(total_rps / cap - 1e-9) if cap > 0 else None

    return Replicas(n(capacity.rate_rps), n(capacity.high), n(capacity.low))

"""Load curves blended with a simulator of the engine, where the context's own data prefer it.

A config's load curve (knowledge/load_curve.py) reads a held-out rate off the rates it was
measured at; a simulator of the engine (knowledge/batch_sim.py, driven through the target's
adapter) computes the same figures from how the engine schedules work. Their errors differ in
kind: the curve misplaces a knee that falls between two measured rates, the simulator misses
what its step model leaves out. On the shipped GPU data their geometric mean predicted held-out
rates better than either for some figures and worse for others
(docs/benchmarks/batch-simulator-2026-12-05/), so the
choice is made per context and metric from the context's own data, never from the trials an
answer is scored on: the curves' leave-one-rate-out predictions (made for their intervals)
against the same predictions blended with the simulator. A metric the blend does not improve
(mean absolute log error, not MAPE: :func:`fit_blend` says why) keeps the curve alone. The
blend's intervals are calibrated on the same held-out residuals, as the curves' are, and never
narrower than the engine's repeat noise.

Which simulator serves a context comes from the ``slo_advisor.load_simulators`` entry points,
one per workload kind: ``fit(trials)`` returns an object whose ``predict(config, workload)``
gives the figures at a workload's features, or None where the trials do not support one. This
module names no engine, knob or workload; a kind without an entry point gets no blend.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Protocol

import numpy as np

from knowledge.load_curve import LoadCurves, calibrated_widths, pooled_half_width

__all__ = ["ENTRY_POINT_GROUP", "MIN_HELD_OUT", "SIM_WEIGHT", "BlendScore", "CurveBlend",
           "Simulation", "fit_blend", "fit_simulation", "mix"]

log = logging.getLogger(__name__)

#: The entry-point group naming, per workload kind, the factory of a context's simulator.
ENTRY_POINT_GROUP = "slo_advisor.load_simulators"
#: The simulator's weight in the geometric mean ``curve^(1 - w) * simulator^w``. Equal weights
#: were named before the blend was first scored
#: (docs/benchmarks/h200-batch-sim-2026-12-04/batch_sim.py); scored beside it on
#: the 8B's TTFT p95, 0.25 lost on both held-out tests and 0.75 won on one and lost on the
#: other (docs/benchmarks/batch-simulator-2026-12-05/), so the named weight stays.
SIM_WEIGHT = 0.5
#: A metric is blended only where at least this many held-out predictions compared the two.
MIN_HELD_OUT = 10
#: Simulated figures kept per blend (each costs one simulation per seed of the adapter).
_CACHE_SIZE = 4096
#: What :meth:`CurveBlend.figures` finds for a key it has not simulated (None is an answer).
_MISSING = object()


class Simulation(Protocol):
    """A context's simulator, as a target's adapter provides it."""

    def predict(self, config: Mapping[str, Any], workload: Mapping[str, float]
                ) -> Mapping[str, float] | None:
        """The figures of ``config`` at ``workload`` (its features), or None where the
        simulator cannot place it."""


def fit_simulation(trials: Sequence[Any]) -> Simulation | None:
    """The simulator the entry point of the trials' workload kind fits on them, or None (mixed
    kinds, no entry point, or the adapter found too little to fit)."""
    kinds = {str((t.workload_spec or {}).get("kind", "")) for t in trials}
    if len(kinds) != 1:
        return None
    factory = _factory(kinds.pop())
    if factory is None:
        return None
    try:
        return factory(trials)
    except Exception as exc:  # a broken adapter costs the blend, never the fit
        log.warning("the load simulator failed to fit (%s: %s): the curves answer alone",
                    type(exc).__name__, exc)
        return None


def _factory(kind: str) -> Callable[[Sequence[Any]], Simulation | None] | None:
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name == kind:
            loaded: Callable[[Sequence[Any]], Simulation | None] = point.load()
            return loaded
    return None


@dataclass(frozen=True)
class BlendScore:
    """The curves alone against the blend on one metric's held-out rates: MAPE and mean
    absolute log error (what the choice reads) of each, over ``n`` predictions."""

    curve_mape: float
    blend_mape: float
    curve_log: float
    blend_log: float
    n: int

    @property
    def blend_wins(self) -> bool:
        return self.n >= MIN_HELD_OUT and self.blend_log < self.curve_log


@dataclass
class CurveBlend:
    """The blend of one context's curves with its simulator.

    ``metrics``: those the blend answers for (it beat the curves alone on the context's
    held-out rates); ``scores``: per compared metric, :class:`BlendScore`;
    ``half_width``: per blended metric, (load band, support) -> log half-width, as the curves';
    ``rate_error``: per blended metric and load band, (MAPE, predictions) on held-out rates.
    """

    simulation: Simulation
    weight: float
    metrics: tuple[str, ...]
    scores: dict[str, BlendScore]
    half_width: dict[str, dict[tuple[int, int], float]]
    rate_error: dict[str, dict[int, tuple[float, int]]]
    _cache: dict[tuple[str, str], object] = field(
        default_factory=dict, repr=False)

    def figures(self, config: Mapping[str, Any], workload: Mapping[str, float]
                ) -> Mapping[str, float] | None:
        """The simulator's figures of ``config`` at ``workload``, computed once."""
        key = (_key(config), _key(workload))
        cached = self._cache.get(key, _MISSING)
        if cached is not _MISSING:
            return cached  # type: ignore[return-value]
        figures = self.simulation.predict(config, workload)
        if len(self._cache) >= _CACHE_SIZE:  # a long-running service asks many rates
            self._cache.clear()
        self._cache[key] = figures  # threads asking at once compute it twice, harmlessly
        return figures

    def predict(self, config: Mapping[str, Any], workload: Mapping[str, float], metric: str,
                curve_value: float, band: int, support: int
                ) -> tuple[float, float, float] | None:
        """(value, low, high) of the blend where ``metric`` is blended and the simulator places
        the config, else None (the curve answers alone)."""
        value = self._blended(config, workload, metric, curve_value)
        if value is None:
            return None
        half = pooled_half_width(self.half_width[metric], band, support)
        return value, value * math.exp(-half), value * math.exp(half)

    def _blended(self, config: Mapping[str, Any], workload: Mapping[str, float], metric: str,
                 value: float) -> float | None:
        """``value`` mixed with the simulator's figure, where ``metric`` is blended here and the
        simulator places ``config``; else None."""
        if metric not in self.metrics or not value > 0:
            return None
        sim = (self.figures(config, workload) or {}).get(metric)
        if sim is None or not sim > 0:
            return None
        return mix(value, float(sim), self.weight)

    def predict_unmeasured(self, config: Mapping[str, Any], workload: Mapping[str, float],
                           metric: str, value: float, low: float, high: float
                           ) -> tuple[float, float, float] | None:
        """For a config with no curve of its own: its knob-level answer (``value`` in
        [``low``, ``high``]) blended with the simulator's figure, where ``metric`` is blended in
        this context and the simulator places the config (it simulates configs it was not
        fitted on where what it needs of them was measured); else None.

        Held out by config on the shipped 8B trials, and on configs measured after their
        prediction was committed, this beat the knob-level answer alone on the first-token
        latency and kept its intervals' coverage
        (docs/benchmarks/batch-simulator-2026-12-05/). No held-out-config
        residuals calibrate it per context, so the interval is the knob-level one's log
        half-width (its wider side) around the blend: on both of those tests it held at least
        as many measurements as the knob-level interval."""
        if not 0 < low <= value <= high:
            return None
        blended = self._blended(config, workload, metric, value)
        if blended is None:
            return None
        half = max(math.log(high / value), math.log(value / low))
        return blended, blended * math.exp(-half), blended * math.exp(half)

    def places(self, config: Mapping[str, Any], workload: Mapping[str, float]) -> bool:
        """Whether the simulator answers for ``config`` at ``workload``."""
        return bool(self.figures(config, workload))

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the figures computed so far (they depend only on what is kept)."""
        state = dict(self.__dict__)
        state["_cache"] = {}
        return state


def _key(mapping: Mapping[str, Any]) -> str:
    return repr(sorted((str(k), repr(v)) for k, v in mapping.items()))


def mix(curve: float, sim: float, weight: float) -> float:
    """The blend of a curve's and a simulator's figure: ``curve^(1 - weight) * sim^weight``."""
    return math.exp((1.0 - weight) * math.log(curve) + weight * math.log(sim))


def fit_blend(curves: LoadCurves, simulation: Simulation | None,
              configs: Sequence[Mapping[str, Any]], workloads: Sequence[Mapping[str, float]],
              measured: Sequence[Mapping[str, float]], *, weight: float = SIM_WEIGHT
              ) -> CurveBlend | None:
    """The blend of ``curves`` (fitted on these rows) with ``simulation``, or None where no
    metric's held-out rates improve with it.

    Every leave-one-rate-out prediction the curves made for their intervals
    (``curves.held_out_``) is blended with the simulator's figure of that row's config at that
    row's workload; per metric, the blend answers where its mean absolute log error over those
    predictions is below the curves' alone (at least :data:`MIN_HELD_OUT` of them). Not MAPE:
    an answer too low errs by at most 100 % and one too high without bound, so MAPE prefers a
    model that is low near capacity, where a simulator that leaves out the server's own queue
    is (on the shipped 3B trials the blend won on MAPE and lost on the log error, by 0.37
    against 0.32 below capacity and 1.18 against 0.84 from it). The simulator is fitted on every
    row, so its side of each held-out prediction has seen the rate held out; how far that
    flatters the choice is what the workload-held-out eval, which refits both per fold, shows.
    """
    held = getattr(curves, "held_out_", None)
    if simulation is None or not held:
        return None
    blend = CurveBlend(simulation, weight, (), {}, {}, {})
    errors: dict[str, tuple[list[float], list[float], list[float], list[float]]] = {}
    logs: dict[tuple[str, int, int], list[float]] = {}
    by_band: dict[tuple[str, int], list[float]] = {}
    for row, metric, pred, band, support in held:
        sim = (blend.figures(configs[row], workloads[row]) or {}).get(metric)
        truth = measured[row].get(metric)
        if sim is None or not sim > 0 or not isinstance(truth, int | float) or not truth > 0:
            continue
        mixed = mix(pred, float(sim), weight)
        curve_ape, blend_ape, curve_log, blend_log = errors.setdefault(metric, ([], [], [], []))
        curve_ape.append(abs(pred - truth) / truth)
        blend_ape.append(abs(mixed - truth) / truth)
        curve_log.append(abs(math.log(truth / pred)))
        blend_log.append(abs(math.log(truth / mixed)))
        logs.setdefault((metric, band, support), []).append(blend_log[-1])
        by_band.setdefault((metric, band), []).append(blend_ape[-1])
    for metric, (curve_ape, blend_ape, curve_log, blend_log) in sorted(errors.items()):
        blend.scores[metric] = BlendScore(
            float(np.mean(curve_ape)), float(np.mean(blend_ape)), float(np.mean(curve_log)),
            float(np.mean(blend_log)), len(blend_ape))
    blend.metrics = tuple(m for m, score in blend.scores.items() if score.blend_wins)
    if not blend.metrics:
        return None
    repeat_sd = getattr(curves, "repeat_sd_", {})
    for metric in blend.metrics:
        blend.half_width[metric] = calibrated_widths(logs, repeat_sd, metric, curves.coverage)
        blend.rate_error[metric] = {band: (float(np.mean(errs)), len(errs))
                                    for (m, band), errs in by_band.items() if m == metric}
    return blend

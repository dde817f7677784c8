"""Load curves: per measured config, its figures against the offered arrival rate, in the known
shape of a server under load: throughput grows with the rate until the engine's capacity, then
flattens; latency is flat at light load and grows as a queue forms when utilisation nears 1
(and, past capacity, by the wait a finite run's backlog adds).

Which workload feature is the offered rate and which metrics are latencies or throughputs is
read from the names (:func:`load_roles`): metric names carry their unit (``objectives/metrics.py``),
so nothing here names an engine or a metric. This module never imports an engine.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["CURVE_COVERAGE", "ConfigCurve", "LoadCurves", "LoadRoles", "calibrated_widths",
           "config_key", "conformal_quantile", "load_roles", "pooled_half_width",
           "unvaried_knobs"]

#: Nominal coverage of a curve's prediction interval (the surrogates' too).
CURVE_COVERAGE = 0.9
#: Sharpness of the throughput curve's bend at capacity (a smooth minimum of ``s * rate`` and
#: the ceiling): 6 bends within ~15 % of the knee, as the measured H200 curves do.
_BEND = 6.0
#: Utilisation at which the steady-state queue term stops growing: beyond it a finite run's
#: backlog term takes over (a steady-state queue never forms there).
_RHO_CAP = 0.95
#: Capacity scales tried for each latency metric (the queue of one figure may start growing a
#: little before or after the served rate bends).
_SCALES = (0.7, 0.8, 0.9, 1.0, 1.1, 1.25, 1.4)
#: A capacity estimate beyond this multiple of the highest measured rate is not seen in the
#: data (the served rate never bent): the context's seen capacities are borrowed instead.
_UNSEEN = 1.5
_NOISE_Z = 1.645


@dataclass(frozen=True)
class LoadRoles:
    """Where the curves read their inputs: the workload feature holding the offered rate, the
    metric holding the served rate (same unit), and the latencies and throughputs to curve."""

    rate: str
    served: str
    latencies: tuple[str, ...]
    throughputs: tuple[str, ...]

    @property
    def metrics(self) -> tuple[str, ...]:
        return (*self.throughputs, *self.latencies)


def load_roles(metrics: Mapping[str, Sequence[float]], features: Sequence[str]
               ) -> LoadRoles | None:
    """The roles of a context's names by their unit suffixes, or None where none apply.

    The offered rate is the workload feature in requests per second (``*_rps``); the served rate
    is the metric in the same unit (``*requests_per_s``) with the largest median (every request
    completed counts, a goodput only those meeting a bound); latencies end in ``_ms`` and
    throughputs in ``_per_s``. A throughput that falls as the rate grows (a goodput past
    capacity) gets no curve (:meth:`LoadCurves.fit`): the curves are monotone in the rate.
    """
    rates = sorted(f for f in features if f.endswith("_rps"))
    served = [m for m in metrics if m.endswith("requests_per_s") and metrics[m]]
    if not rates or not served:
        return None
    best = max(served, key=lambda m: float(np.median(metrics[m])))
    return LoadRoles(rate=rates[0], served=best,
                     latencies=tuple(sorted(m for m in metrics if m.endswith("_ms"))),
                     throughputs=tuple(sorted(m for m in metrics if m.endswith("_per_s"))))


def config_key(config: Mapping[str, Any], workload: Mapping[str, float], rate: str,
               unvaried: frozenset[str] = frozenset()) -> str:
    """One curve per config (less its ``unvaried`` knobs) and workload other than its rate."""
    rest = {k: round(float(v), 6) for k, v in workload.items() if k != rate}
    own = {k: v for k, v in config.items() if k not in unvaried}
    return json.dumps([own, rest], sort_keys=True, default=str)


def unvaried_knobs(configs: Sequence[Mapping[str, Any]]) -> frozenset[str]:
    """Knobs that some configs lack and every config that sets them sets to one value.

    A knob added to a space after some trials were measured is missing from those trials'
    configs; they ran at the engine's default, which is what every later trial that never
    varied it recorded. Such a knob tells no config from another, so it is left out of a
    config's identity: the same engine settings measured before and after the knob existed
    share one curve. A knob set to two values (or set by every config) stays.
    """
    values: dict[str, set[str]] = {}
    for config in configs:
        for k, v in config.items():
            values.setdefault(k, set()).add(json.dumps(v, sort_keys=True, default=str))
    return frozenset(k for k, seen in values.items()
                     if len(seen) == 1 and any(k not in c for c in configs))


# -- the two curve forms -----------------------------------------------------------------------


def _throughput(params: np.ndarray, rate: np.ndarray) -> np.ndarray:
    """``s * rate`` bending smoothly into the ceiling ``top``: params are (log s, log top)."""
    log_s, log_top = params
    linear = log_s + np.log(rate)
    return np.asarray(linear - np.logaddexp(0.0, _BEND * (linear - log_top)) / _BEND)


def _fit_throughput(rate: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(log s, log top) minimising the squared log error (a grid over the ceiling, then s in
    closed form per ceiling: the rates are few and the problem 1-D once the ceiling is fixed)."""
    logy = np.log(y)
    low = logy - np.log(rate)
    best: tuple[float, np.ndarray] | None = None
    for top in np.exp(np.linspace(math.log(0.7 * y.max()), math.log(20 * y.max()), 80)):
        log_s = float(np.median(low))
        for _ in range(30):  # Gauss-Newton on log s, the curve's only other parameter
            p = np.asarray([log_s, math.log(top)])
            r = _throughput(p, rate) - logy
            lin = log_s + np.log(rate)
            d = 0.5 * (1.0 - np.tanh(0.5 * _BEND * (lin - math.log(top))))  # d curve / d log s
            step = float((d @ r) / max(float(d @ d), 1e-12))
            log_s -= step
            if abs(step) < 1e-9:
                break
        p = np.asarray([log_s, math.log(top)])
        err = float(np.sum((_throughput(p, rate) - logy) ** 2))
        if best is None or err < best[0] - 1e-12:
            best = (err, p)
    assert best is not None
    return best[1]


def _latency_basis(rate: np.ndarray, capacity: float) -> np.ndarray:
    """Columns whose non-negative sum is a latency non-decreasing in the rate: a floor, a term
    linear in utilisation (batches grow with load), the steady-state queue ``rho / (1 - rho)``
    up to :data:`_RHO_CAP`, and past capacity the backlog a run of fixed length builds up
    (``1 - 1 / rho``: the share of its arrivals still queued at the end)."""
    rho = np.asarray(rate, dtype=float) / capacity
    capped = np.minimum(rho, _RHO_CAP)
    return np.column_stack([np.ones_like(rho), rho, capped / (1 - capped),
                            np.maximum(0.0, 1 - 1 / np.maximum(rho, 1e-9))])


#: Rates a config needs for a latency curve of its own shape (all four columns); with fewer
#: its curve takes the shape of the context's best-measured config (:func:`_fit_latency`).
OWN_SHAPE_RATES = 5
#: Rates a config needs for latency terms of its own at its served-rate capacity (no search
#: over where its queue starts): between this and :data:`OWN_SHAPE_RATES`.
OWN_TERMS_RATES = 4


def _fit_latency(rate: np.ndarray, y: np.ndarray, capacity: float, scales: Sequence[float],
                 shape: tuple[float, np.ndarray] | None = None) -> tuple[float, np.ndarray]:
    """(capacity scale, coefficients >= 0) minimising the squared relative error.

    With ``shape`` (a reference curve's capacity scale and coefficients) only two numbers are
    fitted: a floor and how much of the reference's load-dependent part (at this config's own
    capacity) this config has. A few rates cannot tell a queue from a backlog or a linear
    term; the shape of a config measured at many rates can.
    """
    from scipy.optimize import nnls

    if shape is not None:
        ref_scale, ref = shape
        basis = _latency_basis(rate, capacity * ref_scale)
        two = np.column_stack([basis[:, 0], basis[:, 1:] @ ref[1:]])
        colmax = np.where(two.max(axis=0) > 0, two.max(axis=0), 1.0)
        try:
            c, _ = nnls(two / colmax / y[:, None], np.ones(len(y)), maxiter=200)
        except RuntimeError:
            c = np.asarray([float(np.median(y)) * colmax[0], 0.0])
        c = c / colmax
        return ref_scale, np.concatenate([[c[0]], c[1] * ref[1:]])
    best: tuple[float, float, np.ndarray] | None = None
    for scale in scales:
        basis = _latency_basis(rate, capacity * scale)
        colmax = basis.max(axis=0)
        colmax = np.where(colmax > 0, colmax, 1.0)
        try:
            coef, _ = nnls(basis / colmax / y[:, None], np.ones(len(y)), maxiter=200)
        except RuntimeError:
            continue
        coef = coef / colmax
        err = float(np.sum(((basis @ coef) / y - 1) ** 2))
        if best is None or err < best[0] - 1e-12:
            best = (err, scale, coef)
    if best is None:
        return 1.0, np.asarray([float(np.median(y)), 0.0, 0.0, 0.0])
    return best[1], best[2]


@dataclass
class ConfigCurve:
    """One config's fitted curves at one workload (all but its rate).

    ``capacity`` is the offered rate at which the served rate stops growing (requests/s);
    ``seen`` says whether this config's own measurements show the bend (else it was borrowed
    from the context's other configs, or is a lower bound). ``throughput`` holds (log s, log
    ceiling) per throughput metric; ``latency`` (capacity scale, coefficients) per latency."""

    rates: tuple[float, ...]
    capacity: float
    seen: bool
    throughput: dict[str, np.ndarray] = field(default_factory=dict)
    latency: dict[str, tuple[float, np.ndarray]] = field(default_factory=dict)

    def predict(self, metric: str, rate: np.ndarray) -> np.ndarray | None:
        """The curve's value of ``metric`` at each rate (None: not curved)."""
        rate = np.maximum(np.asarray(rate, dtype=float), 1e-9)
        if metric in self.throughput:
            return np.asarray(np.exp(_throughput(self.throughput[metric], rate)))
        if metric in self.latency:
            scale, coef = self.latency[metric]
            return np.asarray(_latency_basis(rate, self.capacity * scale) @ coef)
        return None

    @property
    def rate_range(self) -> tuple[float, float]:
        return min(self.rates), max(self.rates)


def _medians(rows: Sequence[tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
    """Per distinct rate, the median of its repeats: each rate counts once, and one noisy
    repeat moves the fit less."""
    by_rate: dict[float, list[float]] = {}
    for r, v in rows:
        by_rate.setdefault(r, []).append(v)
    rates = np.asarray(sorted(by_rate))
    return rates, np.asarray([float(np.median(by_rate[r])) for r in rates])


def _fit_curve(points: Mapping[str, Sequence[tuple[float, float]]], roles: LoadRoles,
               prior_capacity: float | None,
               shapes: Mapping[str, tuple[float, np.ndarray]] | None = None
               ) -> ConfigCurve | None:
    """A config's curves from its (rate, value) points per metric, or None with fewer than two
    rates of its served rate. ``shapes``: per latency metric, the reference shape a config
    measured at fewer than :data:`OWN_SHAPE_RATES` rates takes."""
    served = points.get(roles.served, [])
    rates, values = _medians(served)
    if len(rates) < 2:
        return None
    s_params = _fit_throughput(rates, values)
    capacity = float(math.exp(s_params[1] - s_params[0]))
    seen = capacity <= _UNSEEN * float(rates.max())
    if not seen:
        # The served rate never bent: the capacity lies beyond the measured rates. Borrow the
        # context's seen capacity where it lies beyond them too.
        capacity = max(prior_capacity or 0.0, float(rates.max()) * _UNSEEN)
    curve = ConfigCurve(tuple(float(r) for r in rates), capacity, seen)
    for metric in roles.metrics:
        r, v = _medians(points.get(metric, []))
        if len(r) < 2 or np.any(v <= 0):
            continue
        if metric in roles.throughputs:
            curve.throughput[metric] = _fit_throughput(r, v)
        elif len(r) >= OWN_SHAPE_RATES:
            curve.latency[metric] = _fit_latency(r, v, capacity, _SCALES)
        else:
            shape = None if len(r) >= OWN_TERMS_RATES else (shapes or {}).get(metric)
            curve.latency[metric] = _fit_latency(r, v, capacity, (1.0,), shape)
    return curve


#: The largest fall, relative to the highest value at a lower rate, that a curved figure's
#: per-rate medians may show (repeat noise); a goodput past capacity falls far more.
_MAX_FALL = 1 / 3


def _monotone(points: Sequence[tuple[float, float]]) -> bool:
    """Whether a figure of one config does not fall as the rate grows, beyond noise: no
    per-rate median below (1 - :data:`_MAX_FALL`) times the highest at a lower rate."""
    _, values = _medians(points)
    peak = np.maximum.accumulate(values) if len(values) else values
    return bool(np.all(values >= (1 - _MAX_FALL) * peak))


#: Utilisation (offered rate / capacity) from which a rate counts as heavy load.
HEAVY_LOAD = 0.85


def _band(rate: float, capacity: float) -> int:
    """0 below :data:`HEAVY_LOAD` utilisation, 1 at or above it."""
    return int(rate >= HEAVY_LOAD * capacity)


def _support(rates: int) -> int:
    """1 for a curve of its own shape (:data:`OWN_SHAPE_RATES` rates or more), else 0."""
    return int(rates >= OWN_SHAPE_RATES)


def conformal_quantile(residuals: Sequence[float], coverage: float) -> float | None:
    """The finite-sample conformal quantile of ``residuals``; the largest doubled when too few
    for the coverage, None without any."""
    n = len(residuals)
    if n == 0:
        return None
    needed = math.ceil((n + 1) * coverage)
    if needed > n:
        return 2.0 * float(max(residuals))
    return float(np.quantile(np.asarray(residuals), needed / n))


def calibrated_widths(errors: Mapping[tuple[str, int, int], Sequence[float]],
                      repeat_sd: Mapping[tuple[str, int], float], metric: str, coverage: float
                      ) -> dict[tuple[int, int], float]:
    """``metric``'s log half-width per (load band, support) pool that has residuals: the
    conformal quantile of its absolute log errors (``errors`` keyed (metric, band, support)),
    never narrower than :data:`_NOISE_Z` repeat standard deviations of its band (``repeat_sd``
    keyed (metric, band)): no model answers closer than the engine repeats."""
    widths: dict[tuple[int, int], float] = {}
    for band, support in ((0, 0), (0, 1), (1, 0), (1, 1)):
        q = conformal_quantile(errors.get((metric, band, support), []), coverage)
        if q is not None:
            widths[(band, support)] = max(q, _NOISE_Z * repeat_sd.get((metric, band), 0.0))
    return widths


def pooled_half_width(widths: Mapping[tuple[int, int], float], band: int, support: int
                      ) -> float:
    """The calibrated log half-width of the (load band, support) pool, else the widest of the
    band's pools, else the widest of all (never narrower for want of residuals)."""
    if (band, support) in widths:
        return widths[(band, support)]
    same = [w for (b, _), w in widths.items() if b == band]
    return max(same) if same else max(widths.values())


class LoadCurves:
    """Every measured config's load curves in one context, with calibrated intervals.

    sklearn's estimator shape: ``fit(configs, workloads, measured)`` on the context's trials
    (one row each) sets ``curves_`` (config key -> :class:`ConfigCurve`) and ``half_width_``
    (metric -> (load band, support) -> log half-width): the conformal quantile of
    leave-one-rate-out log errors of single trials, below and from :data:`HEAVY_LOAD`
    utilisation, for curves of their own shape and for those through a few rates.

    ``blend_`` (set by :func:`knowledge.curve_blend.fit_blend`, None until then): a second
    model of the same figures whose geometric mean with the curves answers instead, for the
    metrics where the context's own held-out rates chose it.
    """

    def __init__(self, *, roles: LoadRoles, coverage: float = CURVE_COVERAGE) -> None:
        self.roles = roles
        self.coverage = coverage

    def fit(self, configs: Sequence[Mapping[str, Any]], workloads: Sequence[Mapping[str, float]],
            measured: Sequence[Mapping[str, float]]) -> LoadCurves:
        roles = self.roles
        self.blend_: Any = None
        self.unvaried_ = unvaried_knobs(configs)
        groups: dict[str, list[int]] = {}
        for i, (config, w) in enumerate(zip(configs, workloads, strict=True)):
            if isinstance(w.get(roles.rate), int | float) and w[roles.rate] > 0:
                groups.setdefault(config_key(config, w, roles.rate, self.unvaried_),
                                  []).append(i)
        # Every latency gets curves (non-decreasing in the rate by construction: where the
        # per-rate medians of one config fall, e.g. two sessions read one rate differently, the
        # fit is a compromise and the calibration widens the intervals); a throughput gets them
        # only if it falls with the rate in no config (a goodput past capacity falls for good).
        # Dropping a latency for one config's fall lost its curve for every config (held out by
        # rate on the shipped GPU data, one context's p95 inter-token figure erred 15.5 % that
        # way and 10.1 % this way: docs/knowledge.md).
        def of(m: str, rows: Sequence[int]) -> list[tuple[float, float]]:
            return [(float(workloads[i][roles.rate]), float(measured[i][m])) for i in rows
                    if isinstance(measured[i].get(m), int | float)]

        self.metrics_ = tuple(m for m in roles.metrics
                              if any(of(m, rows) for rows in groups.values())
                              and (m in roles.latencies
                                   or all(_monotone(of(m, rows)) for rows in groups.values())))
        self.roles_ = LoadRoles(roles.rate, roles.served,
                                tuple(m for m in roles.latencies if m in self.metrics_),
                                tuple(m for m in roles.throughputs if m in self.metrics_))

        def points(rows: Sequence[int]) -> dict[str, list[tuple[float, float]]]:
            return {m: [(float(workloads[i][roles.rate]), float(measured[i][m])) for i in rows
                        if isinstance(measured[i].get(m), int | float)]
                    for m in (*self.metrics_, roles.served)}

        first = {k: _fit_curve(points(rows), self.roles_, None) for k, rows in groups.items()}
        fitted = [c for c in first.values() if c is not None]
        seen = [c.capacity for c in fitted if c.seen]
        self.prior_capacity_ = float(np.median(seen)) if seen else None
        # The reference shape: the config measured at the most rates, when it has its own.
        ref = max(fitted, key=lambda c: len(c.rates), default=None)
        self.shapes_ = ({m: (sc, coef / coef[0]) for m, (sc, coef) in ref.latency.items()
                         if coef[0] > 0} if ref is not None
                        and len(ref.rates) >= OWN_SHAPE_RATES else {})
        self.curves_ = {k: curve for k, rows in groups.items()
                        if (curve := _fit_curve(points(rows), self.roles_,
                                                self.prior_capacity_, self.shapes_)) is not None}
        self._calibrate(groups, workloads, measured, points)
        return self

    def _calibrate(self, groups: Mapping[str, list[int]], workloads: Sequence[Mapping[str, float]],
                   measured: Sequence[Mapping[str, float]], points: Any) -> None:
        """Leave one rate of one config out, refit its curves, and keep the log error of each
        of its trials at that rate, pooled by load band (:func:`_band`) and by the support of
        the curve (:func:`_support`): repeats spread far more near and past capacity than at
        light load, and a curve through two rates errs far more than one through seven."""
        rate = self.roles.rate
        # Every held-out prediction, kept for a blend with a second model of the same figures
        # (knowledge/curve_blend.py): (row, metric, predicted value, load band, support).
        self.held_out_: list[tuple[int, str, float, int, int]] = []
        errors: dict[tuple[str, int, int], list[float]] = {}
        relative: dict[tuple[str, int], list[float]] = {}
        repeats: dict[tuple[str, int], list[float]] = {}
        for key, rows in groups.items():
            full = self.curves_.get(key)
            rates = sorted({float(workloads[i][rate]) for i in rows})
            for held in rates:
                train = [i for i in rows if float(workloads[i][rate]) != held]
                test = [i for i in rows if float(workloads[i][rate]) == held]
                curve = _fit_curve(points(train), self.roles_, self.prior_capacity_,
                                   self.shapes_)
                if curve is None or full is None:
                    continue
                band, support = _band(held, full.capacity), _support(len(curve.rates) + 1)
                for m in self.metrics_:
                    vals = [float(measured[i][m]) for i in test
                            if isinstance(measured[i].get(m), int | float) and measured[i][m] > 0]
                    if len(vals) > 1:
                        logs = np.log(vals)
                        repeats.setdefault((m, band), []).extend((logs - logs.mean()).tolist())
                    pred = curve.predict(m, np.asarray([held]))
                    if pred is None or not pred[0] > 0:
                        continue
                    errors.setdefault((m, band, support), []).extend(
                        abs(math.log(v / float(pred[0]))) for v in vals)
                    self.held_out_.extend((i, m, float(pred[0]), band, support) for i in test
                                          if isinstance(measured[i].get(m), int | float)
                                          and measured[i][m] > 0)
                    relative.setdefault((m, band), []).extend(
                        abs(float(pred[0]) - v) / v for v in vals)
        # The same leave-one-rate-out errors as MAPE per load band (and how many trials): the
        # accuracy an answer read off a curve quotes, rather than the knob-level surrogate's,
        # which is scored on configs held out whole.
        self.rate_error_: dict[str, dict[int, tuple[float, int]]] = {}
        for (m, band), errs in relative.items():
            self.rate_error_.setdefault(m, {})[band] = (float(np.mean(errs)), len(errs))
        #: Per (metric, load band), the standard deviation of repeats' log values about their
        #: mean: the floor of every interval (no model answers closer than the engine repeats).
        self.repeat_sd_ = {key: float(np.std(noise)) for key, noise in repeats.items() if noise}
        self.half_width_: dict[str, dict[tuple[int, int], float]] = {}
        for m in self.metrics_:
            widths = calibrated_widths(errors, self.repeat_sd_, m, self.coverage)
            if widths:
                self.half_width_[m] = widths

    def _half_width(self, metric: str, band: int, support: int) -> float:
        return pooled_half_width(self.half_width_[metric], band, support)

    def curve(self, config: Mapping[str, Any], workload: Mapping[str, float]
              ) -> ConfigCurve | None:
        if self.roles.rate not in workload:
            return None
        return self.curves_.get(config_key(config, workload, self.roles.rate, self.unvaried_))

    def predict(self, config: Mapping[str, Any], workload: Mapping[str, float],
                metric: str) -> tuple[float, float, float] | None:
        """(value, low, high) of ``metric`` for ``config`` at ``workload``, or None where no
        curve of that config (at that workload, any rate) models the metric.

        Below the config's lowest measured rate a latency's interval reaches up to its upper
        end at that rate: a latency does not fall as the rate grows, and no measurement tells
        where its floor lies below the rates measured (a curve through 80-110 req/s places its
        floor at 20 req/s wherever its fit puts it; the context-wide rule is
        ``ContextModels.predict``'s)."""
        curve = self.curve(config, workload)
        if curve is None or metric not in self.half_width_:
            return None
        rate = float(workload[self.roles.rate])
        answer = self._predict_at(curve, config, workload, metric, rate)
        lowest = curve.rate_range[0]
        if answer is None or metric not in curve.latency or rate >= lowest:
            return answer
        there = self._predict_at(curve, config, {**workload, self.roles.rate: lowest}, metric,
                                 lowest)
        if there is None:
            return answer
        return answer[0], answer[1], max(answer[2], there[2])

    def _predict_at(self, curve: ConfigCurve, config: Mapping[str, Any],
                    workload: Mapping[str, float], metric: str, rate: float
                    ) -> tuple[float, float, float] | None:
        """(value, low, high) of ``metric`` read off ``curve`` (blended where chosen) at
        ``rate``."""
        value = curve.predict(metric, np.asarray([rate]))
        if value is None or not value[0] > 0:
            return None
        band, support = _band(rate, curve.capacity), _support(len(curve.rates))
        v = float(value[0])
        blend = getattr(self, "blend_", None)
        if blend is not None and metric in blend.metrics:
            blended = blend.predict(config, workload, metric, v, band, support)
            if blended is not None:
                return blended
        half = self._half_width(metric, band, support)
        return v, v * math.exp(-half), v * math.exp(half)

    def blended(self, metric: str) -> bool:
        """Whether ``metric``'s answers are the curves blended with the context's simulator."""
        blend = getattr(self, "blend_", None)
        return blend is not None and metric in blend.metrics

    def held_out_error(self, config: Mapping[str, Any], workload: Mapping[str, float],
                       metric: str) -> tuple[float, int] | None:
        """(MAPE, trials) of this context's curves at a rate held out of them, in the load band
        ``config``'s curve puts the asked rate in (leave one rate of one config out, as the
        intervals are calibrated); None where no curve of ``config`` models ``metric``."""
        curve = self.curve(config, workload)
        if curve is None or (metric not in curve.latency and metric not in curve.throughput):
            return None
        bands = (self.blend_.rate_error.get(metric, {}) if self.blended(metric)
                 else self.rate_error_.get(metric, {}))
        band = _band(float(workload[self.roles.rate]), curve.capacity)
        return bands.get(band) or (max(bands.values()) if bands else None)

    def capacities(self) -> dict[str, tuple[float, bool]]:
        """Config key -> (capacity in offered requests/s, seen in its own data)."""
        return {k: (c.capacity, c.seen) for k, c in self.curves_.items()}

"""Load curves carried across model shapes: one config's curves on measured shapes, regressed on
the shapes' features, predict that config's curve for a shape never measured.

Each measured shape's curve (:mod:`knowledge.load_curve`) is read in utilisation coordinates
(offered rate / that shape's capacity). The log capacity, and at each utilisation the log of
every figure, are fitted as a line in the log of one shape feature across the measured shapes
(a power law: decode is memory-bound, so time per token grows with the bytes read per step, and
the KV cache a GPU holds shrinks with the KV bytes per token). Which feature is chosen by
leave-one-shape-out error; the same held-out errors widen the prediction intervals, so an
answer for an unmeasured shape is never as narrow as one for a measured shape.

Feature names are the shape vocabulary (``parameters``, ``kv_bytes_per_token``: see
``objectives/llm/shapes.py``); metric roles come from unit suffixes (:func:`load_roles`). Nothing
here names an engine or a knob.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from knowledge.load_curve import CURVE_COVERAGE, HEAVY_LOAD, LoadCurves, LoadRoles, load_roles

__all__ = ["CANDIDATE_FEATURES", "HeldOutShape", "MeasuredShape", "ShapePrediction",
           "ShapeTransfer", "leave_one_shape_out"]

#: Shape features a transfer may regress on, in order of the physical prior (the first wins ties).
CANDIDATE_FEATURES = ("parameters", "kv_bytes_per_token")
#: Measured shapes needed: two fit a line, a third is needed to hold one out and calibrate.
MIN_SHAPES = 3


@dataclass(frozen=True)
class MeasuredShape:
    """One config's measurements on one shape at one workload (all but the offered rate):
    ``rates[i]`` is the offered rate of the trial whose figures are ``metrics[i]``."""

    name: str
    features: Mapping[str, float]
    rates: tuple[float, ...]
    metrics: tuple[Mapping[str, float], ...]


@dataclass
class _ShapeCurve:
    """A measured shape's curve: its load curves where they model a figure, else a log-linear
    interpolation of the figure's per-rate medians (a throughput whose median falls with the
    rate beyond noise, a goodput past capacity, gets no load curve)."""

    name: str
    features: Mapping[str, float]
    capacity: float
    curves: LoadCurves
    medians: dict[str, tuple[np.ndarray, np.ndarray]]

    def value(self, metric: str, rate: float) -> float | None:
        curve = next(iter(self.curves.curves_.values()))
        if metric in self.curves.metrics_:
            v = curve.predict(metric, np.asarray([rate]))
            if v is not None and v[0] > 0:
                return float(v[0])
        if metric not in self.medians:
            return None
        r, y = self.medians[metric]
        return float(np.exp(np.interp(math.log(rate), np.log(r), np.log(y))))

    def half_width(self, metric: str, band: int) -> float:
        """The widest in-shape conformal log half-width of ``metric`` in load ``band`` (any
        curve support; 0 when not curved)."""
        widths = self.curves.half_width_.get(metric, {})
        return max((w for (b, _), w in widths.items() if b == band), default=0.0)


def _medians(shape: MeasuredShape, metric: str) -> tuple[np.ndarray, np.ndarray] | None:
    by_rate: dict[float, list[float]] = {}
    for r, m in zip(shape.rates, shape.metrics, strict=True):
        v = m.get(metric)
        if isinstance(v, int | float) and v > 0:
            by_rate.setdefault(float(r), []).append(float(v))
    if len(by_rate) < 2:
        return None
    rates = np.asarray(sorted(by_rate))
    return rates, np.asarray([float(np.median(by_rate[r])) for r in rates])


def _roles(shapes: Sequence[MeasuredShape]) -> LoadRoles | None:
    values: dict[str, list[float]] = {}
    for s in shapes:
        for m in s.metrics:
            for k, v in m.items():
                if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
                    values.setdefault(k, []).append(float(v))
    return load_roles(values, ["rate_rps"])


def _shape_curve(shape: MeasuredShape, roles: LoadRoles) -> _ShapeCurve | None:
    """The curve of one shape, or None where its served rate was measured at fewer than two
    rates (no capacity can be read)."""
    curves = LoadCurves(roles=roles).fit([{}] * len(shape.rates),
                                         [{roles.rate: r} for r in shape.rates],
                                         list(shape.metrics))
    if not curves.curves_:
        return None
    capacity = next(iter(curves.curves_.values())).capacity
    medians = {m: med for m in roles.metrics if (med := _medians(shape, m)) is not None}
    return _ShapeCurve(shape.name, shape.features, capacity, curves, medians)


def _line(x: np.ndarray, y: np.ndarray, at: float) -> float:
    """The least-squares line of ``y`` on ``x`` evaluated at ``at`` (the mean when x is flat)."""
    if len(x) < 2 or float(np.ptp(x)) == 0.0:
        return float(np.mean(y))
    slope, intercept = np.polyfit(x, y, 1)
    return float(intercept + slope * at)


def _log_feature(features: Mapping[str, float], feature: str) -> float:
    value = features.get(feature)
    if not isinstance(value, int | float) or value <= 0:
        raise ValueError(f"shape feature {feature!r} must be a positive number, got {value!r}")
    return math.log(float(value))


def _predict(curves: Sequence[_ShapeCurve], feature: str, features: Mapping[str, float],
             metric: str, rate: float) -> tuple[float, float | None]:
    """(capacity, value of ``metric`` at ``rate``) for a shape with ``features``, from the
    training shapes' ``curves`` (value None where no training shape curves the metric)."""
    x = np.asarray([_log_feature(c.features, feature) for c in curves])
    at = _log_feature(features, feature)
    capacity = math.exp(_line(x, np.log([c.capacity for c in curves]), at))
    rho = rate / capacity
    pairs = [(xi, v) for xi, c in zip(x, curves, strict=True)
             if (v := c.value(metric, rho * c.capacity)) is not None]
    if not pairs:
        return capacity, None
    xs, vs = np.asarray([p[0] for p in pairs]), np.log([p[1] for p in pairs])
    return capacity, math.exp(_line(xs, vs, at))


@dataclass(frozen=True)
class HeldOutShape:
    """A measured shape predicted from the others: per metric, the absolute percentage errors
    at each of its measured rates (against the per-rate median of its repeats), split by load
    band (offered rate below / from :data:`HEAVY_LOAD` of its measured capacity)."""

    name: str
    feature: str
    trained_on: tuple[str, ...]
    #: ``interpolation`` when its feature lies between the training shapes', else
    #: ``extrapolation``.
    position: str
    capacity_measured: float
    capacity_predicted: float
    errors: dict[str, list[tuple[float, float, float]]] = field(default_factory=dict)

    @property
    def capacity_ape(self) -> float:
        return abs(self.capacity_predicted / self.capacity_measured - 1)

    def mape(self, metric: str, band: int | None = None) -> float | None:
        """Mean absolute percentage error of ``metric`` (in one band when given)."""
        errs = [abs(p / m - 1) for r, m, p in self.errors.get(metric, [])
                if band is None or int(r >= HEAVY_LOAD * self.capacity_measured) == band]
        return float(np.mean(errs)) if errs else None

    def log_errors(self, metric: str) -> list[tuple[float, float]]:
        """(predicted utilisation, |log error|) per measured rate: how wide to make intervals."""
        return [(r / self.capacity_predicted, abs(math.log(p / m)))
                for r, m, p in self.errors.get(metric, [])]

    def to_dict(self) -> dict[str, Any]:
        return {"shape": self.name, "feature": self.feature, "trained_on": list(self.trained_on),
                "position": self.position,
                "capacity_measured": self.capacity_measured,
                "capacity_predicted": self.capacity_predicted,
                "capacity_ape": self.capacity_ape,
                "mape": {m: self.mape(m) for m in self.errors},
                "mape_light_load": {m: self.mape(m, 0) for m in self.errors},
                "points": {m: [{"rate": r, "measured": v, "predicted": p} for r, v, p in e]
                           for m, e in self.errors.items()}}


def _held_out(curves: Sequence[_ShapeCurve], shapes: Mapping[str, MeasuredShape], feature: str,
              metrics: Sequence[str]) -> list[HeldOutShape]:
    out: list[HeldOutShape] = []
    for held in curves:
        train = [c for c in curves if c is not held]
        if len(train) < 2:
            continue
        errors: dict[str, list[tuple[float, float, float]]] = {}
        cap = 0.0
        for metric in metrics:
            med = _medians(shapes[held.name], metric)
            if med is None:
                continue
            for r, v in zip(*med, strict=True):
                cap, p = _predict(train, feature, held.features, metric, float(r))
                if p is not None:
                    errors.setdefault(metric, []).append((float(r), float(v), p))
        if not cap:
            cap, _ = _predict(train, feature, held.features, metrics[0], 1.0)
        seen = [float(c.features[feature]) for c in train]
        x = float(held.features[feature])
        position = "interpolation" if min(seen) <= x <= max(seen) else "extrapolation"
        out.append(HeldOutShape(held.name, feature, tuple(c.name for c in train), position,
                                held.capacity, cap, errors))
    return out


def leave_one_shape_out(shapes: Sequence[MeasuredShape], feature: str,
                        metrics: Sequence[str] | None = None) -> list[HeldOutShape]:
    """Each shape predicted from all the others with ``feature`` (see :class:`HeldOutShape`)."""
    roles = _roles(shapes)
    if roles is None:
        return []
    fitted = [c for s in shapes if (c := _shape_curve(s, roles)) is not None]
    return _held_out(fitted, {s.name: s for s in shapes}, feature,
                     list(metrics) if metrics is not None else list(roles.metrics))


@dataclass(frozen=True)
class ShapePrediction:
    """Predicted figures of an unmeasured shape at one offered rate: per metric (value, low,
    high) with the interval widened by the held-out-shape error. ``position`` is
    ``interpolation`` when the shape's feature lies between measured shapes' (else
    ``extrapolation``); ``beyond`` is how many times outside that range it lies (1 inside)."""

    capacity: tuple[float, float, float]
    metrics: dict[str, tuple[float, float, float]]
    feature: str
    position: str
    beyond: float
    shapes: tuple[str, ...]


class ShapeTransfer:
    """One config's load curves across shapes, at one hardware, engine version and workload.

    sklearn's estimator shape: ``fit(shapes)`` (at least :data:`MIN_SHAPES`
    :class:`MeasuredShape`) sets ``feature_`` (the candidate with the lowest mean
    leave-one-shape-out MAPE over the metrics), ``held_out_`` (its :class:`HeldOutShape` s),
    ``errors_`` (candidate -> mean held-out MAPE) and ``half_width_`` (metric -> (position,
    load band) -> log half-width): the largest of the shapes' in-shape widths and of the
    held-out log errors in that band (by predicted utilisation). An interpolation is calibrated
    on the held-out shapes that lay between the others (when any did), an extrapolation on all
    of them: held-out extrapolations err more, and an interval should say so.
    """

    def __init__(self, *, features: Sequence[str] = CANDIDATE_FEATURES,
                 coverage: float = CURVE_COVERAGE) -> None:
        self.features = tuple(features)
        self.coverage = coverage

    def fit(self, shapes: Sequence[MeasuredShape]) -> ShapeTransfer:
        names = [s.name for s in shapes]
        if len(set(names)) < MIN_SHAPES:
            raise ValueError(f"a shape transfer needs >= {MIN_SHAPES} measured shapes (one held "
                             f"out to calibrate it), got {len(set(names))}: {names}")
        roles = _roles(shapes)
        if roles is None:
            raise ValueError("the shapes' metrics declare no offered and served rate")
        self.roles_ = roles
        self.curves_ = [c for s in shapes if (c := _shape_curve(s, roles)) is not None]
        if len(self.curves_) < MIN_SHAPES:
            raise ValueError(f"only {len(self.curves_)} shapes have a load curve; need "
                             f">= {MIN_SHAPES}")
        by_name = {s.name: s for s in shapes}
        self.metrics_ = tuple(m for m in roles.metrics
                              if all(m in c.medians for c in self.curves_))
        runs = {f: _held_out(self.curves_, by_name, f, self.metrics_) for f in self.features}
        self.errors_ = {f: float(np.mean([e for h in held for m in self.metrics_
                                          if (e := h.mape(m)) is not None] or [math.inf]))
                        for f, held in runs.items()}
        self.feature_ = min(self.features, key=lambda f: self.errors_[f])
        self.held_out_ = runs[self.feature_]
        inside = [h for h in self.held_out_ if h.position == "interpolation"] or self.held_out_
        pools = {"interpolation": inside, "extrapolation": self.held_out_}
        self.half_width_: dict[str, dict[tuple[str, int], float]] = {}
        for m in self.metrics_:
            widths = {}
            for position, held in pools.items():
                for band in (0, 1):
                    inner = max(c.half_width(m, band) for c in self.curves_)
                    errs = [e for h in held for u, e in h.log_errors(m)
                            if int(u >= HEAVY_LOAD) == band]
                    widths[(position, band)] = max([inner, *errs])
            self.half_width_[m] = widths
        self.capacity_half_width_ = {
            position: max(abs(math.log(h.capacity_predicted / h.capacity_measured)) for h in held)
            for position, held in pools.items()}
        return self

    def position(self, features: Mapping[str, float]) -> tuple[str, float]:
        """(``interpolation`` or ``extrapolation``, factor outside the measured range of the
        chosen feature: 1 inside)."""
        x = math.exp(_log_feature(features, self.feature_))
        seen = [float(c.features[self.feature_]) for c in self.curves_]
        lo, hi = min(seen), max(seen)
        if lo <= x <= hi:
            return "interpolation", 1.0
        return "extrapolation", max(lo / x, x / hi)

    def predict(self, features: Mapping[str, float], rate: float,
                metrics: Sequence[str] | None = None) -> ShapePrediction:
        """The figures of a shape with ``features`` at offered ``rate`` (see
        :class:`ShapePrediction`); metrics no measured shape curves are left out."""
        out: dict[str, tuple[float, float, float]] = {}
        capacity = 0.0
        position, beyond = self.position(features)
        for m in metrics if metrics is not None else self.metrics_:
            if m not in self.half_width_:
                continue
            capacity, v = _predict(self.curves_, self.feature_, features, m, rate)
            if v is None:
                continue
            half = self.half_width_[m][(position, int(rate >= HEAVY_LOAD * capacity))]
            out[m] = (v, v * math.exp(-half), v * math.exp(half))
        if not capacity:
            capacity, _ = _predict(self.curves_, self.feature_, features, self.metrics_[0], 1.0)
        ch = self.capacity_half_width_[position]
        return ShapePrediction((capacity, capacity * math.exp(-ch), capacity * math.exp(ch)), out,
                               self.feature_, position, beyond,
                               tuple(c.name for c in self.curves_))

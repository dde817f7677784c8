"""Load curves for configs never measured: a model over the knobs of the measured configs' curves.

A measured config's load curve (:mod:`knowledge.load_curve`) is summed up by its capacity and, per
figure, its values at fixed utilisations (offered rate / capacity). Those numbers, not the raw
trials, are what this model regresses on the knobs: an unmeasured config gets a predicted
capacity and predicted values at each utilisation, and so a curve of the known shape (flat, then
a queue), non-decreasing in the rate, instead of a black box's guess at one rate.

Three regressors compete (:data:`FAMILIES`) and a fourth is the baseline they must beat:
``mean`` (every measured config's average curve, no knobs). Which one answers is chosen on
held-out configs (``docs/benchmarks/h200-knobs-2026-12-04/curve_knobs.py``;
docs/benchmarks/load-curves-2026-12-06/).
Like the curves, nothing here
names an engine, a knob or a metric: the roles come from :class:`~knowledge.load_curve.LoadRoles`
and the knobs from the context's :class:`~knowledge.surrogates.FeatureEncoder`.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from knowledge.load_curve import ConfigCurve, LoadCurves, conformal_quantile

__all__ = ["FAMILIES", "KNOB_CURVE_FAMILY", "MIN_CURVES", "UTILISATIONS", "KnobCurveModel",
           "curve_rows"]

#: Utilisations at which a curve's figures are read and regressed on the knobs: dense where the
#: queue bends (0.8-1.0), and a little past capacity, where measured rates still reach.
UTILISATIONS = np.asarray([0.2, 0.4, 0.6, 0.75, 0.85, 0.95, 1.05, 1.2])
#: Regressors of the curve parameters on the knobs (``mean`` ignores the knobs: the baseline).
FAMILIES = ("mean", "nearest", "ridge", "gp")
#: The family whose predicted curves answer for unmeasured configs (None: the surrogates
#: answer), chosen on held-out configs of the shipped data
#: (docs/benchmarks/h200-knobs-2026-12-04/curve_knobs.py).
KNOB_CURVE_FAMILY: str | None = "gp"
#: Curves with a capacity seen in their own data a model needs before it answers.
MIN_CURVES = 4
#: Nominal coverage of the intervals (the surrogates' and the curves' too).
_COVERAGE = 0.9


class _Regressor(Protocol):
    def fit(self, X: np.ndarray, Y: np.ndarray) -> Any: ...

    def predict(self, X: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class CurveRow:
    """One measured config's curve as regression targets: the config, the workload (its rate
    left out), log capacity, and per figure the log value at each of :data:`UTILISATIONS`."""

    config: dict[str, Any]
    workload: dict[str, float]
    log_capacity: float
    log_values: dict[str, np.ndarray]
    curve: ConfigCurve


def curve_rows(curves: LoadCurves) -> list[CurveRow]:
    """The curves whose capacity their own measurements show (a borrowed capacity is a guess,
    not a target), read at :data:`UTILISATIONS` of that capacity."""
    rows = []
    for key, curve in curves.curves_.items():
        if not curve.seen:
            continue
        config, workload = json.loads(key)
        at = UTILISATIONS * curve.capacity
        values = {}
        for metric in curves.metrics_:
            v = curve.predict(metric, at)
            if v is not None and np.all(v > 0):
                values[metric] = np.log(v)
        rows.append(CurveRow(config, workload, math.log(curve.capacity), values, curve))
    return rows


class _Mean:
    """The baseline: every row's average, whatever the knobs."""

    def fit(self, X: np.ndarray, Y: np.ndarray) -> _Mean:
        self.mean_ = Y.mean(axis=0)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.tile(self.mean_, (len(X), 1))


class _Nearest:
    """The average of the two nearest rows (standardised knob space), weighted by closeness."""

    def fit(self, X: np.ndarray, Y: np.ndarray) -> _Nearest:
        self.X_, self.Y_ = X, Y
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        d = np.sqrt(((X[:, None, :] - self.X_[None, :, :]) ** 2).sum(axis=2))
        k = min(2, len(self.X_))
        near = np.argsort(d, axis=1)[:, :k]
        w = 1.0 / (np.take_along_axis(d, near, axis=1) + 1e-6)
        return np.einsum("nk,nkj->nj", w / w.sum(axis=1, keepdims=True), self.Y_[near])


def _make(family: str, n: int) -> _Regressor:
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
    from sklearn.linear_model import RidgeCV

    if family == "mean":
        return _Mean()
    if family == "nearest":
        return _Nearest()
    if family == "ridge":
        # Leave-one-out over the penalty: a handful of rows and as many knobs.
        return RidgeCV(alphas=np.logspace(-1, 3, 17))
    if family == "gp":
        # One length scale for every standardised knob (a few rows cannot fit one each).
        kernel = (ConstantKernel(1.0, (1e-2, 1e2)) * RBF(3.0, (0.3, 30.0))
                  + WhiteKernel(0.1, (1e-4, 1.0)))
        return GaussianProcessRegressor(kernel, normalize_y=True, n_restarts_optimizer=2,
                                        random_state=0)
    raise ValueError(f"`family` must be one of {', '.join(FAMILIES)}, got {family!r}")


def _fitted(family: str, Z: np.ndarray, Y: np.ndarray) -> _Regressor:
    """``_make(family)`` fitted on (Z, Y), scikit-learn's convergence warnings silenced: a GP's
    noise level at its lower bound (curves the knobs explain almost exactly) is expected here,
    and the warning, printed once per fit, buried the output of ``advisor knowledge eval``."""
    from sklearn.exceptions import ConvergenceWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return _make(family, len(Z)).fit(Z, Y)


class KnobCurveModel:
    """Predicted load curves for configs of one context from its measured configs' curves.

    ``fit(curves, encode)`` takes the context's fitted :class:`LoadCurves` and a function that
    turns configs and workloads into the context's feature rows (the surrogates' encoder);
    ``predict(config, workload, metric)`` returns (value, low, high) at the workload's rate.
    The 90 % interval is the conformal quantile of leave-one-config-out log errors at the
    utilisations each held-out curve was measured over, widened by the curves' own repeat
    half-width (a predicted curve cannot be closer to a trial than the trial's own curve is).
    """

    def __init__(self, *, family: str = "gp", coverage: float = _COVERAGE) -> None:
        if family not in FAMILIES:
            raise ValueError(f"`family` must be one of {', '.join(FAMILIES)}, got {family!r}")
        self.family = family
        self.coverage = coverage

    # -- fitting ----------------------------------------------------------------------------

    def fit(self, curves: LoadCurves, encode: Any) -> KnobCurveModel:
        roles = curves.roles_
        self.rate_ = roles.rate
        self.throughputs_ = frozenset(roles.throughputs)
        rows = curve_rows(curves)
        self.metrics_ = tuple(m for m in curves.metrics_
                              if rows and all(m in r.log_values for r in rows))
        self.n_curves_ = len(rows)
        if len(rows) < MIN_CURVES or not self.metrics_:
            self.fitted_ = False
            return self
        X = self._features(encode, rows)
        Y = self._targets(rows)
        active = ~np.isnan(X)
        counts = np.maximum(active.sum(axis=0), 1)
        self.center_ = np.where(active, X, 0.0).sum(axis=0) / counts
        scale = np.sqrt(np.where(active, (X - self.center_) ** 2, 0.0).sum(axis=0) / counts)
        # A knob no two curves differ in (or inactive in all) tells them nothing.
        self.keep_ = scale > 1e-9
        self.scale_ = np.where(self.keep_, scale, 1.0)
        Z = self._standardise(X)
        self.model_ = _fitted(self.family, Z, Y)
        self.encode_ = encode
        self.curve_width_ = {m: max(w.values()) for m, w in curves.half_width_.items()}
        self.half_width_ = self._calibrate(Z, Y, rows)
        self.fitted_ = True
        return self

    def _features(self, encode: Any, rows: Sequence[CurveRow]) -> np.ndarray:
        # The rate column is the same for every row: curves are compared at equal utilisation.
        return np.asarray(encode([r.config for r in rows],
                                 [{**r.workload, self.rate_: 1.0} for r in rows]), dtype=float)

    def _targets(self, rows: Sequence[CurveRow]) -> np.ndarray:
        return np.asarray([[r.log_capacity, *np.concatenate([r.log_values[m]
                                                              for m in self.metrics_])]
                           for r in rows])

    def _standardise(self, X: np.ndarray) -> np.ndarray:
        Z = (X - self.center_) / self.scale_
        Z = np.where(np.isnan(Z), 0.0, Z)  # a knob inactive in a config: the average
        return Z[:, self.keep_]

    def _calibrate(self, Z: np.ndarray, Y: np.ndarray, rows: Sequence[CurveRow]
                   ) -> dict[str, float]:
        """Per figure, the log half-width: leave one curve out, refit, and read its error at six
        rates spanning those it was measured at (also kept as ``held_out_error_``: per figure,
        MAPE against the held-out configs' own curves and how many configs)."""
        errors: dict[str, list[float]] = {m: [] for m in self.metrics_}
        relative: dict[str, list[float]] = {m: [] for m in self.metrics_}
        for i, row in enumerate(rows):
            rest = [j for j in range(len(rows)) if j != i]
            model = _fitted(self.family, Z[rest], Y[rest])
            pred = model.predict(Z[i:i + 1])[0]
            at = np.linspace(*row.curve.rate_range, 6)
            for m, (cap, log_at) in self._unpack(pred).items():
                # The held-out curve over its own measured rates, against the predicted curve.
                own = row.curve.predict(m, at)
                if own is None or not np.all(own > 0):
                    continue
                guess = self._at(m, at, cap, log_at)
                errors[m].extend(np.abs(np.log(own) - guess).tolist())
                relative[m].extend((np.abs(np.exp(guess) - own) / own).tolist())
        # The same errors as MAPE: what an answer read off a predicted curve quotes.
        self.held_out_error_ = {m: (float(np.mean(r)), len(r) // 6)
                                for m, r in relative.items() if r}
        out = {}
        for m, errs in errors.items():
            q = conformal_quantile(errs, self.coverage)
            out[m] = math.hypot(q, self.curve_width_.get(m, 0.0)) if q is not None else math.inf
        return out

    # -- predicting -------------------------------------------------------------------------

    def _unpack(self, y: np.ndarray) -> dict[str, tuple[float, np.ndarray]]:
        """A target row -> per figure (capacity, log values at the utilisations, made
        non-decreasing: every curved figure grows with the load)."""
        cap = float(math.exp(y[0]))
        n = len(UTILISATIONS)
        return {m: (cap, np.maximum.accumulate(y[1 + i * n: 1 + (i + 1) * n]))
                for i, m in enumerate(self.metrics_)}

    def _at(self, metric: str, rate: np.ndarray, capacity: float, log_at: np.ndarray
            ) -> np.ndarray:
        """Log value of ``metric`` at each offered rate, read off the predicted curve: linear in
        utilisation between the grid's points; below it a throughput falls in proportion to the
        rate and a latency stays at its floor; past it both keep the last segment's slope (a
        throughput's last slope is its ceiling's, near zero)."""
        rho = np.asarray(rate, dtype=float) / capacity
        u = UTILISATIONS
        out = np.interp(rho, u, log_at)
        below = rho < u[0]
        if metric in self.throughputs_:
            out[below] = log_at[0] + np.log(np.maximum(rho[below], 1e-12) / u[0])
        above = rho > u[-1]
        slope = (log_at[-1] - log_at[-2]) / (u[-1] - u[-2])
        out[above] = log_at[-1] + slope * (rho[above] - u[-1])
        return np.asarray(out)

    def _row(self, config: Mapping[str, Any], workload: Mapping[str, float]) -> np.ndarray:
        return np.asarray(self.encode_([dict(config)], [{**workload, self.rate_: 1.0}]),
                          dtype=float)

    def predict(self, config: Mapping[str, Any], workload: Mapping[str, float], metric: str
                ) -> tuple[float, float, float] | None:
        """(value, low, high) of ``metric`` for ``config`` at ``workload``'s rate, or None where
        the model is not fitted, does not model ``metric``, or the workload has no rate."""
        many = self.predict_many([config], workload, [metric])
        return None if many is None or metric not in many else many[metric][0]

    def predict_many(self, configs: Sequence[Mapping[str, Any]], workload: Mapping[str, float],
                     metrics: Sequence[str]
                     ) -> dict[str, list[tuple[float, float, float]]] | None:
        """:meth:`predict` for several configs at one workload in one regression call (a
        recommender asks for hundreds; the regressor's cost is per call, not per row): per
        modelled metric of ``metrics``, one (value, low, high) per config. None where the model
        is not fitted, there is no config, or the workload has no rate."""
        if not getattr(self, "fitted_", False) or not configs:
            return None
        rate = workload.get(self.rate_)
        if not isinstance(rate, int | float) or rate <= 0:
            return None
        X = np.asarray(self.encode_([dict(c) for c in configs],
                                    [{**workload, self.rate_: 1.0}] * len(configs)), dtype=float)
        rows = [self._unpack(y) for y in self.model_.predict(self._standardise(X))]
        at = np.asarray([float(rate)])
        out: dict[str, list[tuple[float, float, float]]] = {}
        for metric in metrics:
            if metric not in self.metrics_:
                continue
            half = self.half_width_[metric]
            values = [float(math.exp(self._at(metric, at, *row[metric])[0])) for row in rows]
            out[metric] = [(v, v * math.exp(-half), v * math.exp(half)) for v in values]
        return out

    def capacity(self, config: Mapping[str, Any], workload: Mapping[str, float]) -> float | None:
        """The predicted capacity (offered requests/s) of ``config``, or None unfitted."""
        if not getattr(self, "fitted_", False):
            return None
        return float(math.exp(self.model_.predict(self._standardise(self._row(config,
                                                                              workload)))[0][0]))

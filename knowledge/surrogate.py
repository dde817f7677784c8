"""Surrogate models: per context (target, hardware, model shape, engine version), one regressor
per metric from knobs plus workload features, with a calibrated prediction interval.

Latency, throughput and sizes are fitted in log space and fractions (recall) in logit space, so
errors are relative and predictions stay positive / inside [0, 1]. Intervals are calibrated on
out-of-fold residuals (normalised conformal prediction), so a nominal 90 % interval covers about
90 % of held-out trials even when the raw ensemble spread is over- or under-confident.

This module never imports an engine or optuna: it sees trials only as stored records.
"""

from __future__ import annotations

import math
import pickle
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from knowledge.curve_blend import fit_blend, fit_simulation
from knowledge.curve_model import KNOB_CURVE_FAMILY, KnobCurveModel
from knowledge.load_curve import LoadCurves, load_roles
from knowledge.models import TrialRecord
from knowledge.work_cost import CostLaw, WorkCost
from objectives.vocabulary import workload_kinds

__all__ = [
    "COST_TERMS",
    "DEFAULT_FAMILY",
    "FAMILIES",
    "GROUP_BY",
    "SCORE_ON",
    "ContextKey",
    "ContextModels",
    "FeatureEncoder",
    "IntervalRegressor",
    "MetricModel",
    "MetricScore",
    "WorkloadPoint",
    "context_of",
    "cost_law",
    "cross_validate",
    "derived_features",
    "fit_context",
    "fit_knob_curves",
    "fit_load_curves",
    "instance_groups",
    "launch_params",
    "metric_transform",
    "noise_floor",
    "workload_features",
    "workload_params",
]

#: Surrogate families that :class:`IntervalRegressor` implements (benchmarks/surrogates.py
#: compares them on the shipped data; ``linear-forest`` is the default).
FAMILIES = ("linear-forest", "forest", "hgb-quantile", "gp")
DEFAULT_FAMILY = "linear-forest"
#: Nominal coverage of every prediction interval.
COVERAGE = 0.9
#: Metrics never modelled: counters and bookkeeping, not performance.
_SKIP_METRICS = frozenset({"failed_requests"})
_STAGES = ("embed_", "retrieve_", "prefill_", "decode_")
_FRACTION_EPS = 1e-4
#: Below 9 calibration configs (90 % coverage) the largest residual ratio is multiplied by this.
SMALL_SAMPLE_INFLATION = 2.0


# -- contexts and workload features -----------------------------------------------------------


@dataclass(frozen=True, order=True)
class ContextKey:
    """What a model is fitted per: knowledge never transfers silently across these."""

    target: str
    hardware_key: str
    model: str | None
    engine_version: str | None

    def label(self) -> str:
        parts = [self.target, self.hardware_key]
        if self.model:
            parts.append(self.model)
        if self.engine_version:
            parts.append(self.engine_version)
        return " / ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "hardware_key": self.hardware_key, "model": self.model,
                "engine_version": self.engine_version}


def _minor(version: str | None) -> str | None:
    """``0.26.0`` -> ``0.26``: patch releases do not change serving behaviour enough to split."""
    if not version:
        return None
    parts = str(version).split(".")
    return ".".join(parts[:2])


def context_of(trial: TrialRecord) -> ContextKey:
    """The context a trial's measurements belong to."""
    params = trial.workload_spec.get("params", {}) or {}
    model = params.get("model")
    # An engine's version is recorded under the target's name or its Python spelling.
    engine = trial.engine_versions.get(trial.target) or trial.engine_versions.get(
        trial.target.replace("-", "_"))
    return ContextKey(trial.target, trial.hardware_key, str(model) if model else None,
                      _minor(engine))


def workload_features(spec: Mapping[str, Any]) -> dict[str, float]:
    """Numeric workload features of a stored workload spec (or of a query's plain mapping).

    Names are the public vocabulary of queries, declared by the workload kinds
    (objectives/kinds/): a query's mapping names no kind, so every kind reads what it knows.
    """
    params: Mapping[str, Any] = spec.get("params", spec) or {}
    out: dict[str, float] = {}
    for kind in workload_kinds():
        out.update(kind.features(params))
    return out


def workload_params(features: Mapping[str, float]) -> list[str]:
    """``features`` back as ``name=value`` workload parameters (``advisor tune
    --workload-param``), as the workload kinds declare the inverse of their features."""
    return [param for kind in workload_kinds() for param in kind.workload_params(features)]


def launch_params(params: Mapping[str, Any], features: Mapping[str, float]) -> dict[str, Any]:
    """A measured spec's ``params`` moved to the asked ``features`` where a kind can (for a
    launch command)."""
    out = dict(params)
    for kind in workload_kinds():
        out = kind.launch_params(out, features)
    return out


@dataclass(frozen=True)
class WorkloadPoint:
    """One measured workload of a context: its features and how many trials saw it."""

    name: str
    spec_hash: str
    spec: dict[str, Any]
    features: dict[str, float]
    trials: int

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "spec_hash": self.spec_hash, "features": self.features,
                "trials": self.trials}


def workload_distance(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    """Largest |log ratio| over the features both have: 0 = same, log(2) = a factor 2 apart."""
    shared = [f for f in a if f in b and a[f] > 0 and b[f] > 0]
    if not shared:
        return 0.0
    return max(abs(math.log(a[f] / b[f])) for f in shared)


# -- metric transforms --------------------------------------------------------------------------


def metric_transform(metric: str, values: Sequence[float] | np.ndarray) -> str:
    """``logit`` for fractions, ``log`` for positive figures, ``identity`` otherwise."""
    arr = np.asarray(values, dtype=float)
    if metric.startswith("recall_at_") or metric.endswith("_fraction"):
        return "logit"
    if arr.size and np.all(arr > 0):
        return "log"
    return "identity"


def _forward(kind: str, y: np.ndarray) -> np.ndarray:
    if kind == "log":
        return np.log(y)
    if kind == "logit":
        p = np.clip(y, _FRACTION_EPS, 1 - _FRACTION_EPS)
        return np.log(p / (1 - p))
    return y


def _inverse(kind: str, z: np.ndarray) -> np.ndarray:
    if kind == "log":
        return np.exp(np.clip(z, -50, 50))
    if kind == "logit":
        return 1.0 / (1.0 + np.exp(-np.clip(z, -50, 50)))
    return z


# -- features -------------------------------------------------------------------------------------


def derived_features(config: Mapping[str, Any], workload: Mapping[str, float]
                     ) -> dict[str, float]:
    """Products and ratios that serving costs are proportional to, so a (log-)linear model can
    use them directly, as each workload kind declares them (objectives/kinds/): a kind's features
    appear where its knobs and workload features do."""
    out: dict[str, float] = {}
    for kind in workload_kinds():
        out.update(kind.derived_features(config, workload))
    return out


#: The per-query work terms every declared cost law adds up (objectives/vocabulary.py).
COST_TERMS = tuple(t for kind in workload_kinds() if kind.cost_law for t in kind.cost_law.terms)


def cost_law(encoder: FeatureEncoder, metric: str) -> CostLaw | None:
    """The cost law of ``metric`` over ``encoder``'s columns, or None where none applies.

    One applies where the context's rows carry the per-query work terms a workload kind declares
    (:class:`~objectives.vocabulary.CostLawSpec`) and the kind models ``metric``: one query's
    time, or a rate of batched calls (its work shared by the kind's ``parallel`` column, each
    call's fixed cost by its ``per_call`` queries). Each category of a string knob (an index
    type) has a fixed cost per query of its own.
    """
    index = {c: i for i, c in enumerate(encoder.columns_)}
    for kind in workload_kinds():
        spec = kind.cost_law
        if spec is None or (role := spec.metric_role(metric)) is None:
            continue
        terms = tuple(index[t] for t in spec.terms if t in index)
        if not terms:
            continue
        rate = role == "rate"
        fixed = tuple(index[f"{name}={c}"] for name, cats in sorted(encoder.categories_.items())
                      for c in cats)
        return CostLaw(terms, fixed, rate=rate,
                       parallel=index.get(spec.parallel) if rate and spec.parallel else None,
                       per_call=index.get(spec.per_call) if rate and spec.per_call else None)
    return None


class FeatureEncoder:
    """Knob configs plus workload features -> a float matrix, learnt from the data alone.

    Numbers become log(value) when every seen value is positive (knob effects are multiplicative:
    doubling nprobe, halving block size), booleans 0/1, strings one-hot; a knob that does not apply
    to a config (``nprobe`` of an HNSW index) is NaN, which tree models route on their own.
    """

    def __init__(self) -> None:
        self.columns_: list[str] = []
        self.kinds_: dict[str, str] = {}
        self.categories_: dict[str, list[str]] = {}

    def fit(self, configs: Sequence[Mapping[str, Any]],
            workloads: Sequence[Mapping[str, float]]) -> FeatureEncoder:
        values: dict[str, list[Any]] = {}
        for config, wl in zip(configs, workloads, strict=True):
            for k, v in {**config, **wl, **derived_features(config, wl)}.items():
                values.setdefault(k, []).append(v)
        self.columns_, self.kinds_, self.categories_ = [], {}, {}
        for name in sorted(values):
            seen = [v for v in values[name] if v is not None]
            if all(isinstance(v, bool) for v in seen):
                self.kinds_[name] = "bool"
                self.columns_.append(name)
            elif all(isinstance(v, int | float) and not isinstance(v, bool) for v in seen):
                positive = all(float(v) > 0 for v in seen)
                self.kinds_[name] = "log" if positive else "num"
                self.columns_.append(name)
            else:
                self.kinds_[name] = "cat"
                cats = sorted({str(v) for v in seen})
                self.categories_[name] = cats
                self.columns_.extend(f"{name}={c}" for c in cats)
        return self

    @property
    def names(self) -> list[str]:
        """Knob / workload-feature names (before one-hot expansion)."""
        return list(self.kinds_)

    def transform(self, configs: Sequence[Mapping[str, Any]],
                  workloads: Sequence[Mapping[str, float]]) -> np.ndarray:
        out = np.full((len(configs), len(self.columns_)), np.nan)
        index = {c: i for i, c in enumerate(self.columns_)}
        for r, (config, wl) in enumerate(zip(configs, workloads, strict=True)):
            row = {**config, **wl, **derived_features(config, wl)}
            for name, kind in self.kinds_.items():
                v = row.get(name)
                if kind == "cat":
                    if v is None:
                        continue  # inactive: all its one-hot columns stay NaN
                    for c in self.categories_[name]:
                        out[r, index[f"{name}={c}"]] = 1.0 if str(v) == c else 0.0
                elif v is None or isinstance(v, str):
                    continue
                elif kind == "bool":
                    out[r, index[name]] = float(bool(v))
                elif kind == "log":
                    out[r, index[name]] = math.log(max(float(v), 1e-12))
                else:
                    out[r, index[name]] = float(v)
        return out


# -- the regressor ----------------------------------------------------------------------------


def _impute(X: np.ndarray) -> np.ndarray:
    """NaN -> a sentinel below every seen value (for estimators without native NaN support)."""
    return np.where(np.isnan(X), -10.0, X)


#: Distinct rows each side of a 0/1 column needs before that category gets its own slopes.
_MIN_ROWS_PER_SLOPE_SET = 20


def weighted_ridge(X: np.ndarray, y: np.ndarray, w: np.ndarray, *, alpha: float
                   ) -> tuple[np.ndarray, float]:
    """(coefficients, intercept) of ridge regression with an unpenalised intercept and sample
    weights: the problem scikit-learn's ``Ridge(alpha).fit(X, y, sample_weight=w)`` solves
    (centre X and y on their weighted means, then solve the normal equations), in closed form.

    A forest fits one per member, tens of thousands per knowledge fit, on ~100 x 100 designs:
    scikit-learn's input checks cost ten times the solve there (44 of a 138 s fit of the
    shipped knowledge). ``tests/knowledge/test_surrogate.py`` holds it to scikit-learn's answer.
    """
    w = np.asarray(w, dtype=float)
    x_mean = w @ X / w.sum()
    y_mean = float(w @ y / w.sum())
    Xc = X - x_mean
    Xw = Xc * w[:, None]
    gram = Xc.T @ Xw
    gram[np.diag_indices_from(gram)] += alpha
    coef = np.linalg.solve(gram, Xw.T @ (y - y_mean))
    return coef, y_mean - float(x_mean @ coef)


def _zero_one_columns(X: np.ndarray) -> list[int]:
    """Columns whose non-NaN values are exactly {0, 1}, both present (one-hot categories and
    boolean knobs)."""
    seen = ~np.isnan(X)
    zero, one = seen & (X == 0.0), seen & (X == 1.0)
    only = np.all(zero | one | ~seen, axis=0) & zero.any(axis=0) & one.any(axis=0)
    return [int(j) for j in np.flatnonzero(only)]


def _distinct_rows_at_least(rows: np.ndarray, need: int) -> bool:
    """Whether ``rows`` holds at least ``need`` distinct rows (as ``np.unique(axis=0)`` counts
    them: a row holding NaN equals no other row, and -0.0 equals 0.0). The first ``need`` rows
    usually settle it; only otherwise are all rows sorted (a sort of every row on every call
    was 11 of the 65 s the shipped vector-search fit took, and a Python loop over rows 16 of a
    profiled 226 s knowledge fit)."""
    if len(rows) < need or len(rows) == 0:
        return False
    rows = np.asarray(rows, dtype=float)
    unequal = np.isnan(rows).any(axis=1)
    n_unequal = int(unequal.sum())
    if n_unequal >= need:
        return True
    clean = np.ascontiguousarray(rows[~unequal] + 0.0)  # + 0.0: -0.0 becomes 0.0
    if clean.shape[1] == 0:
        return min(len(clean), 1) + n_unequal >= need
    keys = clean.view(np.dtype((np.void, clean.dtype.itemsize * clean.shape[1]))).ravel()
    if len(set(keys[:need - n_unequal].tolist())) + n_unequal >= need:
        return True
    return len(np.unique(keys)) + n_unequal >= need


class _LinearBase:
    """Ridge regression on standardised features; a missing (inactive) knob becomes 0 plus an
    indicator column, so index families without a knob still get a fit.

    Each 0/1 column (a one-hot category such as ``index_type=hnsw``, or a boolean knob) also
    gets its own slope for every other feature: each index family follows its own power law
    (nlist costs an IVF-flat index centroid distances, an IVF-HNSW one graph hops) instead of
    one compromise slope shared across families.

    Standardised features are clipped to the training range widened by its own width on either
    side: a column seen at almost one value in a (bootstrap) sample gets a tiny spread, and
    without the clip a held-out value far from it makes the linear part explode (a 400-fold
    log error was seen on the shipped vector-search data). Measured-neighbour extrapolation up to
    one range width beyond the training data is kept.
    """

    def fit(self, X: np.ndarray, y: np.ndarray, w: np.ndarray) -> _LinearBase:
        finite = np.where(np.isfinite(X), X, np.nan)
        # A knob inactive in every trial gives an all-NaN column: mean 0, std 1, no warning.
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            self.mean_ = np.nan_to_num(np.nanmean(finite, axis=0))
            std = np.nan_to_num(np.nanstd(finite, axis=0))
        self.std_ = np.where(std > 0, std, 1.0)
        zero_one = _zero_one_columns(finite)
        self.slopes_ = [j for j in range(X.shape[1]) if j not in zero_one]
        # A category gets slopes of its own only where both sides of it hold enough distinct
        # rows to fit them: with a few configs (the H200 contexts) they would only overfit.
        need = max(_MIN_ROWS_PER_SLOPE_SET, len(self.slopes_))
        self.indicators_ = [j for j in zero_one if all(
            _distinct_rows_at_least(finite[finite[:, j] == side], need) for side in (0.0, 1.0))]
        self.lo_, self.hi_ = np.full(X.shape[1], -np.inf), np.full(X.shape[1], np.inf)
        Z = self._standardised(X)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            lo, hi = np.nanmin(Z, axis=0), np.nanmax(Z, axis=0)
        width = np.nan_to_num(hi - lo)
        self.lo_, self.hi_ = np.nan_to_num(lo) - width, np.nan_to_num(hi) + width
        design = self._design(X)
        # Slopes of a knob inside a category it never applies to are all 0: leave them out, so
        # the ridge solves for as few columns as carry information.
        self.keep_ = np.flatnonzero(np.any(design != 0, axis=0))
        self.coef_ = np.zeros(design.shape[1])
        if len(self.keep_) == 0:
            # Every row alike (one config at one workload): the fit is the weighted mean.
            self.intercept_ = float(np.average(y, weights=w))
            return self
        coef, self.intercept_ = weighted_ridge(design[:, self.keep_], y, w, alpha=1.0)
        self.coef_[self.keep_] = coef
        return self

    def _standardised(self, X: np.ndarray) -> np.ndarray:
        """(X - mean) / std, clipped to the widened training range (NaN stays NaN)."""
        Z = (X - self.mean_) / self.std_
        # Models pickled before the clip and the per-category slopes carry neither attribute.
        lo, hi = getattr(self, "lo_", None), getattr(self, "hi_", None)
        out: np.ndarray = Z if lo is None or hi is None else np.clip(Z, lo, hi)
        return out

    def _design(self, X: np.ndarray) -> np.ndarray:
        missing = np.isnan(X)
        Z = np.where(missing, 0.0, self._standardised(X))
        parts = [Z, missing.astype(float)]
        indicators: list[int] = getattr(self, "indicators_", [])
        if indicators:
            ind = np.nan_to_num(X[:, indicators])
            slopes = Z[:, self.slopes_]
            parts.extend(slopes * ind[:, [k]] for k in range(len(indicators)))
        return np.hstack(parts)

    def predict(self, X: np.ndarray) -> np.ndarray:
        out: np.ndarray = self._design(X) @ self.coef_ + self.intercept_
        return out


#: The two-sided 90 % normal quantile: repeat noise widens every interval to at least this many
#: of its standard deviations.
NOISE_Z = 1.645


def _repeat_sd(X: np.ndarray, y: np.ndarray) -> float:
    """The pooled standard deviation of ``y`` among rows with identical inputs (repeated
    measurements), 0 without repeats."""
    groups: dict[bytes, list[float]] = {}
    for row, value in zip(np.nan_to_num(X, nan=-1e300), y, strict=True):
        groups.setdefault(row.tobytes(), []).append(float(value))
    squares, dof = 0.0, 0
    for values in groups.values():
        if len(values) > 1:
            arr = np.asarray(values)
            squares += float(((arr - arr.mean()) ** 2).sum())
            dof += len(values) - 1
    return math.sqrt(squares / dof) if dof else 0.0


def _member_layout(member: Any) -> tuple[Any, ...]:
    """What members must share to be predicted as one array operation: the cost law (its
    basis columns) and the ridge part's number of columns; ``("single",)`` for a member
    predicted alone (a ridge pickled before the clip bounds)."""
    base, _, *cost = member
    law = id(cost[0].law) if cost and cost[0] is not None else None
    if base is None:
        return ("trees", law)
    if getattr(base, "lo_", None) is None or getattr(base, "hi_", None) is None:
        return ("single",)
    return ("ridge", law, len(base.mean_))


def _costs_predict(costs: Sequence[WorkCost], X: np.ndarray) -> np.ndarray:
    """``cost.predict(X)`` of each of ``costs`` (one law, each its own unit costs), shape
    ``(costs, rows)``: the law's basis is computed once."""
    basis = costs[0].basis(X)
    # Each member's own WorkCost.predict from the shared basis: the column feeds the trees'
    # splits in float32, so it stays bit-equal to the one-member computation.
    return np.stack([c.predict_basis(basis) for c in costs])


#: A column's largest term in the shared matrix products of :func:`_linear_bases_predict`
#: beyond which it is computed on its own (a bootstrap sample that saw one value of a knob has
#: a std of ~1e-16 there: its terms would cancel at ~1e15 and lose every digit).
_AFFINE_TERM_LIMIT = 1e4


def _linear_bases_predict(bases: Sequence[_LinearBase], X: np.ndarray,
                          extra: np.ndarray | None = None) -> np.ndarray:
    """``bases[m].predict(X with column extra[m] appended)`` for ridges with the same columns,
    shape ``(bases, rows)`` (``extra``: a cost law's column per member, or None).

    Each ridge predicts ``design @ coef`` with the design of :meth:`_LinearBase._design`:
    standardised features ``Z = clip((X - mean) / std, lo, hi)`` (0 where missing), the missing
    indicators, and ``Z[:, slopes]`` times each 0/1 indicator column. Where a member clips
    nothing, ``Z`` is affine in ``X``, so every member's product is one matrix product of the
    shared ``X`` with per-member weights; a column a member may clip (some row outside its
    bounds: its bootstrap sample's range widened by its width), or whose terms there would be
    too large to cancel exactly, is computed for that member on its own, as the design does.
    Equal to the one-member computation up to floating-point summation order."""
    n_members, (n, p) = len(bases), X.shape
    d = len(bases[0].mean_)
    mean, std = np.stack([b.mean_ for b in bases]), np.stack([b.std_ for b in bases])
    lo, hi = np.stack([b.lo_ for b in bases]), np.stack([b.hi_ for b in bases])
    coef = np.stack([b.coef_[:2 * d] for b in bases])
    weight, missing_weight = coef[:, :d], coef[:, d:2 * d]
    # Each member's 0/1 columns and their slopes (bootstrap samples differ in which they
    # fit), in one layout: the union of both, a member's coefficients 0 outside its own.
    indicators = sorted({k for b in bases for k in getattr(b, "indicators_", [])})
    slopes = sorted({j for b in bases if getattr(b, "indicators_", [])
                     for j in getattr(b, "slopes_", [])})
    slope_of = {col: j for j, col in enumerate(slopes)}
    per = np.zeros((n_members, len(indicators), len(slopes)))
    for m, b in enumerate(bases):
        own_k: list[int] = list(getattr(b, "indicators_", []))
        if own_k:
            own_j = list(b.slopes_)
            per[m][np.ix_([indicators.index(k) for k in own_k],
                          [slope_of[j] for j in own_j])] = \
                b.coef_[2 * d:].reshape(len(own_k), len(own_j))
    ind = np.nan_to_num(X[:, indicators])  # 0/1 columns: never the appended one
    missing = np.isnan(X)
    inv = 1.0 / std[:, :p]
    # Columns shifted by one reference (the members' mean) so that the products stay small.
    ref = mean[:, :p].mean(axis=0)
    shifted, centre = X - ref, mean[:, :p] - ref
    X0, present = np.where(missing, 0.0, shifted), (~missing).astype(float)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        low, high = np.nanmin(shifted, axis=0), np.nanmax(shifted, axis=0)
        size = np.nan_to_num(np.nanmax(np.abs(shifted), axis=0))
    along = np.abs(weight[:, :p]).copy()  # everything a column's Z is multiplied by, bounded
    for col, j in slope_of.items():
        if col < p:
            along[:, col] += np.abs(per[:, :, j]).sum(axis=1)
    alone = (((low[None, :] - centre) * inv < lo[:, :p])
             | ((high[None, :] - centre) * inv > hi[:, :p])
             | ((size[None, :] + np.abs(centre)) * inv * along > _AFFINE_TERM_LIMIT))
    scaled = np.where(alone, 0.0, inv)
    # Unclipped: Z @ weight = X0 @ (weight / std) - present @ (weight * centre / std).
    out: np.ndarray = (X0 @ (weight[:, :p] * scaled).T
                       - present @ (weight[:, :p] * centre * scaled).T
                       + missing.astype(float) @ missing_weight[:, :p].T
                       + np.asarray([b.intercept_ for b in bases])[None, :]).T
    shared = [j for j, col in enumerate(slopes) if col < p]
    cols = [slopes[j] for j in shared]
    for k in range(len(indicators)):
        w = per[:, k, shared] * scaled[:, cols]
        out += ((ind[:, [k]] * X0[:, cols]) @ w.T
                - (ind[:, [k]] * present[:, cols]) @ (w * centre[:, cols]).T).T
    ms, cs = np.nonzero(alone)  # every (member, column) computed on its own, at once
    if len(ms):
        z = np.nan_to_num(np.clip((X[:, cs] - mean[ms, cs]) / std[ms, cs], lo[ms, cs],
                                  hi[ms, cs]))
        factor = np.broadcast_to(weight[ms, cs], z.shape).copy()
        sloped = np.asarray([c in slope_of for c in cs.tolist()])
        if sloped.any():
            at = np.asarray([slope_of[c] for c in cs[sloped].tolist()])
            factor[:, sloped] += ind @ per[ms[sloped], :, at].T
        owner = np.zeros((len(ms), n_members))
        owner[np.arange(len(ms)), ms] = 1.0
        out += ((z * factor) @ owner).T
    if extra is not None:  # the appended column, one per member, never missing
        z = np.clip((extra - mean[:, [p]]) / std[:, [p]], lo[:, [p]], hi[:, [p]])
        factor = np.repeat(weight[:, [p]], n, axis=1)
        if p in slope_of:
            factor += per[:, :, slope_of[p]] @ ind.T
        out += z * factor
    return out


def _with_cost(X: np.ndarray, cost: WorkCost | None) -> np.ndarray:
    """``X`` with the cost law's prediction as one more column (unchanged without a law)."""
    return X if cost is None else np.hstack([X, cost.predict(X)[:, None]])


class IntervalRegressor:
    """A point prediction plus a calibrated ``coverage`` interval, in sklearn's estimator shape.

    ``family``:

    - ``linear-forest`` (default): as ``forest``, but each member is a ridge regression on the
      (log) features plus a tree on its residuals. Serving figures are close to power laws in
      their knobs and workload (latency ~ N^a · nprobe^b), which the linear part captures and
      interpolates between measured workloads; the trees add interactions and categories.
    - ``forest``: a bootstrap ensemble of ``n_trees`` regression trees, each fitted on a
      bootstrap sample of *configs* (a config's repeated measurements are drawn together) with
      random feature subsets; the spread of the trees' predictions is the raw uncertainty, and
      calibration uses each row's out-of-bag trees (no refits).
    - ``hgb-quantile``: gradient boosting with quantile loss at 5 %, 50 % and 95 %.
    - ``gp``: a Gaussian process (Matern 5/2 + white noise) on standardised features.

    In every family the raw half-width is multiplied by a factor chosen on out-of-sample residuals
    (out-of-bag for ``forest``; ``calibration_folds`` grouped folds otherwise) so that
    ``coverage`` of those residuals fall inside the interval: normalised conformal calibration.
    The half-width is never below 1.645 pooled standard deviations of repeated measurements of
    one input (``noise_sd_``): no model knows a figure better than it can be re-measured.

    ``cost_law`` (forests only; :func:`cost_law` builds one for vector search): each member also
    fits the law's unit costs on its bootstrap sample and takes the law's prediction as one more
    feature, where a pilot of members shows that it helps out of bag (``oob_error_``); the law
    adds up the stages of a query, which no product of knobs describes. ``cost_law_`` is the
    law the members use, or None.
    """

    cost_law_: CostLaw | None
    oob_error_: dict[str, float]

    def __init__(self, *, family: str = DEFAULT_FAMILY, coverage: float = COVERAGE,
                 calibration_folds: int = 3, n_trees: int = 48, random_state: int = 0,
                 cost_law: CostLaw | None = None) -> None:
        if family not in FAMILIES:
            raise ValueError(f"`family` must be one of {FAMILIES}, got {family!r}")
        self.family = family
        self.cost_law = cost_law
        self.n_trees = n_trees
        self.coverage = coverage
        self.calibration_folds = calibration_folds
        self.random_state = random_state

    def _make(self) -> Any:
        if self.family == "hgb-quantile":
            from sklearn.ensemble import HistGradientBoostingRegressor

            return [HistGradientBoostingRegressor(loss="quantile", quantile=q, max_iter=100,
                                                  learning_rate=0.1, min_samples_leaf=3,
                                                  random_state=self.random_state)
                    for q in (0.05, 0.5, 0.95)]
        if self.family == "gp":
            from sklearn.gaussian_process import GaussianProcessRegressor
            from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel
            from sklearn.pipeline import make_pipeline
            from sklearn.preprocessing import StandardScaler

            kernel = ConstantKernel(1.0) * Matern(nu=2.5) + WhiteKernel(0.05)
            return make_pipeline(StandardScaler(), GaussianProcessRegressor(
                kernel=kernel, normalize_y=True, random_state=self.random_state))
        raise ValueError(f"`family` must be one of {FAMILIES}, got {self.family!r}")

    def _fit_forest(self, X: np.ndarray, y: np.ndarray, g: np.ndarray
                    ) -> tuple[list[Any], np.ndarray]:
        """Members fitted on bootstrap samples of *groups* (configs), so a config's repeats are
        in or out together; returns the members and each member's in-bag row mask.

        With a cost law, a pilot of ``n_trees // 3`` members with the law's feature and as many
        without decides by their out-of-bag error (:meth:`_oob_error`) which kind all members
        are (the pilot's losers are dropped): the law describes some machines' figures better
        than the plain features do and some worse (the 16-core host's single-query latencies,
        whose repeats of one config spread 2x), and the training data alone can tell which.
        """
        import sklearn
        from threadpoolctl import threadpool_limits  # a dependency of scikit-learn

        rng = np.random.default_rng(self.random_state)
        uniq, inverse, sizes = np.unique(g, return_inverse=True, return_counts=True)
        law: CostLaw | None = getattr(self, "cost_law_", None)
        # A group (a config and its repeats) is one piece of evidence of the law.
        law_weight = 1.0 / sizes[inverse]
        members: list[Any] = []
        bags: list[np.ndarray] = []

        def grow(count: int, kinds: Sequence[bool]) -> None:
            for b in range(count):
                counts = np.bincount(rng.integers(0, len(uniq), len(uniq)),
                                     minlength=len(uniq))
                weight = counts[inverse].astype(float)
                members.append(self._fit_member(X, y, weight, law if kinds[b % len(kinds)]
                                                else None, law_weight, rng))
                bags.append(weight > 0)

        # The ridge solves are ~100 x 100: BLAS threads only add their start-up and, on a busy
        # machine, waits for a core (a solve took 20 ms with them, 0.3 ms without).
        # Parameter validation of ~40k tiny trees per knowledge fit took 13 of its profiled 226 s;
        # the trees' parameters are fixed and valid.
        with threadpool_limits(limits=1, user_api="blas"), \
                sklearn.config_context(skip_parameter_validation=True):
            if law is None:
                grow(self.n_trees, [False])
            else:
                pilot = max(2, self.n_trees // 3)
                grow(2 * pilot, [True, False])
                in_bag = np.asarray(bags)
                with_law = np.asarray([m[2] is not None for m in members])
                self.oob_error_ = {kind: self._oob_error(X, y, [
                    m for m, k in zip(members, with_law, strict=True) if k == use],
                    in_bag[with_law == use]) for kind, use in (("cost-law", True),
                                                               ("plain", False))}
                use_law = self.oob_error_["cost-law"] <= self.oob_error_["plain"]
                members = [m for m, k in zip(members, with_law, strict=True) if k == use_law]
                bags = [b for b, k in zip(bags, with_law, strict=True) if k == use_law]
                if not use_law:
                    self.cost_law_ = None
                grow(self.n_trees - pilot, [use_law])
        return members, np.asarray(bags)

    def _fit_member(self, X: np.ndarray, y: np.ndarray, weight: np.ndarray,
                    law: CostLaw | None, law_weight: np.ndarray, rng: np.random.Generator
                    ) -> tuple[_LinearBase | None, Any, WorkCost | None]:
        """One member on the rows of bootstrap ``weight`` > 0: the cost law (if any), the ridge
        (``linear-forest``) and a tree on what they leave."""
        from sklearn.tree import DecisionTreeRegressor

        rows = weight > 0
        cost = (WorkCost(law=law).fit(X[rows], y[rows], weight[rows] * law_weight[rows])
                if law is not None else None)
        Xm = _with_cost(X, cost)
        base = (_LinearBase().fit(Xm[rows], y[rows], weight[rows])
                if self.family == "linear-forest" else None)
        resid = y[rows] - (base.predict(Xm[rows]) if base is not None else 0.0)
        tree = DecisionTreeRegressor(min_samples_leaf=1, max_features=0.7,
                                     random_state=int(rng.integers(2**31)))
        tree.fit(Xm[rows], resid, sample_weight=weight[rows])
        return base, tree, cost

    def _oob_error(self, X: np.ndarray, y: np.ndarray, members: list[Any],
                   in_bag: np.ndarray) -> float:
        """Mean relative error, on the metric's own scale, of the out-of-bag prediction of every
        row that at least two of ``members`` never saw: the held-out score's measure (the
        metrics with a cost law are fitted in log space), on the training data alone."""
        per_tree = self._members_predict(members, X)
        oob = ~in_bag
        seen = oob.sum(axis=0)
        usable = seen >= 2
        if not usable.any():
            return math.inf
        centre = (per_tree * oob).sum(axis=0)[usable] / seen[usable]
        return float(np.mean(np.abs(np.expm1(np.clip(centre - y[usable], -50, 50)))))

    @staticmethod
    def _member_predict(member: Any, X: np.ndarray) -> np.ndarray:
        base, tree, *cost = member  # members pickled before the cost law have none
        X = _with_cost(X, cost[0] if cost else None)
        # The fitted tree's own array predictor: sklearn's public predict() re-validates X on
        # every call, which costs more than the prediction on a few hundred rows.
        X32 = np.ascontiguousarray(X, dtype=np.float32)
        out: np.ndarray = tree.tree_.predict(X32).reshape(len(X))
        return out + base.predict(X) if base is not None else out

    @classmethod
    def _members_predict(cls, members: Sequence[Any], X: np.ndarray) -> np.ndarray:
        """Every member's prediction of every row, shape ``(members, rows)``: what
        :meth:`_member_predict` gives one member at a time, with the members that share a
        layout (cost law, ridge columns) computed as one array operation. A forest has 48
        members and an answer predicts each metric for a few hundred configs several times:
        one member at a time, the ridges' elementwise work (and numpy's overhead per call)
        was most of an answer's time.
        Equal to the one-at-a-time result up to floating-point summation order."""
        out = np.empty((len(members), len(X)))
        groups: dict[tuple[Any, ...], list[int]] = {}
        for i, member in enumerate(members):
            groups.setdefault(_member_layout(member), []).append(i)
        for layout, rows in groups.items():
            if layout[0] == "single":
                for i in rows:
                    out[i] = cls._member_predict(members[i], X)
                continue
            group = [members[i] for i in rows]
            column = None if layout[1] is None else _costs_predict([m[2] for m in group], X)
            X32 = np.ascontiguousarray(X, dtype=np.float32) if column is None else None
            for j, member in enumerate(group):
                own = X32 if column is None else np.ascontiguousarray(
                    np.hstack([X, column[j][:, None]]), dtype=np.float32)
                out[rows[j]] = member[1].tree_.predict(own).reshape(len(X))
            if group[0][0] is not None:
                out[rows] += _linear_bases_predict([m[0] for m in group], X, column)
        return out

    def _fit_raw(self, X: np.ndarray, y: np.ndarray) -> Any:
        est = self._make()
        if self.family == "hgb-quantile":
            for e in est:
                e.fit(X, y)
        else:
            est.fit(_impute(X), y)
        return est

    def _predict_raw(self, est: Any, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(centre, raw half-width > 0)."""
        if self.family in ("forest", "linear-forest"):
            per_tree = self._members_predict(est, X)
            centre = per_tree.mean(axis=0)
            spread = per_tree.std(axis=0)
        elif self.family == "hgb-quantile":
            lo, mid, hi = (e.predict(X) for e in est)
            centre, spread = mid, np.abs(hi - lo) / 2
        else:
            centre, spread = est.predict(_impute(X), return_std=True)
        return centre, np.maximum(spread, 1e-3)

    def fit(self, X: np.ndarray, y: np.ndarray, groups: Sequence[Any] | np.ndarray | None = None
            ) -> IntervalRegressor:
        X, y = np.asarray(X, dtype=float), np.asarray(y, dtype=float)
        if X.shape[0] != y.shape[0] or X.shape[0] < 2:
            raise ValueError(f"need >= 2 rows with matching X and y, got {X.shape}, {y.shape}")
        g = np.asarray(groups if groups is not None else np.arange(len(y))).astype(str)
        self.n_samples_ = X.shape[0]
        self.noise_sd_ = _repeat_sd(X, y)
        # The law's unit costs need rows to spare, as a category's own slopes do; only the
        # forests' members take its feature.
        law = self.cost_law
        self.cost_law_ = law if (
            law is not None and self.family in ("forest", "linear-forest")
            and _distinct_rows_at_least(X, max(_MIN_ROWS_PER_SLOPE_SET, 2 * law.n_costs))
        ) else None
        self.oob_error_ = {}
        if self.family in ("forest", "linear-forest"):
            trees, in_bag = self._fit_forest(X, y, g)
            self.estimator_ = trees
            self.scale_ = self._calibrate_oob(X, y, trees, in_bag, g)
        else:
            self.estimator_ = self._fit_raw(X, y)
            self.scale_ = self._calibrate(X, y, g)
        return self

    def _conformal(self, ratios: Sequence[float]) -> float:
        """The finite-sample conformal quantile ceil((n + 1) * coverage) / n of ``ratios``.

        With fewer than ``coverage / (1 - coverage)`` ratios (9 for 90 %) no finite quantile
        guarantees the coverage: the largest ratio is then doubled, so that a model fitted on a
        handful of configs answers with wide intervals rather than false confidence.
        """
        n = len(ratios)
        if n < 2:
            return 3.0  # nothing to calibrate on: a wide, honest default
        needed = math.ceil((n + 1) * self.coverage)
        if needed > n:
            return float(max(ratios)) * SMALL_SAMPLE_INFLATION
        return float(np.quantile(np.asarray(ratios), needed / n))

    def _calibrate_oob(self, X: np.ndarray, y: np.ndarray, trees: list[Any],
                       in_bag: np.ndarray, g: np.ndarray) -> float:
        """Normalised residuals against the members that never saw a config, one per config
        (its worst row): rows of one config are not independent evidence."""
        per_tree = self._members_predict(trees, X)
        worst: dict[str, float] = {}
        for i in range(len(y)):
            oob = ~in_bag[:, i]
            if oob.sum() < 3:
                continue
            preds = per_tree[oob, i]
            spread = max(float(preds.std()), 1e-3)
            ratio = abs(float(y[i]) - float(preds.mean())) / spread
            worst[str(g[i])] = max(worst.get(str(g[i]), 0.0), ratio)
        return self._conformal(list(worst.values()))

    def _calibrate(self, X: np.ndarray, y: np.ndarray, g: np.ndarray) -> float:
        n_groups = len(set(g.tolist()))
        folds = min(self.calibration_folds, n_groups)
        if folds < 2:
            return 3.0
        from sklearn.model_selection import GroupKFold

        worst: dict[str, float] = {}
        for train, test in GroupKFold(n_splits=folds).split(X, y, g):
            est = self._fit_raw(X[train], y[train])
            centre, spread = self._predict_raw(est, X[test])
            for gi, r in zip(g[test], np.abs(y[test] - centre) / spread, strict=True):
                worst[str(gi)] = max(worst.get(str(gi), 0.0), float(r))
        return self._conformal(list(worst.values()))

    def predict_interval(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(centre, low, high)`` in the space ``y`` was fitted in."""
        if not hasattr(self, "estimator_"):
            raise RuntimeError("IntervalRegressor is not fitted; call fit() first")
        centre, spread = self._predict_raw(self.estimator_, np.asarray(X, dtype=float))
        # Never narrower than the measurement noise: repeats of one input disagree by that much
        # whatever the model says (a model of one config's repeats has no spread of its own).
        half = np.maximum(self.scale_ * spread, NOISE_Z * getattr(self, "noise_sd_", 0.0))
        return centre, centre - half, centre + half

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.predict_interval(X)[0]


# -- per-context model sets ----------------------------------------------------------------------


@dataclass(frozen=True)
class MetricScore:
    """Held-out quality of one metric's model: grouped K-fold over distinct configs."""

    metric: str
    n: int
    n_groups: int
    mape: float | None
    coverage: float | None
    folds: int
    #: Error of predicting each repeated measurement by the geometric mean of its repeats (same
    #: config, same workload): the floor no model can beat. None without repeats.
    noise_mape: float | None = None
    noise_n: int = 0
    #: Held out by workload: the error on held-out measurements of configs measured at another
    #: workload of the fold's training side (a held-out rate of a measured config), and on the
    #: rest (configs measured at the held-out workload only: held-out configs in effect).
    #: None when not grouped by workload.
    seen_config_mape: float | None = None
    seen_config_n: int = 0
    unseen_config_mape: float | None = None
    unseen_config_n: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "n": self.n, "configs": self.n_groups,
                "mape": self.mape, "interval_coverage": self.coverage, "folds": self.folds,
                "noise_floor_mape": self.noise_mape, "noise_floor_n": self.noise_n,
                "seen_config_mape": self.seen_config_mape, "seen_config_n": self.seen_config_n,
                "unseen_config_mape": self.unseen_config_mape,
                "unseen_config_n": self.unseen_config_n}


def noise_floor(trials: Sequence[TrialRecord], metric: str) -> tuple[float | None, int]:
    """Leave-one-out error among repeats: each measurement against the geometric mean of the
    other measurements of the same config on the same workload."""
    groups: dict[tuple[str, str], list[float]] = {}
    for t in trials:
        v = t.metrics.get(metric)
        if isinstance(v, int | float) and v > 0:
            groups.setdefault((t.config_hash, t.workload_hash), []).append(float(v))
    errors: list[float] = []
    for values in groups.values():
        if len(values) < 2:
            continue
        logs = np.log(values)
        for i, v in enumerate(values):
            others = np.exp(np.delete(logs, i).mean())
            errors.append(abs(others - v) / v)
    return (float(np.mean(errors)) if errors else None), len(errors)


@dataclass
class MetricModel:
    """One metric's fitted regressor with its transform and its cross-validated score.

    Pickled with the regressor as an opaque blob that is only unpickled when the metric is first
    predicted: loading a saved model set then costs milliseconds, and a query pays only for the
    few metrics it asks about.
    """

    metric: str
    transform: str
    regressor: IntervalRegressor | None
    score: MetricScore | None = None
    blob: bytes | None = None

    def fitted(self) -> IntervalRegressor:
        if self.regressor is None:
            if self.blob is None:
                raise RuntimeError(f"model of {self.metric} has neither a regressor nor a blob")
            self.regressor = pickle.loads(self.blob)  # written by __getstate__ below
            self.blob = None
        return self.regressor

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        if state.get("regressor") is not None:
            state["blob"] = pickle.dumps(state["regressor"], protocol=pickle.HIGHEST_PROTOCOL)
            state["regressor"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


@dataclass
class ContextModels:
    """Everything fitted for one context: encoder, per-metric models, the evidence it saw."""

    key: ContextKey
    family: str
    encoder: FeatureEncoder
    metrics: dict[str, MetricModel]
    trial_ids: list[int]
    configs: list[dict[str, Any]]
    features: list[dict[str, float]]
    measured: list[dict[str, float]]
    workloads: list[WorkloadPoint]
    trial_workload: list[str]  # spec hash per trial
    fit_seconds: float = 0.0
    trial_studies: list[str] = field(default_factory=list)  # study name per trial
    X_: np.ndarray | None = None  # the encoded training rows, for nearest-evidence search
    failed_configs: list[dict[str, Any]] = field(default_factory=list)
    #: Measured configs' load curves (knowledge/load_curve.py): where a config has one at the
    #: asked workload, its curve answers for the metrics it models instead of the surrogate.
    load_curves: LoadCurves | None = None
    #: The measured curves regressed on the knobs (knowledge/curve_model.py): a config with no
    #: curve of its own gets a predicted one, where the context has enough curves.
    knob_curves: KnobCurveModel | None = None

    def predict(self, configs: Sequence[Mapping[str, Any]], workload: Mapping[str, float],
                metrics: Iterable[str] | None = None
                ) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per metric, (value, low, high) arrays on the metric's own scale, one entry per config."""
        X = self.encoder.transform(list(configs), [workload] * len(configs))
        out: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for name in metrics if metrics is not None else self.metrics:
            mm = self.metrics.get(name)
            if mm is None:
                continue
            c, lo, hi = mm.fitted().predict_interval(X)
            out[name] = (_inverse(mm.transform, c), _inverse(mm.transform, lo),
                         _inverse(mm.transform, hi))
        out = _with_curves(getattr(self, "load_curves", None), configs, workload, out,
                           getattr(self, "knob_curves", None))
        return self._bounded_below_measured_rates(configs, workload, out)

    def _bounded_below_measured_rates(
            self, configs: Sequence[Mapping[str, Any]], workload: Mapping[str, float],
            out: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]
    ) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """``out`` with, below the lowest offered rate the context measured (at the asked
        workload's other features, where it measured them), each latency's upper end raised to
        at least its upper end at that rate: a latency does not fall as the rate grows, and no
        model fitted on higher rates knows the floor below them (held out by config, the 1B's
        default config, predicted from trials at 80-110 req/s alone, read a TTFT p95 upper end
        of 20 ms at 20-45 req/s, where 31-84 ms were measured)."""
        curves = getattr(self, "load_curves", None)
        if curves is None:
            return out
        rate = curves.roles.rate
        asked = workload.get(rate)
        latencies = [m for m in out if m in curves.roles.latencies]
        if not isinstance(asked, int | float) or not latencies:
            return out
        rest = {k: v for k, v in workload.items() if k != rate}
        rates = [w.features[rate] for w in self.workloads if rate in w.features]
        alike = [w.features[rate] for w in self.workloads if rate in w.features
                 and {k: v for k, v in w.features.items() if k != rate} == rest]
        lowest = min(alike or rates, default=None)
        if lowest is None or asked >= lowest:
            return out
        there = self.predict(configs, {**workload, rate: lowest}, latencies)
        for m in latencies:
            if m in there:
                c, lo, hi = out[m]
                out[m] = (c, lo, np.maximum(hi, there[m][2]))
        return out

    def curve_of(self, config: Mapping[str, Any], workload: Mapping[str, float]
                 ) -> Any | None:
        """The load curve of ``config`` at ``workload`` (any rate), or None."""
        curves = getattr(self, "load_curves", None)
        return None if curves is None else curves.curve(config, workload)

    @property
    def n_trials(self) -> int:
        return len(self.trial_ids)

    def workload_ranges(self) -> dict[str, tuple[float, float]]:
        ranges: dict[str, tuple[float, float]] = {}
        for w in self.workloads:
            for f, v in w.features.items():
                lo, hi = ranges.get(f, (v, v))
                ranges[f] = (min(lo, v), max(hi, v))
        return ranges


def _with_curves(curves: LoadCurves | None, configs: Sequence[Mapping[str, Any]],
                 workload: Mapping[str, float],
                 out: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
                 knob: KnobCurveModel | None = None
                 ) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``out`` with each config's load-curve prediction in place of the surrogate's, for the
    metrics its curve models; a config with no curve of its own takes the curve ``knob``
    predicts from its knobs, where that model answers (else the surrogate's stands), blended
    with the context's simulator where that places the config
    (:meth:`knowledge.curve_blend.CurveBlend.predict_unmeasured`)."""
    if curves is None:
        return out
    uncurved = [i for i, config in enumerate(configs) if curves.curve(config, workload) is None]
    from_knobs = (knob.predict_many([configs[i] for i in uncurved], workload, list(out))
                  if knob is not None and uncurved else None) or {}
    unmeasured = set(uncurved)
    for name, (c, lo, hi) in out.items():
        knob_p = dict(zip(uncurved, from_knobs.get(name, []), strict=False))
        for i, config in enumerate(configs):
            p = (_unmeasured_answer(curves, config, workload, name, knob_p.get(i),
                                    (c[i], lo[i], hi[i])) if i in unmeasured
                 else curves.predict(config, workload, name))
            if p is not None:
                c[i], lo[i], hi[i] = p
    return out


def _unmeasured_answer(curves: LoadCurves, config: Mapping[str, Any],
                       workload: Mapping[str, float], metric: str,
                       from_knobs: tuple[float, float, float] | None,
                       surrogate: tuple[float, float, float]
                       ) -> tuple[float, float, float] | None:
    """The answer for a config with no load curve of its own: the curve its knobs predict
    (``from_knobs``), else the ``surrogate``'s, blended with the context's simulator where that
    places the config; None where the surrogate's answer stands as it is."""
    blend = getattr(curves, "blend_", None)
    if blend is None:
        return from_knobs
    value, low, high = from_knobs if from_knobs is not None else surrogate
    return blend.predict_unmeasured(config, workload, metric, float(value), float(low),
                                    float(high)) or from_knobs


def fit_knob_curves(curves: LoadCurves | None, encoder: FeatureEncoder
                    ) -> KnobCurveModel | None:
    """The knob-level model of ``curves`` (:data:`KNOB_CURVE_FAMILY`), or None where none is
    chosen or too few curves show their capacity (:data:`knowledge.curve_model.MIN_CURVES`)."""
    if curves is None or KNOB_CURVE_FAMILY is None:
        return None
    model = KnobCurveModel(family=KNOB_CURVE_FAMILY).fit(curves, encoder.transform)
    return model if model.fitted_ else None


def fit_load_curves(trials: Sequence[TrialRecord], *, blend: bool = True
                    ) -> LoadCurves | None:
    """The load curves of a context's measured configs, or None where its names declare no
    offered rate and served rate (:func:`knowledge.load_curve.load_roles`) or no config was
    measured at two rates. ``blend``: also blend them with the simulator of the trials'
    workload kind where their own held-out rates prefer it (:mod:`knowledge.curve_blend`)."""
    wl = [workload_features(t.workload_spec) for t in trials]
    values: dict[str, list[float]] = {}
    for t in trials:
        for m, v in t.metrics.items():
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
                values.setdefault(m, []).append(float(v))
    roles = load_roles(values, sorted({f for w in wl for f in w}))
    if roles is None:
        return None
    configs, measured = [t.config for t in trials], [t.metrics for t in trials]
    curves = LoadCurves(roles=roles).fit(configs, wl, measured)
    if not curves.curves_ or not curves.half_width_:
        return None
    if blend:
        curves.blend_ = fit_blend(curves, fit_simulation(trials), configs, wl, measured)
    return curves


def _usable(trials: Sequence[TrialRecord]) -> list[TrialRecord]:
    return [t for t in trials if t.status == "complete" and t.metrics]


def _metric_names(trials: Sequence[TrialRecord], min_share: float = 0.8) -> list[str]:
    counts: dict[str, int] = {}
    for t in trials:
        for m, v in t.metrics.items():
            if m not in _SKIP_METRICS and isinstance(v, int | float) and math.isfinite(v):
                counts[m] = counts.get(m, 0) + 1
    # p90s sit between the modelled p50/p95/p99 and are never asked for more than those. Of a
    # pipeline trial's per-stage breakdown only the mean and p95 are modelled: they are what the
    # cheat-sheet's stage shares and SLOs use, and each modelled metric costs a fit.
    return sorted(m for m, c in counts.items() if c >= max(2, min_share * len(trials))
                  and "_p90" not in m and not _stage_detail(m))


def _stage_detail(metric: str) -> bool:
    return metric.startswith(_STAGES) and metric.endswith(("_p50_ms", "_p99_ms"))


def _workload_points(trials: Sequence[TrialRecord]) -> list[WorkloadPoint]:
    seen: dict[str, WorkloadPoint] = {}
    for t in trials:
        w = seen.get(t.workload_hash)
        if w is None:
            seen[t.workload_hash] = WorkloadPoint(
                str(t.workload_spec.get("name", "")), t.workload_hash, dict(t.workload_spec),
                workload_features(t.workload_spec), 1)
        else:
            seen[t.workload_hash] = WorkloadPoint(w.name, w.spec_hash, w.spec, w.features,
                                                  w.trials + 1)
    return sorted(seen.values(), key=lambda w: (-w.trials, w.spec_hash))


def _xy(trials: Sequence[TrialRecord], encoder: FeatureEncoder, metric: str
        ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    keep = [i for i, t in enumerate(trials) if isinstance(t.metrics.get(metric), int | float)
            and math.isfinite(t.metrics[metric])]
    rows = [trials[i] for i in keep]
    X = encoder.transform([t.config for t in rows],
                          [workload_features(t.workload_spec) for t in rows])
    y = np.asarray([float(t.metrics[metric]) for t in rows])
    groups = np.asarray([t.config_hash for t in rows])
    # Positions, not `t in rows`: that compared records field by field, O(n^2) (18 of the 65 s
    # the shipped vector-search fit took).
    return X, y, groups, np.asarray(keep, dtype=int)


def fit_context(key: ContextKey, trials: Sequence[TrialRecord], *, family: str = DEFAULT_FAMILY,
                score: bool = True, folds: int = 5, failed: Sequence[TrialRecord] = (),
                study_names: Mapping[int, str] | None = None,
                metrics: Iterable[str] | None = None, load_curves: bool = True
                ) -> ContextModels:
    """Fit one model per metric on the complete trials of one context.

    ``metrics`` limits the models to those metrics (the audit needs only the SLO's).
    ``load_curves``: also fit the measured configs' load curves (:func:`fit_load_curves`),
    which then answer for their configs.
    With ``score`` the models are also cross-validated (grouped by config, ``folds`` folds) and
    each :class:`MetricModel` carries its :class:`MetricScore`.
    """
    started = time.perf_counter()
    usable = _usable(trials)
    if len(usable) < 2:
        raise ValueError(f"context {key.label()} has {len(usable)} measured trials; need >= 2")
    wl = [workload_features(t.workload_spec) for t in usable]
    encoder = FeatureEncoder().fit([t.config for t in usable], wl)
    # The scores a fit keeps are quoted for answers the knob-level models give (configs held
    # out whole); a blended curve quotes its own held-out-rate error, so the folds skip the
    # simulator (on the 8B shape it would cost ~10 s a fold).
    scores = (cross_validate(key, usable, family=family, folds=folds, blend=False)
              if score else {})
    curves = fit_load_curves(usable) if load_curves else None
    models: dict[str, MetricModel] = {}
    wanted = set(metrics) if metrics is not None else None
    for metric in _metric_names(usable):
        if wanted is not None and metric not in wanted:
            continue
        X, y, groups, _ = _xy(usable, encoder, metric)
        kind = metric_transform(metric, y)
        law = cost_law(encoder, metric) if kind == "log" else None
        reg = IntervalRegressor(family=family, cost_law=law).fit(X, _forward(kind, y), groups)
        models[metric] = MetricModel(metric, kind, reg, scores.get(metric))
    return ContextModels(
        key=key, family=family, encoder=encoder, metrics=models,
        trial_ids=[int(t.id or 0) for t in usable], configs=[dict(t.config) for t in usable],
        features=wl, measured=[{k: float(v) for k, v in t.metrics.items()
                                if isinstance(v, int | float)} for t in usable],
        workloads=_workload_points(usable), trial_workload=[t.workload_hash for t in usable],
        fit_seconds=time.perf_counter() - started,
        failed_configs=[dict(t.config) for t in failed],
        trial_studies=[(study_names or {}).get(t.study_id, "") for t in usable],
        X_=encoder.transform([t.config for t in usable], wl),
        load_curves=curves, knob_curves=fit_knob_curves(curves, encoder))


#: How :func:`cross_validate` can group what it holds out together.
GROUP_BY = ("config", "instance", "workload")
#: What :func:`cross_validate` scores a prediction against: each ``trial``'s measurement, or
#: the ``median`` of the repeats of one config at one workload (one score per such group).
SCORE_ON = ("trial", "median")


def instance_groups(trials: Sequence[TrialRecord]) -> list[str]:
    """One group label per trial for holding out whole engine instances: a trial and the
    settings its search sweep measured on the same instance (``swept_from``) share a group,
    and so does every other measurement of any of those configs (repeats, other studies),
    transitively — nothing held out has its instance or its config on the training side."""
    parent = list(range(len(trials)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[tuple[Any, ...], int] = {}
    for i, t in enumerate(trials):
        instance = ("instance", t.study_id,
                    t.swept_from if t.swept_from is not None else t.number)
        for key in (("config", t.config_hash), instance):
            j = first.setdefault(key, i)
            parent[find(i)] = find(j)
    return [f"g{find(i)}" for i in range(len(trials))]


def cross_validate(key: ContextKey, trials: Sequence[TrialRecord], *, family: str = DEFAULT_FAMILY,
                   folds: int = 5, metrics: Iterable[str] | None = None,
                   group_by: str = "config", load_curves: bool = True,
                   score_on: str = "trial", blend: bool = True) -> dict[str, MetricScore]:
    """Held-out error per metric: GroupKFold over distinct configs, so repeated measurements
    of one config (and its measurements at other rates) never sit on both sides of a split.
    ``group_by="instance"`` holds out whole engine instances with their configs
    (:func:`instance_groups`): a swept setting is then predicted without the other settings
    measured on its instance. ``group_by="workload"`` holds out whole workloads instead (how
    well an unmeasured rate or corpus size is predicted for configs measured elsewhere).

    MAPE compares the predicted value with the measured one on the metric's own scale; coverage is
    the share of held-out measurements inside the predicted interval (nominal: ``COVERAGE``).
    With ``load_curves`` each fold also fits the load curves of its training trials, which
    answer for the held-out trials of configs they cover (a held-out rate of a measured config),
    and their knob-level model (:func:`fit_knob_curves`) for held-out configs, where chosen.
    ``score_on="median"`` scores one error per held-out (config, workload): against the median
    of its repeats, which a single measurement's repeat noise does not move (coverage still
    counts every trial). ``blend``: each fold's curves are blended with its simulator where its
    training trials choose that (:func:`fit_load_curves`), as an answer's are.
    """
    from sklearn.model_selection import GroupKFold

    usable = _usable(trials)
    wl = [workload_features(t.workload_spec) for t in usable]
    encoder = FeatureEncoder().fit([t.config for t in usable], wl)
    out: dict[str, MetricScore] = {}
    if group_by not in GROUP_BY:
        raise ValueError(f"`group_by` must be one of {', '.join(GROUP_BY)}, got {group_by!r}")
    if score_on not in SCORE_ON:
        raise ValueError(f"`score_on` must be one of {', '.join(SCORE_ON)}, got {score_on!r}")
    # One group label per usable trial (None: _xy's config groups).
    trial_groups = (instance_groups(usable) if group_by == "instance"
                    else [t.workload_hash for t in usable] if group_by == "workload" else None)
    # One fit of the load curves per distinct training set (every metric's folds share them).
    curves_of: dict[tuple[int, ...], LoadCurves | None] = {}
    knobs_of: dict[tuple[int, ...], KnobCurveModel | None] = {}
    for metric in metrics if metrics is not None else _metric_names(usable):
        X, y, groups, idx = _xy(usable, encoder, metric)
        if trial_groups is not None:
            groups = np.asarray([trial_groups[i] for i in idx])
        n_groups = len(set(groups.tolist()))
        k = min(folds, n_groups)
        if k < 2 or len(y) < 4:
            out[metric] = MetricScore(metric, len(y), n_groups, None, None, 0)
            continue
        kind = metric_transform(metric, y)
        z = _forward(kind, y)
        law = cost_law(encoder, metric) if kind == "log" else None
        errors: list[float] = []
        seen: list[bool] = []  # per error: its config was measured on the training side
        inside: list[bool] = []
        for train, test in GroupKFold(n_splits=k).split(X, z, groups):
            trained = {usable[i].config_hash for i in idx[train]}
            reg = IntervalRegressor(family=family, cost_law=law).fit(X[train], z[train],
                                                                      groups[train])
            c, lo, hi = reg.predict_interval(X[test])
            held = [usable[i] for i in idx[test]]
            if load_curves and (curves := curves_of.get(tuple(idx[train]))) is None:
                curves = curves_of[tuple(idx[train])] = fit_load_curves(
                    [usable[i] for i in idx[train]], blend=blend)
            if load_curves and curves is not None:
                if tuple(idx[train]) not in knobs_of:
                    knobs_of[tuple(idx[train])] = fit_knob_curves(curves, encoder)
                knob = knobs_of[tuple(idx[train])]
                value = _inverse(kind, c)
                low, high = _inverse(kind, lo), _inverse(kind, hi)
                for j, t in enumerate(held):
                    point = workload_features(t.workload_spec)
                    if curves.curve(t.config, point) is None:
                        p = _unmeasured_answer(
                            curves, t.config, point, metric,
                            knob.predict(t.config, point, metric) if knob is not None else None,
                            (value[j], low[j], high[j]))
                    else:
                        p = curves.predict(t.config, point, metric)
                    if p is not None:
                        value[j], low[j], high[j] = p
                c, lo, hi = (_forward(kind, np.maximum(a, 1e-300) if kind == "log" else a)
                             for a in (value, low, high))
            pred = _inverse(kind, c)
            # Measured at another rate: the same config on the training side (by hash, or by
            # its load-curve identity, which leaves out knobs added to the space later).
            known = [t.config_hash in trained or (
                load_curves and curves is not None
                and curves.curve(t.config, workload_features(t.workload_spec)) is not None)
                for t in held]
            inside.extend(((z[test] >= lo - 1e-9) & (z[test] <= hi + 1e-9)).tolist())
            if score_on == "trial":
                errors.extend((np.abs(pred - y[test])
                               / np.maximum(np.abs(y[test]), 1e-12)).tolist())
                seen.extend(known)
                continue
            by_group: dict[tuple[str, str], list[int]] = {}
            for j, t in enumerate(held):
                by_group.setdefault((t.config_hash, t.workload_hash), []).append(j)
            for rows in by_group.values():
                truth = float(np.median(y[test][rows]))
                errors.append(abs(float(np.mean(pred[rows])) - truth)
                              / max(abs(truth), 1e-12))
                seen.append(known[rows[0]])
        floor, floor_n = noise_floor(usable, metric)
        if not np.all(np.abs(y) > 0):
            # A relative error of a measured zero is undefined (a count of cut requests is
            # mostly 0): dividing by a tiny floor printed MAPEs of 10^15 % in the cheat-sheet.
            out[metric] = MetricScore(metric, len(y), n_groups, None, float(np.mean(inside)), k,
                                      floor, floor_n)
            continue
        split: dict[str, Any] = {}
        if group_by == "workload":
            elsewhere = [e for e, s in zip(errors, seen, strict=True) if s]
            only_there = [e for e, s in zip(errors, seen, strict=True) if not s]
            split = {"seen_config_mape": float(np.mean(elsewhere)) if elsewhere else None,
                     "seen_config_n": len(elsewhere),
                     "unseen_config_mape": float(np.mean(only_there)) if only_there else None,
                     "unseen_config_n": len(only_there)}
        out[metric] = MetricScore(metric, len(y), n_groups, float(np.mean(errors)),
                                  float(np.mean(inside)), k, floor, floor_n, **split)
    return out

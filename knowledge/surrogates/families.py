"""Surrogate families: how one kind of regressor fits, predicts and is calibrated.

:class:`~knowledge.surrogates.regressor.IntervalRegressor` holds the settings and the fitted
state and picks its family by name from :data:`FAMILY_IMPLEMENTATIONS`; a family is a small
strategy object (:class:`SurrogateFamily`), so a new one is a class here and a name in
:data:`FAMILIES`, not another branch in every method.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from knowledge.model_choices import DEFAULT_SURROGATE_FAMILY as DEFAULT_FAMILY
from knowledge.model_choices import SURROGATE_FAMILIES as FAMILIES
from knowledge.surrogates.calibration import conformal, fold_scale
from knowledge.surrogates.linear import _impute, _linear_bases_predict, _LinearBase
from knowledge.work_cost import CostLaw, WorkCost

__all__ = ["DEFAULT_FAMILY", "FAMILIES", "FAMILY_IMPLEMENTATIONS", "FittingRegressor", "Forest",
           "GaussianProcess", "QuantileBoosting", "SurrogateFamily", "member_predict",
           "members_predict"]


class FittingRegressor(Protocol):
    """What a family reads and sets on the regressor it fits for
    (:class:`~knowledge.surrogates.regressor.IntervalRegressor`): described here, not imported,
    so that the regressor can pick its family from this module without a circle."""

    n_trees: int
    coverage: float
    calibration_folds: int
    random_state: int
    cost_law_: CostLaw | None
    oob_error_: dict[str, float]

    def _predict_raw(self, est: Any, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...


class SurrogateFamily(Protocol):
    """One family of regressors behind :class:`IntervalRegressor`.

    :meth:`fit` is called once per :meth:`IntervalRegressor.fit`, after the regressor has set
    its noise floor and decided its cost law (``reg.cost_law_``, only for a family that
    ``takes_cost_law``); it returns the fitted estimator (pickled with the regressor) and the
    conformal scale of its raw half-width. :meth:`predict_raw` turns a fitted estimator and rows
    into (centre, raw half-width); the regressor floors the half-width and scales it.
    """

    @property
    def takes_cost_law(self) -> bool:
        """Whether the family's members can take a cost law's prediction as one more feature."""
        ...

    def fit(self, reg: FittingRegressor, X: np.ndarray, y: np.ndarray, g: np.ndarray
            ) -> tuple[Any, float]: ...

    def predict_raw(self, estimator: Any, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...


# -- forests ----------------------------------------------------------------------------------


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


def _with_cost(X: np.ndarray, cost: WorkCost | None) -> np.ndarray:
    """``X`` with the cost law's prediction as one more column (unchanged without a law)."""
    return X if cost is None else np.hstack([X, cost.predict(X)[:, None]])


def member_predict(member: Any, X: np.ndarray) -> np.ndarray:
    """One forest member's prediction of every row of ``X``."""
    base, tree, *cost = member  # members pickled before the cost law have none
    X = _with_cost(X, cost[0] if cost else None)
    # The fitted tree's own array predictor: sklearn's public predict() re-validates X on
    # every call, which costs more than the prediction on a few hundred rows.
    X32 = np.ascontiguousarray(X, dtype=np.float32)
    out: np.ndarray = tree.tree_.predict(X32).reshape(len(X))
    return out + base.predict(X) if base is not None else out


def members_predict(members: Sequence[Any], X: np.ndarray) -> np.ndarray:
    """Every member's prediction of every row, shape ``(members, rows)``: what
    :func:`member_predict` gives one member at a time, with the members that share a
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
                out[i] = member_predict(members[i], X)
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


def _oob_error(X: np.ndarray, y: np.ndarray, members: list[Any], in_bag: np.ndarray) -> float:
    """Mean relative error, on the metric's own scale, of the out-of-bag prediction of every
    row that at least two of ``members`` never saw: the held-out score's measure (the
    metrics with a cost law are fitted in log space), on the training data alone."""
    per_tree = members_predict(members, X)
    oob = ~in_bag
    seen = oob.sum(axis=0)
    usable = seen >= 2
    if not usable.any():
        return math.inf
    centre = (per_tree * oob).sum(axis=0)[usable] / seen[usable]
    return float(np.mean(np.abs(np.expm1(np.clip(centre - y[usable], -50, 50)))))


@dataclass(frozen=True)
class Forest:
    """A bootstrap ensemble of regression trees over *configs*, calibrated out of bag; with
    ``linear`` each member is a ridge regression plus a tree on its residuals
    (``linear-forest``)."""

    linear: bool
    takes_cost_law: bool = True

    def fit(self, reg: FittingRegressor, X: np.ndarray, y: np.ndarray, g: np.ndarray
            ) -> tuple[Any, float]:
        trees, in_bag = self._fit_forest(reg, X, y, g)
        return trees, self._calibrate_oob(reg, X, y, trees, in_bag, g)

    def predict_raw(self, estimator: Any, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        per_tree = members_predict(estimator, X)
        return per_tree.mean(axis=0), per_tree.std(axis=0)

    def _fit_forest(self, reg: FittingRegressor, X: np.ndarray, y: np.ndarray, g: np.ndarray
                    ) -> tuple[list[Any], np.ndarray]:
        """Members fitted on bootstrap samples of *groups* (configs), so a config's repeats are
        in or out together; returns the members and each member's in-bag row mask.

        With a cost law, a pilot of ``n_trees // 3`` members with the law's feature and as many
        without decides by their out-of-bag error (:func:`_oob_error`) which kind all members
        are (the pilot's losers are dropped): the law describes some machines' figures better
        than the plain features do and some worse (the 16-core host's single-query latencies,
        whose repeats of one config spread 2x), and the training data alone can tell which.
        """
        import sklearn
        from threadpoolctl import threadpool_limits  # a dependency of scikit-learn

        rng = np.random.default_rng(reg.random_state)
        uniq, inverse, sizes = np.unique(g, return_inverse=True, return_counts=True)
        law: CostLaw | None = getattr(reg, "cost_law_", None)
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
                grow(reg.n_trees, [False])
            else:
                pilot = max(2, reg.n_trees // 3)
                grow(2 * pilot, [True, False])
                in_bag = np.asarray(bags)
                with_law = np.asarray([m[2] is not None for m in members])
                reg.oob_error_ = {kind: _oob_error(X, y, [
                    m for m, k in zip(members, with_law, strict=True) if k == use],
                    in_bag[with_law == use]) for kind, use in (("cost-law", True),
                                                               ("plain", False))}
                use_law = reg.oob_error_["cost-law"] <= reg.oob_error_["plain"]
                members = [m for m, k in zip(members, with_law, strict=True) if k == use_law]
                bags = [b for b, k in zip(bags, with_law, strict=True) if k == use_law]
                if not use_law:
                    reg.cost_law_ = None
                grow(reg.n_trees - pilot, [use_law])
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
                if self.linear else None)
        resid = y[rows] - (base.predict(Xm[rows]) if base is not None else 0.0)
        tree = DecisionTreeRegressor(min_samples_leaf=1, max_features=0.7,
                                     random_state=int(rng.integers(2**31)))
        tree.fit(Xm[rows], resid, sample_weight=weight[rows])
        return base, tree, cost

    @staticmethod
    def _calibrate_oob(reg: FittingRegressor, X: np.ndarray, y: np.ndarray, trees: list[Any],
                       in_bag: np.ndarray, g: np.ndarray) -> float:
        """Normalised residuals against the members that never saw a config, one per config
        (its worst row): rows of one config are not independent evidence."""
        per_tree = members_predict(trees, X)
        worst: dict[str, float] = {}
        for i in range(len(y)):
            oob = ~in_bag[:, i]
            if oob.sum() < 3:
                continue
            preds = per_tree[oob, i]
            spread = max(float(preds.std()), 1e-3)
            ratio = abs(float(y[i]) - float(preds.mean())) / spread
            worst[str(g[i])] = max(worst.get(str(g[i]), 0.0), ratio)
        return conformal(list(worst.values()), reg.coverage)


# -- refitted families, calibrated on grouped folds -------------------------------------------


class _FoldCalibrated:
    """A family fitted as one estimator, calibrated by refits on grouped folds."""

    takes_cost_law = False

    def make(self, random_state: int) -> Any:
        raise NotImplementedError

    def fit_raw(self, reg: FittingRegressor, X: np.ndarray, y: np.ndarray) -> Any:
        est = self.make(reg.random_state)
        est.fit(_impute(X), y)
        return est

    def fit(self, reg: FittingRegressor, X: np.ndarray, y: np.ndarray, g: np.ndarray
            ) -> tuple[Any, float]:
        est = self.fit_raw(reg, X, y)
        return est, fold_scale(X, y, g, folds=reg.calibration_folds, coverage=reg.coverage,
                               fit=lambda Xf, yf: self.fit_raw(reg, Xf, yf),
                               predict=reg._predict_raw)


class QuantileBoosting(_FoldCalibrated):
    """Gradient boosting with quantile loss at 5 %, 50 % and 95 % (``hgb-quantile``)."""

    def make(self, random_state: int) -> Any:
        from sklearn.ensemble import HistGradientBoostingRegressor

        return [HistGradientBoostingRegressor(loss="quantile", quantile=q, max_iter=100,
                                              learning_rate=0.1, min_samples_leaf=3,
                                              random_state=random_state)
                for q in (0.05, 0.5, 0.95)]

    def fit_raw(self, reg: FittingRegressor, X: np.ndarray, y: np.ndarray) -> Any:
        est = self.make(reg.random_state)
        for e in est:
            e.fit(X, y)
        return est

    def predict_raw(self, estimator: Any, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lo, mid, hi = (e.predict(X) for e in estimator)
        return mid, np.abs(hi - lo) / 2


class GaussianProcess(_FoldCalibrated):
    """A Gaussian process (Matern 5/2 + white noise) on standardised features (``gp``)."""

    def make(self, random_state: int) -> Any:
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        kernel = ConstantKernel(1.0) * Matern(nu=2.5) + WhiteKernel(0.05)
        return make_pipeline(StandardScaler(), GaussianProcessRegressor(
            kernel=kernel, normalize_y=True, random_state=random_state))

    def predict_raw(self, estimator: Any, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        centre, spread = estimator.predict(_impute(X), return_std=True)
        return centre, spread


#: The implementation of each name in :data:`FAMILIES`.
FAMILY_IMPLEMENTATIONS: dict[str, SurrogateFamily] = {
    "linear-forest": Forest(linear=True), "forest": Forest(linear=False),
    "hgb-quantile": QuantileBoosting(), "gp": GaussianProcess(),
}

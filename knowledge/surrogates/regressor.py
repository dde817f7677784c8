"""The interval regressor: a point prediction plus a calibrated interval, sklearn-shaped.

Its family (knowledge/surrogates/families.py) fits and predicts; this class holds the settings
and the fitted state, floors every interval at the repeat noise and scales it by the family's
conformal calibration (knowledge/surrogates/calibration.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from knowledge.surrogates.calibration import COVERAGE, NOISE_Z, _repeat_sd
from knowledge.surrogates.families import (
    DEFAULT_FAMILY,
    FAMILIES,
    FAMILY_IMPLEMENTATIONS,
    SurrogateFamily,
    member_predict,
    members_predict,
)
from knowledge.surrogates.linear import _MIN_ROWS_PER_SLOPE_SET, _distinct_rows_at_least
from knowledge.work_cost import CostLaw

__all__ = ["IntervalRegressor"]


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

    ``cost_law`` (forests only; :func:`~knowledge.surrogates.features.cost_law` builds one):
    each member also fits the law's unit costs on its bootstrap sample and takes the law's
    prediction as one more feature, where a pilot of members shows that it helps out of bag
    (``oob_error_``); the law adds up the stages of a query, which no product of knobs
    describes. ``cost_law_`` is the law the members use, or None.
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

    def _family(self) -> SurrogateFamily:
        return FAMILY_IMPLEMENTATIONS[self.family]

    @staticmethod
    def _member_predict(member: Any, X: np.ndarray) -> np.ndarray:
        """One forest member's prediction
        (:func:`~knowledge.surrogates.families.member_predict`)."""
        return member_predict(member, X)

    @staticmethod
    def _members_predict(members: Sequence[Any], X: np.ndarray) -> np.ndarray:
        """Every forest member's prediction of every row
        (:func:`~knowledge.surrogates.families.members_predict`)."""
        return members_predict(members, X)

    def _predict_raw(self, est: Any, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(centre, raw half-width > 0)."""
        centre, spread = self._family().predict_raw(est, X)
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
            law is not None and self._family().takes_cost_law
            and _distinct_rows_at_least(X, max(_MIN_ROWS_PER_SLOPE_SET, 2 * law.n_costs))
        ) else None
        self.oob_error_ = {}
        self.estimator_, self.scale_ = self._family().fit(self, X, y, g)
        return self

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

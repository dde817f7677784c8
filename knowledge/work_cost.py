"""A fitted cost law for vector search: one query's time is the sum, over the stages it goes
through, of the work each stage does times what one unit of that work costs on the measured
machine. The unit costs are fitted per context (non-negative); the law's prediction is one more
feature of a metric's surrogate (:class:`knowledge.surrogates.IntervalRegressor`).

This module never imports an engine: it reads columns of an encoded feature matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["CostLaw", "WorkCost"]


@dataclass(frozen=True)
class CostLaw:
    """Where a cost law reads its inputs in an encoded feature matrix, and how the metric it
    predicts relates to time.

    - ``terms``: columns holding log(units of one kind of work per query), NaN where the stage
      does not exist for a row (an HNSW index scans no inverted lists).
    - ``fixed``: 0/1 columns (the categories of a knob such as the index type), each with a
      fixed cost per query of its own: each code path allocates and sets up differently. Rows
      in none of them share one more fixed cost.
    - ``rate``: the metric is queries per second, the inverse of the wall time per query
      (otherwise it is one query's time). A rate's per-query work is shared by the threads a
      call keeps busy (``parallel``: the column of log(their number)), and each call has a fixed
      cost that its queries share (``per_call``: the column of log(queries per call)).
    """

    terms: tuple[int, ...]
    fixed: tuple[int, ...] = ()
    rate: bool = False
    parallel: int | None = None
    per_call: int | None = None

    @property
    def n_costs(self) -> int:
        """How many unit costs the law fits."""
        return (len(self.terms) + len(self.fixed) + 1
                + int(self.rate and self.per_call is not None))


class WorkCost:
    """The unit costs ``coef_ >= 0`` of ``time per query = basis(X) @ coef_``, fitted for
    relative error (each row's residual divided by its measured time, a non-negative least
    squares problem): the times span three decades, and the errors the surrogates are judged
    by are relative too.

    sklearn's estimator shape: ``fit(X, y, sample_weight)`` with ``y`` the log of the metric
    (what the surrogates fit) sets ``coef_``; ``predict(X)`` is the law's log metric, clipped to
    the training range widened by its own width on either side, as the ridge part's inputs are.
    """

    def __init__(self, *, law: CostLaw) -> None:
        self.law = law

    def basis(self, X: np.ndarray) -> np.ndarray:
        """One column per unit cost: the work of each stage, 1 for each fixed cost (and, for a
        rate, both divided by the busy threads, plus 1 / queries per call)."""
        law = self.law
        X = np.asarray(X, dtype=float)
        with np.errstate(over="ignore"):
            work = np.nan_to_num(np.exp(X[:, list(law.terms)]), nan=0.0, posinf=0.0)
        fixed = np.nan_to_num(X[:, list(law.fixed)], nan=0.0)
        other = (fixed.sum(axis=1) == 0).astype(float)[:, None]
        per_query = np.hstack([work, fixed, other])
        if not law.rate:
            return per_query
        if law.parallel is not None:
            per_query /= np.exp(np.nan_to_num(X[:, [law.parallel]], nan=0.0))
        if law.per_call is None:
            return per_query
        # A missing batch knob is one query per call: log 0.
        per_call = np.exp(-np.nan_to_num(X[:, [law.per_call]], nan=0.0))
        return np.hstack([per_query, per_call])

    def fit(self, X: np.ndarray, y: np.ndarray, sample_weight: np.ndarray | None = None
            ) -> WorkCost:
        from scipy.optimize import nnls

        y = np.asarray(y, dtype=float)
        A = self.basis(X)
        if A.shape[0] != y.shape[0] or A.shape[0] < 1:
            raise ValueError(f"need >= 1 row with matching X and y, got {A.shape}, {y.shape}")
        w = (np.ones(len(y)) if sample_weight is None
             else np.asarray(sample_weight, dtype=float))
        time = np.exp(-y if self.law.rate else y)
        # Columns scaled to a largest value of 1: the work terms span ten decades.
        scale = A.max(axis=0)
        scale = np.where(scale > 0, scale, 1.0)
        root = np.sqrt(w)
        lo, hi = float(y.min()), float(y.max())
        self.lo_, self.hi_ = lo - (hi - lo), hi + (hi - lo)
        try:
            coef, _ = nnls(A / scale * (root / time)[:, None], root, maxiter=50 * A.shape[1])
        except RuntimeError:  # no convergence (never seen): the law then knows nothing
            coef = np.zeros(A.shape[1])
        self.coef_ = coef / scale
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.predict_basis(self.basis(X))

    def predict_basis(self, basis: np.ndarray) -> np.ndarray:
        """:meth:`predict` from the rows' :meth:`basis`, which depends on the law alone: the
        members of a forest that share a law compute it once."""
        if not hasattr(self, "coef_"):
            raise RuntimeError("WorkCost is not fitted; call fit() first")
        time = basis @ self.coef_
        # A row whose every stage got a zero cost has no time of its own: log 0, clipped to
        # the range's edge.
        with np.errstate(divide="ignore"):
            z = np.log(np.maximum(time, 0.0))
        out: np.ndarray = np.clip(-z if self.law.rate else z, self.lo_, self.hi_)
        return out

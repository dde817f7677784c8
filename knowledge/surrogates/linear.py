"""The ridge part of a ``linear-forest`` member: weighted ridge on standardised, clipped
features with per-category slopes, and its batched prediction over many members.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

__all__ = ["weighted_ridge"]


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

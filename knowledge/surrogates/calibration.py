"""Calibrating prediction intervals: normalised conformal scales and the repeat-noise floor.

A family's raw spread (the ensemble's disagreement, a quantile pair, a GP's std) is multiplied
by a scale chosen on out-of-sample residuals so that ``coverage`` of them fall inside, and no
interval is narrower than repeated measurements of one input disagree.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["COVERAGE", "NOISE_Z", "SMALL_SAMPLE_INFLATION", "conformal", "fold_scale"]

#: Nominal coverage of every prediction interval.
COVERAGE = 0.9
#: Below 9 calibration configs (90 % coverage) the largest residual ratio is multiplied by this.
SMALL_SAMPLE_INFLATION = 2.0
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


def conformal(ratios: Sequence[float], coverage: float) -> float:
    """The finite-sample conformal quantile ceil((n + 1) * coverage) / n of ``ratios``.

    With fewer than ``coverage / (1 - coverage)`` ratios (9 for 90 %) no finite quantile
    guarantees the coverage: the largest ratio is then doubled, so that a model fitted on a
    handful of configs answers with wide intervals rather than false confidence.
    """
    n = len(ratios)
    if n < 2:
        return 3.0  # nothing to calibrate on: a wide, honest default
    needed = math.ceil((n + 1) * coverage)
    if needed > n:
        return float(max(ratios)) * SMALL_SAMPLE_INFLATION
    return float(np.quantile(np.asarray(ratios), needed / n))


def fold_scale(X: np.ndarray, y: np.ndarray, g: np.ndarray, *, folds: int, coverage: float,
               fit: Callable[[np.ndarray, np.ndarray], Any],
               predict: Callable[[Any, np.ndarray], tuple[np.ndarray, np.ndarray]]) -> float:
    """The conformal scale of normalised residuals on ``folds`` grouped folds, one per group
    (its worst row): ``fit(X, y)`` refits on a fold's training rows, ``predict(est, X)`` gives
    (centre, raw half-width) of its held-out rows."""
    n_groups = len(set(g.tolist()))
    folds = min(folds, n_groups)
    if folds < 2:
        return 3.0
    from sklearn.model_selection import GroupKFold

    worst: dict[str, float] = {}
    for train, test in GroupKFold(n_splits=folds).split(X, y, g):
        est = fit(X[train], y[train])
        centre, spread = predict(est, X[test])
        for gi, r in zip(g[test], np.abs(y[test] - centre) / spread, strict=True):
            worst[str(gi)] = max(worst.get(str(gi), 0.0), float(r))
    return conformal(list(worst.values()), coverage)

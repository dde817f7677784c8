"""Metric transforms: latency, throughput and sizes are fitted in log space and fractions
(recall) in logit space, so errors are relative and predictions stay positive / inside [0, 1].
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["metric_transform"]


_FRACTION_EPS = 1e-4


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

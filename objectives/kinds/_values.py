"""Reading numbers out of workload params and configs, shared by the kind declarations."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["median_of", "positive"]


def median_of(value: Any) -> float | None:
    """A number, or a distribution's median (else its value or mean); None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, Mapping):
        for key in ("median", "value", "mean"):
            if isinstance(value.get(key), int | float):
                return float(value[key])
    return None


def positive(value: Any) -> float | None:
    """``value`` as a float when it is a positive number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if value > 0 else None

"""Reading numbers out of workload params and configs, shared by the kind declarations."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["median_of", "positive"]


def median_of(value: Any) -> float | None:
    """A number, or a distribution's median (else its value or mean; a uniform distribution's
    midpoint); None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, Mapping):
        for key in ("median", "value", "mean"):
            if isinstance(value.get(key), int | float):
                return float(value[key])
        # Without this a uniform length (rag-long-prompt's 1,500-3,500 prompt tokens) had no
        # feature, and its windows read as the same workload as any other at that rate.
        low, high = value.get("low"), value.get("high")
        if (value.get("dist") == "uniform" and isinstance(low, int | float)
                and isinstance(high, int | float)
                and not isinstance(low, bool) and not isinstance(high, bool)):
            return (float(low) + float(high)) / 2
    return None


def positive(value: Any) -> float | None:
    """``value`` as a float when it is a positive number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if value > 0 else None

"""Drift between two runs of a sweep: did a cell's best config get slower (or faster) beyond the
noise measured by repeating it?

Each run measures its best config ``repeats`` times; the next run measures the previous best
config again as many times. Per metric (the objective and every SLO metric) the change of the
mean counts only when it exceeds both ``noise_factor`` × the larger relative spread (coefficient
of variation) seen in either run's repeats and ``min_change``. A change in the metric's bad
direction is a regression, as is a config that met the SLO on average and no longer does.

Moves are compared as factors, the same either way: a mean that halves has moved as far as one
that doubles (by 1.0, i.e. 100 %). A relative change alone cannot fall below -100 %, so with a
threshold of 1 or more a throughput drop (or a latency improvement) could never count.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from advisor.sweeps.spec import DriftPolicy

__all__ = ["CellDrift", "MetricDrift", "compare_cell", "factor_change", "summarize_values"]


@dataclass(frozen=True)
class MetricDrift:
    """One metric of one cell, previous run against this run, on the same config."""

    metric: str
    worse_when: str  # "higher" or "lower"
    previous_mean: float
    current_mean: float
    change: float  # relative: (current - previous) / |previous|
    factor_change: float  # the move as a factor either way, less 1: max(c/p, p/c) - 1
    noise: float  # the larger coefficient of variation of the two runs' repeats
    threshold: float
    verdict: str  # "regressed", "improved" or "steady"
    previous_n: int
    current_n: int


@dataclass(frozen=True)
class CellDrift:
    """The drift verdict of one cell (``status``: regressed, improved, steady, no-baseline)."""

    cell: str
    status: str
    config: dict[str, Any] | None = None
    metrics: tuple[MetricDrift, ...] = ()
    slo_previously_met: bool | None = None
    slo_now_met: bool | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["metrics"] = [asdict(m) for m in self.metrics]
        data["notes"] = list(self.notes)
        return data


def summarize_values(values: Sequence[float]) -> dict[str, float]:
    """Mean, coefficient of variation and count of repeat measurements of one metric."""
    mean = statistics.fmean(values)
    cv = statistics.stdev(values) / abs(mean) if len(values) > 1 and mean else 0.0
    return {"mean": mean, "cv": cv, "n": float(len(values))}


def factor_change(previous: float, current: float) -> float:
    """How far a mean moved, as a factor either way less 1 (``max(c/p, p/c) - 1``): 1.0 for a
    doubling and for a halving alike. Where no factor exists (a mean of 0, or a change of sign)
    the size of the relative change stands in for it."""
    if previous == 0 or current == 0 or (previous > 0) != (current > 0):
        return abs(current - previous) / abs(previous) if previous else 0.0
    ratio = current / previous
    return max(ratio, 1 / ratio) - 1


def compare_cell(cell: str, *, config: Mapping[str, Any] | None,
                 previous: Mapping[str, Sequence[float]], current: Mapping[str, Sequence[float]],
                 worse_when: Mapping[str, str], slo_bounds: Sequence[tuple[str, str, float]],
                 policy: DriftPolicy, notes: Sequence[str] = ()) -> CellDrift:
    """Compare the previous run's repeat measurements of ``config`` with this run's.

    ``previous`` / ``current`` map metric → measured values; ``worse_when`` maps metric →
    ``"higher"`` or ``"lower"``; ``slo_bounds`` are (metric, op, threshold) of the cell's SLO.
    """
    if not previous or not current:
        return CellDrift(cell, "no-baseline", dict(config) if config else None,
                         notes=(*notes, "no repeat measurements of the same config in both "
                                        "runs to compare"))
    drifts = []
    for metric, direction in worse_when.items():
        prev, cur = previous.get(metric) or [], current.get(metric) or []
        if not prev or not cur:
            continue
        p, c = summarize_values(prev), summarize_values(cur)
        change = (c["mean"] - p["mean"]) / abs(p["mean"]) if p["mean"] else 0.0
        moved = factor_change(p["mean"], c["mean"])
        noise = max(p["cv"], c["cv"])
        threshold = max(policy.noise_factor * noise, policy.min_change)
        up, down = moved > threshold and change > 0, moved > threshold and change < 0
        worse, better = (up, down) if direction == "higher" else (down, up)
        drifts.append(MetricDrift(
            metric=metric, worse_when=direction, previous_mean=p["mean"], current_mean=c["mean"],
            change=change, factor_change=moved, noise=noise, threshold=threshold,
            verdict="regressed" if worse else "improved" if better else "steady",
            previous_n=len(prev), current_n=len(cur)))
    prev_met = _meets(previous, slo_bounds)
    now_met = _meets(current, slo_bounds)
    verdicts = {d.verdict for d in drifts}
    if "regressed" in verdicts or (prev_met and now_met is False):
        status = "regressed"
    elif "improved" in verdicts:
        status = "improved"
    else:
        status = "steady"
    return CellDrift(cell, status, dict(config) if config else None, tuple(drifts), prev_met,
                     now_met, tuple(notes))


def _meets(values: Mapping[str, Sequence[float]],
           bounds: Sequence[tuple[str, str, float]]) -> bool | None:
    """Whether the mean of each SLO metric meets its bound (None when one was not measured)."""
    for metric, op, threshold in bounds:
        measured = values.get(metric)
        if not measured:
            return None
        mean = statistics.fmean(measured)
        if (op == "<=" and mean > threshold) or (op == ">=" and mean < threshold):
            return False
    return True

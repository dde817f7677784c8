"""Paired comparisons: is config X really better than config Y, beyond the measurement noise?

Both configs are measured in the same lease, interleaved (X Y X Y ...), at least
:data:`MIN_REPEATS` times each, so slow drifts of the machine hit both alike. Per metric the
answer holds each arm's mean, the difference of means (X - Y) and its relative size, and a
seeded percentile-bootstrap interval of the difference: each arm's repeats are resampled
independently, with replacement, and the difference of the resampled means is taken
:data:`RESAMPLES` times. The verdict says what X is, compared with Y, in the metric's good
direction: ``better`` or ``worse`` when the interval excludes 0, ``within_noise`` when it
contains 0. Comparisons are claims, so too few repeats or arms measured in blocks are refused.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from advisor.errors import AdvisorError

__all__ = ["LEVEL", "MIN_REPEATS", "RESAMPLES", "Better", "MetricComparison",
           "PairedComparison", "PairedComparisonError", "Repeat", "Verdict", "check_interleaved",
           "compare"]

#: Repeats each arm needs before a difference is claimed.
MIN_REPEATS = 3
#: Two-sided level of the bootstrap interval.
LEVEL = 0.95
#: Bootstrap resamples per metric.
RESAMPLES = 4000
METHOD = ("percentile bootstrap of the difference of means (X - Y): each arm's repeats "
          "resampled independently with replacement")

Better = Literal["lower", "higher"]
Verdict = Literal["better", "worse", "within_noise"]


class PairedComparisonError(AdvisorError):
    """A paired comparison cannot be claimed from these repeats (too few, or not interleaved)."""


@dataclass(frozen=True)
class Repeat:
    """One measurement of one arm: ``order`` is its place in the lease's measurement sequence
    (a trial number), ``trial_id`` where it is stored."""

    arm: str
    order: int
    metrics: Mapping[str, float]
    trial_id: int | None = None


@dataclass(frozen=True)
class MetricComparison:
    """X against Y on one metric. ``difference`` = mean X - mean Y; ``relative_difference`` =
    difference / |mean Y| (``None`` when mean Y is 0); ``interval`` bounds the difference."""

    metric: str
    better: Better
    mean_x: float
    mean_y: float
    n_x: int
    n_y: int
    difference: float
    relative_difference: float | None
    interval: tuple[float, float]
    verdict: Verdict

    @property
    def relative_interval(self) -> tuple[float, float] | None:
        if self.mean_y == 0:
            return None
        return (self.interval[0] / abs(self.mean_y), self.interval[1] / abs(self.mean_y))

    def to_dict(self) -> dict[str, Any]:
        rel = self.relative_interval
        return {"metric": self.metric, "better": self.better, "mean_x": self.mean_x,
                "mean_y": self.mean_y, "n_x": self.n_x, "n_y": self.n_y,
                "difference": self.difference, "relative_difference": self.relative_difference,
                "interval": list(self.interval),
                "relative_interval": None if rel is None else list(rel),
                "verdict": self.verdict}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MetricComparison:
        lo, hi = data["interval"]
        return cls(str(data["metric"]), data["better"], float(data["mean_x"]),
                   float(data["mean_y"]), int(data["n_x"]), int(data["n_y"]),
                   float(data["difference"]),
                   None if data.get("relative_difference") is None
                   else float(data["relative_difference"]),
                   (float(lo), float(hi)), data["verdict"])


@dataclass(frozen=True)
class PairedComparison:
    """Arm ``x`` against arm ``y`` (e.g. ``best`` against ``default``), metric by metric."""

    x: str
    y: str
    metrics: tuple[MetricComparison, ...]
    level: float = LEVEL
    resamples: int = RESAMPLES
    seed: int = 0
    method: str = METHOD
    x_config: dict[str, Any] | None = None
    y_config: dict[str, Any] | None = None
    x_trials: tuple[int, ...] = ()
    y_trials: tuple[int, ...] = ()
    #: Where and how the repeats were taken (study, hardware key, workload hash, ...).
    context: dict[str, Any] = field(default_factory=dict)

    def metric(self, name: str) -> MetricComparison | None:
        return next((m for m in self.metrics if m.metric == name), None)

    def verdict(self, name: str) -> Verdict | None:
        """The verdict on metric ``name`` (``None`` when it was not compared)."""
        m = self.metric(name)
        return None if m is None else m.verdict

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "paired-comparison/1", "x": self.x, "y": self.y,
                "level": self.level, "resamples": self.resamples, "seed": self.seed,
                "method": self.method, "x_config": self.x_config, "y_config": self.y_config,
                "x_trials": list(self.x_trials), "y_trials": list(self.y_trials),
                "context": dict(self.context),
                "metrics": [m.to_dict() for m in self.metrics]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PairedComparison:
        return cls(x=str(data["x"]), y=str(data["y"]),
                   metrics=tuple(MetricComparison.from_dict(m) for m in data["metrics"]),
                   level=float(data.get("level", LEVEL)),
                   resamples=int(data.get("resamples", RESAMPLES)),
                   seed=int(data.get("seed", 0)), method=str(data.get("method", METHOD)),
                   x_config=data.get("x_config"), y_config=data.get("y_config"),
                   x_trials=tuple(int(t) for t in data.get("x_trials", ())),
                   y_trials=tuple(int(t) for t in data.get("y_trials", ())),
                   context=dict(data.get("context") or {}))


def check_interleaved(x: Sequence[Repeat], y: Sequence[Repeat]) -> None:
    """Raise :class:`PairedComparisonError` unless the two arms were measured interleaved: in
    measurement order, neither arm is ever more than one measurement ahead of the other
    (X Y X Y and X Y Y X pass; X X Y Y does not)."""
    orders = [r.order for r in (*x, *y)]
    if len(set(orders)) != len(orders):
        raise PairedComparisonError("two repeats share one place in the measurement order")
    sequence = sorted([(r.order, 0) for r in x] + [(r.order, 1) for r in y])
    counts = [0, 0]
    for order, arm in sequence:
        counts[arm] += 1
        if abs(counts[0] - counts[1]) > 1:
            raise PairedComparisonError(
                f"the arms were not measured interleaved: at measurement {order} one arm had "
                f"{max(counts)} repeats and the other {min(counts)}; measure them alternately "
                "(X Y X Y ...) in the same lease")


def compare(x: Sequence[Repeat], y: Sequence[Repeat], *, better: Mapping[str, Better],
            level: float = LEVEL, resamples: int = RESAMPLES, seed: int = 0,
            x_config: Mapping[str, Any] | None = None, y_config: Mapping[str, Any] | None = None,
            context: Mapping[str, Any] | None = None) -> PairedComparison:
    """Compare arm ``x`` with arm ``y`` on every metric of ``better`` (metric -> its good
    direction) that both arms measured in each repeat.

    Raises :class:`PairedComparisonError` when an arm has fewer than :data:`MIN_REPEATS`
    repeats or the arms were not interleaved (:func:`check_interleaved`).
    """
    if not 0 < level < 1:
        raise ValueError(f"`0 < level < 1` must hold, but got {level=}")
    if resamples < 100:
        raise ValueError(f"`resamples >= 100` must hold, but got {resamples=}")
    if not x or not y:
        raise PairedComparisonError("a paired comparison needs repeats of both arms")
    names = {r.arm for r in x}, {r.arm for r in y}
    if len(names[0]) != 1 or len(names[1]) != 1 or names[0] == names[1]:
        raise PairedComparisonError(f"each arm must hold one arm's repeats, got {names}")
    x_arm, y_arm = next(iter(names[0])), next(iter(names[1]))
    for arm, reps in ((x_arm, x), (y_arm, y)):
        if len(reps) < MIN_REPEATS:
            raise PairedComparisonError(
                f"arm {arm!r} has {len(reps)} repeat(s); a paired comparison needs at least "
                f"{MIN_REPEATS} of each arm")
    check_interleaved(x, y)
    rng = np.random.default_rng(seed)
    compared = []
    for metric, good in better.items():
        xs, ys = _values(x, metric), _values(y, metric)
        if len(xs) < MIN_REPEATS or len(ys) < MIN_REPEATS:
            continue  # not measured by (enough of) the repeats: not compared, never guessed
        compared.append(_compare_metric(metric, good, xs, ys, level, resamples, rng))
    return PairedComparison(
        x=x_arm, y=y_arm, metrics=tuple(compared), level=level, resamples=resamples, seed=seed,
        x_config=None if x_config is None else dict(x_config),
        y_config=None if y_config is None else dict(y_config),
        x_trials=tuple(r.trial_id for r in sorted(x, key=lambda r: r.order)
                       if r.trial_id is not None),
        y_trials=tuple(r.trial_id for r in sorted(y, key=lambda r: r.order)
                       if r.trial_id is not None),
        context=dict(context or {}))


def _values(repeats: Sequence[Repeat], metric: str) -> np.ndarray:
    values = [r.metrics.get(metric) for r in repeats]
    return np.asarray([float(v) for v in values
                       if isinstance(v, int | float) and math.isfinite(float(v))])


def _compare_metric(metric: str, good: Better, xs: np.ndarray, ys: np.ndarray, level: float,
                    resamples: int, rng: np.random.Generator) -> MetricComparison:
    if good not in ("lower", "higher"):
        raise ValueError(f"metric {metric!r}: direction must be 'lower' or 'higher', got {good!r}")
    mean_x, mean_y = float(xs.mean()), float(ys.mean())
    diff = mean_x - mean_y
    boot_x = xs[rng.integers(0, len(xs), size=(resamples, len(xs)))].mean(axis=1)
    boot_y = ys[rng.integers(0, len(ys), size=(resamples, len(ys)))].mean(axis=1)
    tail = (1 - level) / 2
    lo, hi = (float(v) for v in np.quantile(boot_x - boot_y, [tail, 1 - tail]))
    verdict: Verdict
    if lo <= 0 <= hi:
        verdict = "within_noise"
    else:
        x_higher = lo > 0
        verdict = "better" if x_higher == (good == "higher") else "worse"
    return MetricComparison(metric, good, mean_x, mean_y, len(xs), len(ys), diff,
                            diff / abs(mean_y) if mean_y else None, (lo, hi), verdict)

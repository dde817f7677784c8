"""Sweep a target's search-time knobs over one engine instance, skipping settings that cannot
improve the quality/cost front (the pruning FAISS's ``ParameterSpace.explore`` does).

Some knobs change only how an already-built engine answers (how many lists or graph candidates
a vector index visits): measuring each of their settings as a whole trial pays process start,
build or cache load and warm-up again for every setting. A target that declares such knobs
(:meth:`Target.swept_knobs`) measures all of them in one trial: the driver samples the other
knobs, the target builds once and calls :func:`explore` here, and every measured setting is
stored as a trial of its own.

The ladders are monotone by declaration: a larger value of every swept knob never lowers the
quality and never lowers the cost. Where quality can be computed cheaply without timing anything
(recall from one search pass), :func:`explore_by_quality` first computes it for the ladder and
times only the cheapest setting reaching each quality level that matters (the study's SLO bound,
the target's tiers, the best quality reached): any other setting is slower for no gain at those
levels. A setting is then skipped when a setting already measured is
at least as good as the best it could be (quality at most that of the cheapest measured setting
above it, or the declared ceiling; cost at least that of the dearest measured setting below it).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

__all__ = ["ExploreResult", "explore", "explore_by_quality", "power_ladder"]

M = TypeVar("M")


@dataclass(frozen=True)
class ExploreResult(Generic[M]):
    """The settings measured, in measuring order, and what was not."""

    points: list[tuple[dict[str, Any], M]]
    #: Settings skipped because a measured one dominates whatever they could measure.
    pruned: int
    #: Settings never reached because the point or time budget ran out.
    unreached: int

    def summary(self) -> dict[str, int]:
        return {"measured": len(self.points), "pruned": self.pruned,
                "unreached": self.unreached}


def power_ladder(low: int, high: int, include: Sequence[int] = ()) -> list[int]:
    """The powers of two in ``[low, high]`` with both ends and ``include`` (values inside the
    range), ascending: a ladder that covers several orders of magnitude in few steps."""
    if low > high:
        raise ValueError(f"`low <= high` must hold, got low={low}, high={high}")
    values = {low, high, *(v for v in include if low <= v <= high)}
    step = 1
    while step <= high:
        if step >= low:
            values.add(step)
        step *= 2
    return sorted(values)


def explore(ladders: Mapping[str, Sequence[Any]], measure: Callable[[dict[str, Any]], M], *,
            quality: Callable[[M], float], cost: Callable[[M], float],
            quality_ceiling: float | None = None, max_points: int = 12,
            budget_s: float = 60.0) -> ExploreResult[M]:
    """Measure settings of the swept knobs (one value per ladder), cheapest first, skipping
    dominated ones, until every setting is measured or skipped, ``max_points`` are measured or
    ``budget_s`` seconds have passed (a measurement under way finishes).

    ``measure`` may raise: the exception propagates (the caller decides whether what was measured
    so far is kept). At least one setting is always measured.
    """
    if not ladders:
        raise ValueError("explore needs at least one ladder")
    names = list(ladders)
    grids = [list(ladders[n]) for n in names]
    if any(not g for g in grids):
        raise ValueError("every ladder needs at least one value")
    order = _cheapest_first(grids)
    measured: list[tuple[tuple[int, ...], float, float]] = []
    points: list[tuple[dict[str, Any], M]] = []
    pruned = 0
    deadline = time.monotonic() + budget_s
    for position, idx in enumerate(order):
        if points and (len(points) >= max_points or time.monotonic() >= deadline):
            return ExploreResult(points, pruned, len(order) - position)
        if _dominated(idx, measured, quality_ceiling):
            pruned += 1
            continue
        setting = _setting(names, grids, idx)
        result = measure(setting)
        measured.append((idx, float(quality(result)), float(cost(result))))
        points.append((setting, result))
    return ExploreResult(points, pruned, 0)


def _dominated(idx: tuple[int, ...], measured: Sequence[tuple[tuple[int, ...], float, float]],
               ceiling: float | None) -> bool:
    """Whether a measured setting is at least as good as the best ``idx`` could measure."""
    above = [q for other, q, _ in measured if all(o >= i for o, i in zip(other, idx, strict=True))]
    best_quality = min(above) if above else ceiling
    if best_quality is None:
        return False
    below = [c for other, _, c in measured if all(o <= i for o, i in zip(other, idx, strict=True))]
    least_cost = max(below) if below else 0.0
    return any(q >= best_quality and c <= least_cost for _, q, c in measured)


def explore_by_quality(ladders: Mapping[str, Sequence[Any]], measure: Callable[[dict[str, Any]], M],
                       probe: Callable[[dict[str, Any]], float], *,
                       quality_levels: Sequence[float], include: Mapping[str, Any] | None = None,
                       quality_ceiling: float | None = None, max_probes: int = 48,
                       max_points: int = 12, budget_s: float = 60.0) -> ExploreResult[M]:
    """Probe settings' quality cheaply (``probe``, cheapest first), skipping those above a
    cheaper setting that reached the highest of ``quality_levels`` (or ``quality_ceiling``),
    then time (``measure``) the cheapest setting reaching each level — or, when none reaches
    any, the best one probed — and ``include`` (the trial's own setting) when it was probed.
    Settings past the highest level are slower for no gain at any level and never timed.
    "Cheapest" is the ladder order (sum of positions): exact for one ladder, the usual proxy for
    two. Settings not timed count as pruned."""
    if not ladders:
        raise ValueError("explore_by_quality needs at least one ladder")
    names = list(ladders)
    grids = [list(ladders[n]) for n in names]
    order = _cheapest_first(grids)
    deadline = time.monotonic() + budget_s
    top = min([max(quality_levels)] if quality_levels else [], default=quality_ceiling)
    if quality_ceiling is not None and top is not None:
        top = min(top, quality_ceiling)
    probed: list[tuple[tuple[int, ...], float]] = []
    for idx in order[:max_probes]:
        if top is not None and any(
                q >= top and all(o <= i for o, i in zip(other, idx, strict=True))
                for other, q in probed):
            continue  # a cheaper setting already reached the highest level
        probed.append((idx, float(probe(_setting(names, grids, idx)))))
    chosen: list[tuple[int, ...]] = []
    best = max(q for _, q in probed)
    reached = {v for v in quality_levels if v <= best}
    for level in sorted(reached or {best}):
        first = next(idx for idx, q in probed if q >= level)
        if first not in chosen:
            chosen.append(first)
    if include:
        own = tuple(g.index(include[n]) if include.get(n) in g else -1
                    for n, g in zip(names, grids, strict=True))
        if own in {idx for idx, _ in probed} and own not in chosen:
            chosen.append(own)
    chosen.sort(key=_cost_rank)
    points: list[tuple[dict[str, Any], M]] = []
    for position, idx in enumerate(chosen):
        if points and (len(points) >= max_points or time.monotonic() >= deadline):
            return ExploreResult(points, len(order) - len(chosen), len(chosen) - position)
        setting = _setting(names, grids, idx)
        points.append((setting, measure(setting)))
    return ExploreResult(points, len(order) - len(chosen), 0)


def _cost_rank(idx: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
    """Cheapest first: by the sum of ladder positions, then lexicographically."""
    return sum(idx), idx


def _cheapest_first(grids: Sequence[Sequence[Any]]) -> list[tuple[int, ...]]:
    """Every setting's ladder positions, cheapest first."""
    return sorted(itertools.product(*(range(len(g)) for g in grids)), key=_cost_rank)


def _setting(names: Sequence[str], grids: Sequence[Sequence[Any]], idx: tuple[int, ...]
             ) -> dict[str, Any]:
    return {n: g[i] for n, g, i in zip(names, grids, idx, strict=True)}

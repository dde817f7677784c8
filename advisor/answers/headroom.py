"""Quality headroom: how far a quality metric of one config can move between two builds of it,
measured from rebuilds, so that an answer keeps that margin on the SLO's quality bounds.

For some engines a quality metric is fixed by the config and the data; for others it depends on
the build as well (a graph index that several threads fill in a different order each time). A
target names the metrics that can differ (``Target.rebuild_varying_metrics``). The driver's paired
re-measurements of a study's best config and of the engine default build afresh (their trials
carry ``details[FRESH_BUILD]``), so every study with a paired comparison holds several builds of
two configs. For each such metric, the headroom is the largest spread (max - min) between the
builds of one config over every rebuilt config in the evidence; with no rebuilt config it is 0,
and the answer says that it was not measured rather than implying there is no spread.

A build cached and reused by several trials is one build: only trials that built afresh add one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from advisor.trial_records import FRESH_BUILD
from knowledge import TrialRecord, TrialStatus
from objectives.slo import SLO, Bound

__all__ = ["FRESH_BUILD", "Headroom", "bound_margin", "margins_with_headroom",
           "measured_headroom"]


@dataclass(frozen=True)
class Headroom:
    """The headroom kept on one quality metric, and what it was measured from."""

    metric: str
    #: Largest spread between builds of one config (0.0 when nothing was rebuilt).
    value: float
    #: Configs with at least two builds in the evidence.
    configs_checked: int = 0
    #: Builds of those configs, together.
    builds: int = 0

    @property
    def measured(self) -> bool:
        return self.configs_checked > 0

    @property
    def basis(self) -> str:
        """One line saying where the headroom comes from."""
        if not self.measured:
            return (f"not measured: no config in the evidence was rebuilt, so how far "
                    f"{self.metric} moves between two builds of one config is unknown")
        return (f"largest spread of {self.metric} between builds of one config: "
                f"{self.value:.4g} over {self.configs_checked} rebuilt config(s), "
                f"{self.builds} builds")

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "headroom": self.value, "measured": self.measured,
                "configs_checked": self.configs_checked, "builds": self.builds,
                "basis": self.basis}


def _builds(trials: Sequence[TrialRecord], metric: str) -> list[float]:
    """The metric once per distinct build: every fresh build, plus the cached build (shared by
    the trials that did not build afresh) once."""
    fresh = [float(t.metrics[metric]) for t in trials if t.details.get(FRESH_BUILD)]
    cached = [float(t.metrics[metric]) for t in trials if not t.details.get(FRESH_BUILD)]
    return fresh + cached[:1]


def measured_headroom(trials: Iterable[TrialRecord], metrics: Iterable[str]
                      ) -> dict[str, Headroom]:
    """The headroom of each of ``metrics`` over ``trials`` (the evidence an answer comes from):
    builds of one config are grouped by config, workload and hardware."""
    groups: dict[tuple[str, str, str], list[TrialRecord]] = {}
    for t in trials:
        if t.status == TrialStatus.COMPLETE:
            groups.setdefault((t.config_hash, t.workload_hash, t.hardware_key), []).append(t)
    out: dict[str, Headroom] = {}
    for metric in sorted(set(metrics)):
        spread, checked, builds = 0.0, 0, 0
        for group in groups.values():
            values = _builds([t for t in group if t.metrics.get(metric) is not None], metric)
            if len(values) < 2:
                continue
            checked += 1
            builds += len(values)
            spread = max(spread, max(values) - min(values))
        out[metric] = Headroom(metric, spread, checked, builds)
    return out


def bound_margin(bound: Bound, value: float, headroom: Mapping[str, Headroom]) -> float:
    """``bound.margin(value)`` with ``value`` moved by its metric's headroom to the side that is
    worse for the bound (``>=``: lower, ``<=``: higher)."""
    h = headroom[bound.metric].value if bound.metric in headroom else 0.0
    return bound.margin(value - h if bound.op == ">=" else value + h)


def margins_with_headroom(slo: SLO, metrics: Mapping[str, float],
                          headroom: Mapping[str, Headroom]) -> dict[str, float]:
    """``slo.margins(metrics)`` with each headroom metric moved by its headroom
    (:func:`bound_margin`), so ``<= 0`` everywhere means the SLO holds for a rebuild as far off
    as the worst one measured."""
    return {str(b): bound_margin(b, float(metrics.get(b.metric, math.nan)), headroom)
            for b in slo.bounds}

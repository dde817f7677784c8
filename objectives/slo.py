"""SLO expressions: parsing, and the margins telling a sampler how far a trial is from meeting them.

An SLO is a conjunction of bounds such as ``"p95_latency_ms<=2, recall_at_10>=0.95"``. Each bound
yields a margin, relative to its threshold, that is ``<= 0`` exactly when the bound holds; these
margins are what the study driver hands to Optuna as constraints.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Literal

from advisor.errors import SLOParseError, did_you_mean
from objectives.metrics import METRICS, metric_spec, unknown_metric

__all__ = ["SLO", "Bound", "parse_slo"]

Op = Literal["<=", ">="]
_BOUND_RE = re.compile(
    r"^\s*(?P<metric>[A-Za-z_][A-Za-z0-9_]*)\s*(?P<op><=|>=)\s*"
    r"(?P<value>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$"
)


@dataclass(frozen=True, slots=True)
class Bound:
    """One SLO bound: ``metric <= threshold`` or ``metric >= threshold``."""

    metric: str
    op: Op
    threshold: float

    def margin(self, value: float) -> float:
        """Signed distance from the bound, relative to the threshold; ``<= 0`` iff the bound holds.

        Relative margins let bounds of different scales (ms and recall) be compared when a sampler
        sums violations. A threshold of 0 falls back to the absolute difference.
        """
        if math.isnan(value):
            return math.inf
        diff = value - self.threshold if self.op == "<=" else self.threshold - value
        scale = abs(self.threshold)
        return diff / scale if scale > 0 else diff

    def holds(self, value: float) -> bool:
        """Whether ``value`` meets this bound."""
        return self.margin(value) <= 0

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.threshold:g}"


@dataclass(frozen=True, slots=True)
class SLO:
    """A conjunction of bounds. Empty SLOs are allowed (every measured trial is feasible)."""

    bounds: tuple[Bound, ...]

    @property
    def metrics(self) -> list[str]:
        return [b.metric for b in self.bounds]

    def margins(self, metrics: Mapping[str, float]) -> dict[str, float]:
        """Margin per bound, keyed by the bound's text; a missing metric counts as violated."""
        return {
            str(b): b.margin(float(metrics.get(b.metric, math.nan))) for b in self.bounds
        }

    def is_met(self, metrics: Mapping[str, float]) -> bool:
        """True when every bound holds for ``metrics``."""
        return all(m <= 0 for m in self.margins(metrics).values())

    def check_metrics(self, target: str, reported: Collection[str]) -> None:
        """Raise if a bound names a metric that ``target`` (reporting ``reported``) lacks."""
        for b in self.bounds:
            if b.metric not in reported:
                hint = did_you_mean(b.metric, reported)
                raise SLOParseError(
                    f"target {target!r} does not report {b.metric!r}{hint}" if hint else
                    f"target {target!r} does not report {b.metric!r}; "
                    f"its metrics are: {', '.join(sorted(reported))}"
                )

    def __str__(self) -> str:
        return ",".join(str(b) for b in self.bounds)


def parse_slo(text: str, known: Collection[str] | None = None) -> SLO:
    """Parse ``"metric<=value, metric>=value, ..."`` into an :class:`SLO`.

    Raises :class:`SLOParseError` naming the bad part: for a metric name not in ``known`` (the
    asked target's metrics; every catalogued metric when None), the near miss it was meant to
    be, else the names in ``known`` only.
    """
    if text is None:
        raise SLOParseError("SLO expression is missing")
    parts = [p for p in (s.strip() for s in text.split(",")) if p]
    bounds: list[Bound] = []
    seen: set[tuple[str, str]] = set()
    for part in parts:
        match = _BOUND_RE.match(part)
        if match is None:
            raise SLOParseError(
                f"cannot parse SLO bound {part!r}: expected '<metric><=<number>' or "
                f"'<metric>>=<number>', e.g. 'p95_latency_ms<=2' or 'recall_at_10>=0.95'. "
                f"Valid metrics: {', '.join(sorted(METRICS if known is None else known))}"
            )
        name, op, value = match["metric"], match["op"], float(match["value"])
        if known is not None and name not in known and name not in METRICS:
            raise SLOParseError(unknown_metric(name, known))
        spec = metric_spec(name)
        key = (name, op)
        if key in seen:
            raise SLOParseError(f"SLO bound on {name!r} with {op!r} is given twice")
        seen.add(key)
        if not math.isfinite(value):
            raise SLOParseError(f"SLO threshold for {name!r} must be finite, got {value}")
        if spec.unit == "fraction" and not 0 <= value <= 1:
            raise SLOParseError(f"{name!r} is a fraction: threshold must be in [0, 1], got {value}")
        bounds.append(Bound(name, op, value))  # type: ignore[arg-type]
    return SLO(tuple(bounds))

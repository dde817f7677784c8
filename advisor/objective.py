"""The study objective: which metric to optimise and in which direction (subject to the SLO)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from advisor.errors import SLOParseError
from objectives.metrics import metric_spec

__all__ = ["Direction", "Objective"]

Direction = Literal["maximize", "minimize"]


@dataclass(frozen=True, slots=True)
class Objective:
    """``maximize:qps`` or ``minimize:p99_latency_ms``; a bare metric takes its good direction."""

    metric: str
    direction: Direction

    @classmethod
    def parse(cls, text: str) -> Objective:
        direction, sep, metric = text.strip().partition(":")
        if not sep:
            spec = metric_spec(direction)
            return cls(spec.name, "maximize" if spec.better == "higher" else "minimize")
        if direction not in ("maximize", "minimize"):
            raise SLOParseError(
                f"objective {text!r}: direction must be 'maximize' or 'minimize', e.g. "
                "'maximize:qps' or 'minimize:p99_latency_ms'")
        spec = metric_spec(metric.strip())
        return cls(spec.name, direction)  # type: ignore[arg-type]

    def is_better(self, a: float, b: float | None) -> bool:
        """Whether value ``a`` beats ``b`` (anything beats None)."""
        if b is None:
            return True
        return a > b if self.direction == "maximize" else a < b

    def __str__(self) -> str:
        return f"{self.direction}:{self.metric}"

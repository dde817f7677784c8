"""The one rule that decides "config C meets the SLO at workload W", for the engine default and
every candidate alike.

Measured windows at W decide first: every stored trial of C measured at W is one window, and C
meets the SLO there when at least :data:`MEET_SHARE` of its windows meet every bound (with the
quality headroom of :mod:`advisor.answers.headroom` kept on bounds whose metric varies between
builds).
Only where C has no window at W does a prediction decide, and then at the conservative end of
its interval (the end worse for each bound). The verdict says which basis decided, with
``k of n`` windows for a measured one, so an answer can print the rule it followed.

A predicted verdict that does not meet is one of two things: a miss (even the optimistic end of
some bound's interval misses it) or undecided (every bound's interval reaches the side that
meets, but not every conservative end does: the interval straddles the SLO). When no candidate
meets, :func:`undecided` says whether the refusal holds: a straddling candidate means the
predictions cannot tell, and measuring it decides.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from advisor.answers.headroom import Headroom, bound_margin, margins_with_headroom
from objectives import SLO

__all__ = [
    "MEASURED_RULE",
    "MEET_SHARE",
    "PREDICTED_RULE",
    "Verdict",
    "measured_figures",
    "measured_verdict",
    "point_meets",
    "predicted_verdict",
    "straddle_reason",
    "undecided",
    "windows_needed",
]

#: A config meets the SLO at a workload when at least this share of its measured windows there
#: meet every bound: one window of one meeting two (a lucky 252 ms beside a 392 ms at the same
#: rate) is not enough, two of three are.
MEET_SHARE = 2.0 / 3.0
MEASURED_RULE = ("measured: meets when at least 2/3 of its windows at this workload meet every "
                 "bound (k of n shown)")
PREDICTED_RULE = ("predicted: meets when the conservative end of every 90% interval (the end "
                  "worse for the bound) meets it")

VerdictBasis = Literal["measured", "predicted", "none"]


def windows_needed(n: int) -> int:
    """How many of ``n`` windows must meet the SLO (``ceil(n * MEET_SHARE)``, at least 1)."""
    return max(1, math.ceil(n * MEET_SHARE - 1e-9))


@dataclass(frozen=True)
class Verdict:
    """Whether one config meets the SLO at one workload, and on what evidence.

    ``meets`` is None when there is no evidence at all (``basis`` ``none``). For a measured
    verdict ``windows_met`` of ``windows`` met every bound and ``trial_ids`` are those windows;
    ``margins`` are the margins of the median figures (``<= 0``: met). For a predicted one
    ``margins`` are the conservative margins, ``optimistic_margins`` and ``point_margins`` those
    of the other end of each interval and of the point, and ``windows`` is 0.
    """

    meets: bool | None
    basis: VerdictBasis
    windows_met: int = 0
    windows: int = 0
    margins: dict[str, float] = field(default_factory=dict)
    trial_ids: tuple[int, ...] = ()
    optimistic_margins: dict[str, float] = field(default_factory=dict)
    point_margins: dict[str, float] = field(default_factory=dict)

    @property
    def straddles(self) -> bool:
        """A predicted verdict that does not meet while the optimistic end of every bound's
        interval does: the interval straddles the SLO, so the prediction cannot say "misses"."""
        return (self.basis == "predicted" and self.meets is False
                and bool(self.optimistic_margins)
                and all(m <= 0 for m in self.optimistic_margins.values()))

    @property
    def rule(self) -> str:
        return {"measured": MEASURED_RULE, "predicted": PREDICTED_RULE}.get(
            self.basis, "no measurement and no prediction")

    def text(self) -> str:
        """``meets the SLO (measured, 4 of 5 windows)`` and the like."""
        if self.meets is None:
            return "unknown (neither measured nor predicted here)"
        said = "meets the SLO" if self.meets else "misses the SLO"
        if self.basis == "measured":
            return f"{said} (measured, {self.windows_met} of {self.windows} windows)"
        if self.straddles:
            point = "meets" if point_meets(self) else "misses"
            return ("undecided (predicted: the 90% interval straddles the SLO; the point "
                    f"prediction {point} it, the conservative end misses it)")
        return f"{said} (predicted, conservative end of the 90% interval)"

    def to_dict(self) -> dict[str, Any]:
        return {"meets_slo": self.meets, "basis": self.basis, "rule": self.rule,
                "windows_met": self.windows_met, "windows": self.windows,
                "margins": self.margins, "trial_ids": list(self.trial_ids),
                "text": self.text()}


def measured_figures(windows: Sequence[Mapping[str, Any]], metrics: Sequence[str]
                     ) -> dict[str, tuple[float, float, float, int]]:
    """Per metric over the windows that measured it: (median, lowest, highest, windows)."""
    out: dict[str, tuple[float, float, float, int]] = {}
    for m in metrics:
        values = [float(w[m]) for w in windows if isinstance(w.get(m), int | float)
                  and not isinstance(w.get(m), bool) and math.isfinite(float(w[m]))]
        if values:
            out[m] = (statistics.median(values), min(values), max(values), len(values))
    return out


def measured_verdict(slo: SLO, windows: Sequence[Mapping[str, Any]],
                     headroom: Mapping[str, Headroom] | None = None,
                     trial_ids: Sequence[int] = ()) -> Verdict:
    """The verdict of a config from its measured windows at one workload (see the module)."""
    if not windows:
        return Verdict(meets=None, basis="none")
    room = headroom or {}
    met = sum(1 for w in windows if _all_measured(slo, w)
              and all(m <= 0 for m in margins_with_headroom(slo, w, room).values()))
    figures = measured_figures(windows, slo.metrics)
    medians = {m: f[0] for m, f in figures.items()}
    margins = (margins_with_headroom(slo, medians, room) if len(medians) == len(set(slo.metrics))
               else {})
    return Verdict(meets=met >= windows_needed(len(windows)), basis="measured", windows_met=met,
                   windows=len(windows), margins=margins, trial_ids=tuple(trial_ids))


def predicted_verdict(slo: SLO, intervals: Mapping[str, tuple[float, float, float]],
                      headroom: Mapping[str, Headroom] | None = None) -> Verdict:
    """The verdict of a config from predictions ``metric -> (value, low, high)``: every bound
    at its interval's conservative end."""
    if any(b.metric not in intervals for b in slo.bounds):
        return Verdict(meets=None, basis="none")
    room = headroom or {}

    def at(end: int) -> dict[str, float]:
        """Margins with each bound read at the point (0), its worse end (1) or better end (2)."""
        out = {}
        for b in slo.bounds:
            value, low, high = intervals[b.metric]
            worse, better = (high, low) if b.op == "<=" else (low, high)
            out[str(b)] = bound_margin(b, float((value, worse, better)[end]), room)
        return out

    margins = at(1)
    return Verdict(meets=all(m <= 0 for m in margins.values()), basis="predicted",
                   margins=margins, optimistic_margins=at(2), point_margins=at(0))


def undecided(verdicts: Sequence[Verdict], default: int | None = 0) -> list[int]:
    """The candidates whose predicted interval straddles the SLO (:attr:`Verdict.straddles`),
    most promising first: the ``default``'s when its point prediction meets (measuring it also
    answers "may I keep the defaults?"), then those whose point prediction meets before those
    whose point misses, each closest to meeting at the conservative end first, and where that
    ties (an interval widened to span an unmeasured assumption's absence shares its
    conservative end with the config without it), the point prediction's total margin. Empty
    when every candidate that does not meet misses even at its optimistic end (or was measured
    to miss): then a refusal is what the evidence says. Callers ask it only when no candidate
    meets."""
    def violation(margins: Mapping[str, float]) -> float:
        return sum(max(m, 0.0) for m in margins.values())

    def key(i: int) -> tuple[bool, bool, float, float, int]:
        misses = not point_meets(verdicts[i])
        return (not (i == default and not misses), misses, violation(verdicts[i].margins),
                sum(verdicts[i].point_margins.values()), i)

    return sorted((i for i, v in enumerate(verdicts) if v.straddles), key=key)


def _all_measured(slo: SLO, window: Mapping[str, Any]) -> bool:
    return all(isinstance(window.get(m), int | float) for m in slo.metrics)


def _straddle_text(slo: SLO, intervals: Mapping[str, tuple[float, float, float]]) -> str:
    """Each bound's predicted figure ``metric value [low .. high]`` against the bound, for the
    reason of an undecided answer: ``ttft_p95_ms 57.3 [9.39 .. 349] against <= 300``."""
    def fmt(v: float) -> str:
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"

    parts = []
    for b in slo.bounds:
        if b.metric in intervals:
            value, low, high = intervals[b.metric]
            parts.append(f"{b.metric} {fmt(value)} [{fmt(low)} .. {fmt(high)}] against "
                         f"{b.op} {b.threshold:g}")
    return ", ".join(parts)


def point_meets(verdict: Verdict) -> bool:
    """Whether a predicted verdict's point prediction meets every bound."""
    return bool(verdict.point_margins) and all(m <= 0 for m in verdict.point_margins.values())


def straddle_reason(count: int, which: str, verdict: Verdict, slo: SLO,
                    intervals: Mapping[str, tuple[float, float, float]]) -> str:
    """The sentence an undecided answer gives after saying that no candidate meets: how many
    straddle, the one to measure (``which``, its ``verdict`` and its predicted ``intervals``
    ``metric -> (value, low, high)``, each against its bound of ``slo``), and whether its point
    prediction leans to meeting or to missing."""
    said = _straddle_text(slo, intervals)
    lean = ("its point prediction meets the SLO" if point_meets(verdict) else
            "its point prediction misses the SLO, so a measurement will more likely confirm a "
            "miss")
    them = ("but 1 of them is not shown to miss it either: its 90% intervals straddle" if count == 1
            else f"but {count} of them are not shown to miss it either: their 90% intervals "
                 "straddle")
    return f"{them} the SLO. The most promising, {which}, is predicted {said} ({lean})"

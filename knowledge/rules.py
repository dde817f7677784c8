"""Rules of thumb fitted to measured trials, and Pareto fronts, for the cheat-sheet.

Each rule is a small closed-form curve (``y = c·√N``, ``p99 = a + b/(1 + c·x)``), declared by a
workload kind (objectives/kinds/) and fitted by least squares to measured trials only, reported
with its fit quality (R² and n), so a reader can judge whether the rule holds on this hardware.
Rules with too few distinct points say so instead of inventing a fit, and a fit whose R² is below
:data:`R2_MIN` is kept in the data but not shown as a rule (``Rule.shown``): a curve that explains
less of the spread than it leaves unexplained would mislead a reader more than it helps.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from objectives.kinds import kind_for_target
from objectives.vocabulary import RuleOfThumb, RulePoints

__all__ = ["R2_MIN", "Rule", "fit_rule", "fit_rules", "pareto_front"]

#: A rule needs at least this many points at this many distinct x values.
MIN_POINTS, MIN_DISTINCT_X = 3, 3
#: Fits with a lower R² are not shown as rules of thumb. At R² = 0.5 the curve explains as much of
#: the variance as it leaves, and the residual spread is still 71 % of the raw spread (sqrt(0.5)):
#: below that, reading a value off the curve is closer to guessing than to a rule.
R2_MIN = 0.5


@dataclass(frozen=True)
class Rule:
    """One fitted rule: ``formula`` with ``params``; ``r2`` on the fitted points."""

    name: str
    formula: str
    x_label: str
    y_label: str
    status: str  # "fitted" or "insufficient data: ..."
    params: dict[str, float] = field(default_factory=dict)
    r2: float | None = None
    n: int = 0
    points: list[tuple[float, float]] = field(default_factory=list)
    curve: list[tuple[float, float]] = field(default_factory=list)
    note: str = ""

    @property
    def shown(self) -> bool:
        """Whether the rule is fitted well enough to be shown: fitted, with R² >= R2_MIN."""
        return self.status == "fitted" and self.r2 is not None and self.r2 >= R2_MIN

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "formula": self.formula, "x": self.x_label,
                "y": self.y_label, "status": self.status, "params": self.params,
                "r2": self.r2, "n": self.n, "points": self.points, "curve": self.curve,
                "note": self.note, "shown": self.shown, "r2_min": R2_MIN}


Trial = Mapping[str, Any]  # {"config": ..., "metrics": ..., "features": ...}


def _r2(y: np.ndarray, fit: np.ndarray) -> float:
    ss_res = float(np.sum((y - fit) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    return 1.0 - ss_res / ss_tot if ss_tot > 0 else 0.0


def _fit_curve(name: str, formula: str, x_label: str, y_label: str,
               points: Sequence[tuple[float, float]],
               fn: Callable[..., Any], p0: Sequence[float], param_names: Sequence[str],
               *, log_y: bool = False, note: str = "", bounds: Any = (-np.inf, np.inf)) -> Rule:
    pts = sorted((float(x), float(y)) for x, y in points
                 if math.isfinite(x) and math.isfinite(y))
    distinct = len({x for x, _ in pts})
    if len(pts) < max(MIN_POINTS, len(p0)) or distinct < MIN_DISTINCT_X:
        return Rule(name, formula, x_label, y_label,
                    f"insufficient data: {len(pts)} points at {distinct} distinct {x_label} "
                    f"values (need >= {max(MIN_POINTS, len(p0))} at >= {MIN_DISTINCT_X})",
                    n=len(pts), points=pts, note=note)
    from scipy.optimize import curve_fit

    x = np.array([p[0] for p in pts])
    y = np.array([p[1] for p in pts])
    target = np.log(y) if log_y else y

    def model(xv: np.ndarray, *p: float) -> np.ndarray:
        out = np.asarray(fn(xv, *p), dtype=float)
        return np.log(np.maximum(out, 1e-12)) if log_y else out

    try:
        params, _ = curve_fit(model, x, target, p0=list(p0), maxfev=20000, bounds=bounds)
    except (RuntimeError, ValueError) as exc:
        return Rule(name, formula, x_label, y_label, f"fit failed: {exc}", n=len(pts),
                    points=pts, note=note)
    # Points spread over decades are drawn on a log axis: sample the curve evenly there too.
    spread = x.min() > 0 and x.max() / x.min() > 30
    grid = (np.geomspace(x.min(), x.max(), 40) if spread else np.linspace(x.min(), x.max(), 40))
    curve = [(float(a), float(b)) for a, b in zip(grid, fn(grid, *params), strict=True)]
    return Rule(name, formula, x_label, y_label, "fitted",
                {k: float(v) for k, v in zip(param_names, params, strict=True)},
                round(_r2(target, model(x, *params)), 4), len(pts), pts, curve, note)


def fit_rules(target: str, trials: Sequence[Trial]) -> list[Rule]:
    """The rules of thumb of ``target``'s workload kind (objectives/kinds/) fitted on ``trials``
    (dicts with config, metrics and workload features)."""
    rules: list[Rule] = []
    for rule in kind_for_target(target).rules_of_thumb:
        found = rule.points(trials)
        if found is None:
            continue  # the rule is about trials of another sort (another index family)
        rules.append(fit_rule(rule, found))
    return rules


def fit_rule(rule: RuleOfThumb, found: RulePoints) -> Rule:
    """``rule`` fitted to ``found``'s points by least squares."""
    bounds = rule.bounds if rule.bounds is not None else (-np.inf, np.inf)
    return _fit_curve(rule.name.format(subset=found.subset), rule.formula, rule.x_label,
                      rule.y_label, found.points, rule.curve, rule.start(found.points),
                      rule.param_names, log_y=rule.log_y, note=rule.note, bounds=bounds)


def pareto_front(points: Sequence[tuple[float, float]], *, x_lower_better: bool = True,
                 y_higher_better: bool = True) -> list[int]:
    """Indices of the non-dominated points (e.g. latency lower and throughput higher is better),
    sorted by x."""
    sx = 1.0 if x_lower_better else -1.0
    sy = 1.0 if y_higher_better else -1.0
    order = sorted(range(len(points)), key=lambda i: (sx * points[i][0], -sy * points[i][1]))
    front: list[int] = []
    best = -math.inf
    for i in order:
        y = sy * points[i][1]
        if y > best:
            front.append(i)
            best = y
    return front

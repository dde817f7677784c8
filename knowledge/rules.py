"""Rules of thumb fitted to measured trials, and Pareto fronts, for the cheat-sheet.

Each rule is a small closed-form curve (``nlist = c·√N``, ``p99 = a + b/(1 + c·x)``) fitted by
least squares to measured trials only, reported with its fit quality (R² and n), so a reader can
judge whether the rule holds on this hardware. Rules with too few distinct points say so instead
of inventing a fit, and a fit whose R² is below :data:`R2_MIN` is kept in the data but not shown
as a rule (``Rule.shown``): a curve that explains less of the spread than it leaves unexplained
would mislead a reader more than it helps.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["R2_MIN", "Rule", "fit_rules", "pareto_front"]

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


def _best_per_group(trials: Sequence[Trial], group: Callable[[Trial], Any],
                    ok: Callable[[Trial], bool], score: Callable[[Trial], float]
                    ) -> dict[Any, Trial]:
    best: dict[Any, Trial] = {}
    for t in trials:
        if not ok(t):
            continue
        g = group(t)
        if g is None:
            continue
        if g not in best or score(t) > score(best[g]):
            best[g] = t
    return best


def _faiss_rules(trials: Sequence[Trial]) -> list[Rule]:
    rules: list[Rule] = []
    ivf = [t for t in trials if t["config"].get("index_type") in ("ivf_flat", "ivf_pq",
                                                                   "ivf_hnsw")
           and "nlist" in t["config"]]
    best = _best_per_group(
        ivf, lambda t: t["features"].get("n_vectors"),
        lambda t: float(t["metrics"].get("recall_at_10", 0)) >= 0.9,
        lambda t: float(t["metrics"].get("qps", 0)))
    pts = [(math.sqrt(float(n)), float(t["config"]["nlist"])) for n, t in best.items()]
    rules.append(_fit_curve(
        "best nlist against sqrt(N)", "nlist = c * sqrt(N)", "sqrt(N) (vectors^0.5)",
        "best nlist (lists)", pts,
        lambda x, c: c * x, [1.0], ["c"], log_y=True,
        note="per corpus size, the IVF trial with the highest qps at recall@10 >= 0.9; "
             "the literature's rule of thumb is c ~ 1-16"))
    flat = [t for t in ivf if t["config"].get("index_type") == "ivf_flat"
            and "nprobe" in t["config"]]
    if flat:
        main_n = max({t["features"].get("n_vectors") for t in flat},
                     key=lambda n: sum(t["features"].get("n_vectors") == n for t in flat))
        sub = [t for t in flat if t["features"].get("n_vectors") == main_n]
        pts = [(float(t["config"]["nprobe"]) / float(t["config"]["nlist"]),
                float(t["metrics"]["recall_at_10"])) for t in sub
               if "recall_at_10" in t["metrics"]]
        rules.append(_fit_curve(
            f"recall@10 against nprobe/nlist (IVF-Flat, N={main_n:g})",
            "recall = 1 - a * exp(-b * x)", "nprobe/nlist (share of lists)", "recall@10 (fraction)",
            pts,
            lambda x, a, b: 1 - a * np.exp(-b * x), [0.5, 10.0], ["a", "b"],
            bounds=([0, 0], [1.5, 1e4]),
            note="the share of lists probed decides recall, not nprobe alone"))
        pts = [(float(t["config"]["nprobe"]), float(t["metrics"]["p95_latency_ms"]))
               for t in sub if "p95_latency_ms" in t["metrics"]]
        rules.append(_fit_curve(
            f"p95 latency against nprobe (IVF-Flat, N={main_n:g})", "p95 = a + b * nprobe",
            "nprobe (lists)", "p95 latency (ms)", pts, lambda x, a, b: a + b * x, [0.01, 0.001],
            ["a", "b"], note="each probed list adds a scan of about N/nlist vectors"))
    return rules


def _llm_rules(trials: Sequence[Trial]) -> list[Rule]:
    rules: list[Rule] = []
    offload = [t for t in trials if "ttft_p99_ms" in t["metrics"]]
    pts = [(float(t["config"].get("kv_offloading_size", 0.0))
            if t["config"].get("kv_offloading") else 0.0, float(t["metrics"]["ttft_p99_ms"]))
           for t in offload]
    rules.append(_fit_curve(
        "p99 TTFT against KV offload (swap) space", "p99 = a + b / (1 + c * x)",
        "kv_offloading_size (GiB, 0 = off)", "TTFT p99 (ms)", pts,
        lambda x, a, b, c: a + b / (1 + c * x), [1000.0, 1000.0, 0.1], ["a", "b", "c"],
        log_y=True, bounds=([0, 0, 0], [1e7, 1e7, 100]),
        note="vLLM's CPU offloading (its swap space since 0.18), fitted as decreasing in x (b, c "
             ">= 0); all other knobs and the arrival rate vary too, so R² shows how much of p99 "
             "the offload size alone explains"))
    pts = _knob_metric_points(trials, "block_size", "output_tokens_per_s")
    rules.append(_fit_curve(
        "output throughput against page (block) size", "tokens/s = a + b * log2(x)",
        "block_size (tokens)", "output throughput (tokens/s)", pts,
        lambda x, a, b: a + b * np.log2(x), [1000.0, 0.0], ["a", "b"],
        note="paged-attention block size; other knobs vary too"))
    pts = _knob_metric_points(trials, "max_num_seqs", "output_tokens_per_s")
    rules.append(_fit_curve(
        "output throughput against max_num_seqs", "tokens/s = a * x / (b + x)",
        "max_num_seqs (sequences)", "output throughput (tokens/s)", pts,
        lambda x, a, b: a * x / (b + x),
        [max((p[1] for p in pts), default=1000.0), 32.0], ["a", "b"], log_y=True,
        bounds=([0, 0], [1e8, 1e5]),
        note="batch-size cap: throughput saturates once the arrival rate, not the cap, limits"))
    return rules


def fit_rules(target: str, trials: Sequence[Trial]) -> list[Rule]:
    """The rules of thumb for ``target`` fitted on ``trials`` (dicts with config, metrics and
    workload features)."""
    if target == "faiss":
        return _faiss_rules(trials)
    return _llm_rules(trials)


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


def _knob_metric_points(trials: Sequence[Trial], knob: str, metric: str
                        ) -> list[tuple[float, float]]:
    """(knob value, metric) of every trial that has both."""
    return [(float(t["config"][knob]), float(t["metrics"][metric])) for t in trials
            if knob in t["config"] and metric in t["metrics"]]

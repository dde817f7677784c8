"""Holding the recommender against measured truth.

Grouped K-fold over configs: models are fitted on the other folds, then for each held-out trial
and each audit SLO the *conservative* prediction (interval end on the wrong side of every bound)
is compared with what was measured. A held-out trial predicted feasible but measured infeasible
is a false-feasible answer: the rate the user would be misled at. The recommendation-level audit
goes further: per fold and SLO it picks the best conservatively feasible held-out config, as the
recommender would, and checks whether its measurement meets the SLO.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from advisor.objective import Objective
from knowledge import TrialRecord
from knowledge.surrogates import (
    DEFAULT_FAMILY,
    ContextKey,
    context_of,
    fit_context,
    instance_groups,
    workload_features,
)
from objectives import SLO, parse_slo
from objectives.kinds import kind_for_target
from objectives.registry import get_target

__all__ = ["FeasibilityAudit", "audit_slos", "audit_store_trials", "holdout_feasibility"]


@dataclass
class FeasibilityAudit:
    """Counts over (held-out trial, SLO) pairs and over per-fold recommendations."""

    context: str
    slos: list[str]
    pairs: int = 0
    measured_feasible: int = 0
    predicted_feasible: int = 0
    false_feasible: int = 0
    recommendations: int = 0
    recommendations_infeasible: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)

    @property
    def false_feasible_rate(self) -> float | None:
        """Share of conservatively-feasible predictions that measured infeasible."""
        return self.false_feasible / self.predicted_feasible if self.predicted_feasible else None

    @property
    def recall(self) -> float | None:
        """Share of measured-feasible pairs the conservative filter let through."""
        kept = self.predicted_feasible - self.false_feasible
        return kept / self.measured_feasible if self.measured_feasible else None

    @property
    def recommendation_infeasible_rate(self) -> float | None:
        return (self.recommendations_infeasible / self.recommendations
                if self.recommendations else None)

    def to_dict(self) -> dict[str, Any]:
        return {"context": self.context, "slos": self.slos, "pairs": self.pairs,
                "measured_feasible": self.measured_feasible,
                "predicted_feasible": self.predicted_feasible,
                "false_feasible": self.false_feasible,
                "false_feasible_rate": self.false_feasible_rate,
                "feasible_recall": self.recall, "recommendations": self.recommendations,
                "recommendations_measured_infeasible": self.recommendations_infeasible,
                "recommendation_infeasible_rate": self.recommendation_infeasible_rate,
                "examples": self.examples[:5]}


def audit_slos(target: str, trials: Sequence[TrialRecord]) -> list[SLO]:
    """SLOs spread over what was measured, as the target's workload kind declares them
    (objectives/kinds/): latency bounds at percentiles of the measured values, crossed with a
    quality bound (recall for vector search, TPOT for LLM serving)."""
    def q(metric: str, p: float) -> float | None:
        vals = [float(t.metrics[metric]) for t in trials
                if isinstance(t.metrics.get(metric), int | float)]
        return float(np.percentile(vals, p)) if vals else None

    return [parse_slo(slo) for slo in kind_for_target(target).audit_slos(q)]


def _objective(target: str) -> Objective:
    return Objective.parse(get_target(target).default_objective)


def holdout_feasibility(key: ContextKey, trials: Sequence[TrialRecord], *,
                        slos: Sequence[SLO] | None = None, family: str = DEFAULT_FAMILY,
                        folds: int = 5, seed: int = 0, group_by: str = "config",
                        load_curves: bool = True) -> FeasibilityAudit:
    """Audit the conservative feasibility filter of one context on held-out configs (or, with
    ``group_by``, held-out workloads or engine instances, as
    :func:`knowledge.surrogates.cross_validate` holds them out); ``load_curves`` as there."""
    from sklearn.model_selection import GroupKFold

    rows = [t for t in trials if t.status == "complete" and t.metrics]
    slos = list(slos) if slos is not None else audit_slos(key.target, rows)
    audit = FeasibilityAudit(key.label(), [str(s) for s in slos])
    groups = np.asarray(instance_groups(rows) if group_by == "instance"
                        else [t.workload_hash for t in rows] if group_by == "workload"
                        else [t.config_hash for t in rows])
    k = min(folds, len(set(groups.tolist())))
    if k < 2 or not slos:
        return audit
    objective = _objective(key.target)
    sign = 1.0 if objective.direction == "maximize" else -1.0
    splitter = GroupKFold(n_splits=k, shuffle=True, random_state=seed)
    needed = sorted({m for s in slos for m in s.metrics} | {objective.metric})
    for train, test in splitter.split(np.zeros(len(rows)), groups=groups):
        ctx = fit_context(key, [rows[i] for i in train], family=family, score=False,
                          metrics=needed, load_curves=load_curves)
        held = [rows[i] for i in test]
        preds: dict[str, list[tuple[float, float, float]]] = {m: [] for m in needed}
        for t in held:
            p = ctx.predict([t.config], workload_features(t.workload_spec), needed)
            for m in needed:
                if m in p:
                    preds[m].append((float(p[m][0][0]), float(p[m][1][0]), float(p[m][2][0])))
        for slo in slos:
            if any(len(preds[m]) != len(held) for m in slo.metrics):
                continue
            feasible_idx: list[int] = []
            for i, t in enumerate(held):
                if any(not isinstance(t.metrics.get(m), int | float) for m in slo.metrics):
                    continue
                conservative = {b.metric: preds[b.metric][i][2 if b.op == "<=" else 1]
                                for b in slo.bounds}
                predicted_ok = all(b.holds(conservative[b.metric]) for b in slo.bounds)
                measured_ok = slo.is_met(t.metrics)
                audit.pairs += 1
                audit.measured_feasible += measured_ok
                if predicted_ok:
                    audit.predicted_feasible += 1
                    feasible_idx.append(i)
                    if not measured_ok:
                        audit.false_feasible += 1
                        audit.examples.append({
                            "trial_id": t.id, "slo": str(slo), "config": t.config,
                            "measured": {m: t.metrics.get(m) for m in slo.metrics},
                            "conservative_prediction": conservative})
            if len(preds[objective.metric]) != len(held):
                continue
            # Per held-out workload, the recommender's pick among the held-out configs.
            for wl in {held[i].workload_hash for i in feasible_idx}:
                pool = [i for i in feasible_idx if held[i].workload_hash == wl]
                best = max(pool, key=lambda i: sign * preds[objective.metric][i][0])
                audit.recommendations += 1
                audit.recommendations_infeasible += not slo.is_met(held[best].metrics)
    return audit


def audit_store_trials(trials: Sequence[TrialRecord], *, target: str | None = None,
                       family: str = DEFAULT_FAMILY, folds: int = 5, min_trials: int = 8,
                       group_by: str = "config", load_curves: bool = True
                       ) -> list[FeasibilityAudit]:
    """:func:`holdout_feasibility` for every context with at least ``min_trials`` trials."""
    grouped: dict[ContextKey, list[TrialRecord]] = {}
    for t in trials:
        if t.status == "complete" and t.metrics and (target is None or t.target == target):
            grouped.setdefault(context_of(t), []).append(t)
    return [holdout_feasibility(k, v, family=family, folds=folds, group_by=group_by,
                                load_curves=load_curves)
            for k, v in sorted(grouped.items()) if len(v) >= min_trials]

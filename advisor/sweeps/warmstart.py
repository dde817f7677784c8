"""Warm start for a sweep cell: the configs worth measuring first, from what the store knows.

A nightly budget is small; spending it relearning last night's answer wastes it. Each cell is
seeded, in this order and without repeats, with the previous run's best config for the same cell,
the model-based recommendation for the cell's question (when the knowledge covers it), and the
best measured configs on this hardware and workload under the cell's SLO.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from advisor.errors import AdvisorError
from advisor.recommend import RecommendationQuery, recommend
from advisor.sweeps.spec import CellSpec
from knowledge import TrialFilter, TrialRecord, TrialStatus, TrialStore
from knowledge.cache import KnowledgeModels
from knowledge.surrogate import workload_features
from objectives import SLO
from objectives.workload import canonical_json

__all__ = ["WarmStartConfig", "best_measured", "warm_start_configs"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WarmStartConfig:
    """A config to enqueue, and where it came from (stored with its trial as ``source``)."""

    config: dict[str, Any]
    source: str  # "previous-run", "recommendation" or "best-known"


def _met(trial: TrialRecord, slo: SLO) -> bool:
    values = trial.metrics
    return all(values.get(b.metric) is not None and b.margin(float(values[b.metric])) <= 0
               for b in slo.bounds)


def best_measured(trials: list[TrialRecord], cell: CellSpec, n: int) -> list[TrialRecord]:
    """Up to ``n`` measured trials with distinct configs that meet the cell's SLO, best
    objective first."""
    met = [t for t in trials if t.status == TrialStatus.COMPLETE and _met(t, cell.slo)
           and t.metrics.get(cell.objective.metric) is not None]
    sign = -1.0 if cell.objective.direction == "maximize" else 1.0
    met.sort(key=lambda t: sign * float(t.metrics[cell.objective.metric]))
    seen: set[str] = set()
    out = []
    for t in met:
        if t.config_hash not in seen:
            seen.add(t.config_hash)
            out.append(t)
        if len(out) >= n:
            break
    return out


def warm_start_configs(store: TrialStore, cell: CellSpec, *, hardware_key: str,
                       previous_best: Mapping[str, Any] | None, use_recommendation: bool,
                       best_known: int, models: KnowledgeModels | None) -> list[WarmStartConfig]:
    """The configs to measure first in ``cell`` (see the module docstring)."""
    found: list[WarmStartConfig] = []
    if previous_best:
        found.append(WarmStartConfig(dict(previous_best), "previous-run"))
    if use_recommendation:
        query = RecommendationQuery(
            target=cell.target, slo=str(cell.slo), hardware=hardware_key, model=cell.model,
            workload=workload_features(cell.workload.spec), objective=str(cell.objective))
        try:
            answer = recommend(store, query, models=models)
        except AdvisorError as exc:  # the question may not be answerable yet: not an error
            log.info("no warm-start recommendation for %s: %s", cell.key, exc)
        else:
            if answer.found and answer.config is not None:
                found.append(WarmStartConfig(dict(answer.config), "recommendation"))
    if best_known:
        trials = store.list_trials(TrialFilter(
            target=cell.target, status=TrialStatus.COMPLETE, hardware_key=hardware_key,
            workload_hash=cell.workload.spec_hash))
        found += [WarmStartConfig(dict(t.config), "best-known")
                  for t in best_measured(trials, cell, best_known)]
    unique: dict[str, WarmStartConfig] = {}
    for item in found:
        unique.setdefault(canonical_json(item.config), item)
    return list(unique.values())

"""Warm start for a sweep cell: the configs worth measuring first, from what the store knows.

A nightly budget is small; spending it relearning last night's answer wastes it. Each cell is
seeded, in this order and without repeats, with the previous run's best config for the same cell,
then what any new study is warm-started with (advisor/warm_start.py): the model-based
recommendation for the cell's question (when the knowledge covers it) and the best measured
configs on this hardware and workload under the cell's SLO.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from advisor import warm_start
from advisor.sweeps.spec import CellSpec
from advisor.warm_start import StudyQuestion, WarmStartConfig, knowledge_configs, unique_configs
from knowledge import TrialRecord, TrialStore
from knowledge.cache import KnowledgeModels

__all__ = ["WarmStartConfig", "best_measured", "cell_question", "warm_start_configs"]


def cell_question(cell: CellSpec, hardware_key: str) -> StudyQuestion:
    """The question a cell's study asks of the knowledge, on ``hardware_key``."""
    return StudyQuestion(target=cell.target, slo=cell.slo, objective=cell.objective,
                         workload=cell.workload, hardware_key=hardware_key, model=cell.model)


def best_measured(trials: Iterable[TrialRecord], cell: CellSpec, n: int) -> list[TrialRecord]:
    """Up to ``n`` measured trials with distinct configs that meet the cell's SLO, best
    objective first."""
    return warm_start.best_measured(trials, cell.slo, cell.objective, n)


def warm_start_configs(store: TrialStore, cell: CellSpec, *, hardware_key: str,
                       previous_best: Mapping[str, Any] | None, use_recommendation: bool,
                       best_known: int, models: KnowledgeModels | None) -> list[WarmStartConfig]:
    """The configs to measure first in ``cell`` (see the module docstring)."""
    found: list[WarmStartConfig] = []
    if previous_best:
        found.append(WarmStartConfig(dict(previous_best), "previous-run"))
    found += knowledge_configs(store, cell_question(cell, hardware_key),
                               use_recommendation=use_recommendation, best_known=best_known,
                               models=models)
    return unique_configs(found)

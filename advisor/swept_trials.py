"""The settings a search sweep measured in one trial, as trials of their own.

A target that sweeps search-time knobs (objectives/search_sweep.py) returns several measured
settings from one trial. The trial Optuna asked for keeps one of them — the setting it was queued
with (the engine default, an enqueued or warm-start config), else the best one under the study's
SLO — and every other setting becomes a trial of the same study, in Optuna (so the sampler and
optuna-dashboard see the whole front) and in the store (``swept_from`` names the trial; such
trials take no slot of the budget). These helpers choose that setting and build the Optuna
record of the others; the driver writes them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState

from advisor.objective import Objective
from objectives import SLO
from objectives.measurement import Measurement

__all__ = ["chosen_point", "constraint_attrs", "swept_trial_template"]


def chosen_point(points: Sequence[tuple[Mapping[str, Any], Measurement]], slo: SLO,
                 objective: Objective, own: Mapping[str, Any] | None) -> int:
    """Index of the setting the asked trial keeps: the one equal to ``own`` (the swept knobs'
    values it was queued with) when it was measured, else the best one meeting ``slo`` by
    ``objective``, else the one nearest to meeting it (least summed violation)."""
    if own:
        for i, (config, _) in enumerate(points):
            if all(config.get(k) == v for k, v in own.items()):
                return i

    def violation(m: Measurement) -> float:
        return sum(max(0.0, v) for v in slo.margins(m.metrics).values())

    def value(m: Measurement) -> float:
        raw = m.metrics.get(objective.metric)
        if raw is None or not math.isfinite(float(raw)):
            return -math.inf
        return float(raw) if objective.direction == "maximize" else -float(raw)

    met = [i for i, (_, m) in enumerate(points) if violation(m) == 0]
    if met:
        return max(met, key=lambda i: value(points[i][1]))
    return min(range(len(points)), key=lambda i: violation(points[i][1]))


def constraint_attrs(slo: SLO, metrics: Mapping[str, float]
                     ) -> tuple[list[float], dict[str, Any]]:
    """A measured trial's SLO margins (one per bound, in order; ``<= 0`` met) and the user
    attributes optuna-dashboard shows them by: each SLO metric, each bound's margin, and whether
    the SLO held."""
    margins = [bound.margin(float(metrics[bound.metric])) for bound in slo.bounds]
    attrs: dict[str, Any] = {metric: float(metrics[metric]) for metric in slo.metrics}
    attrs.update({f"margin {bound}": margin
                  for bound, margin in zip(slo.bounds, margins, strict=True)})
    attrs["slo_met"] = all(m <= 0 for m in margins)
    return margins, attrs


def swept_trial_template(params: Mapping[str, tuple[Any, BaseDistribution]], *,
                         value: float | None, slo: SLO, metrics: Mapping[str, float] | None,
                         user_attrs: Mapping[str, Any], constraints_key: str) -> FrozenTrial:
    """The finished Optuna trial of one swept setting: complete with its objective ``value`` and
    SLO constraints, or failed (``value`` None: an unusable measurement must not steer the
    search)."""
    attrs = dict(user_attrs)
    system_attrs: dict[str, Any] = {}
    if value is not None and metrics is not None:
        margins, slo_attrs = constraint_attrs(slo, metrics)
        attrs.update(slo_attrs)
        system_attrs[constraints_key] = margins
    return optuna.trial.create_trial(
        state=TrialState.COMPLETE if value is not None else TrialState.FAIL,
        value=value, params={k: v for k, (v, _) in params.items()},
        distributions={k: d for k, (_, d) in params.items()},
        user_attrs=attrs, system_attrs=system_attrs)

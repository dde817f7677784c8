"""First recommender: answer an SLO with the best *measured* feasible config in the store.

Feasibility is re-checked against the SLO asked now (not the SLO the trial's study used), so any
trial ever measured can answer. Only measured figures are returned; the model-based recommender
with predictions and intervals builds on this.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field, replace
from typing import Any

from advisor.objective import Objective
from knowledge import TrialFilter, TrialRecord, TrialStatus, TrialStore
from objectives import SLO
from objectives.registry import get_target
from objectives.workload import Workload

__all__ = ["Recommendation", "recommend_measured"]


@dataclass(frozen=True)
class Recommendation:
    """The answer to one SLO question.

    ``trial`` is the best measured trial that meets the SLO, or None when no measured trial does;
    then ``closest`` is the trial that came nearest (smallest summed violation) and
    ``tune_command`` the command that would cover the gap.
    """

    slo: SLO
    objective: Objective
    target: str
    hardware_key: str | None
    considered: int
    feasible_count: int
    trial: TrialRecord | None = None
    margins: dict[str, float] = field(default_factory=dict)
    closest: TrialRecord | None = None
    closest_margins: dict[str, float] = field(default_factory=dict)
    launch_command: str | None = None
    tune_command: str | None = None
    default_trial: TrialRecord | None = None

    @property
    def found(self) -> bool:
        return self.trial is not None

    def to_dict(self) -> dict[str, Any]:
        def trial_dict(t: TrialRecord | None) -> dict[str, Any] | None:
            if t is None:
                return None
            return {"trial_id": t.id, "study_id": t.study_id, "number": t.number,
                    "config": t.config, "metrics": t.metrics, "hardware_key": t.hardware_key,
                    "workload": t.workload_spec, "engine_versions": t.engine_versions}

        return {
            "found": self.found, "target": self.target, "slo": str(self.slo),
            "objective": str(self.objective), "hardware_key": self.hardware_key,
            "basis": "measured",  # every figure below was measured, none predicted
            "trials_considered": self.considered, "trials_meeting_slo": self.feasible_count,
            "recommended": trial_dict(self.trial), "slo_margins": self.margins,
            "launch_command": self.launch_command,
            "closest": trial_dict(self.closest), "closest_margins": self.closest_margins,
            "engine_default": trial_dict(self.default_trial),
            "tune_command": self.tune_command,
        }


def _violation(margins: dict[str, float]) -> float:
    return sum(max(m, 0.0) for m in margins.values())


def recommend_measured(store: TrialStore, *, target: str, slo: SLO, objective: Objective,
                       hardware_key: str | None = None, workload_hash: str | None = None
                       ) -> Recommendation:
    """The best measured trial of ``target`` meeting ``slo`` by ``objective``.

    ``hardware_key`` / ``workload_hash`` restrict the evidence to one machine / one workload.
    """
    engine = get_target(target)
    slo.check_metrics(target, engine.reported_metrics())
    trials = store.list_trials(TrialFilter(target=target, status=TrialStatus.COMPLETE,
                                           hardware_key=hardware_key,
                                           workload_hash=workload_hash))
    usable = [t for t in trials if t.metrics.get(objective.metric) is not None
              and all(t.metrics.get(m) is not None for m in slo.metrics)]
    best: TrialRecord | None = None
    closest: TrialRecord | None = None
    closest_violation = float("inf")
    feasible = 0
    for t in usable:
        margins = slo.margins(t.metrics)
        if all(m <= 0 for m in margins.values()):
            feasible += 1
            if best is None or objective.is_better(float(t.metrics[objective.metric]),
                                                   float(best.metrics[objective.metric])):
                best = t
        elif (violation := _violation(margins)) < closest_violation:
            closest, closest_violation = t, violation
    answer = Recommendation(slo=slo, objective=objective, target=target,
                            hardware_key=hardware_key, considered=len(usable),
                            feasible_count=feasible)
    if best is not None:
        launch = engine.launch_command(best.config, Workload.from_spec(best.workload_spec))
        return replace(answer, trial=best, margins=slo.margins(best.metrics),
                       launch_command=launch, default_trial=_engine_default_for(usable, best))
    return replace(answer, closest=closest,
                   closest_margins=slo.margins(closest.metrics) if closest else {},
                   tune_command=_tune_command(target, slo, objective))


def _engine_default_for(trials: list[TrialRecord], best: TrialRecord | None
                        ) -> TrialRecord | None:
    """The engine-default trial measured on the same workload as ``best``, for comparison."""
    if best is None:
        return None
    return next((t for t in reversed(trials) if t.details.get("role") == "engine-default"
                 and t.workload_hash == best.workload_hash), None)


def _tune_command(target: str, slo: SLO, objective: Objective) -> str:
    return shlex.join(["advisor", "tune", "--target", target, "--slo", str(slo),
                       "--objective", str(objective), "--trials", "40"])

"""The one answer document: every outcome of a recommendation, through every door, in one shape.

`advisor recommend --json` prints exactly what `POST /v1/recommendations` returns, and both are
an :class:`Answer`; its JSON Schema (:func:`answer_json_schema`) is published in docs/api.md and
in the OpenAPI document. Every top-level field is present in every outcome (null or empty where
it does not apply), so a client reads one shape.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ANSWER_SCHEMA_VERSION",
    "Answer",
    "AnswerKind",
    "Capacity",
    "CapacityFigure",
    "Comparison",
    "Confidence",
    "ConfidenceLevel",
    "DefaultAssessment",
    "EvidenceWindow",
    "Figure",
    "NextStep",
    "Question",
    "ReplicasFigure",
    "Status",
    "VerdictDoc",
    "answer_json_schema",
]

ANSWER_SCHEMA_VERSION: Literal[1] = 1

#: ``undecided``: no config is shown to meet the SLO by its predictions, and not every one is shown
#: to miss it (a candidate's 90 % intervals straddle the SLO: advisor/answers/rule.py); the answer
#: names that candidate and ``next`` the measurement that decides it. ``no_feasible_config`` is
#: kept for "every candidate misses", measured or even at its intervals' optimistic ends.
Status = Literal["recommended", "keep_defaults", "no_feasible_config", "undecided",
                 "not_covered"]
AnswerKind = Literal["config", "keep_defaults", "none"]
Basis = Literal["model", "measured", "extrapolation", "calibration", "none"]
ConfidenceLevel = Literal["high", "medium", "low", "none"]


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Figure(_Doc):
    """One figure of a config at the asked workload: measured (the median of its windows there,
    ``low``/``high`` their range) or predicted (the model's point and 90 % interval)."""

    value: float
    low: float | None = None
    high: float | None = None
    basis: Literal["measured", "predicted"]
    windows: int | None = Field(default=None, description="measured: windows that measured it")
    note: str | None = Field(default=None, description="e.g. why an interval was widened")


class VerdictDoc(_Doc):
    """Whether a config meets the SLO at the asked workload, by the one rule (advisor/answers/
    rule.py): measured windows decide first (k of n), a prediction only where none exists."""

    meets_slo: bool | None
    basis: Literal["measured", "predicted", "none"]
    rule: str
    windows_met: int = 0
    windows: int = 0
    margins: dict[str, float] = Field(default_factory=dict,
                                      description="per bound; <= 0 means met")
    trial_ids: list[int] = Field(default_factory=list)
    text: str


class DefaultAssessment(_Doc):
    """The engine default at the asked workload: candidate #1 of every answer."""

    config: dict[str, Any] | None = None
    figures: dict[str, Figure] = Field(default_factory=dict)
    verdict: VerdictDoc | None = None
    source: str | None = None


class Comparison(_Doc):
    """The answered config against the engine default, and why the one won."""

    basis: str = Field(description="paired / default_repeats / margin / is_default / "
                                   "default_misses_slo / no_default")
    reason: str
    gain: float | None = Field(default=None, description="relative objective advantage of the "
                                                         "candidate (positive: better)")
    threshold: float | None = None
    paired: dict[str, Any] | None = None


class EvidenceWindow(_Doc):
    """A measured trial (one window) cited by the answer."""

    trial_id: int
    study: str = ""
    config: dict[str, Any]
    measured: dict[str, float]
    workload: str = ""
    workload_features: dict[str, float] = Field(default_factory=dict)
    meets_slo: bool
    same_config: bool
    distance: float | None = None


class Confidence(_Doc):
    level: ConfidenceLevel
    reason: str


class NextStep(_Doc):
    """What to run next to cover or strengthen the answer (null command: nothing needed or
    nothing runnable; ``reason`` says which)."""

    tune_command: str | None = None
    reason: str | None = None


class CapacityFigure(_Doc):
    """The highest arrival rate one GPU holds at the SLO with one config, and the range its
    interval allows (``low``: every figure at its pessimistic end; ``high``: optimistic)."""

    rate_rps: float
    low: float
    high: float
    basis: Literal["measured", "predicted"] = "predicted"
    note: str | None = Field(default=None, description="its label (e.g. `predicted from "
                                                       "calibration`) and why it was capped")


class ReplicasFigure(_Doc):
    """Replicas of one GPU serving a total rate at the SLO: ceil(total / capacity), with the
    range the capacity's interval gives (null: no count does, a capacity bound is 0)."""

    total_rate_rps: float
    count: int | None
    low: int | None = None
    high: int | None = None


class Capacity(_Doc):
    """Capacity at the SLO of the answered config and of the defaults, and the replicas the
    asked total rate needs with each (null where not computed)."""

    slo: str
    config: CapacityFigure | None = None
    default: CapacityFigure | None = None
    replicas: ReplicasFigure | None = None
    default_replicas: ReplicasFigure | None = None


class Question(_Doc):
    """The question as the planner resolved it."""

    target: str
    slo: str
    objective: str
    hardware: str | None = Field(default=None, description="hardware asked (part of a key)")
    hardware_key: str | None = Field(default=None, description="hardware answered for")
    model: str | None = Field(default=None, description="the model as the user named it")
    workload: dict[str, float] = Field(default_factory=dict)
    measured_only: bool = False
    total_rate_rps: float | None = Field(default=None, description="total arrival rate to "
                                                                   "serve (replicas)")


class Answer(_Doc):
    """One recommendation, whatever its outcome (see the module docstring)."""

    schema_version: Literal[1] = ANSWER_SCHEMA_VERSION
    status: Status
    answer: AnswerKind
    basis: Basis = Field(description="what the answer rests on: `model` (fitted models over "
                                     "stored trials, measured windows first), `measured` "
                                     "(stored trials only), `extrapolation` (a model shape "
                                     "never measured here, carried from measured shapes), "
                                     "`calibration` (a GPU known from a calibration profile: "
                                     "the simulator with its step costs, measured windows "
                                     "first)")
    summary: str
    question: Question
    config: dict[str, Any] | None = None
    launch_command: str | None = None
    figures: dict[str, Figure] = Field(default_factory=dict)
    verdict: VerdictDoc | None = None
    default: DefaultAssessment | None = None
    comparison: Comparison | None = None
    evidence: list[EvidenceWindow] = Field(default_factory=list)
    confidence: Confidence
    next: NextStep = Field(default_factory=NextStep)
    closest: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    borrowed_workload: dict[str, Any] | None = None
    candidates: dict[str, int] = Field(default_factory=dict)
    model_quality: dict[str, dict[str, Any]] = Field(default_factory=dict)
    quality_headroom: dict[str, dict[str, Any]] = Field(default_factory=dict)
    capacity: Capacity | None = Field(default=None, description="the highest rate one GPU "
                                      "holds at the SLO, and replicas for a total rate")
    notes: list[str] = Field(default_factory=list)
    details: dict[str, Any] = Field(default_factory=dict,
                                    description="outcome-specific extras (a shape's position "
                                                "and held-out errors, capacity, ...)")

    @property
    def found(self) -> bool:
        return self.config is not None and self.status in ("recommended", "keep_defaults")

    def to_json_bytes(self) -> bytes:
        """The serialised document: what REST returns and `--json` prints, byte for byte."""
        return json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=False,
                          allow_nan=False).encode() + b"\n"


def answer_json_schema() -> dict[str, Any]:
    """The published JSON Schema of :class:`Answer`."""
    return Answer.model_json_schema()

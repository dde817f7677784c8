"""Request and response models of the REST API (``XCreate`` in, ``XPublic`` out)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from advisor.answers import Answer, RecommendationRequest
from advisor.errors import InputError
from advisor.inputs import MAX_TRIALS, STUDY_NAME_PATTERN, check_numbers
from advisor.samplers import DEFAULT_SAMPLER, SAMPLERS
from advisor.settings import check_paired_repeats

__all__ = [
    "CheatSheetValuePublic",
    "ErrorBody",
    "ErrorPublic",
    "JobProgress",
    "JobPublic",
    "Page",
    "RecommendationCreate",
    "RecommendationPublic",
    "StudyCreate",
    "StudyPublic",
    "TrialPublic",
    "WorkloadChoice",
]

T = TypeVar("T")

_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


def _bounded(value: Any, where: str) -> Any:
    """A free-form mapping's numbers are finite and at most 2**53 in size (advisor/inputs.py),
    as a validation error (422) rather than an overflow deep inside a target (500)."""
    try:
        return check_numbers(value, where)
    except InputError as exc:
        raise ValueError(str(exc)) from None


class ErrorBody(BaseModel):
    type: str = Field(description="machine-readable error kind, e.g. `unauthorized`, "
                                  "`validation_error`, `not_found`, `slo_parse_error`")
    message: str = Field(description="what went wrong and how to fix it")
    detail: Any = Field(default=None, description="field errors or other context, if any")


class ErrorPublic(BaseModel):
    """Every 4xx/5xx answer has this body."""

    error: ErrorBody

    model_config = ConfigDict(json_schema_extra={"examples": [{"error": {
        "type": "unauthorized", "message": "this endpoint needs an API key: send "
                                           "`Authorization: Bearer <key>` or `X-API-Key: <key>`",
        "detail": None}}]})


class Page(BaseModel, Generic[T]):
    """One page of a listing; ``total`` counts every match."""

    items: list[T]
    total: int
    limit: int
    offset: int


# recommendations ------------------------------------------------------------------------------


#: The recommendation request and answer are the planner's own (advisor/answers/): the CLI and
#: REST share them, so `advisor recommend --json` and the API return the same document.
RecommendationPublic = Answer


class RecommendationCreate(RecommendationRequest):
    """An SLO and the context it must hold in (the planner's request, with examples)."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"examples": [
        {"target": "faiss", "slo": "p95_latency_ms<=0.25,recall_at_10>=0.95",
         "objective": "maximize:qps", "hardware": "cpu"},
        {"target": "vllm", "slo": "ttft_p95_ms<=300,tpot_p95_ms<=40", "hardware": "h200",
         "model": "llama-3-8b", "workload": {"class": "chat", "rate_rps": 60}},
        {"target": "vllm", "slo": "ttft_p95_ms<=300,tpot_p95_ms<=40", "hardware": "h200",
         "model": "llama-3-8b", "workload": {"rate_rps": 60}, "measured": True},
    ]})


class CheatSheetValuePublic(BaseModel):
    """One knob's recommended value for a context."""

    knob: str
    target: str
    found: bool
    value: Any = None
    row: dict[str, Any] | None = None
    raw: dict[str, Any] = Field(default_factory=dict)


# studies, trials, jobs ------------------------------------------------------------------------


class WorkloadChoice(BaseModel):
    """A named preset of the target, with some of its parameters changed."""

    model_config = ConfigDict(extra="forbid")

    preset: str | None = Field(default=None, max_length=64, pattern=_NAME,
                               description="a preset name of the target (default: the "
                                           "target's default workload); files are not accepted")
    params: dict[str, Any] = Field(default_factory=dict, max_length=32,
                                   description="override values the preset already has, same "
                                               "type; strings must be plain names")

    @field_validator("params")
    @classmethod
    def _param_numbers(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _bounded(value, "workload.params")


class StudyCreate(BaseModel):
    """A tuning study to run in the background. Every field is checked against what is
    registered; nothing becomes a command, flag or path. Numbers and switches are strict, as
    docs/api.md says: ``"yes"``, ``0`` or ``"1"`` for a boolean, ``true`` or ``"8"`` for a
    number are a 422, never read as something the client may not have meant."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "target": "faiss", "slo": "p95_latency_ms<=0.25,recall_at_10>=0.95",
        "objective": "maximize:qps", "trials": 20, "seed": 0,
        "workload": {"preset": "stdlib-docs-2k"}, "fixed": {"index_type": "hnsw"},
    }]})

    target: str = Field(min_length=1, max_length=64, pattern=_NAME)
    slo: str | None = Field(default=None, max_length=500, description="default: the target's")
    objective: str | None = Field(default=None, max_length=80,
                                  description="default: the target's")
    workload: WorkloadChoice = Field(default_factory=WorkloadChoice)
    fixed: dict[str, Any] = Field(default_factory=dict, max_length=64,
                                  description="knobs held at one value, checked against the "
                                              "target's search space")
    enqueue: list[dict[str, Any]] = Field(
        default_factory=list, max_length=64,
        description="configs measured right after the engine default, as `advisor tune "
                    "--enqueue` takes them: knob mappings, completed with the engine defaults "
                    "and checked against the search space")
    trials: int = Field(default=30, ge=1, le=MAX_TRIALS, strict=True)
    sampler: str = Field(default=DEFAULT_SAMPLER, json_schema_extra={"enum": list(SAMPLERS)},
                         description="search algorithm")
    seed: int | None = Field(default=None, ge=0, le=2**31 - 1, strict=True)
    startup_trials: int | None = Field(
        default=None, ge=1, le=1000, strict=True,
        description="trials the tpe and gp samplers draw at random before they model, the "
                    "engine default and warm-start configs included (default 5), as "
                    "`advisor tune --startup-trials`; kept by the study")
    include_default: bool = Field(default=True, strict=True,
                                  description="measure the engine default first")
    paired_repeats: int | None = Field(
        default=None, ge=0, le=50, strict=True,
        # 1 and 2 are refused (check_paired_repeats): the schema says so, or a client (and
        # schemathesis) reads them as valid
        json_schema_extra={"not": {"enum": [1, 2]}},
        description="after the search, measure the best config and the engine default this "
                    "many times each, interleaved, and store their paired comparison with the "
                    "study (0: off, else at least 3; default: the server's "
                    "`ADVISOR_PAIRED_REPEATS`, 3)")
    name: str | None = Field(default=None, max_length=200, pattern=STUDY_NAME_PATTERN,
                             description="study name; default derived like `advisor tune`")
    resume: bool = Field(default=False, strict=True,
                         description="continue the study if it exists")
    warm_start: bool = Field(
        default=True, strict=True,
        description="a new study first measures, after the engine default and `enqueue`, what "
                    "the store knows for its SLO, workload and hardware (the recommender's "
                    "config and the best measured configs meeting the SLO), as `advisor tune` "
                    "does; a resumed study never gets them again")

    search_sweep: bool = Field(
        default=False, strict=True,
        description="where the target can (faiss: nprobe, efSearch), each trial builds once and "
                    "sweeps the search-time knobs, storing every setting as a trial of its own "
                    "outside the `trials` budget, as `advisor tune --search-sweep` does; false "
                    "(the default): every knob is sampled")

    @field_validator("sampler")
    @classmethod
    def _sampler(cls, value: str) -> str:
        if value not in SAMPLERS:  # a ValueError: a 422 naming the field, as for the rest
            raise ValueError(f"Input should be {' or '.join(map(repr, SAMPLERS))}")
        return value

    @field_validator("paired_repeats")
    @classmethod
    def _paired_repeats(cls, value: int | None) -> int | None:
        return None if value is None else check_paired_repeats(value)

    @field_validator("fixed", "enqueue")
    @classmethod
    def _config_numbers(cls, value: Any, info: Any) -> Any:
        return _bounded(value, str(info.field_name))


class JobProgress(BaseModel):
    trials_finished: int
    trials_total: int
    trials_complete: int
    trials_failed: int
    trials_meeting_slo: int
    best_objective_value: float | None = None
    best_trial_id: int | None = None
    best_config: dict[str, Any] | None = None


class JobPublic(BaseModel):
    id: str = Field(description="job id")
    status: Literal["queued", "running", "succeeded", "failed", "cancelled"]
    study_name: str
    study_id: int | None = None
    target: str
    request: dict[str, Any]
    cancel_requested: bool
    error: str | None = None
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    progress: JobProgress | None = None


class StudyPublic(BaseModel):
    id: int
    name: str
    target: str
    slo: str
    objective: str
    status: str
    workload: dict[str, Any]
    sampler: str
    seed: int | None
    trials_requested: int
    trials: int
    trials_complete: int
    trials_failed: int
    trials_meeting_slo: int
    trials_invalid: int = Field(default=0, description="measured, but failed the validity "
                                                       "check: kept, never used")
    hardware_key: str
    paired_comparison: dict[str, Any] | None = Field(
        default=None, description="the best config against the engine default, re-measured "
                                  "interleaved at the end of the study: `status` compared (per "
                                  "metric: means, difference, bootstrap interval, verdict), "
                                  "refused or skipped, with the reason")
    created_at: datetime
    updated_at: datetime


class TrialPublic(BaseModel):
    id: int
    study_id: int
    number: int
    target: str
    status: str = Field(description="running, complete, failed, interrupted or invalid "
                                    "(measured, but the measurement failed its validity check)")
    validity: str | None = Field(default=None, description="the measurement's validity label "
                                                           "(valid, unchecked, client_bound, "
                                                           "...); null when the target gives none")
    config: dict[str, Any]
    metrics: dict[str, Any]
    feasible: bool | None
    objective_value: float | None
    error_type: str | None
    error: str | None
    workload: dict[str, Any]
    workload_hash: str
    hardware_key: str
    engine_versions: dict[str, Any]
    started_at: datetime
    finished_at: datetime | None
    duration_s: float | None
    swept_from: int | None = Field(default=None, description="for a setting a search sweep "
                                   "measured within another trial: that trial's number (such "
                                   "trials take no slot of the study's budget)")

"""One recommendation question, as every door asks it, and its resolution.

:class:`RecommendationRequest` is the body of ``POST /v1/recommendations`` and what `advisor
recommend` builds from its flags; :func:`resolve` checks it once (target, SLO, objective,
workload fields, model name or ``config.json`` shape) and turns names into the keys trials are
stored under, so a door never parses a shape or a workload itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from advisor.errors import SLOParseError, WorkloadError, did_you_mean
from advisor.inputs import LABEL_PATTERN, check_label, check_numbers, requested_slo
from advisor.model_config import check_takes_model
from advisor.objective import Objective
from knowledge.surrogates import workload_features
from objectives import SLO
from objectives.llm.shapes import (
    ShapeFeatures,
    display_name,
    features_of,
    fields_text,
    model_key,
    parse_config,
    shape_features,
)
from objectives.registry import get_target
from objectives.target import Target

__all__ = ["RecommendationRequest", "ResolvedQuestion", "resolve"]

_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
#: Workload keys that name the workload rather than a feature of it.
_WORKLOAD_NAMES = frozenset({"class"})


class RecommendationRequest(BaseModel):
    """An SLO and the context it must hold in (the REST body; the CLI builds the same)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    target: str = Field(min_length=1, max_length=64, pattern=_NAME,
                        description="a registered target (`GET /v1/targets`)")
    slo: str = Field(min_length=1, max_length=500,
                     description="bounds to meet, `metric<=x` / `metric>=x`, comma-separated")
    objective: str | None = Field(default=None, max_length=80,
                                  description="`maximize:METRIC` or `minimize:METRIC`; default "
                                              "the target's")
    hardware: str | None = Field(default=None, max_length=200, pattern=LABEL_PATTERN,
                                 description="hardware key or part of it (`h200`, `cpu`); "
                                             "default: the measured hardware with the most "
                                             "evidence, named in the answer")
    model: str | None = Field(default=None, max_length=200, pattern=LABEL_PATTERN,
                              description="LLM model: a built-in shape (`llama-3-8b`), a "
                                          "published name (`llama-3.2-3b`) or a canonical "
                                          "shape name")
    workload: dict[str, Any] = Field(default_factory=dict, max_length=32,
                                     description="workload class and features, e.g. "
                                                 '`{"class": "chat", "rate_rps": 8}`; an '
                                                 "unknown feature is refused (422)")
    hf_config: dict[str, Any] | None = Field(
        default=None, max_length=200,
        description="LLM targets: the fields of a Hugging Face `config.json` of a dense decoder, "
                    "instead of or beside `model`: its shape is the model. A shape never "
                    "measured on the asked hardware is answered from the measured shapes, "
                    "`basis: extrapolation`, or `not_covered` with the reason")
    measured: bool = Field(default=False, description="answer from measured trials only (no "
                                                      "model predictions)")
    total_rate_rps: float | None = Field(default=None, gt=0, le=1e9,
                                         description="total arrival rate (req/s) the fleet "
                                                     "serves: the answer gives the replicas of "
                                                     "one GPU it needs at the SLO, where it "
                                                     "knows the capacity")

    @field_validator("workload")
    @classmethod
    def _workload_numbers(cls, value: dict[str, Any]) -> dict[str, Any]:
        check_numbers(value, "workload")
        return value

    @field_validator("hf_config")
    @classmethod
    def _config_numbers(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            check_numbers(value, "hf_config")
        return value


@dataclass(frozen=True)
class ResolvedQuestion:
    """A checked question: names resolved to the keys trials are stored under."""

    request: RecommendationRequest
    engine: Target
    slo: SLO
    objective: Objective
    #: The model as the user named it (shown in answers), and the key its trials carry.
    model_name: str | None
    model_key: str | None
    shape: ShapeFeatures | None
    #: ``KEY=VALUE,...`` of the config's shape-deciding fields (a runnable `--model-config`).
    shape_fields: str | None
    #: Numeric workload features asked (``class`` and other names dropped).
    workload: dict[str, float]
    #: What a launch command serves: the user's local model directory when they gave one.
    launch_model: str | None = None


def resolve(request: RecommendationRequest, *, launch_model: str | None = None
            ) -> ResolvedQuestion:
    """Check ``request`` and resolve its names (one line errors: :class:`InputError` and
    subclasses, 422 over REST, exit 2 on the CLI)."""
    engine = get_target(request.target)
    slo = requested_slo(request.slo, engine.reported_metrics())
    slo.check_metrics(request.target, engine.reported_metrics())
    objective = Objective.parse(request.objective or engine.default_objective)
    if objective.metric not in engine.reported_metrics():
        raise SLOParseError(f"target {request.target!r} does not report the objective metric "
                            f"{objective.metric!r}")
    workload = _checked_workload(engine, request.workload)
    shape: ShapeFeatures | None = None
    fields: str | None = None
    name = request.model
    if request.hf_config is not None:
        check_takes_model(engine, "`hf_config`")
        config = parse_config(request.hf_config, where="hf_config")
        shape = features_of(config)
        fields = fields_text(config)
        if name is not None and model_key(name) != shape.name:
            given = shape_features(model_key(name))
            if given is None or given.to_dict() | {"name": ""} != shape.to_dict() | {"name": ""}:
                raise WorkloadError(f"`model` {name} and the model config name different shapes "
                                    f"(the config is {display_name(shape.name)}); give one of "
                                    "them")
        name = name or display_name(shape.name)
    elif name is not None:
        check_label(name, "the model")
        check_takes_model(engine, "`model`")
    key = None if name is None else (shape.name if shape is not None else model_key(name))
    return ResolvedQuestion(request=request, engine=engine, slo=slo, objective=objective,
                            model_name=name, model_key=key, shape=shape, shape_fields=fields,
                            workload=workload, launch_model=launch_model)


def _checked_workload(engine: Target, workload: dict[str, Any]) -> dict[str, float]:
    """The numeric features of ``workload``; a field no workload kind reads is refused, naming
    it and the features ``engine``'s workloads have (with the nearest one)."""
    known = sorted(workload_features(engine.default_workload().spec))
    out: dict[str, float] = {}
    for key, value in workload.items():
        if key in _WORKLOAD_NAMES:
            if not isinstance(value, str):
                raise WorkloadError(f"workload field {key!r} must be a name, got {value!r}")
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise WorkloadError(f"workload feature {key!r} must be a number, got {value!r}")
        if value < 0:
            raise WorkloadError(f"workload feature {key!r} must be > 0, got {value}")
        features = workload_features({key: value})
        if key not in features:
            raise WorkloadError(f"unknown workload feature {key!r} for target {engine.name!r} "
                                f"(its features: {', '.join(known) or 'none'})"
                                f"{did_you_mean(key, known)}")
        if value == 0:
            raise WorkloadError(f"workload feature {key!r} must be > 0, got {value}")
        out[key] = float(features[key])
    return out


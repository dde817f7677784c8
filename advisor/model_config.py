"""``--model-config``: a Hugging Face ``config.json`` as the model of ``advisor tune``,
``crosscheck`` and ``recommend``.

The config is parsed and checked once (objectives/llm/shapes.py) and turned into the shape's name,
which becomes the workload's ``model``: the built-in name when the config has a built-in shape,
else the canonical name that spells the shape out, so every trial of it is keyed alike and carries
its features. For ``recommend``, a shape with no measurement on the asked hardware gets a precise
answer naming the measured shapes and the ``advisor tune`` command that would measure it (and,
where shapes measured there can be carried to it, a prediction: advisor/answers/shapes.py).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from advisor.errors import InputError, WorkloadError
from objectives.hardware import hardware_matches
from objectives.llm.shapes import (
    ShapeFeatures,
    display_name,
    features_of,
    load_model_config,
    shape_features,
)
from objectives.target import Target

if TYPE_CHECKING:
    # The store (SQLModel, SQLAlchemy) is imported where a store is read: `--model-config` is an
    # option of commands whose `--help` and option parsing must not pay for it.
    from knowledge import TrialStore

__all__ = ["UnmeasuredShape", "check_takes_model", "describe", "model_option", "shape_option",
           "unmeasured_shape"]


def shape_option(model: str | None, model_config: str | None) -> ShapeFeatures | None:
    """The shape ``--model-config`` gives (None without it), checked against ``--model`` when
    both are given: they must name the same shape. Raises :class:`WorkloadError` for a missing
    file, bad JSON, an unsupported architecture or inconsistent fields, and
    :class:`InputError` when ``--model`` names another shape."""
    if model_config is None:
        return None
    shape = features_of(load_model_config(model_config))
    if model is not None and model != shape.name:
        given = shape_features(model)
        if given is None or given.to_dict() | {"name": ""} != shape.to_dict() | {"name": ""}:
            raise InputError(f"--model {model} and --model-config {model_config} name different "
                             f"shapes (the config is {shape.name}); give one of them")
    return shape


def check_takes_model(target: Target, option: str = "--model-config") -> None:
    """Raise :class:`WorkloadError` when ``target``'s workloads take no ``model`` (a model
    shape means nothing to them: a vector index, say)."""
    if "model" not in target.default_workload().params:
        raise WorkloadError(f"{option} applies to targets whose workloads serve a model; "
                            f"{target.name} takes none")


def model_option(model: str | None, model_config: str | None) -> str | None:
    """The workload's ``model`` for ``--model`` / ``--model-config`` (see :func:`shape_option`):
    the config's shape name when a config is given, else ``model`` as it is."""
    shape = shape_option(model, model_config)
    return model if shape is None else shape.name


def describe(shape: ShapeFeatures) -> str:
    """One line for the user: the shape's name and the features the models see."""
    return (f"shape {shape.name}: {shape.architecture}, {_count(shape.parameters)} parameters, "
            f"{shape.layers} layers, {shape.heads} heads / {shape.kv_heads} KV heads of "
            f"{shape.head_dim}, KV cache {shape.kv_bytes_per_token / 1024:g} KiB/token "
            f"({shape.dtype})")


def _count(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n:,}"


@dataclass(frozen=True)
class UnmeasuredShape:
    """``recommend``'s answer for a shape no valid trial of ``target`` measured on ``hardware``
    (None: any hardware): which shapes were measured there, and the command that measures it."""

    shape: ShapeFeatures
    target: str
    hardware_key: str | None
    measured: dict[str, ShapeFeatures | None] = field(default_factory=dict)
    tune_command: str = ""
    #: What else the asker can do (e.g. ask at a rate, for a prediction carried from the
    #: measured shapes: advisor/answers/shapes.py); appended to the reason.
    note: str = ""

    @property
    def reason(self) -> str:
        where = f"hardware {self.hardware_key}" if self.hardware_key else "any hardware"
        measured = ", ".join(
            display_name(name) if f is None else f"{display_name(name)} ({_count(f.parameters)})"
            for name, f in self.measured.items()) or "none"
        return (f"no measurements of shape {display_name(self.shape.name)} with {self.target} on "
                f"{where}; "
                f"measured shapes: {measured}; run: {self.tune_command}"
                + (f"; {self.note}" if self.note else ""))

    def to_dict(self) -> dict[str, Any]:
        return {"found": False, "status": "not_covered", "basis": "none",
                "target": self.target, "hardware_key": self.hardware_key,
                "model": self.shape.name, "model_shape": self.shape.to_dict(),
                "measured_models": {n: None if f is None else f.to_dict()
                                    for n, f in self.measured.items()},
                "reason": self.reason, "tune_command": self.tune_command}


def unmeasured_shape(store: TrialStore, *, target: str, hardware: str | None,
                     shape: ShapeFeatures, model_config: str, slo: str) -> UnmeasuredShape | None:
    """None when a complete trial of ``target`` on ``hardware`` (a key or part of one, as
    ``recommend --hardware`` takes it; None: any) served ``shape``; else the answer saying so.
    The measured shapes are listed with their features where they have any (a local model
    directory elsewhere has none here)."""
    from knowledge import TrialFilter, TrialStatus

    models: dict[str, ShapeFeatures | None] = {}
    for trial in store.list_trials(TrialFilter(target=target, status=TrialStatus.COMPLETE)):
        if hardware is not None and not hardware_matches(hardware, trial.hardware_key):
            continue
        model = (trial.workload_spec.get("params") or {}).get("model")
        if not isinstance(model, str) or model in models:
            continue
        if model == shape.name:
            return None
        models[model] = shape_features(model)
    command = shlex.join(["advisor", "tune", "--target", target, "--model-config", model_config,
                          "--slo", slo])
    if hardware is not None:
        command += f"  # on {hardware}"
    return UnmeasuredShape(shape, target, hardware, dict(sorted(models.items())), command)

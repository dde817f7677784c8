"""Resolve a workload the way users name one: a target's preset, or a YAML/JSON file, plus
parameter overrides. Shared by ``advisor tune`` and sweep files."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from advisor.errors import WorkloadError
from objectives.target import Target
from objectives.workload import Workload

__all__ = ["check_model", "known_model", "resolve_workload"]


def known_model(model: str) -> bool:
    """Whether ``advisor tune --model`` can run ``model``: a named shape (random weights) or a
    local model directory (its config.json)."""
    from objectives.llm.models import MODEL_SHAPES

    return model in MODEL_SHAPES or Path(model).expanduser().is_dir()


def check_model(model: str) -> None:
    """Raise :class:`WorkloadError` naming the known shapes when ``model`` cannot be tuned
    (checked before anything starts, so a typo fails the command, not every trial)."""
    from objectives.llm.models import MODEL_SHAPES

    if not known_model(model):
        raise WorkloadError(f"unknown model {model!r}: not a model shape "
                            f"({', '.join(MODEL_SHAPES)}) nor a local model directory")


def resolve_workload(target: Target, workload: str | None,
                     overrides: Mapping[str, Any] | None = None) -> Workload:
    """``workload`` (a preset of ``target``, a file, or ``None`` for the target's default) with
    ``overrides`` applied and checked by the target (:meth:`Target.check_workload`); raises
    :class:`WorkloadError` naming what is unknown or out of range."""
    presets = target.named_workloads()
    if workload is None:
        wl = target.default_workload()
    elif workload in presets:
        wl = presets[workload]
    elif Path(workload).exists():
        wl = Workload.from_file(Path(workload))
    else:
        raise WorkloadError(f"unknown workload {workload!r}: not a preset of {target.name} "
                            f"({', '.join(sorted(presets))}) and not a file")
    wl = wl.with_params(**dict(overrides)) if overrides else wl
    target.check_workload(wl)
    return wl

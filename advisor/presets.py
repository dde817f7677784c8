"""Resolve a workload the way users name one: a target's preset, or a YAML/JSON file, plus
parameter overrides. Shared by ``advisor tune`` and sweep files."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from advisor.errors import WorkloadError
from objectives.target import Target
from objectives.workload import Workload

__all__ = ["resolve_workload"]


def resolve_workload(target: Target, workload: str | None,
                     overrides: Mapping[str, Any] | None = None) -> Workload:
    """``workload`` (a preset of ``target``, a file, or ``None`` for the target's default) with
    ``overrides`` applied; raises :class:`WorkloadError` naming what is unknown."""
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
    return wl.with_params(**dict(overrides)) if overrides else wl

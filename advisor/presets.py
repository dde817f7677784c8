"""Resolve a workload the way users name one: a target's preset, or a YAML/JSON file, plus
parameter overrides. The one preset lookup of every front door (advisor/study_request.py):
``advisor tune``, sweep files and the REST API, which may only choose a preset and change the
values it already has (``from_client``)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from advisor.errors import WorkloadError
from advisor.inputs import check_numbers
from objectives.target import Target
from objectives.workload import Workload

__all__ = ["check_model", "known_model", "resolve_workload"]

#: A string a client may set in a preset: a plain name, never a path or a command.
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


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
                     overrides: Mapping[str, Any] | None = None, *,
                     from_client: bool = False) -> Workload:
    """``workload`` (a preset of ``target``, a file, or ``None`` for the target's default) with
    ``overrides`` applied and checked by the target (:meth:`Target.check_workload`); raises
    :class:`WorkloadError` naming what is unknown or out of range.

    ``from_client``: the request came over the network, so ``workload`` must be a preset (no
    file) and each override must change a value the preset has, keeping its type (strings:
    plain names, models: named shapes).
    """
    presets = target.named_workloads()
    if workload is None:
        wl = target.default_workload()
    elif workload in presets:
        wl = presets[workload]
    elif from_client:
        raise WorkloadError(f"unknown workload {workload!r} for {target.name}; presets: "
                            f"{', '.join(sorted(presets))}")
    elif Path(workload).exists():
        wl = Workload.from_file(Path(workload))
    else:
        raise WorkloadError(f"unknown workload {workload!r}: not a preset of {target.name} "
                            f"({', '.join(sorted(presets))}) and not a file")
    if from_client:
        overrides = {key: _client_param(wl, key, value)
                     for key, value in (overrides or {}).items()}
    wl = wl.with_params(**dict(overrides)) if overrides else wl
    target.check_workload(wl)
    return wl


def _client_param(wl: Workload, key: str, value: Any) -> Any:
    if key not in wl.params:
        raise WorkloadError(f"workload {wl.name!r} has no param {key!r}; its params: "
                            f"{', '.join(sorted(wl.params))}")
    return _check_param(key, wl.params[key], value)


def _check_param(key: str, base: Any, value: Any) -> Any:
    """One workload parameter override from a client, checked against the preset's value."""
    if isinstance(base, bool) or isinstance(value, bool):
        if not (isinstance(base, bool) and isinstance(value, bool)):
            raise WorkloadError(f"workload param {key!r} must be a boolean like the preset's")
        return value
    if isinstance(base, int | float):
        check_numbers(value, f"workload param {key!r}")
        if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            raise WorkloadError(f"workload param {key!r} must be a finite number >= 0")
        if isinstance(base, int) and not (isinstance(value, int) or float(value).is_integer()):
            raise WorkloadError(f"workload param {key!r} must be an integer")
        return int(value) if isinstance(base, int) else float(value)
    if isinstance(base, str):
        if not isinstance(value, str) or not _NAME_RE.match(value):
            raise WorkloadError(f"workload param {key!r} must be a plain name (letters, digits, "
                                "'.', '_', '-'; no paths)")
        if key == "model":
            from objectives.llm.models import MODEL_SHAPES

            if value not in MODEL_SHAPES:
                raise WorkloadError(f"unknown model shape {value!r}; over the API choose one of "
                                    f"{', '.join(sorted(MODEL_SHAPES))}")
        return value
    if isinstance(base, Mapping):
        if not isinstance(value, Mapping):
            raise WorkloadError(f"workload param {key!r} must be an object like the preset's")
        return {**base, **{k: _check_param(f"{key}.{k}", base.get(k, _missing(key, k)), v)
                           for k, v in value.items()}}
    raise WorkloadError(f"workload param {key!r} cannot be changed over the API")


def _missing(key: str, sub: str) -> Any:
    raise WorkloadError(f"workload param {key!r} has no field {sub!r}")

"""Sweep files: a YAML matrix of targets × models × workloads × SLO tiers, expanded into cells.

A cell is one tuning study: one target, model (LLM targets), workload and SLO tier, with its own
trial budget. Everything is checked when the file is loaded (targets, SLO metrics, objective,
workloads), so a typo fails ``advisor sweep plan`` before any trial runs, with the file position
that is wrong.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from advisor.errors import AdvisorError
from advisor.objective import Objective
from advisor.presets import resolve_workload
from advisor.study_request import (
    DEFAULT_SAMPLER,
    check_sampler,
    resolve_objective,
    resolve_slo,
)
from advisor.sweeps.backend_names import BACKENDS
from objectives import SLO, Workload
from objectives.registry import get_target
from objectives.workload import canonical_json

__all__ = ["BACKENDS", "CellSpec", "DriftPolicy", "RayOptions", "SweepFileError", "SweepSpec",
           "load_sweep", "parse_sweep"]

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,59}$")
_TOP_KEYS = {"name", "description", "backend", "workers", "trials", "repeats", "sampler", "seed",
             "trial_timeout_s", "max_consecutive_failures", "warm_start", "drift", "ray", "matrix"}
_ENTRY_KEYS = {"target", "models", "workloads", "workload_params", "slo_tiers", "objective",
               "trials", "repeats", "fixed"}


class SweepFileError(AdvisorError):
    """A sweep file that cannot be run; the message names the file and the broken field."""


@dataclass(frozen=True)
class DriftPolicy:
    """When a cell's measured metric counts as moved: beyond ``noise_factor`` times the
    measured noise (relative spread of the repeat runs) and beyond ``min_change``."""

    noise_factor: float = 3.0
    min_change: float = 0.10


@dataclass(frozen=True)
class RayOptions:
    """Ray Tune backend: where the cluster is and what one trial takes of it."""

    address: str | None = None
    cpus_per_trial: float = 1.0
    gpus_per_trial: float = 0.0
    max_failures: int = 1


@dataclass(frozen=True)
class CellSpec:
    """One cell of the matrix: a study to run."""

    key: str  # "target/model/workload/tier": stable from run to run, what drift compares
    target: str
    model: str | None
    workload: Workload
    tier: str
    slo: SLO
    objective: Objective
    trials: int
    fixed: Mapping[str, Any] = field(default_factory=dict)
    #: Re-measurements of the best config (None: the sweep's ``repeats``).
    repeats: int | None = None

    def study_name(self, run: str) -> str:
        return f"{run}/{self.key}"


@dataclass(frozen=True)
class SweepSpec:
    """A whole sweep file, validated and expanded."""

    name: str
    cells: tuple[CellSpec, ...]
    backend: str = "local"
    workers: int = 1
    repeats: int = 3
    sampler: str = DEFAULT_SAMPLER
    seed: int | None = 0
    trial_timeout_s: float | None = None
    max_consecutive_failures: int = 5
    warm_start_recommendation: bool = True
    warm_start_best_known: int = 3
    drift: DriftPolicy = DriftPolicy()
    ray: RayOptions = RayOptions()
    description: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict)

    @property
    def spec_hash(self) -> str:
        return hashlib.sha256(canonical_json(dict(self.raw)).encode()).hexdigest()[:16]


def load_sweep(path: Path) -> SweepSpec:
    """Read and validate the sweep file at ``path``."""
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise SweepFileError(f"cannot read sweep file {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise SweepFileError(f"{path}: not valid YAML: {exc}") from None
    return parse_sweep(data, source=str(path))


def parse_sweep(data: Any, *, source: str = "sweep") -> SweepSpec:
    """Validate plain data (a parsed sweep file) and expand its matrix into cells."""
    if not isinstance(data, Mapping):
        raise SweepFileError(f"{source}: expected a mapping at the top level")
    _unknown(data, _TOP_KEYS, source)
    name = str(data.get("name", ""))
    if not _NAME_RE.match(name):
        raise SweepFileError(f"{source}: `name` must be 1 to 60 letters, digits, '.', '_' or '-' "
                             f"(starting with a letter or digit), got {name!r}")
    backend = str(data.get("backend", "local"))
    if backend not in BACKENDS:
        raise SweepFileError(f"{source}: `backend` must be one of {BACKENDS}, got {backend!r}")
    try:
        sampler = check_sampler(str(data.get("sampler", DEFAULT_SAMPLER)))
    except AdvisorError as exc:
        raise SweepFileError(f"{source}: `sampler`: {exc}") from None
    workers = _int(data, "workers", 1, source, low=1, high=256)
    default_trials = _int(data, "trials", 20, source, low=1, high=10_000)
    warm = data.get("warm_start") or {}
    if not isinstance(warm, Mapping):
        raise SweepFileError(f"{source}: `warm_start` must be a mapping")
    _unknown(warm, {"recommendation", "best_known"}, f"{source}: warm_start")
    drift = data.get("drift") or {}
    if not isinstance(drift, Mapping):
        raise SweepFileError(f"{source}: `drift` must be a mapping")
    _unknown(drift, {"noise_factor", "min_change"}, f"{source}: drift")
    ray = data.get("ray") or {}
    if not isinstance(ray, Mapping):
        raise SweepFileError(f"{source}: `ray` must be a mapping")
    _unknown(ray, {"address", "cpus_per_trial", "gpus_per_trial", "max_failures"},
             f"{source}: ray")
    matrix = data.get("matrix")
    if not isinstance(matrix, list) or not matrix:
        raise SweepFileError(f"{source}: `matrix` must be a non-empty list of entries")
    cells: list[CellSpec] = []
    for i, entry in enumerate(matrix, start=1):
        cells += _expand(entry, f"{source}: matrix entry {i}", default_trials)
    keys = [c.key for c in cells]
    if dupes := sorted({k for k in keys if keys.count(k) > 1}):
        raise SweepFileError(f"{source}: cells appear twice: {', '.join(dupes)}")
    timeout = data.get("trial_timeout_s")
    seed = data.get("seed", 0)
    return SweepSpec(
        name=name, cells=tuple(cells), backend=backend, workers=workers,
        repeats=_int(data, "repeats", 3, source, low=0, high=50), sampler=sampler,
        seed=None if seed is None else _int(data, "seed", 0, source, low=0, high=2**31),
        trial_timeout_s=None if timeout is None else _float(data, "trial_timeout_s", 0, source,
                                                            low=1.0),
        max_consecutive_failures=_int(data, "max_consecutive_failures", 5, source, low=1,
                                      high=10_000),
        warm_start_recommendation=bool(warm.get("recommendation", True)),
        warm_start_best_known=_int(warm, "best_known", 3, f"{source}: warm_start", low=0,
                                   high=100),
        drift=DriftPolicy(
            noise_factor=_float(drift, "noise_factor", 3.0, f"{source}: drift", low=0.0),
            min_change=_float(drift, "min_change", 0.10, f"{source}: drift", low=0.0)),
        ray=RayOptions(
            address=None if ray.get("address") is None else str(ray["address"]),
            cpus_per_trial=_float(ray, "cpus_per_trial", 1.0, f"{source}: ray", low=0.0),
            gpus_per_trial=_float(ray, "gpus_per_trial", 0.0, f"{source}: ray", low=0.0),
            max_failures=_int(ray, "max_failures", 1, f"{source}: ray", low=0, high=100)),
        description=str(data.get("description", "")), raw=dict(data),
    )


def _expand(entry: Any, where: str, default_trials: int) -> list[CellSpec]:
    if not isinstance(entry, Mapping):
        raise SweepFileError(f"{where}: expected a mapping with at least `target` and `slo_tiers`")
    _unknown(entry, _ENTRY_KEYS, where)
    target_name = str(entry.get("target", ""))
    try:
        target = get_target(target_name)
    except AdvisorError as exc:
        raise SweepFileError(f"{where}: {exc}") from None
    tiers = entry.get("slo_tiers")
    if not isinstance(tiers, Mapping) or not tiers:
        raise SweepFileError(f"{where}: `slo_tiers` must map tier names to SLOs, e.g. "
                             f"{{strict: {target.default_slo!r}}}")
    try:
        objective = resolve_objective(target, str(entry.get("objective") or "") or None)
    except AdvisorError as exc:
        raise SweepFileError(f"{where}: objective: {exc}") from None
    slos: dict[str, SLO] = {}
    for tier, text in tiers.items():
        if not _NAME_RE.match(str(tier)):
            raise SweepFileError(f"{where}: SLO tier name {tier!r} must be letters, digits, '.', "
                                 "'_' or '-'")
        try:
            slo = resolve_slo(target, str(text))
        except AdvisorError as exc:
            raise SweepFileError(f"{where}: SLO tier {tier!r}: {exc}") from None
        slos[str(tier)] = slo
    models = entry.get("models") or [None]
    workloads = entry.get("workloads") or [None]
    params = entry.get("workload_params") or {}
    fixed = entry.get("fixed") or {}
    for key, value in (("models", models), ("workloads", workloads)):
        if not isinstance(value, list):
            raise SweepFileError(f"{where}: `{key}` must be a list")
    if not isinstance(params, Mapping) or not isinstance(fixed, Mapping):
        raise SweepFileError(f"{where}: `workload_params` and `fixed` must be mappings")
    if fixed:
        try:
            target.space().validate_config(dict(fixed), fill_defaults=True)
        except AdvisorError as exc:
            raise SweepFileError(f"{where}: fixed: {exc}") from None
    trials = _int(entry, "trials", default_trials, where, low=1, high=10_000)
    repeats = (None if entry.get("repeats") is None
               else _int(entry, "repeats", 0, where, low=0, high=50))
    cells = []
    for model in models:
        overrides = {**params, **({"model": str(model)} if model is not None else {})}
        for wl_name in workloads:
            try:
                wl = resolve_workload(target, None if wl_name is None else str(wl_name),
                                      overrides)
            except AdvisorError as exc:
                raise SweepFileError(f"{where}: {exc}") from None
            for tier, slo in slos.items():
                key = "/".join([target_name, str(model or "-"), wl.name, tier])
                cells.append(CellSpec(key=key, target=target_name,
                                      model=None if model is None else str(model), workload=wl,
                                      tier=tier, slo=slo, objective=objective, trials=trials,
                                      fixed=dict(fixed), repeats=repeats))
    return cells


def _unknown(data: Mapping[str, Any], allowed: set[str], where: str) -> None:
    if extra := sorted(set(map(str, data)) - allowed):
        raise SweepFileError(f"{where}: unknown field(s) {', '.join(extra)}; allowed: "
                             f"{', '.join(sorted(allowed))}")


def _int(data: Mapping[str, Any], key: str, default: int, where: str, *, low: int,
         high: int) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise SweepFileError(f"{where}: `{key}` must be an integer in [{low}, {high}], "
                             f"got {value!r}")
    return value


def _float(data: Mapping[str, Any], key: str, default: float, where: str, *,
           low: float) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < low:
        raise SweepFileError(f"{where}: `{key}` must be a number >= {low}, got {value!r}")
    return float(value)

"""SearchSpace: the declarative knob space of one target, loaded and validated from YAML."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet

from advisor.errors import SearchSpaceError, did_you_mean
from search_spaces.fast_yaml import safe_load
from search_spaces.knobs import Knob, parse_flags

__all__ = ["KNOB_ROLES", "SPACES_DIR", "SearchSpace", "load_space", "machine_value",
           "visible_gpu_count"]

SPACES_DIR = Path(__file__).resolve().parent

_KNOB_FIELDS = {
    "name", "type", "default", "low", "high", "log", "step", "choices", "unit", "help", "stage",
    "flag", "flags", "when", "high_from", "role", "default_without_flag",
}
#: What a knob may declare it holds, for models that need to know (knowledge/batch_sim.py):
#: the most sequences one engine step runs, the tokens one step may compute, whether the
#: engine serves shared prompt prefixes from its cache (objectives/llm/simulation.py), and how
#: many server processes share the work in front of the engine (knowledge/calibrated.py).
KNOB_ROLES = frozenset({"batch_slots", "step_token_budget", "prefix_cache",
                        "frontend_processes"})
_TOP_FIELDS = {"target", "engine", "description", "knobs"}
_STAGES = {"build", "engine", "search", "client"}


@dataclass(frozen=True)
class SearchSpace:
    """An ordered list of knobs; a knob's ``when``/``high_from`` may only name earlier knobs."""

    target: str
    engine: str
    description: str
    knobs: tuple[Knob, ...]
    source: str = "<memory>"

    def __iter__(self) -> Iterator[Knob]:
        return iter(self.knobs)

    def __contains__(self, name: object) -> bool:
        return any(k.name == name for k in self.knobs)

    def knob(self, name: str) -> Knob:
        for k in self.knobs:
            if k.name == name:
                return k
        names = [k.name for k in self.knobs]
        hint = did_you_mean(name, names)
        raise SearchSpaceError(f"{self.target} has no knob {name!r}{hint}" if hint else
                               f"{self.target} has no knob {name!r}; its knobs are: "
                               f"{', '.join(names)}")

    def knob_with_role(self, role: str) -> str | None:
        """The name of the knob declaring ``role`` (:data:`KNOB_ROLES`), None if none does."""
        return next((k.name for k in self.knobs if k.role == role), None)

    def active_knobs(self, config: Mapping[str, Any]) -> list[Knob]:
        """Knobs that apply to ``config`` (conditions evaluated in order)."""
        return [k for k in self.knobs if k.is_active(config)]

    def default_config(self, machine: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The engine defaults as recorded in the YAML, restricted to active knobs.

        A default or bound the YAML names as a machine quantity (``cpu_count``) is this
        machine's, or, given ``machine`` (a hardware fingerprint as trials record it), that
        machine's: the defaults a 16-core host's trials ran with are not a 2-core laptop's."""
        config: dict[str, Any] = {}
        for k in self.knobs:
            if k.is_active(config):
                value = k.default
                if machine is not None and k.machine_default:
                    value = machine_value(k.machine_default, machine, value)
                if k.type in ("int", "float"):
                    low, high = k.bounds(config)
                    if machine is not None and k.machine_high:
                        high = max(low, machine_value(k.machine_high, machine, high))
                    value = min(max(value, low), high)
                config[k.name] = value
        return config

    def validate_config(self, config: Mapping[str, Any], *, fill_defaults: bool = False
                        ) -> dict[str, Any]:
        """Check ``config`` against the space and return it with only active knobs, in order.

        Unknown knobs, values out of range and values for knobs whose conditions do not hold are
        errors (each one named). With ``fill_defaults`` missing active knobs take their default.
        """
        problems: list[str] = []
        names = {k.name for k in self.knobs}
        for name in config:
            if name not in names:
                problems.append(f"unknown knob {name!r}{did_you_mean(name, names)}")
        clean: dict[str, Any] = {}
        for k in self.knobs:
            if not k.is_active(clean):
                if k.name in config:
                    cond = ", ".join(f"{n} in {list(v)}" for n, v in k.when.items())
                    problems.append(f"{k.name!r} only applies when {cond}")
                continue
            if k.name not in config:
                if fill_defaults:
                    clean[k.name] = k.default
                    continue
                problems.append(f"missing value for {k.name!r}")
                continue
            value = config[k.name]
            if k.type == "int" and isinstance(value, float) and value.is_integer():
                value = int(value)
            why = k.check_value(value, clean)
            if why:
                problems.append(f"{k.name}: {why}")
            clean[k.name] = value
        if problems:
            raise SearchSpaceError(
                f"invalid config for target {self.target!r}: " + "; ".join(problems)
            )
        return clean

    @classmethod
    def from_file(cls, path: Path) -> SearchSpace:
        """Load and validate a YAML file; errors name the file and the broken field."""
        try:
            data = safe_load(path.read_text())
        except OSError as exc:
            raise SearchSpaceError(f"cannot read search space {path}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise SearchSpaceError(f"{path}: not valid YAML: {exc}") from None
        return cls.from_dict(data, source=str(path))

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<memory>") -> SearchSpace:
        """Build from plain data, validating every field."""

        def fail(where: str, why: str) -> SearchSpaceError:
            return SearchSpaceError(f"{source}: {where}: {why}")

        if not isinstance(data, Mapping):
            raise fail("top level", "must be a mapping with 'target', 'engine' and 'knobs'")
        for key in data:
            if key not in _TOP_FIELDS:
                raise fail(f"field {key!r}", f"unknown field; allowed: {sorted(_TOP_FIELDS)}")
        for key in ("target", "engine", "knobs"):
            if key not in data:
                raise fail(f"field {key!r}", "is required")
        raw_knobs = data["knobs"]
        if not isinstance(raw_knobs, list) or not raw_knobs:
            raise fail("field 'knobs'", "must be a non-empty list")
        knobs: list[Knob] = []
        seen: dict[str, Knob] = {}
        for i, raw in enumerate(raw_knobs):
            where = f"knobs[{i}]"
            if not isinstance(raw, Mapping):
                raise fail(where, "must be a mapping")
            if "name" in raw:
                where = f"knobs[{i}] ({raw['name']})"
            knob = _parse_knob(raw, seen, lambda field, why, w=where: fail(f"{w}.{field}", why))
            seen[knob.name] = knob
            knobs.append(knob)
        return cls(str(data["target"]), str(data["engine"]), str(data.get("description", "")),
                   tuple(knobs), source)


def _role(value: Any, fail: Any) -> str:
    if value is None:
        return ""
    if value not in KNOB_ROLES:
        raise fail("role", f"must be one of {sorted(KNOB_ROLES)}, got {value!r}")
    return str(value)


def _parse_knob(raw: Mapping[str, Any], earlier: Mapping[str, Knob], fail: Any) -> Knob:
    for key in raw:
        if key not in _KNOB_FIELDS:
            raise fail(key, f"unknown field; allowed: {sorted(_KNOB_FIELDS)}")
    for key in ("name", "type", "default"):
        if key not in raw:
            raise fail(key, "is required")
    name, ktype = str(raw["name"]), raw["type"]
    if not name.isidentifier():
        raise fail("name", f"must be an identifier, got {name!r}")
    if name in earlier:
        raise fail("name", f"duplicate knob {name!r}")
    if ktype not in ("int", "float", "categorical", "bool"):
        raise fail("type", f"must be int, float, categorical or bool, got {ktype!r}")
    stage = raw.get("stage", "engine")
    if stage not in _STAGES:
        raise fail("stage", f"must be one of {sorted(_STAGES)}, got {stage!r}")
    when: dict[str, tuple[Any, ...]] = {}
    for dep, allowed in (raw.get("when") or {}).items():
        if dep not in earlier:
            raise fail("when", f"refers to {dep!r}, which is not an earlier knob")
        values = tuple(allowed) if isinstance(allowed, list) else (allowed,)
        bad = [v for v in values if earlier[dep].check_value(v, {}) is not None
               and earlier[dep].type in ("categorical", "bool")]
        if bad:
            raise fail("when", f"values {bad} are not valid for {dep!r}")
        when[dep] = values
    try:
        flags = parse_flags(raw.get("flags", raw.get("flag")))
        for mapping in flags:
            if mapping.versions:
                SpecifierSet(mapping.versions)
    except (TypeError, KeyError, InvalidSpecifier) as exc:
        raise fail("flags", f"must be a string or a list of {{flag, versions}}: {exc}") from None
    default_without_flag = raw.get("default_without_flag", False)
    if not isinstance(default_without_flag, bool):
        raise fail("default_without_flag", f"must be true or false, got {default_without_flag!r}")
    if default_without_flag and not any(m.versions for m in flags):
        raise fail("default_without_flag", "needs a flag mapping with `versions` (the releases "
                                           "that have the flag)")
    common: dict[str, Any] = dict(
        name=name, type=ktype, default=_resolve_high(raw["default"]), unit=str(raw.get("unit", "")),
        help=str(raw.get("help", "")), stage=stage, flags=flags, when=when,
        role=_role(raw.get("role"), fail), machine_default=_machine_token(raw["default"]),
        machine_high=_machine_token(raw.get("high")), default_without_flag=default_without_flag,
    )
    if ktype == "categorical":
        choices = raw.get("choices")
        if not isinstance(choices, list) or not choices:
            raise fail("choices", "a categorical knob needs a non-empty list of choices")
        if len(set(map(repr, choices))) != len(choices):
            raise fail("choices", "choices must be distinct")
        knob = Knob(**common, choices=tuple(choices))
    elif ktype == "bool":
        knob = Knob(**common)
    else:
        low, high = raw.get("low"), _resolve_high(raw.get("high"))
        for key, value in (("low", low), ("high", high)):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise fail(key, f"a numeric knob needs a number, got {value!r}")
        assert low is not None and high is not None  # checked just above
        if not low <= high:
            raise fail("high", f"`low <= high` must hold, but got (low={low}, high={high})")
        log = bool(raw.get("log", False))
        if log and low <= 0:
            raise fail("low", f"a log-scale knob needs low > 0, got {low}")
        high_from = raw.get("high_from")
        if high_from is not None and high_from not in earlier:
            raise fail("high_from", f"refers to {high_from!r}, which is not an earlier knob")
        knob = Knob(**common, low=low, high=high, log=log, step=raw.get("step"),
                    high_from=high_from)
    why = knob.check_value(knob.default, {})
    if why and not (knob.high_from and knob.type in ("int", "float")):
        raise fail("default", f"default {knob.default!r} {why}")
    return knob


def visible_gpu_count() -> int:
    """The NVIDIA GPUs this process may use, at least 1: ``CUDA_VISIBLE_DEVICES`` when set (as a
    Ray trial's is), else the ``/dev/nvidiaN`` device files. Cheap and engine-free on purpose:
    a space is loaded often, and a wrong count only bounds a knob (the target checks again,
    exactly, before a start)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        return max(1, len([v for v in ids if not v.startswith("-")]))
    devices = [p for p in Path("/dev").glob("nvidia[0-9]*") if p.name[6:].isdigit()]
    return max(1, len(devices))


def machine_value(token: str, machine: Mapping[str, Any], fallback: Any) -> Any:
    """A machine quantity (``cpu_count``: usable cores; ``gpu_count``: GPUs) read from a hardware
    fingerprint (objectives/hardware.py); ``fallback`` where the fingerprint lacks it."""
    if token == "cpu_count":
        value = machine.get("affinity_cpus") or machine.get("cpu_count")
        return int(value) if value else fallback
    if token == "gpu_count":
        gpus = machine.get("gpus")
        return max(1, len(gpus)) if isinstance(gpus, list) else fallback
    return fallback


def _machine_token(value: Any) -> str:
    return value if value in ("cpu_count", "gpu_count") else ""


def _resolve_high(value: Any) -> Any:
    """``cpu_count`` (as ``high`` or ``default``) means this machine's usable cores, ``gpu_count``
    the GPUs it may use (:func:`visible_gpu_count`)."""
    if value == "cpu_count":
        if hasattr(os, "sched_getaffinity"):
            return len(os.sched_getaffinity(0))
        return os.cpu_count() or 1
    if value == "gpu_count":
        return visible_gpu_count()
    return value


def load_space(target: str, directory: Path | None = None) -> SearchSpace:
    """Load ``<directory>/<target>.yaml`` (the shipped spaces by default)."""
    path = (directory or SPACES_DIR) / f"{target}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in (directory or SPACES_DIR).glob("*.yaml"))
        raise SearchSpaceError(f"no search space for target {target!r} at {path}; known: {known}")
    space = SearchSpace.from_file(path)
    if space.target != target:
        raise SearchSpaceError(
            f"{path}: field 'target': says {space.target!r}, expected {target!r}")
    return space

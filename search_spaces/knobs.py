"""Knob types: one tunable engine setting each, with its range, default, unit and engine flag."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from advisor.errors import ConfigRejectedError

__all__ = ["FlagMapping", "Knob", "KnobType"]

KnobType = Literal["int", "float", "categorical", "bool"]
Stage = Literal["build", "engine", "search", "client"]


@dataclass(frozen=True, slots=True)
class FlagMapping:
    """Which engine flag or field a knob maps to, for which engine versions (PEP 440 specifier)."""

    flag: str
    versions: str = ""

    def matches(self, engine_version: str | None) -> bool:
        if not self.versions or engine_version is None:
            return True
        try:
            return Version(engine_version) in SpecifierSet(self.versions)
        except (InvalidVersion, InvalidSpecifier):
            return False


@dataclass(frozen=True)
class Knob:
    """One tunable setting.

    ``when`` makes the knob active only if earlier knobs hold one of the listed values (e.g.
    ``nprobe`` only for IVF indexes). ``high_from`` caps ``high`` by an earlier knob's value
    (``nprobe <= nlist``). ``stage`` says what a change costs: ``build`` knobs force an index or
    engine rebuild, ``search``/``client`` knobs do not.
    """

    name: str
    type: KnobType
    default: Any
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    choices: tuple[Any, ...] = ()
    unit: str = ""
    help: str = ""
    stage: Stage = "engine"
    flags: tuple[FlagMapping, ...] = ()
    when: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    high_from: str | None = None
    #: What the knob holds for models that read it by role (search_spaces/space.py KNOB_ROLES).
    role: str = ""
    #: The machine quantity (``cpu_count``, ``gpu_count``) the YAML names as this knob's default
    #: or upper bound, resolved on this machine in ``default`` / ``high``; a config of another
    #: machine resolves them from that machine's fingerprint (SearchSpace.default_config).
    machine_default: str = ""
    machine_high: str = ""
    #: The engine releases without a flag for this knob behave as its default does (the flag was
    #: added later and its default keeps the older behaviour): there the default runs with the
    #: flag left out, and only another value is a rejected config (:meth:`flag_for_value`).
    default_without_flag: bool = False

    def is_active(self, config: Mapping[str, Any]) -> bool:
        """Whether this knob applies given the values of the knobs it depends on."""
        return all(config.get(name) in allowed for name, allowed in self.when.items())

    def bounds(self, config: Mapping[str, Any]) -> tuple[float, float]:
        """``(low, high)`` for numeric knobs, with ``high`` capped by ``high_from`` if set."""
        assert self.low is not None and self.high is not None
        high = self.high
        if self.high_from is not None and config.get(self.high_from) is not None:
            high = min(high, float(config[self.high_from]))
        return self.low, max(self.low, high)

    def flag_for(self, engine_version: str | None = None) -> str | None:
        """The engine's own flag/field for this knob at ``engine_version`` (None: no mapping)."""
        for mapping in self.flags:
            if mapping.matches(engine_version):
                return mapping.flag
        return None

    def required_flag(self, engine_version: str | None, *, flag_kind: str, release: str) -> str:
        """:meth:`flag_for`, or :class:`~advisor.errors.ConfigRejectedError` naming the versions
        the knob does map to: a config that sets a knob its engine release lacks is a rejected
        config. ``flag_kind`` and ``release`` word the reason in the engine's terms ("vLLM flag",
        "vLLM" reads "has no vLLM flag in vLLM 0.9")."""
        flag = self.flag_for(engine_version)
        if flag is None:
            ranges = ", ".join(f"{m.flag} ({m.versions or 'any'})" for m in self.flags)
            raise ConfigRejectedError(f"knob {self.name} has no {flag_kind} in {release} "
                                      f"{engine_version}; it maps to: {ranges}")
        return flag

    def flag_for_value(self, value: Any, engine_version: str | None, *, flag_kind: str,
                       release: str) -> str | None:
        """The flag to pass ``value`` with at ``engine_version``, or None to leave it out.

        A knob that declares :attr:`default_without_flag` leaves its default out where the
        release has no flag for it, or where the release is unknown (``engine_version`` None: a
        wrapper command or a pasted launch command may run a release without the flag, and
        leaving the default out means the same on every release). Anything else is
        :meth:`required_flag`: a value the release cannot express is a rejected config
        (:class:`~advisor.errors.ConfigRejectedError` saying which releases can)."""
        if self.default_without_flag and _same_value(value, self.default) and (
                engine_version is None or not any(m.matches(engine_version) for m in self.flags)):
            return None
        if self.default_without_flag and self.flag_for(engine_version) is None:
            ranges = ", ".join(f"{m.flag} ({m.versions or 'any'})" for m in self.flags)
            raise ConfigRejectedError(
                f"knob {self.name}={value!r} needs {ranges}, which {release} {engine_version} "
                f"lacks; there only its default ({self.default!r}) runs, with the flag left out")
        return self.required_flag(engine_version, flag_kind=flag_kind, release=release)

    def check_value(self, value: Any, config: Mapping[str, Any]) -> str | None:
        """Return why ``value`` is invalid for this knob, or None when it is valid."""
        if self.type == "categorical":
            return None if value in self.choices else f"must be one of {list(self.choices)}"
        if self.type == "bool":
            return None if isinstance(value, bool) else "must be true or false"
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"must be a number, got {value!r}"
        if isinstance(value, float) and not math.isfinite(value):
            return "must be finite"
        # Integers compare exactly, however long: no float() before the range check.
        if self.type == "int" and isinstance(value, float) and not value.is_integer():
            return f"must be an integer, got {value!r}"
        low, high = self.bounds(config)
        if not low <= value <= high:
            capped = f" (capped by {self.high_from})" if high != self.high else ""
            shown = (repr(value) if abs(value) < 10**15
                     else f"a {len(str(int(abs(value))))}-digit number")
            return f"must be in [{low:g}, {high:g}]{capped}, got {shown}"
        return None

    def grid(self, config: Mapping[str, Any], points: int = 5) -> list[Any]:
        """A small set of values spanning the knob, for exhaustive grids and sensitivity sweeps."""
        if self.type == "categorical":
            return list(self.choices)
        if self.type == "bool":
            return [False, True]
        low, high = self.bounds(config)
        if self.log:
            values = [low * (high / low) ** (i / max(points - 1, 1)) for i in range(points)]
        else:
            values = [low + (high - low) * i / max(points - 1, 1) for i in range(points)]
        if self.type == "int":
            return sorted({round(v) for v in values})
        return sorted(set(values))


def _same_value(a: Any, b: Any) -> bool:
    """Equal as knob values: ``True`` is not ``1`` (bools are their own type here)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return bool(a == b)


def parse_flags(raw: Any) -> tuple[FlagMapping, ...]:
    """``flag: x`` or ``flags: [{flag: x, versions: '<5.18'}, ...]`` -> FlagMapping tuple."""
    if raw is None:
        return ()
    if isinstance(raw, str):
        return (FlagMapping(raw),)
    if isinstance(raw, Sequence):
        return tuple(FlagMapping(str(m["flag"]), str(m.get("versions", ""))) for m in raw)
    raise TypeError("flags must be a string or a list of {flag, versions}")

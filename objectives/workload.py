"""Workload specs: the data a trial is driven with, as plain data with a stable hash.

A workload is ``kind`` (which family of generator reads it, e.g. ``vector-search``) plus a flat
mapping of parameters. Two trials measured on workloads with the same hash saw the same inputs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from advisor.errors import WorkloadError

__all__ = ["Workload", "canonical_json"]


def canonical_json(data: Any) -> str:
    """JSON with sorted keys and no whitespace: the form every hash in the project is taken of."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True)
class Workload:
    """A named, hashed workload spec.

    ``params`` is interpreted by the target family named in ``kind``; the target validates it
    and raises :class:`WorkloadError` for anything it cannot use.
    """

    kind: str
    name: str
    params: Mapping[str, Any] = field(default_factory=dict)

    @property
    def spec(self) -> dict[str, Any]:
        """The full spec as plain data (what is stored with every trial)."""
        return {"kind": self.kind, "name": self.name, "params": dict(self.params)}

    @property
    def spec_hash(self) -> str:
        """sha256 of the canonical spec, 16 hex digits: equal hashes mean equal inputs."""
        return hashlib.sha256(canonical_json(self.spec).encode()).hexdigest()[:16]

    def with_params(self, **overrides: Any) -> Workload:
        """A copy with some parameters replaced (e.g. ``n_base=1000`` for a smaller corpus)."""
        return Workload(self.kind, self.name, {**self.params, **overrides})

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> Workload:
        """Build from plain data, as stored by :attr:`spec` or written in a YAML file."""
        try:
            kind, name = str(spec["kind"]), str(spec.get("name", spec["kind"]))
        except KeyError as exc:
            raise WorkloadError(f"workload spec lacks the field {exc.args[0]!r}") from None
        params = spec.get("params", {})
        if not isinstance(params, Mapping):
            raise WorkloadError(f"workload 'params' must be a mapping, got {type(params).__name__}")
        return cls(kind, name, dict(params))

    @classmethod
    def from_file(cls, path: Path) -> Workload:
        """Load a workload from a YAML or JSON file."""
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except UnicodeDecodeError as exc:
            raise WorkloadError(f"workload file {path} is not UTF-8 text (byte {exc.start}: "
                                f"{exc.reason})") from None
        except (OSError, yaml.YAMLError) as exc:
            why = " ".join(str(exc).split())  # YAML's messages span lines; errors are one line
            raise WorkloadError(f"cannot read workload file {path}: {why}") from None
        if not isinstance(data, Mapping):
            raise WorkloadError(f"workload file {path} must hold a mapping")
        return cls.from_spec(data)

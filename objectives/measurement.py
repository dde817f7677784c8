"""What one trial measured: summary metrics plus the context needed to trust them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Measurement"]


@dataclass(frozen=True)
class Measurement:
    """The result of one successful trial.

    ``metrics`` uses names from :mod:`objectives.metrics`. ``engine_versions`` maps package to
    version for everything that shaped the numbers; ``details`` holds per-trial facts worth keeping
    (whether a build came from the cache, sample counts, whether the data was synthetic).
    """

    metrics: Mapping[str, float]
    engine_versions: Mapping[str, str]
    details: Mapping[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["metrics"] = dict(self.metrics)
        d["engine_versions"] = dict(self.engine_versions)
        d["details"] = dict(self.details)
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Measurement:
        return cls(
            metrics={k: float(v) for k, v in data["metrics"].items()},
            engine_versions=dict(data.get("engine_versions", {})),
            details=dict(data.get("details", {})),
            duration_s=float(data.get("duration_s", 0.0)),
        )

"""Host paths out of what the open endpoints return.

Trial errors carry log tails, and workload specs may name a local model directory or trace file:
absolute paths of the serving host (its user names, its layout) that anyone who can read
``GET /v1/trials`` would learn. Each path keeps its last component, which is what a reader needs
to recognise it (``.../tiny-llama``, ``.../log.txt``); the store keeps the full text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["redact_paths"]

# An absolute POSIX path of two or more components, not preceded by a word character, a dot or
# a slash (so URLs' paths stay: "http://host/v1/x" has "/" after ":" and host characters).
_PATH = re.compile(r"(?<![\w.:/~-])/(?:[\w.@+~-]+/)+([\w.@+~-]+)")


def redact_paths(value: Any) -> Any:
    """``value`` with every absolute path in its strings shortened to ``.../<last part>``."""
    if isinstance(value, str):
        return _PATH.sub(lambda m: f".../{m.group(1)}", value)
    if isinstance(value, Mapping):
        return {k: redact_paths(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_paths(v) for v in value]
    return value

"""Which measured trials may be used: the one rule deciding whether a measurement's validity
label lets it into the knowledge base's models, answers and "best" figures.

A measurement carries ``details["validity"]`` when its target can cross-check itself (an LLM
serving target compares its client timings with the server's own metrics). Usable labels:
absent (targets with no client/server split, e.g. an in-process vector index), ``"valid"``
(checked and agreeing), ``"frontend_delay"`` (a healthy client read more than the server's
histograms: latency before they start) and ``"unchecked"`` (the engine exposes no independent
server-side timing; kept, labelled). Every other label (``"client_bound"``,
``"server_disagrees"``, ``"legacy_unverified"``, ...) makes the trial ``invalid``: stored with its
metrics and reason, never used.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["USABLE_VALIDITY", "VALIDITY_KEY", "invalid_reason", "is_usable", "validity_of"]

#: The details key a measurement's validity label is stored under.
VALIDITY_KEY = "validity"
#: Labels whose measurements are used (an absent label is usable too): checked and agreeing,
#: nothing independent to check against, or a healthy client that saw latency on top of the
#: server's own histograms (the frontend's delay, real latency: objectives/llm/validity.py).
USABLE_VALIDITY = frozenset({"valid", "unchecked", "frontend_delay"})


def validity_of(details: Mapping[str, Any] | None) -> str | None:
    """The validity label in ``details`` (``None`` when the target attached none)."""
    if not details:
        return None
    value = details.get(VALIDITY_KEY)
    if value is None:
        return None
    if isinstance(value, Mapping):  # {"status": "client_bound", "reason": "..."} is accepted too
        status = value.get("status")
        return None if status is None else str(status)
    return str(value)


def is_usable(details: Mapping[str, Any] | None) -> bool:
    """Whether a measurement with these details may enter models, answers and "best"."""
    label = validity_of(details)
    return label is None or label in USABLE_VALIDITY


def invalid_reason(details: Mapping[str, Any] | None) -> str | None:
    """Why a measurement is unusable (its label, with the gate's explanation when it gave one),
    or ``None`` when it is usable."""
    if is_usable(details):
        return None
    label = validity_of(details)
    assert details is not None and label is not None
    why = details.get("validity_reason")
    if why is None and details.get("validity_reasons"):
        why = "; ".join(str(r) for r in details["validity_reasons"][:3])
    raw = details.get(VALIDITY_KEY)
    if why is None and isinstance(raw, Mapping):
        why = raw.get("reason")
    return f"{label}: {why}" if why else label

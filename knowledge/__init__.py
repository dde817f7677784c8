"""The knowledge base: the trial store (SQLModel on SQLite or PostgreSQL), the surrogate models
fitted on it (surrogate.py, cache.py), rules of thumb (rules.py) and the cheat-sheet renderers
(render.py). Never imports an engine or optuna.

The store's names are loaded on first use (PEP 562), not with the package: importing a light
module of it (``knowledge.model_choices``, or ``TrialStatus`` from here, which the command line
reads for ``--help``) must not load SQLModel and SQLAlchemy, a third of a second of every
``advisor`` start."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from knowledge.models import SLOMarginRecord, StudyRecord, TrialRecord
    from knowledge.statuses import StudyStatus, TrialStatus
    from knowledge.store import TrialFilter, TrialStore

__all__ = ["SLOMarginRecord", "StudyRecord", "StudyStatus", "TrialFilter", "TrialRecord",
           "TrialStatus", "TrialStore"]

#: Where each re-exported name is defined.
_HOMES = {"SLOMarginRecord": "knowledge.models", "StudyRecord": "knowledge.models",
          "StudyStatus": "knowledge.statuses", "TrialRecord": "knowledge.models",
          "TrialStatus": "knowledge.statuses", "TrialFilter": "knowledge.store",
          "TrialStore": "knowledge.store"}


def __getattr__(name: str) -> Any:
    """``knowledge.TrialStore`` and the other re-exports, imported from their module the first
    time one is asked for (then kept in this module, so later lookups are plain)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value

"""The knowledge base: the trial store (SQLModel on SQLite or PostgreSQL), the surrogate models
fitted on it (surrogate.py, cache.py), rules of thumb (rules.py) and the cheat-sheet renderers
(render.py). Never imports an engine or optuna."""

from __future__ import annotations

from knowledge.models import SLOMarginRecord, StudyRecord, StudyStatus, TrialRecord, TrialStatus
from knowledge.store import TrialFilter, TrialStore

__all__ = ["SLOMarginRecord", "StudyRecord", "StudyStatus", "TrialFilter", "TrialRecord",
           "TrialStatus", "TrialStore"]

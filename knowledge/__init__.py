"""The knowledge base: the trial store (SQLModel on SQLite or PostgreSQL) and, later, the
surrogate models and cheat-sheet built from it. Never imports an engine."""

from __future__ import annotations

from knowledge.models import SLOMarginRecord, StudyRecord, StudyStatus, TrialRecord, TrialStatus
from knowledge.store import TrialFilter, TrialStore

__all__ = ["SLOMarginRecord", "StudyRecord", "StudyStatus", "TrialFilter", "TrialRecord",
           "TrialStatus", "TrialStore"]

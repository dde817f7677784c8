"""Reads of the store answered in one place: paged and counted lists for the REST API (one query
per page, one per count), and a study's best feasible trial, the one definition of "best" that
the driver, the sweeps, the REST API and the CLI share (as ``optuna.Study.best_trial`` is
Optuna's)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import func
from sqlmodel import col, select

from knowledge.models import StudyRecord, TrialRecord, TrialStatus
from knowledge.store import TrialFilter, TrialStore

__all__ = ["StudyCounts", "best_feasible", "best_feasible_of_study", "page_studies", "page_trials",
           "study_counts"]


@dataclass(frozen=True)
class StudyCounts:
    trials: int = 0
    complete: int = 0
    failed: int = 0
    feasible: int = 0
    invalid: int = 0

    @property
    def finished(self) -> int:
        return self.complete + self.failed + self.invalid


def study_counts(store: TrialStore, study_ids: Sequence[int]) -> dict[int, StudyCounts]:
    """Trial counts per study, for the given studies, in one grouped query."""
    if not study_ids:
        return {}
    with store.session() as s:
        q = select(TrialRecord.study_id, TrialRecord.status, TrialRecord.feasible,
                   func.count()).where(col(TrialRecord.study_id).in_(list(study_ids))).group_by(
            col(TrialRecord.study_id), col(TrialRecord.status), col(TrialRecord.feasible))
        rows = list(s.exec(q))
    acc: dict[int, dict[str, int]] = {}
    for study_id, status, feasible, n in rows:
        c = acc.setdefault(study_id, {"trials": 0, "complete": 0, "failed": 0, "feasible": 0,
                                      "invalid": 0})
        c["trials"] += n
        if status == TrialStatus.COMPLETE:
            c["complete"] += n
            c["feasible"] += n if feasible else 0
        elif status == TrialStatus.FAILED:
            c["failed"] += n
        elif status == TrialStatus.INVALID:
            c["invalid"] += n
    return {sid: StudyCounts(**c) for sid, c in acc.items()}


def page_studies(store: TrialStore, *, target: str | None = None, status: str | None = None,
                 limit: int = 50, offset: int = 0) -> tuple[list[StudyRecord], int]:
    """Studies, oldest first, and how many match in total."""
    with store.session() as s:
        q = select(StudyRecord)
        n = select(func.count()).select_from(StudyRecord)
        for field, value in ((StudyRecord.target, target), (StudyRecord.status, status)):
            if value is not None:
                q, n = q.where(field == value), n.where(field == value)
        rows = list(s.exec(q.order_by(col(StudyRecord.id)).offset(offset).limit(limit)))
        return rows, int(s.exec(n).one())


def page_trials(store: TrialStore, flt: TrialFilter) -> tuple[list[TrialRecord], int]:
    """Trials matching ``flt`` (its limit/offset applied), oldest first, and the total."""
    return store.list_trials(flt), store.count_matching(flt)


def best_feasible(trials: Iterable[TrialRecord], direction: str, *,
                  exclude: Callable[[TrialRecord], bool] | None = None) -> TrialRecord | None:
    """The best of ``trials`` that completed and met the SLO, by objective value in
    ``direction`` (``"maximize"`` or ``"minimize"``): of equal values the first, in the order
    given. ``exclude`` leaves trials out (a paired re-measurement, say). None when none met it."""
    if direction not in ("maximize", "minimize"):
        raise ValueError(f"`direction` must be 'maximize' or 'minimize', but got {direction!r}")
    best: TrialRecord | None = None
    for t in trials:
        if (t.status != TrialStatus.COMPLETE or not t.feasible or t.objective_value is None
                or (exclude is not None and exclude(t))):
            continue
        if best is None or (t.objective_value > best.objective_value  # type: ignore[operator]
                            if direction == "maximize"
                            else t.objective_value < best.objective_value):  # type: ignore[operator]
            best = t
    return best


def best_feasible_of_study(store: TrialStore, study: StudyRecord) -> TrialRecord | None:
    """The best feasible trial of ``study`` by its own objective (:func:`best_feasible`)."""
    return best_feasible(store.trials_of_study(study.id or 0, [TrialStatus.COMPLETE]),
                         study.objective_direction)

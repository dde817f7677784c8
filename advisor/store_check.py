"""`advisor store check`: what is wrong with a trial store, on demand.

Two checks: SQLite's full ``integrity_check`` of the file (a PostgreSQL store is left to its own
server), and the agreement of Optuna's tables with the advisor's, both in the same database:
every stored trial that Optuna asked for must be in the matching state there (complete with
COMPLETE; failed, invalid or interrupted with FAIL; running with RUNNING), and Optuna must have
no running trial the advisor never recorded. A driver killed mid-trial leaves such a
disagreement until ``advisor tune ... --resume`` reconciles the study.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from sqlalchemy import inspect, text

from knowledge.models import TrialStatus
from knowledge.store import TrialStore, check_sqlite_file, sqlite_path

__all__ = ["StoreReport", "check_consistency", "check_integrity"]

#: The Optuna trial states a stored trial's status agrees with.
_AGREES: dict[str, tuple[str, ...]] = {
    TrialStatus.RUNNING: ("RUNNING",),
    TrialStatus.COMPLETE: ("COMPLETE",),
    TrialStatus.FAILED: ("FAIL", "PRUNED"),
    TrialStatus.INVALID: ("FAIL", "PRUNED"),
    TrialStatus.INTERRUPTED: ("FAIL", "PRUNED"),
}


@dataclass
class StoreReport:
    """What :func:`check_integrity` and :func:`check_consistency` found (empty: nothing)."""

    integrity: list[str] = field(default_factory=list)
    #: Per study name, its trials whose state differs between Optuna and the store.
    disagreements: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.integrity and not self.disagreements


def check_integrity(url: str) -> list[str] | None:
    """SQLite's ``integrity_check`` problems of the store file at ``url`` ([] when sound), or
    None for a database SQLite does not hold. Raises :class:`~advisor.errors.StoreError` when
    the file is not a database SQLite can read."""
    path = sqlite_path(url)
    return None if path is None else check_sqlite_file(path, full=True)


def check_consistency(store: TrialStore) -> dict[str, list[str]]:
    """Per study, one line for each trial whose state Optuna and the store disagree on."""
    if not inspect(store.engine).has_table("trials"):  # no study was ever run by Optuna here
        return {}
    found: dict[str, list[str]] = defaultdict(list)
    with store.engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT s.name, t.number, t.status, o.state, t.optuna_trial_id "
            "FROM advisor_trial t JOIN advisor_study s ON s.id = t.study_id "
            "LEFT JOIN trials o ON o.trial_id = t.optuna_trial_id "
            "WHERE t.optuna_trial_id IS NOT NULL AND t.swept_from IS NULL "
            "ORDER BY s.name, t.number")).all()
        for study, number, status, state, optuna_id in rows:
            if state is None:
                found[study].append(f"trial {number}: {status} in the store, its Optuna trial "
                                    f"{optuna_id} is missing")
            elif state not in _AGREES.get(status, ()):
                found[study].append(f"trial {number}: {status} in the store, {state} in Optuna")
        orphans = conn.execute(text(
            "SELECT st.study_name, o.number FROM trials o "
            "JOIN studies st ON st.study_id = o.study_id "
            "JOIN advisor_study s ON s.name = st.study_name "
            "WHERE o.state = 'RUNNING' AND NOT EXISTS (SELECT 1 FROM advisor_trial t "
            "WHERE t.optuna_trial_id = o.trial_id) ORDER BY st.study_name, o.number")).all()
        for study, number in orphans:
            found[study].append(f"Optuna trial {number}: RUNNING in Optuna, not in the store")
    return dict(found)

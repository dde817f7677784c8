"""How a study's trials count against its search budget, written once for the driver, the CLI's
progress bar and summary, and the API's job progress.

A study is asked for ``search_trials`` search trials (``advisor tune --trials``). Two kinds of
trial take a slot of the study's store budget without being search trials:

- the closing paired repeats (advisor/pairing.py), counted apart as ``repeats``;
- configs the failure gate skipped (advisor/failure_gate.py: stored failed as
  ``predicted_failure``, no engine started). They are *free* up to
  :data:`FREE_SKIP_SHARE` of the search budget (one free skip per budgeted trial), so a gate that
  keeps proposing a region it predicts to fail cannot spend the search; past that share each
  skip is charged like a trial, so a study always ends.

Replaying a study's finished trials in order (:meth:`BudgetTally.of`) gives the same split the
driver made while it ran them, so a resumed study, the progress bar and the summary agree.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from advisor.pairing import is_paired
from knowledge import TrialRecord, TrialStatus
from knowledge.failures import PREDICTED_FAILURE

__all__ = ["FREE_SKIP_SHARE", "OTHER", "REPEAT", "SEARCH", "SKIP", "BudgetTally",
           "free_skip_allowance"]

#: Skips free of charge, as a share of the search budget (1.0: one per budgeted trial).
FREE_SKIP_SHARE = 1.0

SEARCH, REPEAT, SKIP, OTHER = "search", "repeat", "skip", "other"


def free_skip_allowance(search_trials: int) -> int:
    """How many gate skips a study of ``search_trials`` search trials is not charged for."""
    return int(FREE_SKIP_SHARE * search_trials)


@dataclass
class BudgetTally:
    """A study's finished trials split into search trials (charged skips included), paired
    repeats and free skips."""

    search_trials: int
    search_done: int = 0
    repeats_done: int = 0
    skipped_free: int = 0
    skipped_charged: int = 0

    @classmethod
    def of(cls, search_trials: int, trials: Iterable[TrialRecord]) -> BudgetTally:
        """The tally of ``trials`` (a study's, any order) for a search of ``search_trials``."""
        tally = cls(search_trials)
        for t in sorted(trials, key=lambda t: t.number):
            tally.add(t)
        return tally

    @property
    def skipped(self) -> int:
        return self.skipped_free + self.skipped_charged

    @property
    def search_left(self) -> int:
        return max(0, self.search_trials - self.search_done)

    @property
    def slots_used(self) -> int:
        """Slots of the store budget these trials took (every finished, not swept trial)."""
        return self.search_done + self.repeats_done + self.skipped_free

    def add(self, trial: TrialRecord) -> str:
        """Count one trial; returns how it counted: ``search``, ``repeat``, ``skip`` (free) or
        ``other`` (still running, or a setting a search sweep measured beside its trial)."""
        if trial.swept_from is not None or trial.status not in TrialStatus.FINISHED:
            return OTHER
        if is_paired(trial):
            self.repeats_done += 1
            return REPEAT
        if trial.error_type == PREDICTED_FAILURE:
            if self.skipped_free < free_skip_allowance(self.search_trials):
                self.skipped_free += 1
                return SKIP
            self.skipped_charged += 1
        self.search_done += 1
        return SEARCH

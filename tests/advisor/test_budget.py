"""How a study's trials count against its search budget: search trials (charged skips
included), the closing paired repeats apart, and gate skips free up to one per budgeted trial."""

from __future__ import annotations

from typing import Any

from advisor.budget import REPEAT, SEARCH, SKIP, BudgetTally, free_skip_allowance
from knowledge import TrialRecord, TrialStatus
from knowledge.failures import PREDICTED_FAILURE


def _trial(number: int, status: str = TrialStatus.COMPLETE, *, error_type: str | None = None,
           details: dict[str, Any] | None = None, swept_from: int | None = None) -> TrialRecord:
    return TrialRecord(study_id=1, number=number, target="t", config={}, config_hash="c",
                       workload_spec={}, workload_hash="w", hardware={}, hardware_key="h",
                       advisor_version="0", status=status, error_type=error_type,
                       details=details or {}, swept_from=swept_from)


def test_repeats_and_free_skips_take_no_search_slot() -> None:
    tally = BudgetTally(3)
    kinds = [tally.add(t) for t in (
        _trial(0), _trial(1, TrialStatus.FAILED, error_type=PREDICTED_FAILURE),
        _trial(2, TrialStatus.FAILED, error_type="crash"), _trial(3, TrialStatus.INVALID),
        _trial(4, details={"role": "paired-best"}), _trial(5, details={"role": "paired-default"}),
        _trial(6, TrialStatus.RUNNING), _trial(7, swept_from=0),
        _trial(8, TrialStatus.INTERRUPTED))]
    assert kinds == [SEARCH, SKIP, SEARCH, SEARCH, REPEAT, REPEAT, "other", "other", "other"]
    assert (tally.search_done, tally.repeats_done, tally.skipped_free) == (3, 2, 1)
    assert tally.search_left == 0 and tally.slots_used == 6


def test_skips_past_the_free_share_are_charged() -> None:
    budget = 4
    skips = [_trial(n, TrialStatus.FAILED, error_type=PREDICTED_FAILURE)
             for n in range(free_skip_allowance(budget) + 3)]
    tally = BudgetTally.of(budget, reversed(skips))  # replayed in trial order, whatever given
    assert tally.skipped_free == free_skip_allowance(budget) == budget
    assert tally.skipped_charged == 3 and tally.search_done == 3
    assert tally.skipped == len(skips)

"""The API's one adapter to the knowledge layer (recommender, fitted models, cheat-sheet).

Every call into ``advisor.recommend`` / ``advisor.cheatsheet`` goes through :class:`Knowledge`, so
a change of their interface is absorbed here. It keeps the fitted models and the built cheat-sheet
in memory and rebuilds them when the store gained trials (checked at most every
``api_refresh_interval_s``), so a cheat-sheet value is a lookup, not a refit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from sqlalchemy import func
from sqlmodel import select

from advisor.errors import AdvisorError
from advisor.objective import Objective
from advisor.recommend import recommend_measured
from knowledge import TrialRecord, TrialStatus, TrialStore
from objectives import parse_slo
from objectives.registry import get_target

__all__ = ["Knowledge"]

log = logging.getLogger(__name__)


class CheatSheetUnavailableError(AdvisorError):
    """The cheat-sheet builder is not part of this installation."""


class Knowledge:
    """Recommendations and cheat-sheet answers over one store, with cached models."""

    def __init__(self, store: TrialStore, *, refresh_interval_s: float = 2.0) -> None:
        self.store, self.refresh_interval_s = store, refresh_interval_s
        self._lock = threading.Lock()
        self._checked_at = float("-inf")
        self._fingerprint: tuple[int, int] | None = None

    # cache -----------------------------------------------------------------------------------

    def _store_fingerprint(self) -> tuple[int, int]:
        with self.store.session() as s:
            n, last = s.exec(select(func.count(), func.max(TrialRecord.id)).where(
                TrialRecord.status == TrialStatus.COMPLETE)).one()
        return int(n or 0), int(last or 0)

    def refresh(self, *, force: bool = False) -> None:
        """Drop cached models and cheat-sheets if the store changed since they were built."""
        now = time.monotonic()
        if not force and now - self._checked_at < self.refresh_interval_s:
            return
        with self._lock:
            self._checked_at = now
            fingerprint = self._store_fingerprint()
            if force or fingerprint != self._fingerprint:
                self._fingerprint = fingerprint
                self._invalidate()

    def _invalidate(self) -> None:
        pass

    # recommendations -------------------------------------------------------------------------

    def recommend(self, *, target: str, slo: str, objective: str | None, hardware: str | None,
                  model: str | None, workload: Mapping[str, Any]) -> dict[str, Any]:
        """The answer to one SLO question, in the fields of ``RecommendationPublic``."""
        self.refresh()
        tgt = get_target(target)
        parsed = parse_slo(slo)
        obj = Objective.parse(objective or tgt.default_objective)
        rec = recommend_measured(self.store, target=target, slo=parsed, objective=obj,
                                 hardware_key=hardware)
        raw = rec.to_dict()
        if rec.trial is not None:
            status = "recommended"
        elif rec.considered:
            status = "no_feasible_config"
        else:
            status = "not_covered"
        best = raw["recommended"]
        return {
            "status": status, "basis": "measured", "target": target, "slo": str(parsed),
            "objective": str(obj), "config": best["config"] if best else None,
            "predicted": {}, "launch_command": rec.launch_command,
            "evidence": {"trials_considered": rec.considered,
                         "trials_meeting_slo": rec.feasible_count,
                         "trial_id": best["trial_id"] if best else None,
                         "measured": best["metrics"] if best else None},
            "confidence": None, "borrowed_workload": None, "tune_command": rec.tune_command,
            "message": "measured evidence only: the best stored trial meeting the SLO, no "
                       "predictions", "raw": raw,
        }

    # cheat-sheet -----------------------------------------------------------------------------

    def cheatsheet(self, **filters: str | None) -> Any:
        self.refresh()
        raise CheatSheetUnavailableError("the cheat-sheet is not available in this build")

    def knob_value(self, knob: str, **filters: str | None) -> dict[str, Any]:
        self.refresh()
        raise CheatSheetUnavailableError("the cheat-sheet is not available in this build")

"""The API's one adapter to the knowledge layer (fitted models, recommender, cheat-sheet).

Every call into ``advisor.recommend`` / ``advisor.cheatsheet`` / ``knowledge.cache`` goes through
:class:`Knowledge`, so a change of their interface is absorbed here. It holds the fitted models
(one :class:`~knowledge.cache.ModelCache`), the built cheat-sheets and recent answers in memory.
At most every ``refresh_interval_s`` it asks the store whether trials were added (one aggregate
query); if so the models are refitted and every cached sheet and answer is dropped. Between
checks a repeated question or a cheat-sheet value is a dictionary lookup.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from advisor.cheatsheet import CheatSheet, build_cheatsheet, knob_value
from advisor.recommend import RecommendationQuery, recommend
from knowledge import TrialStore
from knowledge.cache import KnowledgeModels, ModelCache

__all__ = ["Knowledge"]

log = logging.getLogger(__name__)
_MAX_ANSWERS = 2048


class Knowledge:
    """Recommendations and cheat-sheet answers over one store, with cached models."""

    def __init__(self, store: TrialStore, *, cache_dir: Path | None = None,
                 refresh_interval_s: float = 2.0) -> None:
        self.store, self.refresh_interval_s = store, refresh_interval_s
        self._cache = ModelCache(store, cache_dir)
        self._lock = threading.RLock()
        self._checked_at = float("-inf")
        self._models: KnowledgeModels | None = None
        self._sheets: dict[tuple[Any, ...], CheatSheet] = {}
        self._answers: OrderedDict[tuple[str, str], dict[str, Any]] = OrderedDict()

    # cache -----------------------------------------------------------------------------------

    def models(self) -> KnowledgeModels:
        """The current fitted models; checks the store for new trials at most every
        ``refresh_interval_s`` (refitting and dropping cached answers when it changed)."""
        now = time.monotonic()
        models = self._models
        if models is not None and now - self._checked_at < self.refresh_interval_s:
            return models
        with self._lock:
            if self._models is not None and now - self._checked_at < self.refresh_interval_s:
                return self._models
            fresh = self._cache.get()
            if fresh is not self._models:
                log.info("knowledge models (re)loaded: %d trials, %d contexts",
                         fresh.data.trials, len(fresh.contexts))
                self._sheets.clear()
                self._answers.clear()
                self._models = fresh
            self._checked_at = time.monotonic()
            return fresh

    def _answer(self, kind: str, key: Mapping[str, Any], compute: Any) -> dict[str, Any]:
        models = self.models()
        cache_key = (kind, json.dumps(key, sort_keys=True, default=str))
        with self._lock:
            if self._models is models and (hit := self._answers.get(cache_key)) is not None:
                self._answers.move_to_end(cache_key)
                return hit
        answer: dict[str, Any] = compute(models)
        with self._lock:
            if self._models is models:
                self._answers[cache_key] = answer
                while len(self._answers) > _MAX_ANSWERS:
                    self._answers.popitem(last=False)
        return answer

    # recommendations -------------------------------------------------------------------------

    def recommend(self, *, target: str, slo: str, objective: str | None, hardware: str | None,
                  model: str | None, workload: Mapping[str, Any]) -> dict[str, Any]:
        """The answer to one SLO question, in the fields of ``RecommendationPublic``."""
        query = RecommendationQuery(target=target, slo=slo, hardware=hardware, model=model,
                                    workload=dict(workload), objective=objective)

        def compute(models: KnowledgeModels) -> dict[str, Any]:
            raw = recommend(self.store, query, models=models).to_dict()
            return {
                "status": raw["status"], "basis": raw.get("basis", "model"),
                "target": raw["target"], "slo": raw["slo"], "objective": raw.get("objective"),
                "config": raw.get("config"), "predicted": raw.get("predicted") or {},
                "evidence": raw.get("evidence"), "launch_command": raw.get("launch_command"),
                "confidence": raw.get("confidence"),
                "borrowed_workload": raw.get("borrowed_workload"),
                "tune_command": raw.get("tune_command"),
                "message": raw.get("confidence_reason"), "raw": raw,
            }

        return self._answer("recommend", query.__dict__, compute)

    # cheat-sheet -----------------------------------------------------------------------------

    def cheatsheet(self, *, target: str | None = None, hardware: str | None = None,
                   model: str | None = None, workload_class: str | None = None,
                   tier: str | None = None) -> CheatSheet:
        """The cheat-sheet for these filters, built once per model version."""
        models = self.models()
        key = (target, hardware, model, workload_class, tier)
        with self._lock:
            if self._models is models and (sheet := self._sheets.get(key)) is not None:
                return sheet
        sheet = build_cheatsheet(self.store, target=target, hardware=hardware, model=model,
                                 workload_class=workload_class, tier=tier, models=models)
        with self._lock:
            if self._models is models:
                self._sheets[key] = sheet
        return sheet

    def knob_value(self, knob: str, *, target: str, hardware: str | None = None,
                   model: str | None = None, workload_class: str | None = None,
                   tier: str | None = "standard") -> dict[str, Any]:
        """One knob's value for a context: a lookup in the target's cached sheet."""
        tier = tier or "standard"
        key = {"knob": knob, "target": target, "hardware": hardware, "model": model,
               "workload_class": workload_class, "tier": tier}

        def compute(models: KnowledgeModels) -> dict[str, Any]:
            sheet = self.cheatsheet(target=target)
            raw = knob_value(sheet, knob, target=target, hardware=hardware, model=model,
                             workload_class=workload_class, tier=tier)
            return {"knob": knob, "target": target, "found": True, "value": raw.get("value"),
                    "row": raw, "raw": raw}

        return self._answer("knob", key, compute)

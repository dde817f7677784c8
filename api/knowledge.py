"""The API's one adapter to the knowledge layer (fitted models, recommender, cheat-sheet).

Every call into ``advisor.answers`` / ``advisor.cheatsheet`` / ``knowledge.cache`` goes through
:class:`Knowledge`, so a change of their interface is absorbed here. It holds the fitted models
(one :class:`~knowledge.cache.ModelCache`), the built cheat-sheets and recent answers in memory.
At most every ``refresh_interval_s`` it asks the store whether trials were added (one aggregate
query); if so the models are refitted in the background while the current ones keep answering,
then every cached sheet and answer is dropped. Between checks a repeated question or a
cheat-sheet value is a dictionary lookup.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from advisor.answers import RecommendationRequest, plan_recommendation
from advisor.cheatsheet import CheatSheet, build_cheatsheet, knob_value
from advisor.errors import (
    AdvisorError,
    NotFoundError,
    NotReadyError,
    SLOParseError,
    UnknownTargetError,
    WorkloadError,
)
from api.schemas import CheatSheetValuePublic
from knowledge import TrialStore
from knowledge.cache import KnowledgeModels, ModelCache, data_key

__all__ = ["Knowledge"]

log = logging.getLogger(__name__)
_MAX_ANSWERS = 2048
#: Filtered cheat-sheets kept (each distinct filter set is built once; bounded so that varied
#: filters cannot grow memory without limit).
_MAX_SHEETS = 32


class Knowledge:
    """Recommendations and cheat-sheet answers over one store, with cached models."""

    def __init__(self, store: TrialStore, *, cache_dir: Path | None = None,
                 shared_model_dir: Path | None = None, refresh_interval_s: float = 2.0) -> None:
        self.store, self.refresh_interval_s = store, refresh_interval_s
        self._cache = ModelCache(store, cache_dir, shared_dir=shared_model_dir)
        self._lock = threading.RLock()
        self._checked_at = float("-inf")
        self._models: KnowledgeModels | None = None
        self._refit: threading.Thread | None = None
        self._warming: threading.Thread | None = None
        self._warming_since = 0.0
        self._warm_error: AdvisorError | None = None
        self._sheets: OrderedDict[tuple[Any, ...], CheatSheet] = OrderedDict()
        self._answers: OrderedDict[tuple[str, str], bytes | AdvisorError] = OrderedDict()
        #: Answers that need no fitted models, with the store version they were computed on.
        self._direct_answers: OrderedDict[tuple[str, str], tuple[Any, bytes]] = OrderedDict()
        self._failure_dir = cache_dir

    # cache -----------------------------------------------------------------------------------

    def warm_up(self, on_ready: Callable[[KnowledgeModels], None] | None = None) -> None:
        """Fit (or load) the models in a background thread, so the service answers its probes
        at once; until they are ready, answers that need them raise :class:`NotReadyError`
        (503 with ``Retry-After``) instead of blocking. ``on_ready`` is called with them."""
        def fit() -> None:
            try:
                models = self._cache.get()
            except AdvisorError as exc:  # answered on the next request, which fits inline
                self._warm_error = exc
                log.warning("fitting the knowledge models failed: %s", exc)
                return
            self._install(models)
            if on_ready is not None:
                on_ready(models)

        self._warming_since = time.monotonic()
        self._warming = threading.Thread(target=fit, name="knowledge-warm-up", daemon=True)
        self._warming.start()

    @property
    def warming(self) -> bool:
        """Whether the first fit is still running in the background (:meth:`warm_up`)."""
        return self._models is None and self._warming is not None and self._warming.is_alive()

    def models(self) -> KnowledgeModels:
        """The current fitted models. The first call fits (or loads) them — or, while
        :meth:`warm_up` is fitting them, raises :class:`NotReadyError`. Later calls check the
        store for new trials at most every ``refresh_interval_s`` (one aggregate query); when it
        changed, a background thread refits while the current models keep answering, then the
        new models replace them and every cached sheet and answer is dropped."""
        models = self._models
        if models is not None and time.monotonic() - self._checked_at < self.refresh_interval_s:
            return models
        if self.warming:
            raise NotReadyError(
                "the knowledge models are being fitted (started "
                f"{time.monotonic() - self._warming_since:.0f} s ago); retry shortly")
        with self._lock:
            if self._models is None:
                self._install(self._cache.get())
            elif time.monotonic() - self._checked_at >= self.refresh_interval_s:
                self._checked_at = time.monotonic()
                if (data_key(self.store) != self._models.data
                        and (self._refit is None or not self._refit.is_alive())):
                    self._refit = threading.Thread(target=self._refit_in_background,
                                                   name="knowledge-refit", daemon=True)
                    self._refit.start()
            assert self._models is not None
            return self._models

    def _install(self, models: KnowledgeModels) -> None:
        with self._lock:
            if models is not self._models:
                log.info("knowledge models loaded: %d trials, %d contexts",
                         models.data.trials, len(models.contexts))
                self._sheets.clear()
                self._answers.clear()
                self._models = models
            self._checked_at = time.monotonic()

    def _refit_in_background(self) -> None:
        try:
            self._install(self._cache.get())
        except AdvisorError as exc:  # keep serving the models we have
            log.warning("refitting the knowledge models failed: %s", exc)

    def _fresh(self) -> KnowledgeModels | None:
        """The models, if checked against the store recently enough (no query made)."""
        models = self._models
        if models is not None and time.monotonic() - self._checked_at < self.refresh_interval_s:
            return models
        return None

    def _cached(self, kind: str, key: Mapping[str, Any]) -> bytes | None:
        """A cached answer (JSON bytes) if the models are fresh; raises the cached error if the
        answer was one. Never touches the store, so the event loop may call it."""
        models = self._fresh()
        if models is None:
            return None
        with self._lock:
            if self._models is not models:
                return None
            hit = self._answers.get((kind, _key(key)))
        if isinstance(hit, AdvisorError):
            raise hit
        return hit

    def _answer(self, kind: str, key: Mapping[str, Any],
                compute: Callable[[KnowledgeModels], bytes]) -> bytes:
        models = self.models()
        cache_key = (kind, _key(key))
        with self._lock:
            if self._models is models and (hit := self._answers.get(cache_key)) is not None:
                self._answers.move_to_end(cache_key)
                if isinstance(hit, AdvisorError):
                    raise hit
                return hit
        answer: bytes | AdvisorError
        try:
            answer = compute(models)
        except (NotFoundError, SLOParseError, UnknownTargetError, WorkloadError) as exc:
            answer = exc  # answers too: "no row for that context" holds until the store changes
        with self._lock:
            if self._models is models:
                self._answers[cache_key] = answer
                while len(self._answers) > _MAX_ANSWERS:
                    self._answers.popitem(last=False)
        if isinstance(answer, AdvisorError):
            raise answer
        return answer

    # recommendations -------------------------------------------------------------------------

    def cached_recommendation(self, query: Mapping[str, Any]) -> bytes | None:
        """The answer to ``query`` if it is cached and the models are fresh, else None."""
        return self._cached("recommend", query)

    def recommend(self, query: Mapping[str, Any]) -> bytes:
        """The answer to one SLO question (the fields of ``RecommendationRequest``) as the
        answer document's JSON, planned by ``advisor.answers.plan_recommendation`` exactly as
        the CLI plans it. A question that needs no fitted models (``measured``, or a shape never
        measured on the hardware) is answered at once, even while the models are fitted; it is
        cached until the store gains trials."""
        request = RecommendationRequest.model_validate(dict(query))
        if request.measured or request.hf_config is not None:
            version = data_key(self.store)
            cache_key = ("recommend-direct", _key(query))
            with self._lock:
                hit = self._direct_answers.get(cache_key)
            if hit is not None and hit[0] == version:
                return hit[1]
            answer = plan_recommendation(self.store, request, models=self.models,
                                         cache_dir=self._failure_dir).to_json_bytes()
            with self._lock:
                self._direct_answers[cache_key] = (version, answer)
                while len(self._direct_answers) > _MAX_ANSWERS:
                    self._direct_answers.popitem(last=False)
            return answer

        def compute(models: KnowledgeModels) -> bytes:
            return plan_recommendation(self.store, request, models=models,
                                       cache_dir=self._failure_dir).to_json_bytes()

        return self._answer("recommend", query, compute)

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
                while len(self._sheets) > _MAX_SHEETS:
                    self._sheets.popitem(last=False)
        return sheet

    def cached_knob_value(self, query: Mapping[str, Any]) -> bytes | None:
        """The knob value for ``query`` if cached and the models are fresh, else None."""
        return self._cached("knob", query)

    def knob_value(self, query: Mapping[str, Any]) -> bytes:
        """One knob's value for a context (``knob``, ``target``, ``hardware``, ``model``,
        ``workload_class``, ``tier``) as ``CheatSheetValuePublic`` JSON: a lookup in the
        target's cached sheet."""

        def compute(models: KnowledgeModels) -> bytes:
            sheet = self.cheatsheet(target=query["target"])
            raw = knob_value(sheet, query["knob"], target=query["target"],
                             hardware=query.get("hardware"), model=query.get("model"),
                             workload_class=query.get("workload_class"),
                             tier=query.get("tier") or "standard")
            return _json(CheatSheetValuePublic, {
                "knob": query["knob"], "target": query["target"], "found": True,
                "value": raw.get("value"), "row": raw, "raw": raw})

        return self._answer("knob", query, compute)


def _key(query: Mapping[str, Any]) -> str:
    return json.dumps(query, sort_keys=True, default=str)


def _json(model: type[BaseModel], data: dict[str, Any]) -> bytes:
    """``data`` validated by its public schema, serialised once (answers are served as bytes)."""
    return model.model_validate(data).model_dump_json().encode()



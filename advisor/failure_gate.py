"""The failure gate: before a sampled trial's engine starts, ask the failure model
(knowledge/failures.py) whether its config will fail, and skip the start when the model is
confident and has earned it on held-out trials. Also the fitted failure models the recommender
reads (one per store and target, refitted as failures arrive) and the held-out report that
``advisor knowledge eval --failures`` prints.

A skip never touches a config someone asked for: the engine default, ``--enqueue`` and
warm-start configs, paired repeats and re-queued trials are always measured.
"""

from __future__ import annotations

import hashlib
import logging
import pickle
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from advisor.study_spec import GATE_KEY, check_threshold
from knowledge import TrialStore
from knowledge.failures import (
    DEFAULT_FAMILY,
    DEFAULT_THRESHOLD,
    FAMILIES,
    PREDICTED_FAILURE,
    FailureEvaluation,
    FailureModel,
    StartFacts,
    engine_version_of,
    evaluate,
    fit_failure_model,
    label_counts,
    labelled_starts,
    too_little_data,
)
from objectives.atomic_files import atomic_write_bytes
from objectives.target import Target
from objectives.workload import Workload

__all__ = ["DEFAULT_THRESHOLD", "PREDICTED_FAILURE", "PROVENANCE_KEY", "FailureGate",
           "GateVerdict", "check_threshold", "evaluate_store", "failure_model",
           "shape_features"]

log = logging.getLogger(__name__)

#: The study provenance key the gate's settings are recorded under (``enabled``, ``threshold``).
PROVENANCE_KEY = GATE_KEY
#: A fitted model is refitted when the config failures stored grew by this share (at least one)
#: or the labelled trials by this share (at least REFIT_MIN_NEW): each fit cross-validates,
#: which takes seconds on a thousand trials, and one more measured config rarely moves a
#: failure boundary.
REFIT_SHARE = 0.1
REFIT_MIN_NEW = 5
#: Bump when a pickled failure model changes shape: older cache files are then refitted.
_CACHE_FORMAT = 1
#: How to turn the gate off, named in every skipped trial's reason.
TURN_OFF = ("run the study with --no-failure-gate (or a --failure-threshold closer to 1; "
            "`advisor tune --resume` takes either)")


def shape_features(model: str) -> dict[str, float] | None:
    """Parameters, layers and hidden size of a named model shape (objectives/llm/models.py):
    how big a model is decides whether a config's memory share holds it. None for a local
    model directory or a name that is no known shape."""
    from objectives.llm.models import MODEL_SHAPES, model_config, parameter_count

    if model not in MODEL_SHAPES:
        return None
    config = model_config(model)
    return {"model_params": float(parameter_count(config)),
            "model_layers": float(config["num_hidden_layers"]),
            "model_hidden": float(config["hidden_size"])}


# -- fitted models, shared within the process ----------------------------------------------------


@dataclass
class _Fitted:
    counts: tuple[int, int]
    model: FailureModel


_MODELS: dict[tuple[str, str, str, float], _Fitted] = {}
_LOCK = threading.Lock()


def _fresh(then: tuple[int, int], now: tuple[int, int]) -> bool:
    (labelled0, failed0), (labelled, failed) = then, now
    return (failed0 <= failed < failed0 + max(1.0, REFIT_SHARE * failed0)
            and labelled0 <= labelled < labelled0 + max(REFIT_MIN_NEW, REFIT_SHARE * labelled0))


def _cache_file(cache_dir: Path, key: tuple[str, str, str, float]) -> Path:
    url, target, family, threshold = key
    digest = hashlib.sha256(url.encode()).hexdigest()[:12]
    return cache_dir / "failure-models" / f"{digest}-{target}-{family}-{threshold:g}.pkl"


def _load(path: Path) -> _Fitted | None:
    try:
        with path.open("rb") as f:
            payload = pickle.load(f)  # our own cache file, never user input
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
        return None
    if not isinstance(payload, dict) or payload.get("format") != _CACHE_FORMAT:
        return None
    fitted = payload.get("fitted")
    if not isinstance(fitted, _Fitted):
        return None
    fitted.model.encoder.shape_features = shape_features  # not pickled: a function of ours
    return fitted


def _save(path: Path, fitted: _Fitted) -> None:
    atomic_write_bytes(path, pickle.dumps({"format": _CACHE_FORMAT, "fitted": fitted},
                                          protocol=pickle.HIGHEST_PROTOCOL))


def failure_model(store: TrialStore, target: str, *, threshold: float = DEFAULT_THRESHOLD,
                  family: str = DEFAULT_FAMILY, cache_dir: Path | None = None) -> FailureModel:
    """``target``'s failure model over ``store``: fitted once per process (and, with
    ``cache_dir``, kept on disk for the next one) and refitted when a config failure was added
    since (or the labelled trials grew by :data:`REFIT_SHARE`). One aggregate query when nothing
    changed. A store too small to learn from is not read at all."""
    key = (store.url, target, family, threshold)
    counts = label_counts(store, target)
    with _LOCK:
        cached = _MODELS.get(key)
    if cached is None and cache_dir is not None:
        cached = _load(_cache_file(cache_dir, key))
        if cached is not None:
            with _LOCK:
                _MODELS[key] = cached
    if cached is not None and _fresh(cached.counts, counts):
        return cached.model
    # label_counts over-counts (co-measured repeats, invalid labels): a cheap first check.
    if (why := too_little_data(target, *counts)) is not None:
        model = fit_failure_model([], target=target, family=family, threshold=threshold)
        model.untrusted = why
    else:
        model = fit_failure_model(labelled_starts(store, target=target), target=target,
                                  family=family, threshold=threshold,
                                  shape_features=shape_features)
        log.info("fitted the %s failure model on %d starts (%d failed) in %.1f s: %s", target,
                 model.starts, model.failures, model.fit_seconds,
                 model.untrusted or "may skip")
    fitted = _Fitted(counts, model)
    with _LOCK:
        _MODELS[key] = fitted
    if cache_dir is not None and model.classifier is not None:
        _save(_cache_file(cache_dir, key), fitted)
    return model


# -- the gate ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GateVerdict:
    """The gate's answer for one asked config: skip it (``reason`` is the trial's error) or not."""

    skip: bool
    probability: float | None
    threshold: float
    reason: str
    evidence: tuple[dict[str, Any], ...] = ()
    model: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"skipped": self.skip, "probability": self.probability,
                "threshold": self.threshold, "evidence": list(self.evidence),
                "model": self.model}


class FailureGate:
    """One study's gate: asks the target's failure model about each sampled config before its
    engine starts. ``enabled`` and ``threshold`` are the study's (recorded in its provenance)."""

    def __init__(self, store: TrialStore, target: Target, workload: Workload, *,
                 enabled: bool = True, threshold: float = DEFAULT_THRESHOLD,
                 family: str = DEFAULT_FAMILY) -> None:
        if family not in FAMILIES:
            raise ValueError(f"unknown failure-model family {family!r}; choose one of {FAMILIES}")
        self.store, self.target, self.workload = store, target, workload
        self.enabled, self.threshold, self.family = enabled, check_threshold(threshold), family
        self._version: str | None = None
        self._announced: str | None = None

    def status(self, hardware_key: str) -> str:
        """One line for people: whether the gate may skip here, and why (not)."""
        if not self.enabled:
            return "failure gate: off for this study"
        model = failure_model(self.store, self.target.name, threshold=self.threshold,
                              family=self.family)
        why = model.trusted_on(hardware_key)
        if why is not None:
            return f"failure gate: skips nothing yet: {why}"
        held = model.held_out
        precision = "" if held is None or held.precision is None else (
            f"; held out: precision {held.precision:.0%}, recall {held.recall or 0:.0%}")
        return (f"failure gate: on, skipping sampled configs predicted to fail with p >= "
                f"{self.threshold:g} (model over {model.starts} stored {self.target.name} "
                f"starts, {model.failures} failed{precision})")

    def announce(self, hardware_key: str) -> str | None:
        """:meth:`status`, the first time and whenever it changes; None otherwise."""
        line = self.status(hardware_key)
        if line == self._announced:
            return None
        self._announced = line
        return line

    def check(self, config: Mapping[str, Any], hardware: Mapping[str, Any], *,
              queued: bool) -> GateVerdict | None:
        """The verdict on ``config`` about to start on ``hardware``; None when the gate does not
        decide: off, a queued config (the default, an enqueued or warm-start config, a repeat:
        measured facts someone asked for), or a model with too little data."""
        if not self.enabled or queued:
            return None
        started = time.perf_counter()
        model = failure_model(self.store, self.target.name, threshold=self.threshold,
                              family=self.family)
        if model.trusted_on(str(hardware["key"])) is not None:
            return None
        facts = StartFacts.of(self.workload.spec, hardware, self._engine_version(model))
        p = float(model.predict([config], facts)[0])
        summary = model.summary()
        if p < self.threshold:
            return GateVerdict(False, p, self.threshold, "", model=summary,
                               seconds=time.perf_counter() - started)
        evidence = tuple(model.evidence(config, facts))
        return GateVerdict(True, p, self.threshold, self._reason(p, model, evidence), evidence,
                           summary, time.perf_counter() - started)

    def _engine_version(self, model: FailureModel) -> str | None:
        """The installed engine's version, asked only of a model that uses versions."""
        if not model.encoder.use_version_:
            return None
        if self._version is None:
            self._version = engine_version_of(self.target.engine_versions(), self.target.name)
        return self._version

    def _reason(self, p: float, model: FailureModel,
                evidence: tuple[dict[str, Any], ...]) -> str:
        held = model.held_out
        quality = "" if held is None or held.precision is None else (
            f"; held out it was right {held.precision:.0%} of the time at this threshold")
        lines = [f"not started: predicted to fail (p={p:.2f} >= {self.threshold:g}) by the "
                 f"failure model over {model.starts} stored {model.target} starts, "
                 f"{model.failures} of them failed{quality}"]
        for e in evidence:
            lines.append(f"  nearest failed: trial {e['trial_id']} of study {e['study']} "
                         f"({e['error_type']}): {e['reason']}")
        lines.append(f"to measure such configs anyway, {TURN_OFF}")
        return "\n".join(lines)


# -- the held-out report -------------------------------------------------------------------------


def evaluate_store(store: TrialStore, *, target: str | None = None,
                   family: str = DEFAULT_FAMILY, threshold: float = DEFAULT_THRESHOLD,
                   folds: int = 5) -> tuple[FailureEvaluation, dict[str, Any]]:
    """Held-out figures of the failure model on ``store``'s trials (:func:`evaluate`) and what
    went in: labelled starts and failures per target, by error type."""
    if family not in FAMILIES:
        raise ValueError(f"unknown failure-model family {family!r}; choose one of {FAMILIES}")
    check_threshold(threshold)
    rows = labelled_starts(store, target=target)
    data: dict[str, Any] = {}
    for r in rows:
        d = data.setdefault(r.target, {"starts": 0, "failures": 0, "prestart_rejections": 0,
                                       "error_types": {}, "studies": set()})
        d["starts"] += 1
        d["studies"].add(r.study)
        if r.failed:
            d["failures"] += 1
            d["prestart_rejections"] += r.prestart
            d["error_types"][str(r.error_type)] = d["error_types"].get(str(r.error_type), 0) + 1
    for d in data.values():
        d["studies"] = len(d["studies"])
    return (evaluate(rows, family=family, threshold=threshold, folds=folds,
                     shape_features=shape_features), data)

"""The failure model: which configs fail before they measure anything (a refused or crashed
engine start, out of memory, a hang), learnt from every stored trial of a target — across
studies, workloads and machines — so a study can skip them and a recommendation never proposes
them.

Labels come from stored fields only. A ``failed`` trial whose ``error_type`` blames the config
(:data:`CONFIG_FAILURES`) is a failure; a measured trial (``complete`` or ``invalid``: the
engine ran, whatever the validity check said of the client) is not. Everything else is left
out: see :data:`NOT_THE_CONFIG`. A co-measured trial repeats its leading trial's engine start
under another workload, so only the leader counts: one row per engine start.

This module never imports an engine or optuna; model-shape facts come in through a callable
(:data:`ShapeFeatures`) from the layer that knows model shapes.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy import func
from sqlmodel import col, select

from knowledge.model_choices import DEFAULT_FAILURE_FAMILY as DEFAULT_FAMILY
from knowledge.model_choices import DEFAULT_FAILURE_THRESHOLD as DEFAULT_THRESHOLD
from knowledge.model_choices import FAILURE_FAMILIES as FAMILIES
from knowledge.models import StudyRecord, TrialRecord, TrialStatus
from knowledge.store import TrialFilter, TrialStore
from knowledge.surrogates import FeatureEncoder, workload_features

__all__ = [
    "CHEAP_REJECTION_S",
    "CONFIG_FAILURES",
    "DEFAULT_FAMILY",
    "DEFAULT_THRESHOLD",
    "FAMILIES",
    "MIN_FAILED_CONFIGS",
    "MIN_FAILURES",
    "MIN_HELD_OUT_SKIPS",
    "MIN_STARTS",
    "MIN_STARTS_ON_HARDWARE",
    "NOT_THE_CONFIG",
    "PREDICTED_FAILURE",
    "SWEEP",
    "TARGET_PRECISION",
    "FailureClassifier",
    "FailureEvaluation",
    "FailureModel",
    "FailureScore",
    "HeldOut",
    "LabelledStart",
    "ShapeFeatures",
    "StartEncoder",
    "StartFacts",
    "engine_version_of",
    "evaluate",
    "fit_failure_model",
    "held_out_probabilities",
    "label_counts",
    "labelled_starts",
    "score",
    "start_workload_features",
    "too_little_data",
]

#: ``error_type`` values that blame the config: the engine refused it (``rejected``, by the
#: target's own checks or by the engine's log), never became ready (``engine_start``), ran out
#: of memory (``oom``), died (``crash``: a signal or an unexpected exception in the engine) or
#: hung past the trial's limit (``timeout``: in the shipped data, compile-heavy configs that
#: never finished warming up).
CONFIG_FAILURES = frozenset({"rejected", "engine_start", "oom", "crash", "timeout"})
#: The ``error_type`` of a trial the failure gate skipped: a prediction, never a label (a model
#: trained on its own predictions would only grow more certain of them).
PREDICTED_FAILURE = "predicted_failure"
#: ``error_type`` values that say nothing about the config, so their trials are left out:
#: ``interrupted`` (the driver was stopped), ``error`` (the advisor's own checks, e.g. a
#: workload the target cannot run), ``missing_metric`` (the target did not report a metric the
#: SLO names), ``worker_setup`` / ``worker_crash`` (the machine a distributed trial ran on),
#: and :data:`PREDICTED_FAILURE`.
NOT_THE_CONFIG = frozenset({"interrupted", "error", "missing_metric", "worker_setup",
                            "worker_crash", PREDICTED_FAILURE})
#: A rejection that took less than this was the target's own check before any engine started
#: (the trial's child process is all it cost): a label like any other, but skipping it saves
#: nothing, so it is left out of the time-saved accounting.
CHEAP_REJECTION_S = 5.0

#: The held-out precision a model must show at its threshold before anything is skipped.
TARGET_PRECISION = 0.9

# "Enough data": below any of these the model skips nothing and says which one is missing.
#: Labelled engine starts of the target, all studies and machines together.
MIN_STARTS = 30
#: Failures among them, of at least MIN_FAILED_CONFIGS distinct configs (a constraint seen once
#: is an anecdote).
MIN_FAILURES = 5
MIN_FAILED_CONFIGS = 3
#: Held-out predictions at or above the threshold needed to measure the model's precision.
MIN_HELD_OUT_SKIPS = 3
#: Labelled starts on the asking machine's hardware key: GPU memory is a feature, but a
#: model that never saw a machine extrapolates its memory limits flat.
MIN_STARTS_ON_HARDWARE = 10

#: ``model name -> {feature: value}`` (parameters, layers, hidden size), None when unknown.
ShapeFeatures = Callable[[str], Mapping[str, float] | None]
#: Feature-name prefix of everything that is not a knob or a workload feature.
_PREFIX = "start_"
_VERSION = _PREFIX + "engine_version"
_EVIDENCE = 3
_REASON_CHARS = 240


# -- what an engine is started with --------------------------------------------------------------


def _upper(value: Any) -> float | None:
    """The largest value a workload length parameter can take (a number, or a distribution's
    ``max`` / ``high``)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, Mapping):
        for key in ("max", "high"):
            if isinstance(value.get(key), int | float) and not isinstance(value.get(key), bool):
                return float(value[key])
    return None


def start_workload_features(spec: Mapping[str, Any]) -> dict[str, float]:
    """The workload features an engine start can depend on: :func:`workload_features` without
    the arrival rate (an engine starts before any request arrives, and in the shipped data each
    study failed its starts at one rate, so the rate would only stand in for the study), plus
    ``start_max_context``, the longest prompt + output the workload can send (the context length
    a serving engine is started with)."""
    out = {k: v for k, v in workload_features(spec).items() if k != "rate_rps"}
    params: Mapping[str, Any] = spec.get("params", spec) or {}
    given = params.get("max_model_len")
    prompt, output = _upper(params.get("prompt_len")), _upper(params.get("output_len"))
    if isinstance(given, int | float) and not isinstance(given, bool):
        out[_PREFIX + "max_context"] = float(given)
    elif prompt is not None and output is not None:
        out[_PREFIX + "max_context"] = prompt + output
    return out


def engine_version_of(versions: Mapping[str, Any], target: str) -> str | None:
    """The target's engine version (major.minor) in an ``engine_versions`` mapping: what the
    surrogates split contexts by, so patch releases do not split the failure model either."""
    found = versions.get(target) or versions.get(target.replace("-", "_"))
    if not found:
        return None
    return ".".join(str(found).split(".")[:2])


@dataclass(frozen=True)
class StartFacts:
    """What an engine is started with besides its knobs: the workload's start-relevant features
    (:func:`start_workload_features`), the model it serves, the machine's fingerprint (GPU count
    and memory, host memory) and the engine's version."""

    workload: Mapping[str, float]
    model: str | None
    hardware: Mapping[str, Any]
    engine_version: str | None

    @classmethod
    def of(cls, workload_spec: Mapping[str, Any], hardware: Mapping[str, Any],
           engine_version: str | None) -> StartFacts:
        params = workload_spec.get("params", {}) or {}
        model = params.get("model")
        return cls(start_workload_features(workload_spec), str(model) if model else None,
                   dict(hardware), engine_version)


def _hardware_features(hw: Mapping[str, Any]) -> dict[str, float]:
    gpus = [g for g in hw.get("gpus") or [] if isinstance(g, Mapping)]
    out = {_PREFIX + "gpu_count": float(len(gpus))}
    memory = [float(g["memory_mib"]) for g in gpus
              if isinstance(g.get("memory_mib"), int | float)]
    if memory:
        out[_PREFIX + "gpu_memory_mib"] = min(memory)  # the smallest GPU bounds a sharded start
    if isinstance(hw.get("memory_gib"), int | float):
        out[_PREFIX + "host_memory_gib"] = float(hw["memory_gib"])
    return out


class StartEncoder:
    """Config + :class:`StartFacts` -> a float matrix: the surrogates' knob encoding
    (:class:`knowledge.surrogates.FeatureEncoder`: log numbers, one-hot strings, NaN for a knob
    that does not apply, the derived cost features) over the knobs, the workload's start
    features, the model shape, the machine's memory, and — only where the training rows hold
    more than one — the engine version (one version is a constant; and failed starts often stored
    no version, which must not become a feature of failing)."""

    def __init__(self, *, shape_features: ShapeFeatures | None = None) -> None:
        self.shape_features = shape_features
        self.encoder_ = FeatureEncoder()
        self.use_version_ = False
        self._shapes: dict[str, Mapping[str, float] | None] = {}

    def _shape(self, model: str | None) -> Mapping[str, float]:
        if model is None or self.shape_features is None:
            return {}
        if model not in self._shapes:
            self._shapes[model] = self.shape_features(model)
        return self._shapes[model] or {}

    def _rows(self, configs: Sequence[Mapping[str, Any]], facts: Sequence[StartFacts]
              ) -> tuple[list[dict[str, Any]], list[dict[str, float]]]:
        knobs, numbers = [], []
        for config, f in zip(configs, facts, strict=True):
            row = dict(config)
            if self.use_version_:
                row[_VERSION] = f.engine_version
            knobs.append(row)
            numbers.append({**f.workload, **_hardware_features(f.hardware),
                            **{_PREFIX + k: float(v) for k, v in self._shape(f.model).items()}})
        return knobs, numbers

    def fit(self, configs: Sequence[Mapping[str, Any]], facts: Sequence[StartFacts]
            ) -> StartEncoder:
        self.use_version_ = len({f.engine_version for f in facts
                                 if f.engine_version is not None}) > 1
        self.encoder_ = FeatureEncoder().fit(*self._rows(configs, facts))
        return self

    def transform(self, configs: Sequence[Mapping[str, Any]], facts: Sequence[StartFacts]
                  ) -> np.ndarray:
        return self.encoder_.transform(*self._rows(configs, facts))

    def __getstate__(self) -> dict[str, Any]:
        # The shape lookup is a function of the layer that built the encoder: not pickled.
        return {**self.__dict__, "shape_features": None}


# -- labelled engine starts ----------------------------------------------------------------------


@dataclass(frozen=True)
class LabelledStart:
    """One engine start of a stored trial with its label: ``failed`` (the config was at fault,
    :data:`CONFIG_FAILURES`) or measured."""

    trial_id: int
    study: str
    target: str
    hardware_key: str
    config: dict[str, Any]
    config_hash: str
    facts: StartFacts
    failed: bool
    error_type: str | None
    reason: str
    duration_s: float
    #: A rejection by the target's own checks before any engine started (:data:`CHEAP_REJECTION_S`).
    prestart: bool


def _is_co_measured(trial: TrialRecord, study: StudyRecord | None) -> bool:
    return bool(trial.details.get("co_measured_with")) or bool(
        study is not None and study.data_provenance.get("co_measured_with"))


def labelled_starts(store: TrialStore, *, target: str | None = None) -> list[LabelledStart]:
    """Every stored engine start (of ``target``, else of every target) with its label, oldest
    first. A trial that stored no engine version (a failed start measures nothing, so it often
    has none) takes the version its study's measured trials ran."""
    studies = {s.id: s for s in store.list_studies(target)}
    trials = store.list_trials(TrialFilter(target=target))
    versions: dict[int, Counter[str]] = {}
    for t in trials:
        if (v := engine_version_of(t.engine_versions, t.target)) is not None:
            versions.setdefault(t.study_id, Counter())[v] += 1
    out: list[LabelledStart] = []
    for t in trials:
        measured = t.status in TrialStatus.MEASURED
        failed = t.status == TrialStatus.FAILED and t.error_type in CONFIG_FAILURES
        study = studies.get(t.study_id)
        if not (measured or failed) or _is_co_measured(t, study):
            continue
        version = engine_version_of(t.engine_versions, t.target)
        if version is None and t.study_id in versions:
            version = versions[t.study_id].most_common(1)[0][0]
        duration = float(t.duration_s or 0.0)
        out.append(LabelledStart(
            trial_id=int(t.id or 0), study=study.name if study else str(t.study_id),
            target=t.target, hardware_key=t.hardware_key, config=dict(t.config),
            config_hash=t.config_hash,
            facts=StartFacts.of(t.workload_spec, t.hardware, version), failed=failed,
            error_type=t.error_type if failed else None,
            reason=(t.error or "").strip().splitlines()[0][:_REASON_CHARS] if failed and t.error
            else "", duration_s=duration,
            prestart=failed and t.error_type == "rejected" and duration < CHEAP_REJECTION_S))
    return out


def label_counts(store: TrialStore, target: str) -> tuple[int, int]:
    """How many of ``target``'s stored trials are measured or failed, and how many of those
    failed for their config: one aggregate query, to tell whether a fitted model is stale."""
    with store.session() as s:
        base = select(func.count()).select_from(TrialRecord).where(TrialRecord.target == target)
        labelled = s.exec(base.where(col(TrialRecord.status).in_(
            [*TrialStatus.MEASURED, TrialStatus.FAILED]))).one()
        failed = s.exec(base.where(TrialRecord.status == TrialStatus.FAILED,
                                   col(TrialRecord.error_type).in_(sorted(CONFIG_FAILURES)))).one()
    return int(labelled), int(failed)


# -- the classifier ------------------------------------------------------------------------------


class FailureClassifier:
    """P(config fails to start) from encoded rows, one of :data:`FAMILIES`:

    - ``forest``: bagged, fully grown trees that may split on every feature at every node
      (scikit-learn's trees route NaN, an inactive knob, on their own). A hidden constraint —
      more lists than vectors, a cache dtype a checkpoint does not support — is a region of
      knob space that one or two features bound; every tree can find it, so the forest votes
      near 1.0 inside a region whose neighbours all failed and near 0 elsewhere. (With the
      usual sqrt(features) per split most trees never see the deciding feature and the votes
      are diluted: at the same precision it recalled half as many failures, docs/knowledge.md.)
    - ``calibrated-forest``: the same, sigmoid-calibrated on internal folds.
    - ``hgb``: histogram gradient boosting.
    - ``logistic``: a logistic regression on imputed, standardised features.

    A training set of one class predicts that class's share (0 when nothing ever failed).
    """

    def __init__(self, *, family: str = DEFAULT_FAMILY, seed: int = 0) -> None:
        self.family = family
        self.seed = seed

    def _make(self, n_pos: int) -> Any:
        from sklearn.calibration import CalibratedClassifierCV
        from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
        from sklearn.impute import SimpleImputer
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        forest = RandomForestClassifier(n_estimators=100, min_samples_leaf=1, max_features=None,
                                        random_state=self.seed, n_jobs=1)
        if self.family == "forest" or (self.family == "calibrated-forest" and n_pos < 2):
            return forest  # calibration needs a failure on each side of its internal split
        if self.family == "calibrated-forest":
            return CalibratedClassifierCV(forest, method="sigmoid", cv=min(3, n_pos))
        if self.family == "hgb":
            return HistGradientBoostingClassifier(max_iter=150, learning_rate=0.1,
                                                  min_samples_leaf=3, l2_regularization=1.0,
                                                  random_state=self.seed)
        if self.family == "logistic":
            return make_pipeline(SimpleImputer(strategy="median", add_indicator=True,
                                               keep_empty_features=True),
                                 StandardScaler(), LogisticRegression(C=1.0, max_iter=2000))
        raise ValueError(f"unknown failure-model family {self.family!r}; choose one of "
                         f"{FAMILIES}")

    def fit(self, X: np.ndarray, y: np.ndarray) -> FailureClassifier:
        y = np.asarray(y, dtype=int)
        if X.shape[0] != y.shape[0] or X.shape[0] == 0:
            raise ValueError(f"`X` and `y` must have the same, non-zero number of rows, but got "
                             f"{X.shape[0]} and {y.shape[0]}")
        self.constant_: float | None = None
        self.estimator_: Any = None
        n_pos = int(y.sum())
        if n_pos in (0, len(y)):
            self.constant_ = float(n_pos > 0)
            return self
        self.estimator_ = self._make(n_pos).fit(X, y)
        return self

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Failure probability per row."""
        if not hasattr(self, "constant_"):
            raise RuntimeError("this FailureClassifier is not fitted yet; call fit() first")
        if self.constant_ is not None:
            return np.full(X.shape[0], self.constant_)
        return np.asarray(self.estimator_.predict_proba(X)[:, 1], dtype=float)


# -- held-out evaluation -------------------------------------------------------------------------


def _splits(rows: Sequence[LabelledStart], scheme: str, folds: int
            ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Train / test index pairs: whole configs held out together (``config``: repeats of a
    config never sit on both sides), or whole studies (``study``)."""
    from sklearn.model_selection import LeaveOneGroupOut, StratifiedGroupKFold

    y = np.asarray([r.failed for r in rows], dtype=int)
    if scheme == "study":
        groups = np.asarray([r.study for r in rows])
        if len(set(groups)) < 2:
            return []
        return list(LeaveOneGroupOut().split(np.zeros(len(rows)), y, groups))
    if scheme != "config":
        raise ValueError(f"`scheme` must be 'config' or 'study', got {scheme!r}")
    groups = np.asarray([r.config_hash for r in rows])
    n_groups = len(set(groups))
    if n_groups < 2:
        return []
    failed_groups = len({r.config_hash for r in rows if r.failed})
    k = min(folds, n_groups)
    if 2 <= failed_groups < k:  # every fold should be able to hold a failure
        k = max(2, failed_groups)
    splitter = StratifiedGroupKFold(n_splits=k, shuffle=True, random_state=0)
    return list(splitter.split(np.zeros(len(rows)), y, groups))


def held_out_probabilities(rows: Sequence[LabelledStart], *, family: str = DEFAULT_FAMILY,
                           scheme: str = "config", folds: int = 5,
                           shape_features: ShapeFeatures | None = None) -> np.ndarray:
    """Each row's failure probability from a model that never saw it (NaN for rows no split
    held out: a single config or study)."""
    out = np.full(len(rows), np.nan)
    for train, test in _splits(rows, scheme, folds):
        encoder = StartEncoder(shape_features=shape_features).fit(
            [rows[i].config for i in train], [rows[i].facts for i in train])
        X = encoder.transform([r.config for r in rows], [r.facts for r in rows])
        y = np.asarray([rows[i].failed for i in train], dtype=int)
        clf = FailureClassifier(family=family).fit(X[train], y)
        out[test] = clf.predict_proba(X[test])
    return out


@dataclass(frozen=True)
class HeldOut:
    """Held-out figures of the failure model at one threshold."""

    starts: int
    failures: int
    failed_configs: int
    #: Held-out predictions at or above the threshold (what would have been skipped), and how
    #: many of them did fail.
    skipped: int
    true_skips: int
    auc: float | None
    brier: float | None
    #: Seconds the skipped failures took (prestart rejections excluded: they cost nothing);
    #: seconds the wrongly skipped measured trials took (their measurement would be lost).
    saved_s: float
    lost_s: float
    prestart_skips: int
    #: Failures that were prestart rejections (:data:`CHEAP_REJECTION_S`).
    prestart_failures: int = 0

    @property
    def false_skips(self) -> int:
        return self.skipped - self.true_skips

    @property
    def precision(self) -> float | None:
        return self.true_skips / self.skipped if self.skipped else None

    @property
    def recall(self) -> float | None:
        return self.true_skips / self.failures if self.failures else None

    def to_dict(self) -> dict[str, Any]:
        return {"starts": self.starts, "failures": self.failures,
                "failed_configs": self.failed_configs, "skipped": self.skipped,
                "true_skips": self.true_skips, "false_skips": self.false_skips,
                "precision": self.precision, "recall": self.recall, "auc": self.auc,
                "brier": self.brier, "saved_s": round(self.saved_s, 1),
                "lost_s": round(self.lost_s, 1),
                "net_saved_s": round(self.saved_s - self.lost_s, 1),
                "prestart_skips": self.prestart_skips,
                "prestart_failures": self.prestart_failures}


def score(rows: Sequence[LabelledStart], p: np.ndarray, threshold: float) -> HeldOut:
    """:class:`HeldOut` figures of probabilities ``p`` (NaN: not held out, left out)."""
    from sklearn.metrics import roc_auc_score

    keep = [i for i in range(len(rows)) if not math.isnan(p[i])]
    y = np.asarray([rows[i].failed for i in keep], dtype=int)
    q = np.asarray([p[i] for i in keep])
    skip = [i for i, pi in zip(keep, q, strict=True) if pi >= threshold]
    true = [i for i in skip if rows[i].failed]
    auc = (float(roc_auc_score(y, q)) if len(keep) and 0 < y.sum() < len(y) else None)
    return HeldOut(
        starts=len(keep), failures=int(y.sum()),
        failed_configs=len({rows[i].config_hash for i in keep if rows[i].failed}),
        skipped=len(skip), true_skips=len(true), auc=auc,
        brier=float(np.mean((q - y) ** 2)) if len(keep) else None,
        saved_s=sum(rows[i].duration_s for i in true if not rows[i].prestart),
        lost_s=sum(rows[i].duration_s for i in skip if not rows[i].failed),
        prestart_skips=sum(rows[i].prestart for i in true),
        prestart_failures=sum(rows[i].prestart for i in keep))


@dataclass(frozen=True)
class FailureScore:
    """Held-out figures of one target (and hardware key, or ``all``) under one hold-out scheme."""

    target: str
    hardware_key: str
    scheme: str
    family: str
    threshold: float
    held_out: HeldOut

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "hardware_key": self.hardware_key, "scheme": self.scheme,
                "family": self.family, "threshold": self.threshold, **self.held_out.to_dict()}


@dataclass(frozen=True)
class FailureEvaluation:
    """:func:`evaluate`'s answer: figures per target and hardware key at the operating
    threshold, and every target's held-out predictions pooled at other thresholds (what the
    default threshold was chosen from)."""

    scores: tuple[FailureScore, ...]
    #: (scheme, threshold, pooled figures) for each threshold of the sweep.
    sweep: tuple[tuple[str, float, HeldOut], ...]
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {"scores": [s.to_dict() for s in self.scores],
                "threshold_sweep": [{"scheme": scheme, "threshold": t, **h.to_dict()}
                                    for scheme, t, h in self.sweep],
                "seconds": round(self.seconds, 1)}


#: Thresholds the evaluation pools every target's held-out predictions at.
SWEEP = (0.5, 0.6, 0.7, 0.8, 0.9)


def evaluate(rows: Sequence[LabelledStart], *, family: str = DEFAULT_FAMILY,
             threshold: float = DEFAULT_THRESHOLD, folds: int = 5,
             schemes: Sequence[str] = ("config", "study"),
             shape_features: ShapeFeatures | None = None,
             sweep: Sequence[float] = SWEEP) -> FailureEvaluation:
    """Held-out precision / recall / AUC and time saved per target, and per hardware key within
    it, for each hold-out scheme: the model is the one :func:`fit_failure_model` fits (one per
    target over every machine), scored on rows it never saw. Targets whose rows cannot be split
    (one config, or one study for ``study``) get no figures under that scheme."""
    started = time.perf_counter()
    scores: list[FailureScore] = []
    pooled: list[tuple[str, float, HeldOut]] = []
    by_target: dict[str, list[LabelledStart]] = {}
    for r in rows:
        by_target.setdefault(r.target, []).append(r)
    for scheme in schemes:
        all_rows: list[LabelledStart] = []
        all_p: list[np.ndarray] = []
        for target, mine in sorted(by_target.items()):
            p = held_out_probabilities(mine, family=family, scheme=scheme, folds=folds,
                                       shape_features=shape_features)
            all_rows += mine
            all_p.append(p)
            if np.isnan(p).all():
                continue
            keys = sorted({r.hardware_key for r in mine})
            parts = [("all", list(range(len(mine))))] if len(keys) > 1 else []
            parts += [(k, [i for i, r in enumerate(mine) if r.hardware_key == k]) for k in keys]
            for key, idx in parts:
                held = score([mine[i] for i in idx], p[idx], threshold)
                scores.append(FailureScore(target, key, scheme, family, threshold, held))
        if all_rows:
            p_all = np.concatenate(all_p)
            pooled += [(scheme, t, score(all_rows, p_all, t)) for t in sweep]
    return FailureEvaluation(tuple(scores), tuple(pooled), time.perf_counter() - started)


# -- the fitted model ----------------------------------------------------------------------------


@dataclass
class FailureModel:
    """One target's fitted failure model over every stored engine start of it, with the
    held-out check that decides whether it may skip anything (:meth:`trusted_on`)."""

    target: str
    family: str
    threshold: float
    encoder: StartEncoder
    #: None when there were too few starts or failures to fit anything worth asking.
    classifier: FailureClassifier | None
    rows: list[LabelledStart]
    X_: np.ndarray
    #: Held-out figures at ``threshold`` (None when there were too few rows to hold any out).
    held_out: HeldOut | None
    #: Why the model may skip nothing anywhere (None: it may, where :meth:`trusted_on` agrees).
    untrusted: str | None
    fit_seconds: float = 0.0
    #: Hardware fingerprints seen per hardware key (the recommender asks by key).
    hardware: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def starts(self) -> int:
        return len(self.rows)

    @property
    def failures(self) -> int:
        return sum(r.failed for r in self.rows)

    def trusted_on(self, hardware_key: str) -> str | None:
        """None when the model may skip configs on ``hardware_key``; else why not."""
        if self.untrusted is not None:
            return self.untrusted
        here = sum(r.hardware_key == hardware_key for r in self.rows)
        if here < MIN_STARTS_ON_HARDWARE:
            return (f"{here} labelled {self.target} starts on {hardware_key} (need "
                    f">= {MIN_STARTS_ON_HARDWARE} on the machine asked about)")
        return None

    def summary(self) -> dict[str, Any]:
        """What the model was fitted on and how it did held out (for reasons and reports)."""
        held = self.held_out
        return {"target": self.target, "family": self.family, "threshold": self.threshold,
                "starts": self.starts, "failures": self.failures,
                "held_out_precision": None if held is None else held.precision,
                "held_out_recall": None if held is None else held.recall,
                "untrusted": self.untrusted}

    def predict(self, configs: Sequence[Mapping[str, Any]], facts: StartFacts) -> np.ndarray:
        """Failure probability of each config started with ``facts``."""
        if self.classifier is None:
            raise RuntimeError(f"the {self.target} failure model was not fitted: "
                               f"{self.untrusted}")
        if not configs:
            return np.zeros(0)
        X = self.encoder.transform(list(configs), [facts] * len(configs))
        return self.classifier.predict_proba(X)

    def evidence(self, config: Mapping[str, Any], facts: StartFacts, k: int = _EVIDENCE
                 ) -> list[dict[str, Any]]:
        """The ``k`` stored failed starts nearest ``config`` (standardised distance over the
        encoded features; a knob set on one side only counts as 3 standard deviations), each
        with its trial, study, error type and reason."""
        failed = [i for i, r in enumerate(self.rows) if r.failed]
        if not failed or self.X_.size == 0:
            return []
        X = self.X_[failed]
        query = self.encoder.transform([config], [facts])[0]
        with np.errstate(all="ignore"):
            scale = np.nanstd(self.X_, axis=0)
        scale[~np.isfinite(scale) | (scale == 0)] = 1.0
        diff = np.abs(X - query) / scale
        diff[np.isnan(diff)] = 3.0
        dist = np.sqrt((diff ** 2).mean(axis=1))
        out = []
        for j in np.argsort(dist, kind="stable")[:k]:
            r = self.rows[failed[int(j)]]
            out.append({"trial_id": r.trial_id, "study": r.study, "error_type": r.error_type,
                        "reason": r.reason, "config": r.config,
                        "distance": round(float(dist[int(j)]), 3)})
        return out


def too_little_data(target: str, starts: int, failures: int, failed_configs: int | None = None
                    ) -> str | None:
    """Why ``starts`` labelled starts with ``failures`` failures (of ``failed_configs``
    distinct configs, when known) are too few to skip anything on; None when enough."""
    if starts < MIN_STARTS:
        return f"{starts} labelled {target} starts (need >= {MIN_STARTS})"
    if failures < MIN_FAILURES or (failed_configs is not None
                                   and failed_configs < MIN_FAILED_CONFIGS):
        configs = "" if failed_configs is None else f" of {failed_configs} configs"
        return (f"{failures} failed {target} starts{configs} (need >= {MIN_FAILURES} of >= "
                f"{MIN_FAILED_CONFIGS} configs)")
    return None


def fit_failure_model(rows: Sequence[LabelledStart], *, target: str,
                      family: str = DEFAULT_FAMILY, threshold: float = DEFAULT_THRESHOLD,
                      folds: int = 5, shape_features: ShapeFeatures | None = None
                      ) -> FailureModel:
    """Fit ``target``'s failure model on its labelled starts and decide whether it may skip
    anything: it needs :data:`MIN_STARTS` starts with :data:`MIN_FAILURES` failures of
    :data:`MIN_FAILED_CONFIGS` configs (else nothing is fitted), and a held-out precision
    (configs held out together) of at least :data:`TARGET_PRECISION` at ``threshold`` over at
    least :data:`MIN_HELD_OUT_SKIPS` held-out skips (else it is fitted but skips nothing).
    ``untrusted`` says which condition failed."""
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"`0 < threshold <= 1` must hold, but got threshold={threshold}")
    started = time.perf_counter()
    mine = [r for r in rows if r.target == target]
    hardware: dict[str, dict[str, Any]] = {}
    for r in mine:
        hardware.setdefault(r.hardware_key, dict(r.facts.hardware))
    encoder = StartEncoder(shape_features=shape_features)
    failures = sum(r.failed for r in mine)
    why = too_little_data(target, len(mine), failures,
                          len({r.config_hash for r in mine if r.failed}))
    if why is not None:
        return FailureModel(target, family, threshold, encoder, None, mine, np.zeros((0, 0)),
                            None, why, time.perf_counter() - started, hardware)
    encoder.fit([r.config for r in mine], [r.facts for r in mine])
    X = encoder.transform([r.config for r in mine], [r.facts for r in mine])
    classifier = FailureClassifier(family=family).fit(
        X, np.asarray([r.failed for r in mine], dtype=int))
    held = score(mine, held_out_probabilities(mine, family=family, folds=folds,
                                              shape_features=shape_features), threshold)
    untrusted: str | None = None
    if held.skipped < MIN_HELD_OUT_SKIPS:
        untrusted = (f"{held.skipped} held-out configs reached p >= {threshold:g} (need >= "
                     f"{MIN_HELD_OUT_SKIPS} to measure the model's precision)")
    elif (held.precision or 0.0) < TARGET_PRECISION:
        untrusted = (f"held-out precision {held.precision:.0%} at p >= {threshold:g} is "
                     f"under {TARGET_PRECISION:.0%}")
    return FailureModel(target, family, threshold, encoder, classifier, mine, X, held,
                        untrusted, time.perf_counter() - started, hardware)

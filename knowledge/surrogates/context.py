"""Per-context model sets: one interval regressor per metric over a context's trials, with the
encoder, the evidence it saw and its load curves, and the fit that builds them.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from knowledge.curve_model import KnobCurveModel
from knowledge.load_curve import LoadCurves
from knowledge.models import TrialRecord
from knowledge.surrogates.curves import _with_curves, fit_knob_curves, fit_load_curves
from knowledge.surrogates.families import DEFAULT_FAMILY
from knowledge.surrogates.features import (
    ContextKey,
    FeatureEncoder,
    WorkloadPoint,
    cost_law,
    workload_features,
)
from knowledge.surrogates.regressor import IntervalRegressor
from knowledge.surrogates.training import _metric_names, _usable, _workload_points, _xy
from knowledge.surrogates.transforms import _forward, _inverse, metric_transform
from knowledge.surrogates.validation import MetricScore, cross_validate

__all__ = ["ContextModels", "MetricModel", "fit_context"]


@dataclass
class MetricModel:
    """One metric's fitted regressor with its transform and its cross-validated score.

    Pickled with the regressor as an opaque blob that is only unpickled when the metric is first
    predicted: loading a saved model set then costs milliseconds, and a query pays only for the
    few metrics it asks about.
    """

    metric: str
    transform: str
    regressor: IntervalRegressor | None
    score: MetricScore | None = None
    blob: bytes | None = None

    def fitted(self) -> IntervalRegressor:
        if self.regressor is None:
            if self.blob is None:
                raise RuntimeError(f"model of {self.metric} has neither a regressor nor a blob")
            self.regressor = pickle.loads(self.blob)  # written by __getstate__ below
            self.blob = None
        return self.regressor

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        if state.get("regressor") is not None:
            state["blob"] = pickle.dumps(state["regressor"], protocol=pickle.HIGHEST_PROTOCOL)
            state["regressor"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


@dataclass
class ContextModels:
    """Everything fitted for one context: encoder, per-metric models, the evidence it saw."""

    key: ContextKey
    family: str
    encoder: FeatureEncoder
    metrics: dict[str, MetricModel]
    trial_ids: list[int]
    configs: list[dict[str, Any]]
    features: list[dict[str, float]]
    measured: list[dict[str, float]]
    workloads: list[WorkloadPoint]
    trial_workload: list[str]  # spec hash per trial
    fit_seconds: float = 0.0
    trial_studies: list[str] = field(default_factory=list)  # study name per trial
    X_: np.ndarray | None = None  # the encoded training rows, for nearest-evidence search
    failed_configs: list[dict[str, Any]] = field(default_factory=list)
    #: Measured configs' load curves (knowledge/load_curve.py): where a config has one at the
    #: asked workload, its curve answers for the metrics it models instead of the surrogate.
    load_curves: LoadCurves | None = None
    #: The measured curves regressed on the knobs (knowledge/curve_model.py): a config with no
    #: curve of its own gets a predicted one, where the context has enough curves.
    knob_curves: KnobCurveModel | None = None

    def predict(self, configs: Sequence[Mapping[str, Any]], workload: Mapping[str, float],
                metrics: Iterable[str] | None = None
                ) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per metric, (value, low, high) arrays on the metric's own scale, one entry per config."""
        X = self.encoder.transform(list(configs), [workload] * len(configs))
        out: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for name in metrics if metrics is not None else self.metrics:
            mm = self.metrics.get(name)
            if mm is None:
                continue
            c, lo, hi = mm.fitted().predict_interval(X)
            out[name] = (_inverse(mm.transform, c), _inverse(mm.transform, lo),
                         _inverse(mm.transform, hi))
        out = _with_curves(getattr(self, "load_curves", None), configs, workload, out,
                           getattr(self, "knob_curves", None))
        return self._bounded_below_measured_rates(configs, workload, out)

    def _bounded_below_measured_rates(
            self, configs: Sequence[Mapping[str, Any]], workload: Mapping[str, float],
            out: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]
    ) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """``out`` with, below the lowest offered rate the context measured (at the asked
        workload's other features, where it measured them), each latency's upper end raised to
        at least its upper end at that rate: a latency does not fall as the rate grows, and no
        model fitted on higher rates knows the floor below them (held out by config, the 1B's
        default config, predicted from trials at 80-110 req/s alone, read a TTFT p95 upper end
        of 20 ms at 20-45 req/s, where 31-84 ms were measured)."""
        curves = getattr(self, "load_curves", None)
        if curves is None:
            return out
        rate = curves.roles.rate
        asked = workload.get(rate)
        latencies = [m for m in out if m in curves.roles.latencies]
        if not isinstance(asked, int | float) or not latencies:
            return out
        rest = {k: v for k, v in workload.items() if k != rate}
        rates = [w.features[rate] for w in self.workloads if rate in w.features]
        alike = [w.features[rate] for w in self.workloads if rate in w.features
                 and {k: v for k, v in w.features.items() if k != rate} == rest]
        lowest = min(alike or rates, default=None)
        if lowest is None or asked >= lowest:
            return out
        there = self.predict(configs, {**workload, rate: lowest}, latencies)
        for m in latencies:
            if m in there:
                c, lo, hi = out[m]
                out[m] = (c, lo, np.maximum(hi, there[m][2]))
        return out

    def curve_of(self, config: Mapping[str, Any], workload: Mapping[str, float]
                 ) -> Any | None:
        """The load curve of ``config`` at ``workload`` (any rate), or None."""
        curves = getattr(self, "load_curves", None)
        return None if curves is None else curves.curve(config, workload)

    @property
    def n_trials(self) -> int:
        return len(self.trial_ids)

    def workload_ranges(self) -> dict[str, tuple[float, float]]:
        ranges: dict[str, tuple[float, float]] = {}
        for w in self.workloads:
            for f, v in w.features.items():
                lo, hi = ranges.get(f, (v, v))
                ranges[f] = (min(lo, v), max(hi, v))
        return ranges


def fit_context(key: ContextKey, trials: Sequence[TrialRecord], *, family: str = DEFAULT_FAMILY,
                score: bool = True, folds: int = 5, failed: Sequence[TrialRecord] = (),
                study_names: Mapping[int, str] | None = None,
                metrics: Iterable[str] | None = None, load_curves: bool = True
                ) -> ContextModels:
    """Fit one model per metric on the complete trials of one context.

    ``metrics`` limits the models to those metrics (the audit needs only the SLO's).
    ``load_curves``: also fit the measured configs' load curves (:func:`fit_load_curves`),
    which then answer for their configs.
    With ``score`` the models are also cross-validated (grouped by config, ``folds`` folds) and
    each :class:`MetricModel` carries its :class:`MetricScore`.
    """
    started = time.perf_counter()
    usable = _usable(trials)
    if len(usable) < 2:
        raise ValueError(f"context {key.label()} has {len(usable)} measured trials; need >= 2")
    wl = [workload_features(t.workload_spec) for t in usable]
    encoder = FeatureEncoder().fit([t.config for t in usable], wl)
    # The scores a fit keeps are quoted for answers the knob-level models give (configs held
    # out whole); a blended curve quotes its own held-out-rate error, so the folds skip the
    # simulator (on the 8B shape it would cost ~10 s a fold).
    scores = (cross_validate(key, usable, family=family, folds=folds, blend=False)
              if score else {})
    curves = fit_load_curves(usable) if load_curves else None
    models: dict[str, MetricModel] = {}
    wanted = set(metrics) if metrics is not None else None
    for metric in _metric_names(usable):
        if wanted is not None and metric not in wanted:
            continue
        X, y, groups, _ = _xy(usable, encoder, metric)
        kind = metric_transform(metric, y)
        law = cost_law(encoder, metric) if kind == "log" else None
        reg = IntervalRegressor(family=family, cost_law=law).fit(X, _forward(kind, y), groups)
        models[metric] = MetricModel(metric, kind, reg, scores.get(metric))
    return ContextModels(
        key=key, family=family, encoder=encoder, metrics=models,
        trial_ids=[int(t.id or 0) for t in usable], configs=[dict(t.config) for t in usable],
        features=wl, measured=[{k: float(v) for k, v in t.metrics.items()
                                if isinstance(v, int | float)} for t in usable],
        workloads=_workload_points(usable), trial_workload=[t.workload_hash for t in usable],
        fit_seconds=time.perf_counter() - started,
        failed_configs=[dict(t.config) for t in failed],
        trial_studies=[(study_names or {}).get(t.study_id, "") for t in usable],
        X_=encoder.transform([t.config for t in usable], wl),
        load_curves=curves, knob_curves=fit_knob_curves(curves, encoder))

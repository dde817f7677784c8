"""Held-out validation of a context's models: grouped K-fold over configs, engine instances or
workloads, scored by MAPE and interval coverage against the repeat-noise floor.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from knowledge.curve_model import KnobCurveModel
from knowledge.load_curve import LoadCurves
from knowledge.model_choices import GROUP_BY, SCORE_ON
from knowledge.models import TrialRecord
from knowledge.surrogates.curves import _unmeasured_answer, fit_knob_curves, fit_load_curves
from knowledge.surrogates.families import DEFAULT_FAMILY
from knowledge.surrogates.features import ContextKey, FeatureEncoder, cost_law, workload_features
from knowledge.surrogates.regressor import IntervalRegressor
from knowledge.surrogates.training import _metric_names, _usable, _xy
from knowledge.surrogates.transforms import _forward, _inverse, metric_transform

__all__ = [
    "GROUP_BY",
    "SCORE_ON",
    "MetricScore",
    "cross_validate",
    "instance_groups",
    "noise_floor",
]


@dataclass(frozen=True)
class MetricScore:
    """Held-out quality of one metric's model: grouped K-fold over distinct configs."""

    metric: str
    n: int
    n_groups: int
    mape: float | None
    coverage: float | None
    folds: int
    #: Error of predicting each repeated measurement by the geometric mean of its repeats (same
    #: config, same workload): the floor no model can beat. None without repeats.
    noise_mape: float | None = None
    noise_n: int = 0
    #: Held out by workload: the error on held-out measurements of configs measured at another
    #: workload of the fold's training side (a held-out rate of a measured config), and on the
    #: rest (configs measured at the held-out workload only: held-out configs in effect).
    #: None when not grouped by workload.
    seen_config_mape: float | None = None
    seen_config_n: int = 0
    unseen_config_mape: float | None = None
    unseen_config_n: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "n": self.n, "configs": self.n_groups,
                "mape": self.mape, "interval_coverage": self.coverage, "folds": self.folds,
                "noise_floor_mape": self.noise_mape, "noise_floor_n": self.noise_n,
                "seen_config_mape": self.seen_config_mape, "seen_config_n": self.seen_config_n,
                "unseen_config_mape": self.unseen_config_mape,
                "unseen_config_n": self.unseen_config_n}


def noise_floor(trials: Sequence[TrialRecord], metric: str) -> tuple[float | None, int]:
    """Leave-one-out error among repeats: each measurement against the geometric mean of the
    other measurements of the same config on the same workload."""
    groups: dict[tuple[str, str], list[float]] = {}
    for t in trials:
        v = t.metrics.get(metric)
        if isinstance(v, int | float) and v > 0:
            groups.setdefault((t.config_hash, t.workload_hash), []).append(float(v))
    errors: list[float] = []
    for values in groups.values():
        if len(values) < 2:
            continue
        logs = np.log(values)
        for i, v in enumerate(values):
            others = np.exp(np.delete(logs, i).mean())
            errors.append(abs(others - v) / v)
    return (float(np.mean(errors)) if errors else None), len(errors)


def instance_groups(trials: Sequence[TrialRecord]) -> list[str]:
    """One group label per trial for holding out whole engine instances: a trial and the
    settings its search sweep measured on the same instance (``swept_from``) share a group,
    and so does every other measurement of any of those configs (repeats, other studies),
    transitively — nothing held out has its instance or its config on the training side."""
    parent = list(range(len(trials)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[tuple[Any, ...], int] = {}
    for i, t in enumerate(trials):
        instance = ("instance", t.study_id,
                    t.swept_from if t.swept_from is not None else t.number)
        for key in (("config", t.config_hash), instance):
            j = first.setdefault(key, i)
            parent[find(i)] = find(j)
    return [f"g{find(i)}" for i in range(len(trials))]


def cross_validate(key: ContextKey, trials: Sequence[TrialRecord], *, family: str = DEFAULT_FAMILY,
                   folds: int = 5, metrics: Iterable[str] | None = None,
                   group_by: str = "config", load_curves: bool = True,
                   score_on: str = "trial", blend: bool = True) -> dict[str, MetricScore]:
    """Held-out error per metric: GroupKFold over distinct configs, so repeated measurements
    of one config (and its measurements at other rates) never sit on both sides of a split.
    ``group_by="instance"`` holds out whole engine instances with their configs
    (:func:`instance_groups`): a swept setting is then predicted without the other settings
    measured on its instance. ``group_by="workload"`` holds out whole workloads instead (how
    well an unmeasured rate or corpus size is predicted for configs measured elsewhere).

    MAPE compares the predicted value with the measured one on the metric's own scale; coverage is
    the share of held-out measurements inside the predicted interval (nominal: ``COVERAGE``).
    With ``load_curves`` each fold also fits the load curves of its training trials, which
    answer for the held-out trials of configs they cover (a held-out rate of a measured config),
    and their knob-level model (:func:`fit_knob_curves`) for held-out configs, where chosen.
    ``score_on="median"`` scores one error per held-out (config, workload): against the median
    of its repeats, which a single measurement's repeat noise does not move (coverage still
    counts every trial). ``blend``: each fold's curves are blended with its simulator where its
    training trials choose that (:func:`fit_load_curves`), as an answer's are.
    """
    from sklearn.model_selection import GroupKFold

    usable = _usable(trials)
    wl = [workload_features(t.workload_spec) for t in usable]
    encoder = FeatureEncoder().fit([t.config for t in usable], wl)
    out: dict[str, MetricScore] = {}
    if group_by not in GROUP_BY:
        raise ValueError(f"`group_by` must be one of {', '.join(GROUP_BY)}, got {group_by!r}")
    if score_on not in SCORE_ON:
        raise ValueError(f"`score_on` must be one of {', '.join(SCORE_ON)}, got {score_on!r}")
    # One group label per usable trial (None: _xy's config groups).
    trial_groups = (instance_groups(usable) if group_by == "instance"
                    else [t.workload_hash for t in usable] if group_by == "workload" else None)
    # One fit of the load curves per distinct training set (every metric's folds share them).
    curves_of: dict[tuple[int, ...], LoadCurves | None] = {}
    knobs_of: dict[tuple[int, ...], KnobCurveModel | None] = {}
    for metric in metrics if metrics is not None else _metric_names(usable):
        X, y, groups, idx = _xy(usable, encoder, metric)
        if trial_groups is not None:
            groups = np.asarray([trial_groups[i] for i in idx])
        n_groups = len(set(groups.tolist()))
        k = min(folds, n_groups)
        if k < 2 or len(y) < 4:
            out[metric] = MetricScore(metric, len(y), n_groups, None, None, 0)
            continue
        kind = metric_transform(metric, y)
        z = _forward(kind, y)
        law = cost_law(encoder, metric) if kind == "log" else None
        errors: list[float] = []
        seen: list[bool] = []  # per error: its config was measured on the training side
        inside: list[bool] = []
        for train, test in GroupKFold(n_splits=k).split(X, z, groups):
            trained = {usable[i].config_hash for i in idx[train]}
            reg = IntervalRegressor(family=family, cost_law=law).fit(X[train], z[train],
                                                                      groups[train])
            c, lo, hi = reg.predict_interval(X[test])
            held = [usable[i] for i in idx[test]]
            if load_curves and (curves := curves_of.get(tuple(idx[train]))) is None:
                curves = curves_of[tuple(idx[train])] = fit_load_curves(
                    [usable[i] for i in idx[train]], blend=blend)
            if load_curves and curves is not None:
                if tuple(idx[train]) not in knobs_of:
                    knobs_of[tuple(idx[train])] = fit_knob_curves(curves, encoder)
                knob = knobs_of[tuple(idx[train])]
                value = _inverse(kind, c)
                low, high = _inverse(kind, lo), _inverse(kind, hi)
                for j, t in enumerate(held):
                    point = workload_features(t.workload_spec)
                    if curves.curve(t.config, point) is None:
                        p = _unmeasured_answer(
                            curves, t.config, point, metric,
                            knob.predict(t.config, point, metric) if knob is not None else None,
                            (value[j], low[j], high[j]))
                    else:
                        p = curves.predict(t.config, point, metric)
                    if p is not None:
                        value[j], low[j], high[j] = p
                c, lo, hi = (_forward(kind, np.maximum(a, 1e-300) if kind == "log" else a)
                             for a in (value, low, high))
            pred = _inverse(kind, c)
            # Measured at another rate: the same config on the training side (by hash, or by
            # its load-curve identity, which leaves out knobs added to the space later).
            known = [t.config_hash in trained or (
                load_curves and curves is not None
                and curves.curve(t.config, workload_features(t.workload_spec)) is not None)
                for t in held]
            inside.extend(((z[test] >= lo - 1e-9) & (z[test] <= hi + 1e-9)).tolist())
            if score_on == "trial":
                errors.extend((np.abs(pred - y[test])
                               / np.maximum(np.abs(y[test]), 1e-12)).tolist())
                seen.extend(known)
                continue
            by_group: dict[tuple[str, str], list[int]] = {}
            for j, t in enumerate(held):
                by_group.setdefault((t.config_hash, t.workload_hash), []).append(j)
            for rows in by_group.values():
                truth = float(np.median(y[test][rows]))
                errors.append(abs(float(np.mean(pred[rows])) - truth)
                              / max(abs(truth), 1e-12))
                seen.append(known[rows[0]])
        floor, floor_n = noise_floor(usable, metric)
        if not np.all(np.abs(y) > 0):
            # A relative error of a measured zero is undefined (a count of cut requests is
            # mostly 0): dividing by a tiny floor printed MAPEs of 10^15 % in the cheat-sheet.
            out[metric] = MetricScore(metric, len(y), n_groups, None, float(np.mean(inside)), k,
                                      floor, floor_n)
            continue
        split: dict[str, Any] = {}
        if group_by == "workload":
            elsewhere = [e for e, s in zip(errors, seen, strict=True) if s]
            only_there = [e for e, s in zip(errors, seen, strict=True) if not s]
            split = {"seen_config_mape": float(np.mean(elsewhere)) if elsewhere else None,
                     "seen_config_n": len(elsewhere),
                     "unseen_config_mape": float(np.mean(only_there)) if only_there else None,
                     "unseen_config_n": len(only_there)}
        out[metric] = MetricScore(metric, len(y), n_groups, float(np.mean(errors)),
                                  float(np.mean(inside)), k, floor, floor_n, **split)
    return out

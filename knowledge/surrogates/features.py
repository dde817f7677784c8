"""Workload features and the feature matrix: what a surrogate sees of a trial.

A context key, the workload features of a spec (as the workload kinds declare them), the
derived features and cost law of a config, and the encoder that turns knob configs plus
workload features into a float matrix.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from knowledge.models import TrialRecord
from knowledge.work_cost import CostLaw
from objectives.kinds import workload_kinds

__all__ = [
    "COST_TERMS",
    "ContextKey",
    "FeatureEncoder",
    "WorkloadPoint",
    "context_of",
    "cost_law",
    "derived_features",
    "launch_params",
    "workload_distance",
    "workload_features",
    "workload_params",
]


@dataclass(frozen=True, order=True)
class ContextKey:
    """What a model is fitted per: knowledge never transfers silently across these."""

    target: str
    hardware_key: str
    model: str | None
    engine_version: str | None

    def label(self) -> str:
        parts = [self.target, self.hardware_key]
        if self.model:
            parts.append(self.model)
        if self.engine_version:
            parts.append(self.engine_version)
        return " / ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "hardware_key": self.hardware_key, "model": self.model,
                "engine_version": self.engine_version}


def _minor(version: str | None) -> str | None:
    """``0.26.0`` -> ``0.26``: patch releases do not change serving behaviour enough to split."""
    if not version:
        return None
    parts = str(version).split(".")
    return ".".join(parts[:2])


def context_of(trial: TrialRecord) -> ContextKey:
    """The context a trial's measurements belong to."""
    params = trial.workload_spec.get("params", {}) or {}
    model = params.get("model")
    # An engine's version is recorded under the target's name or its Python spelling.
    engine = trial.engine_versions.get(trial.target) or trial.engine_versions.get(
        trial.target.replace("-", "_"))
    return ContextKey(trial.target, trial.hardware_key, str(model) if model else None,
                      _minor(engine))


def workload_features(spec: Mapping[str, Any]) -> dict[str, float]:
    """Numeric workload features of a stored workload spec (or of a query's plain mapping).

    Names are the public vocabulary of queries, declared by the workload kinds
    (objectives/kinds/): a query's mapping names no kind, so every kind reads what it knows.
    """
    params: Mapping[str, Any] = spec.get("params", spec) or {}
    out: dict[str, float] = {}
    for kind in workload_kinds():
        out.update(kind.features(params))
    return out


def workload_params(features: Mapping[str, float]) -> list[str]:
    """``features`` back as ``name=value`` workload parameters (``advisor tune
    --workload-param``), as the workload kinds declare the inverse of their features."""
    return [param for kind in workload_kinds() for param in kind.workload_params(features)]


def launch_params(params: Mapping[str, Any], features: Mapping[str, float]) -> dict[str, Any]:
    """A measured spec's ``params`` moved to the asked ``features`` where a kind can (for a
    launch command)."""
    out = dict(params)
    for kind in workload_kinds():
        out = kind.launch_params(out, features)
    return out


@dataclass(frozen=True)
class WorkloadPoint:
    """One measured workload of a context: its features and how many trials saw it."""

    name: str
    spec_hash: str
    spec: dict[str, Any]
    features: dict[str, float]
    trials: int

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "spec_hash": self.spec_hash, "features": self.features,
                "trials": self.trials}


def workload_distance(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    """Largest |log ratio| over the features both have: 0 = same, log(2) = a factor 2 apart."""
    shared = [f for f in a if f in b and a[f] > 0 and b[f] > 0]
    if not shared:
        return 0.0
    return max(abs(math.log(a[f] / b[f])) for f in shared)


def derived_features(config: Mapping[str, Any], workload: Mapping[str, float]
                     ) -> dict[str, float]:
    """Products and ratios that serving costs are proportional to, so a (log-)linear model can
    use them directly, as each workload kind declares them (objectives/kinds/): a kind's features
    appear where its knobs and workload features do."""
    out: dict[str, float] = {}
    for kind in workload_kinds():
        out.update(kind.derived_features(config, workload))
    return out


#: The per-query work terms every declared cost law adds up (objectives/vocabulary.py).
COST_TERMS = tuple(t for kind in workload_kinds() if kind.cost_law for t in kind.cost_law.terms)


def cost_law(encoder: FeatureEncoder, metric: str) -> CostLaw | None:
    """The cost law of ``metric`` over ``encoder``'s columns, or None where none applies.

    One applies where the context's rows carry the per-query work terms a workload kind declares
    (:class:`~objectives.vocabulary.CostLawSpec`) and the kind models ``metric``: one query's
    time, or a rate of batched calls (its work shared by the kind's ``parallel`` column, each
    call's fixed cost by its ``per_call`` queries). Each category of a string knob (an index
    type) has a fixed cost per query of its own.
    """
    index = {c: i for i, c in enumerate(encoder.columns_)}
    for kind in workload_kinds():
        spec = kind.cost_law
        if spec is None or (role := spec.metric_role(metric)) is None:
            continue
        terms = tuple(index[t] for t in spec.terms if t in index)
        if not terms:
            continue
        rate = role == "rate"
        fixed = tuple(index[f"{name}={c}"] for name, cats in sorted(encoder.categories_.items())
                      for c in cats)
        return CostLaw(terms, fixed, rate=rate,
                       parallel=index.get(spec.parallel) if rate and spec.parallel else None,
                       per_call=index.get(spec.per_call) if rate and spec.per_call else None)
    return None


class FeatureEncoder:
    """Knob configs plus workload features -> a float matrix, learnt from the data alone.

    Numbers become log(value) when every seen value is positive (knob effects are multiplicative:
    doubling nprobe, halving block size), booleans 0/1, strings one-hot; a knob that does not apply
    to a config (``nprobe`` of an HNSW index) is NaN, which tree models route on their own.
    """

    def __init__(self) -> None:
        self.columns_: list[str] = []
        self.kinds_: dict[str, str] = {}
        self.categories_: dict[str, list[str]] = {}

    def fit(self, configs: Sequence[Mapping[str, Any]],
            workloads: Sequence[Mapping[str, float]]) -> FeatureEncoder:
        values: dict[str, list[Any]] = {}
        for config, wl in zip(configs, workloads, strict=True):
            for k, v in {**config, **wl, **derived_features(config, wl)}.items():
                values.setdefault(k, []).append(v)
        self.columns_, self.kinds_, self.categories_ = [], {}, {}
        for name in sorted(values):
            seen = [v for v in values[name] if v is not None]
            if all(isinstance(v, bool) for v in seen):
                self.kinds_[name] = "bool"
                self.columns_.append(name)
            elif all(isinstance(v, int | float) and not isinstance(v, bool) for v in seen):
                positive = all(float(v) > 0 for v in seen)
                self.kinds_[name] = "log" if positive else "num"
                self.columns_.append(name)
            else:
                self.kinds_[name] = "cat"
                cats = sorted({str(v) for v in seen})
                self.categories_[name] = cats
                self.columns_.extend(f"{name}={c}" for c in cats)
        return self

    @property
    def names(self) -> list[str]:
        """Knob / workload-feature names (before one-hot expansion)."""
        return list(self.kinds_)

    def transform(self, configs: Sequence[Mapping[str, Any]],
                  workloads: Sequence[Mapping[str, float]]) -> np.ndarray:
        out = np.full((len(configs), len(self.columns_)), np.nan)
        index = {c: i for i, c in enumerate(self.columns_)}
        for r, (config, wl) in enumerate(zip(configs, workloads, strict=True)):
            row = {**config, **wl, **derived_features(config, wl)}
            for name, kind in self.kinds_.items():
                v = row.get(name)
                if kind == "cat":
                    if v is None:
                        continue  # inactive: all its one-hot columns stay NaN
                    for c in self.categories_[name]:
                        out[r, index[f"{name}={c}"]] = 1.0 if str(v) == c else 0.0
                elif v is None or isinstance(v, str):
                    continue
                elif kind == "bool":
                    out[r, index[name]] = float(bool(v))
                elif kind == "log":
                    out[r, index[name]] = math.log(max(float(v), 1e-12))
                else:
                    out[r, index[name]] = float(v)
        return out

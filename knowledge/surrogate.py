"""The surrogate models' former single module: the code lives in knowledge/surrogates/, one
module per concern. Kept so that existing imports (and benchmarks reading private helpers) keep
working; new code imports :mod:`knowledge.surrogates`.
"""

from __future__ import annotations

from knowledge.curve_model import KNOB_CURVE_FAMILY
from knowledge.surrogates import (
    COST_TERMS,
    COVERAGE,
    DEFAULT_FAMILY,
    FAMILIES,
    GROUP_BY,
    NOISE_Z,
    SCORE_ON,
    SMALL_SAMPLE_INFLATION,
    ContextKey,
    ContextModels,
    FeatureEncoder,
    IntervalRegressor,
    MetricModel,
    MetricScore,
    WorkloadPoint,
    context_of,
    cost_law,
    cross_validate,
    derived_features,
    fit_context,
    fit_knob_curves,
    fit_load_curves,
    instance_groups,
    launch_params,
    metric_transform,
    noise_floor,
    weighted_ridge,
    workload_distance,
    workload_features,
    workload_params,
)
from knowledge.surrogates.families import _member_layout
from knowledge.surrogates.linear import (
    _distinct_rows_at_least,
    _linear_bases_predict,
    _LinearBase,
    _zero_one_columns,
)
from knowledge.surrogates.training import _usable, _xy
from knowledge.surrogates.transforms import _forward, _inverse

__all__ = [
    "COST_TERMS",
    "COVERAGE",
    "DEFAULT_FAMILY",
    "FAMILIES",
    "GROUP_BY",
    "KNOB_CURVE_FAMILY",
    "NOISE_Z",
    "SCORE_ON",
    "SMALL_SAMPLE_INFLATION",
    "ContextKey",
    "ContextModels",
    "FeatureEncoder",
    "IntervalRegressor",
    "MetricModel",
    "MetricScore",
    "WorkloadPoint",
    "_LinearBase",
    "_distinct_rows_at_least",
    "_forward",
    "_inverse",
    "_linear_bases_predict",
    "_member_layout",
    "_usable",
    "_xy",
    "_zero_one_columns",
    "context_of",
    "cost_law",
    "cross_validate",
    "derived_features",
    "fit_context",
    "fit_knob_curves",
    "fit_load_curves",
    "instance_groups",
    "launch_params",
    "metric_transform",
    "noise_floor",
    "weighted_ridge",
    "workload_distance",
    "workload_features",
    "workload_params",
]

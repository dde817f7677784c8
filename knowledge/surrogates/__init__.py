"""Surrogate models: per context (target, hardware, model shape, engine version), one regressor
per metric from knobs plus workload features, with a calibrated prediction interval.

Latency, throughput and sizes are fitted in log space and fractions (recall) in logit space, so
errors are relative and predictions stay positive / inside [0, 1]. Intervals are calibrated on
out-of-fold residuals (normalised conformal prediction), so a nominal 90 % interval covers about
90 % of held-out trials even when the raw ensemble spread is over- or under-confident.

One module per concern: features (what a model sees of a trial), transforms, the regressor
families behind a small protocol, calibration, the per-context fit and its validation. This
package never imports an engine or optuna: it sees trials only as stored records.
"""

from __future__ import annotations

from knowledge.surrogates.calibration import COVERAGE, NOISE_Z, SMALL_SAMPLE_INFLATION
from knowledge.surrogates.context import ContextModels, MetricModel, fit_context
from knowledge.surrogates.curves import fit_knob_curves, fit_load_curves
from knowledge.surrogates.families import (
    DEFAULT_FAMILY,
    FAMILIES,
    FAMILY_IMPLEMENTATIONS,
    SurrogateFamily,
)
from knowledge.surrogates.features import (
    COST_TERMS,
    ContextKey,
    FeatureEncoder,
    WorkloadPoint,
    context_of,
    cost_law,
    derived_features,
    launch_params,
    workload_distance,
    workload_features,
    workload_params,
)
from knowledge.surrogates.linear import weighted_ridge
from knowledge.surrogates.regressor import IntervalRegressor
from knowledge.surrogates.transforms import metric_transform
from knowledge.surrogates.validation import (
    GROUP_BY,
    SCORE_ON,
    MetricScore,
    cross_validate,
    instance_groups,
    noise_floor,
)

__all__ = [
    "COST_TERMS",
    "COVERAGE",
    "DEFAULT_FAMILY",
    "FAMILIES",
    "FAMILY_IMPLEMENTATIONS",
    "GROUP_BY",
    "NOISE_Z",
    "SCORE_ON",
    "SMALL_SAMPLE_INFLATION",
    "ContextKey",
    "ContextModels",
    "FeatureEncoder",
    "IntervalRegressor",
    "MetricModel",
    "MetricScore",
    "SurrogateFamily",
    "WorkloadPoint",
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

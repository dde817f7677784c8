"""How a trial is scored: targets (one module per engine), workloads, metrics and SLO scoring.

Objectives never import optuna; only a target's own module imports its engine.
"""

from __future__ import annotations

from objectives.measurement import Measurement
from objectives.metrics import METRICS, MetricSpec, metric_spec
from objectives.slo import SLO, Bound, parse_slo
from objectives.target import Target
from objectives.workload import Workload

__all__ = [
    "METRICS",
    "SLO",
    "Bound",
    "Measurement",
    "MetricSpec",
    "Target",
    "Workload",
    "metric_spec",
    "parse_slo",
]

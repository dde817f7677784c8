"""A small measured store of the scripted target where the engine default meets the standard
SLO and the best config meeting it is within noise of the default, while a looser SLO admits a
clearly faster config; optionally an invalid trial that would beat everything if it were used.

Written straight into a store (no driver) so "keep the defaults" is tested on known figures.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from knowledge import SLOMarginRecord, StudyRecord, TrialRecord, TrialStatus, TrialStore
from objectives import parse_slo
from objectives.workload import Workload, canonical_json

HARDWARE = "cpu-test-box-2c"
WORKLOAD = Workload("scripted", "scripted-2000", {"n_base": 2000, "dim": 64})
#: The vector-search tiers' SLOs: "standard" (the default and its neighbours meet it; the fast
#: configs miss its latency bound) and "throughput" (the fast configs meet it too).
WITHIN = "recall_at_10>=0.95,p95_latency_ms<=1"
LOOSE = "recall_at_10>=0.9"
DEFAULT = {"x": 0.5, "y": 8, "mode": "a"}
NEAR = {"x": 0.6, "y": 8, "mode": "a"}
FAST = {"x": 0.6, "y": 32, "mode": "a"}
INVALID = {"x": 0.55, "y": 8, "mode": "a"}

#: (config, qps, p95 ms): the search trials besides the default's measurements.
SEARCH = [
    (NEAR, 505.0, 0.52), ({"x": 0.7, "y": 8, "mode": "a"}, 495.0, 0.60),
    ({"x": 0.4, "y": 8, "mode": "a"}, 470.0, 0.45), ({"x": 0.3, "y": 8, "mode": "a"}, 430.0, 0.40),
    (FAST, 900.0, 2.0), ({"x": 0.5, "y": 32, "mode": "a"}, 880.0, 1.8),
    ({"x": 0.7, "y": 32, "mode": "a"}, 870.0, 2.2),
]


def config_hash(config: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical_json(dict(config)).encode()).hexdigest()[:16]


def write_trial(store: TrialStore, study: StudyRecord, number: int, config: Mapping[str, Any],
                metrics: Mapping[str, float], *, details: Mapping[str, Any] | None = None,
                status: str = TrialStatus.COMPLETE) -> TrialRecord:
    """One measured trial of the study's target with its margins for the study's SLO."""
    slo = parse_slo(study.slo)
    t = store.start_trial(TrialRecord(
        study_id=study.id or 0, number=number, target=study.target, config=dict(config),
        config_hash=config_hash(config), workload_spec=WORKLOAD.spec,
        workload_hash=WORKLOAD.spec_hash, hardware={"key": HARDWARE}, hardware_key=HARDWARE,
        engine_versions={"scripted": "1.0"}, advisor_version="test", details=dict(details or {})))
    margins = [SLOMarginRecord(trial_id=0, metric=b.metric, op=b.op, threshold=b.threshold,
                               value=metrics[b.metric], margin=b.margin(metrics[b.metric]))
               for b in slo.bounds]
    return store.complete_trial(
        t.id or 0, metrics=metrics, engine_versions={"scripted": "1.0"},
        details=dict(details or {}), margins=margins,
        feasible=status == TrialStatus.COMPLETE and slo.is_met(metrics),
        objective_value=metrics["qps"], duration_s=0.01, status=status)


def new_study(store: TrialStore, name: str, target: str = "scripted") -> StudyRecord:
    """A finished study of ``target`` (a scripted one) under :data:`WITHIN` at :data:`WORKLOAD`."""
    return store.create_study(StudyRecord(
        name=name, target=target, slo=WITHIN, objective_metric="qps",
        objective_direction="maximize", workload_spec=WORKLOAD.spec,
        workload_hash=WORKLOAD.spec_hash, sampler="tpe", n_trials=12, hardware_key=HARDWARE,
        advisor_version="test", status="finished"))


def populate(store: TrialStore, *, name: str = "defaults", default_qps: tuple[float, ...] = (
        490.0, 500.0, 510.0, 495.0), near_qps: float = 512.0, with_invalid: bool = False,
             with_default: bool = True) -> StudyRecord:
    """The study: the default measured ``len(default_qps)`` times (its first trial has the
    engine-default role; none ``with_default=False``), then :data:`SEARCH` (``NEAR`` at
    ``near_qps``)."""
    study = new_study(store, name)
    number = 0
    for i, qps in enumerate(default_qps if with_default else ()):
        write_trial(store, study, number, DEFAULT,
                    {"qps": qps, "p95_latency_ms": 0.50, "recall_at_10": 0.99},
                    details={"role": "engine-default"} if i == 0 else None)
        number += 1
    for config, qps, p95 in SEARCH:
        write_trial(store, study, number, config,
                    {"qps": near_qps if config == NEAR else qps, "p95_latency_ms": p95,
                     "recall_at_10": 0.99})
        number += 1
    if with_invalid:  # would be the best by far, if it were used
        write_trial(store, study, number, INVALID,
                    {"qps": 5000.0, "p95_latency_ms": 0.3, "recall_at_10": 0.999},
                    details={"validity": "client_bound"}, status=TrialStatus.INVALID)
    stored = store.get_study(name)
    assert stored is not None
    return stored

"""The engine default of another machine: a knob whose default is a machine quantity (faiss
``threads: cpu_count``) is that machine's when the answer is about it, so trials of a 16-core
host's defaults are found as the default from a 2-core laptop (and the other way round)."""

from __future__ import annotations

from typing import Any

import pytest

from advisor.answers.model_based import recommend_measured
from advisor.objective import Objective
from advisor.trial_records import config_hash
from knowledge import StudyRecord, TrialRecord, TrialStore
from objectives import parse_slo
from objectives.workload import Workload
from search_spaces.space import load_space

SLO = parse_slo("p95_latency_ms<=0.25,recall_at_10>=0.9")
CORES = 64  # no CI machine has this many: the asker's own default differs
HOST = {"key": f"cpu-big-host-{CORES}c", "cpu_model": "Big Host", "cpu_count": CORES,
        "affinity_cpus": CORES, "gpus": []}


def test_the_space_resolves_machine_defaults_from_a_fingerprint() -> None:
    space = load_space("faiss")
    assert space.default_config()["threads"] != CORES
    assert space.default_config(machine=HOST)["threads"] == CORES
    # A fingerprint without the quantity keeps this machine's value.
    assert space.default_config(machine={"key": "x"}) == space.default_config()


@pytest.fixture
def store(tmp_path: Any) -> TrialStore:
    s = TrialStore(f"sqlite:///{tmp_path / 'k.db'}")
    wl = Workload("vector-search", "stdlib-docs-8k", {"dataset": "stdlib-docs", "n_base": 8000,
                                                      "n_queries": 1000, "k": 10, "seed": 0})
    study = s.create_study(StudyRecord(
        name="host", target="faiss", slo=str(SLO), objective_metric="qps",
        objective_direction="maximize", workload_spec=wl.spec, workload_hash=wl.spec_hash,
        sampler="random", n_trials=3, hardware_key=HOST["key"], advisor_version="test"))
    default = load_space("faiss").default_config(machine=HOST)
    faster = {**default, "nprobe": 16}
    for number, (config, qps, recall) in enumerate([(default, 5000.0, 0.95),
                                                     (default, 5100.0, 0.95),
                                                     (faster, 4000.0, 0.99)]):
        rec = s.start_trial(TrialRecord(
            study_id=study.id or 0, number=number, target="faiss", config=config,
            config_hash=config_hash(config), workload_spec=wl.spec, workload_hash=wl.spec_hash,
            hardware=HOST, hardware_key=HOST["key"], advisor_version="test"))
        metrics = {"qps": qps, "p95_latency_ms": 0.1, "recall_at_10": recall}
        s.complete_trial(rec.id or 0, metrics=metrics, engine_versions={"faiss": "1.15"},
                         details={}, margins=[], feasible=SLO.is_met(metrics),
                         objective_value=qps, duration_s=0.01)
    return s


def test_the_measured_answer_finds_the_default_of_the_answered_machine(store: TrialStore
                                                                       ) -> None:
    rec = recommend_measured(store, target="faiss", slo=SLO,
                             objective=Objective.parse("maximize:qps"),
                             hardware_key=HOST["key"], workload={"n_vectors": 8000})
    assert rec.default_verdict is not None, "the host's default was measured twice"
    assert len(rec.default_windows) == 2 and rec.default_verdict.meets
    assert rec.answer == "keep_defaults" and rec.trial is not None
    assert rec.trial.config["threads"] == CORES

"""`recommend --measured` answers from trials of the asked model and workload only: another
model's trial never answers, a workload measured within 10 % is used as it is, and a farther one
is borrowed by name. Runs on SQLite and on the local PostgreSQL server."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from advisor.answers.model_based import Recommendation, recommend_measured, trial_model
from advisor.objective import Objective
from knowledge import StudyRecord, TrialRecord, TrialStore
from objectives import parse_slo
from objectives.workload import Workload, canonical_json

SLO = parse_slo("p95_latency_ms<=1,recall_at_10>=0.8")
OBJECTIVE = Objective.parse("maximize:qps")
HARDWARE = "1x-test-gpu"


def _measure(store: TrialStore, model: str, n_base: int, results: list[tuple[float, float, float]]
             ) -> list[TrialRecord]:
    """One study of ``model`` at corpus size ``n_base``: a trial per (qps, p95, recall)."""
    wl = Workload("scripted", f"scripted-{model}-{n_base}", {"model": model, "n_base": n_base})
    study = store.create_study(StudyRecord(
        name=wl.name, target="scripted", slo=str(SLO), objective_metric="qps",
        objective_direction="maximize", workload_spec=wl.spec, workload_hash=wl.spec_hash,
        sampler="random", n_trials=len(results), hardware_key=HARDWARE, advisor_version="test"))
    out = []
    for number, (qps, p95, recall) in enumerate(results):
        config: dict[str, Any] = {"x": 0.1 + number / 10, "y": 8, "mode": "a"}
        rec = store.start_trial(TrialRecord(
            study_id=study.id or 0, number=number, target="scripted", config=config,
            config_hash=hashlib.sha256(canonical_json(config).encode()).hexdigest()[:16],
            workload_spec=wl.spec, workload_hash=wl.spec_hash, hardware={"key": HARDWARE},
            hardware_key=HARDWARE, advisor_version="test"))
        metrics = {"qps": qps, "p95_latency_ms": p95, "recall_at_10": recall}
        out.append(store.complete_trial(
            rec.id or 0, metrics=metrics, engine_versions={"scripted": "1.0"}, details={},
            margins=[], feasible=SLO.is_met(metrics), objective_value=qps, duration_s=0.01))
    return out


@pytest.fixture
def store(db_url: str) -> TrialStore:
    s = TrialStore(db_url)
    # The small model is faster: its best trial beats every trial of the big one.
    _measure(s, "llama-3.2-1b", 2000, [(900.0, 0.5, 0.9), (950.0, 0.6, 0.9)])
    _measure(s, "llama-3-8b", 2000, [(300.0, 0.8, 0.9), (500.0, 1.5, 0.9)])
    _measure(s, "llama-3-8b", 8000, [(200.0, 0.9, 0.9)])
    return s


def _ask(store: TrialStore, **kw: Any) -> Recommendation:
    return recommend_measured(store, target="scripted", slo=SLO, objective=OBJECTIVE,
                              hardware_key="test-gpu", **kw)


def test_the_asked_model_answers_never_another(store: TrialStore) -> None:
    rec = _ask(store, model="llama-3-8b", workload={"n_vectors": 2000})
    assert rec.found and rec.trial is not None
    assert trial_model(rec.trial) == "llama-3-8b"
    assert rec.trial.metrics["qps"] == 300.0  # the 8B trial meeting the SLO, not the 1B's 950
    assert rec.considered == 2 and rec.borrowed_workload is None
    assert rec.to_dict()["recommended"]["model"] == "llama-3-8b"


def test_without_a_model_every_model_counts_and_the_answer_names_it(store: TrialStore) -> None:
    rec = _ask(store)
    assert rec.trial is not None and rec.trial.metrics["qps"] == 950.0
    assert trial_model(rec.trial) == "llama-3.2-1b"


def test_a_workload_far_from_every_measured_one_is_borrowed_by_name(store: TrialStore) -> None:
    rec = _ask(store, model="llama-3-8b", workload={"n_vectors": 6000})
    assert rec.trial is not None and rec.trial.metrics["qps"] == 200.0
    assert rec.borrowed_workload is not None
    assert rec.borrowed_workload["name"] == "scripted-llama-3-8b-8000"
    assert rec.borrowed_workload["factor"] == pytest.approx(8000 / 6000, rel=1e-3)
    assert rec.to_dict()["borrowed_workload"]["features"]["n_vectors"] == 8000


def test_a_model_never_measured_says_so_with_a_command_tune_accepts(store: TrialStore) -> None:
    rec = _ask(store, model="tiny-llama")
    assert not rec.found and rec.considered == 0
    assert rec.reason is not None and "llama-3-8b, llama-3.2-1b" in rec.reason
    assert rec.tune_command is not None and "--model tiny-llama" in rec.tune_command


def test_an_unknown_model_gets_no_tune_command_but_the_reason(store: TrialStore) -> None:
    rec = _ask(store, model="qwen2.5-7b")
    assert not rec.found and rec.tune_command is None
    assert rec.reason is not None and "local model directory" in rec.reason

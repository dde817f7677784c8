"""The failure model (knowledge/failures.py): labels blame the config only and count each engine
start once; held-out evaluation keeps a config's repeats (and a study) on one side; a hidden
constraint seen in two studies is learnt; too little data skips nothing; time saved excludes
starts that cost nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from knowledge import StudyRecord, TrialRecord, TrialStore
from knowledge.failures import (
    CHEAP_REJECTION_S,
    MIN_STARTS,
    PREDICTED_FAILURE,
    FailureClassifier,
    LabelledStart,
    StartEncoder,
    StartFacts,
    _splits,
    evaluate,
    fit_failure_model,
    labelled_starts,
    score,
    start_workload_features,
)
from objectives.workload import Workload
from tests.knowledge.failure_trials import LIMIT, config_hash, constrained_study, violates

HW = {"key": "gpu-box", "gpus": [{"memory_mib": 81559.0}], "memory_gib": 250.0}


@pytest.fixture
def store(tmp_path: Path) -> TrialStore:
    return TrialStore(f"sqlite:///{tmp_path / 'f.db'}")


def _study(store: TrialStore, name: str, provenance: dict[str, object] | None = None
           ) -> StudyRecord:
    wl = Workload("llm-serving", "chat", {"model": "tiny", "prompt_len": {"max": 300},
                                          "output_len": {"max": 100},
                                          "arrival": {"rate_rps": 5}})
    return store.create_study(StudyRecord(
        name=name, target="scripted", slo="qps>=1", objective_metric="qps",
        objective_direction="maximize", workload_spec=wl.spec, workload_hash=wl.spec_hash,
        sampler="random", n_trials=20, hardware_key="gpu-box", advisor_version="test",
        data_provenance=provenance or {}))


def _trial(store: TrialStore, study: StudyRecord, number: int, *, status: str,
           error_type: str | None = None, duration_s: float = 30.0,
           versions: dict[str, str] | None = None, details: dict[str, object] | None = None
           ) -> TrialRecord:
    config = {"x": 0.1 * (number + 1), "y": 4, "mode": "a"}
    t = store.start_trial(TrialRecord(
        study_id=study.id or 0, number=number, target="scripted", config=config,
        config_hash=config_hash(config), workload_spec=study.workload_spec,
        workload_hash=study.workload_hash, hardware=HW, hardware_key="gpu-box",
        advisor_version="test", details=details or {}))
    if status in ("complete", "invalid"):
        return store.complete_trial(t.id or 0, metrics={"qps": 1.0},
                                    engine_versions=versions or {"scripted": "1.2.3"},
                                    details={}, margins=[], feasible=None, objective_value=1.0,
                                    duration_s=duration_s, status=status)
    if status == "running":
        return t
    return store.fail_trial(t.id or 0, error_type=error_type or "error", status=status,
                            error=f"{error_type}: why\nlog tail", duration_s=duration_s)


def test_labels_blame_the_config_and_count_each_engine_start_once(store: TrialStore) -> None:
    study = _study(store, "a")
    kinds = [("complete", None), ("invalid", None), ("failed", "crash"), ("failed", "oom"),
             ("failed", "engine_start"), ("failed", "timeout"), ("failed", "rejected"),
             ("failed", "error"), ("failed", "missing_metric"), ("failed", "worker_setup"),
             ("failed", PREDICTED_FAILURE), ("interrupted", "interrupted"), ("running", None)]
    trials = [_trial(store, study, i, status=s, error_type=e) for i, (s, e) in enumerate(kinds)]
    # A co-measured study repeats its leader's engine starts under another workload.
    co = _study(store, "a@9rps", {"co_measured_with": "a"})
    _trial(store, co, 0, status="failed", error_type="crash")
    _trial(store, study, 20, status="failed", error_type="crash",
           details={"co_measured_with": {"study": "a", "trial": 2}})
    rows = {r.trial_id: r for r in labelled_starts(store)}
    kept = {trials[i].id for i in range(7)}
    assert set(rows) == kept  # measured, and the five config failures; nothing else
    assert [rows[trials[i].id].failed for i in range(7)] == [False, False] + [True] * 5
    assert rows[trials[2].id].error_type == "crash" and rows[trials[2].id].reason == "crash: why"
    # Failed starts stored no engine version: they take their study's (major.minor).
    assert {r.facts.engine_version for r in rows.values()} == {"1.2"}


def test_a_quick_rejection_is_a_label_but_saves_no_time(store: TrialStore) -> None:
    study = _study(store, "r")
    quick = _trial(store, study, 0, status="failed", error_type="rejected",
                   duration_s=CHEAP_REJECTION_S / 10)
    slow = _trial(store, study, 1, status="failed", error_type="rejected", duration_s=60.0)
    measured = _trial(store, study, 2, status="complete", duration_s=90.0)
    rows = {r.trial_id: r for r in labelled_starts(store)}
    assert rows[quick.id].prestart and not rows[slow.id].prestart
    ordered = [rows[quick.id], rows[slow.id], rows[measured.id]]
    held = score(ordered, np.array([0.9, 0.9, 0.9]), 0.7)
    assert (held.skipped, held.true_skips, held.false_skips) == (3, 2, 1)
    assert held.saved_s == 60.0 and held.lost_s == 90.0 and held.prestart_skips == 1
    assert held.precision == pytest.approx(2 / 3) and held.recall == 1.0
    assert score(ordered, np.array([0.1, np.nan, 0.1]), 0.7).starts == 2  # NaN: not held out


def test_start_features_leave_the_rate_out_and_add_the_context_length() -> None:
    spec = Workload("llm-serving", "chat", {"prompt_len": {"median": 200, "max": 2048},
                                            "output_len": {"median": 100, "max": 512},
                                            "arrival": {"rate_rps": 40}}).spec
    features = start_workload_features(spec)
    assert "rate_rps" not in features
    assert features["start_max_context"] == 2560 and features["prompt_len"] == 200


def test_engine_version_is_a_feature_only_when_it_varies() -> None:
    facts = [StartFacts({}, "m", HW, "1.0"), StartFacts({}, "m", HW, None)]
    configs = [{"x": 0.5}, {"x": 0.6}]
    one = StartEncoder().fit(configs, facts)
    assert not one.use_version_ and "start_engine_version=1.0" not in one.encoder_.columns_
    two = StartEncoder(shape_features=lambda m: {"model_params": 1e9}).fit(
        configs, [facts[0], StartFacts({}, "m", HW, "2.0")])
    assert two.use_version_ and "start_engine_version=2.0" in two.encoder_.columns_
    assert "start_model_params" in two.encoder_.columns_
    assert "start_gpu_memory_mib" in two.encoder_.columns_


def test_held_out_splits_keep_a_configs_repeats_and_a_study_together(store: TrialStore
                                                                     ) -> None:
    constrained_study(store, "s1", n_configs=30, seed=1)
    constrained_study(store, "s2", n_configs=30, seed=1)  # the same configs again: repeats
    rows = labelled_starts(store)
    for train, test in _splits(rows, "config", 5):
        assert not {rows[i].config_hash for i in train} & {rows[i].config_hash for i in test}
    studies = _splits(rows, "study", 5)
    assert len(studies) == 2
    for train, test in studies:
        assert len({rows[i].study for i in test}) == 1
        assert not {rows[i].study for i in train} & {rows[i].study for i in test}


def test_a_hidden_constraint_seen_in_two_studies_is_learnt(store: TrialStore) -> None:
    constrained_study(store, "s1", n_configs=100, seed=1)
    constrained_study(store, "s2", n_configs=100, seed=2)
    rows = labelled_starts(store)
    model = fit_failure_model(rows, target="scripted")
    assert model.untrusted is None, model.untrusted
    assert model.held_out is not None and (model.held_out.precision or 0) >= 0.9
    facts = rows[0].facts
    far_over = [{"x": 0.85, "y": 60, "mode": "a"}, {"x": 0.8, "y": 50, "mode": "b", "z": 3}]
    far_under = [{"x": 0.1, "y": 2, "mode": "a"}, {"x": 0.3, "y": 8, "mode": "b", "z": 2}]
    assert all(violates(c) for c in far_over) and not any(violates(c) for c in far_under)
    assert (model.predict(far_over, facts) >= model.threshold).all()
    assert (model.predict(far_under, facts) < 0.2).all()
    evidence = model.evidence(far_over[0], facts)
    assert len(evidence) == 3
    assert all(e["error_type"] == "crash" and f"over {LIMIT:g}" in e["reason"] for e in evidence)
    ev = evaluate(rows)
    by_scheme = {s.scheme: s.held_out for s in ev.scores}
    assert set(by_scheme) == {"config", "study"}
    for held in by_scheme.values():
        assert held.auc is not None and held.auc > 0.9
        assert held.saved_s > held.lost_s
    assert {scheme for scheme, _, _ in ev.sweep} == {"config", "study"}


def test_too_little_data_fits_nothing_and_says_so(store: TrialStore) -> None:
    constrained_study(store, "small", n_configs=MIN_STARTS - 5, seed=1)
    model = fit_failure_model(labelled_starts(store), target="scripted")
    assert model.classifier is None
    assert model.untrusted is not None and f"need >= {MIN_STARTS}" in model.untrusted
    assert model.trusted_on("anything") == model.untrusted
    with pytest.raises(RuntimeError, match="not fitted"):
        model.predict([{"x": 0.5, "y": 8, "mode": "a"}], StartFacts({}, None, HW, None))


def test_classifier_contract() -> None:
    with pytest.raises(RuntimeError, match="not fitted"):
        FailureClassifier().predict_proba(np.zeros((1, 2)))
    never = FailureClassifier().fit(np.zeros((4, 2)), np.zeros(4))
    assert (never.predict_proba(np.ones((3, 2))) == 0).all()
    with pytest.raises(ValueError, match="unknown failure-model family"):
        FailureClassifier(family="svm").fit(np.zeros((4, 1)), np.array([0, 1, 0, 1]))
    with pytest.raises(ValueError, match="same, non-zero number of rows"):
        FailureClassifier().fit(np.zeros((3, 1)), np.zeros(2))
    with pytest.raises(ValueError, match="0 < threshold <= 1"):
        fit_failure_model([], target="t", threshold=0.0)


def _row(i: int, failed: bool) -> LabelledStart:
    return LabelledStart(i, "s", "t", "hw", {"x": i}, str(i), StartFacts({}, None, HW, None),
                         failed, "crash" if failed else None, "", 1.0, False)


def test_no_held_out_predictions_without_two_groups() -> None:
    rows = [_row(0, True), _row(0, False)]
    rows = [LabelledStart(**{**r.__dict__, "config_hash": "same"}) for r in rows]
    assert _splits(rows, "config", 5) == [] and _splits(rows, "study", 5) == []
    with pytest.raises(ValueError, match="`scheme` must be"):
        _splits(rows, "workload", 5)

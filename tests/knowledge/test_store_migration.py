"""A store created by an earlier release gains the columns this one added, on open, and keeps
its rows: on SQLite and on PostgreSQL."""

from __future__ import annotations

from sqlalchemy import inspect, text

from knowledge import StudyRecord, TrialRecord, TrialStatus, TrialStore


def _drop_swept_from(store: TrialStore) -> None:
    with store.engine.begin() as conn:
        conn.execute(text("ALTER TABLE advisor_trial DROP COLUMN swept_from"))


def test_an_older_store_gains_the_swept_from_column_and_keeps_its_trials(db_url: str) -> None:
    old = TrialStore(db_url)
    study = old.create_study(StudyRecord(
        name="old", target="scripted", slo="p95_latency_ms<=1", objective_metric="qps",
        objective_direction="maximize", workload_spec={}, workload_hash="w", sampler="tpe",
        n_trials=1, hardware_key="h", advisor_version="old"))
    old.start_trial(TrialRecord(
        study_id=study.id or 0, number=0, target="scripted", config={"x": 0.5},
        config_hash="c", workload_spec={}, workload_hash="w", hardware={}, hardware_key="h",
        advisor_version="old"))
    _drop_swept_from(old)
    old.close()
    assert "swept_from" not in {c["name"] for c in inspect(old.engine).get_columns(
        "advisor_trial")}

    reopened = TrialStore(db_url)
    columns = {c["name"] for c in inspect(reopened.engine).get_columns("advisor_trial")}
    assert "swept_from" in columns
    (trial,) = reopened.trials_of_study(study.id or 0)
    assert trial.config == {"x": 0.5} and trial.swept_from is None
    assert reopened.count_trials(study.id or 0, [TrialStatus.RUNNING]) == 1
    TrialStore(db_url).close()  # a second open finds nothing to add
    reopened.close()

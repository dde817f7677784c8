"""One contract every trial store backend must pass: runs on SQLite and on PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest

from advisor.errors import StoreError
from knowledge import (
    SLOMarginRecord,
    StudyRecord,
    TrialFilter,
    TrialRecord,
    TrialStatus,
    TrialStore,
)
from knowledge.models import utcnow


def _study(name: str = "s1", target: str = "faiss") -> StudyRecord:
    return StudyRecord(name=name, target=target, slo="p95_latency_ms<=1", objective_metric="qps",
                       objective_direction="maximize", workload_spec={"kind": "k"},
                       workload_hash="w1", sampler="tpe", n_trials=3, hardware_key="cpu-x-2c",
                       advisor_version="0")


def _trial(study: StudyRecord, number: int, **kw: object) -> TrialRecord:
    fields = dict(study_id=study.id, number=number, target=study.target,
                  config={"nprobe": number}, config_hash=f"h{number}", workload_spec={"kind": "k"},
                  workload_hash="w1", hardware={"key": "cpu-x-2c"}, hardware_key="cpu-x-2c",
                  advisor_version="0")
    fields.update(kw)
    return TrialRecord(**fields)  # type: ignore[arg-type]


def test_study_roundtrip_and_unique_name(store: TrialStore) -> None:
    created = store.create_study(_study())
    assert created.id is not None
    loaded = store.get_study("s1")
    assert loaded is not None and loaded.workload_spec == {"kind": "k"}
    assert loaded.created_at.tzinfo is not None
    with pytest.raises(StoreError, match="already exists"):
        store.create_study(_study())
    store.set_study_status(created.id, "finished")
    assert store.get_study("s1").status == "finished"  # type: ignore[union-attr]


def test_trial_lifecycle_complete_with_typed_margins(store: TrialStore) -> None:
    study = store.create_study(_study())
    t = store.start_trial(_trial(study, 0))
    assert t.status == TrialStatus.RUNNING and t.pid is not None
    margins = [SLOMarginRecord(trial_id=0, metric="p95_latency_ms", op="<=", threshold=1.0,
                               value=0.8, margin=-0.2)]
    done = store.complete_trial(t.id, metrics={"qps": 100.0, "p95_latency_ms": 0.8,
                                               "bad": float("nan")},
                                engine_versions={"faiss": "1"}, details={"cached": True},
                                margins=margins, feasible=True, objective_value=100.0,
                                duration_s=1.5)
    assert done.status == TrialStatus.COMPLETE and done.finished_at is not None
    assert done.metrics == {"qps": 100.0, "p95_latency_ms": 0.8, "bad": None}
    stored = store.margins(t.id)
    assert [(m.metric, m.op, m.threshold, m.margin) for m in stored] == [
        ("p95_latency_ms", "<=", 1.0, -0.2)]
    with pytest.raises(StoreError, match="refusing to overwrite"):
        store.fail_trial(t.id, error_type="x", error="late")


def test_failed_and_interrupted_trials_keep_their_reason(store: TrialStore) -> None:
    study = store.create_study(_study())
    a = store.start_trial(_trial(study, 0))
    b = store.start_trial(_trial(study, 1))
    store.fail_trial(a.id, error_type="crash", error="killed by signal SIGABRT", duration_s=0.1)
    store.fail_trial(b.id, error_type="interrupted", error="driver died",
                     status=TrialStatus.INTERRUPTED)
    got = {t.number: t for t in store.trials_of_study(study.id)}
    assert (got[0].status, got[0].error_type, got[0].error) == (
        TrialStatus.FAILED, "crash", "killed by signal SIGABRT")
    assert got[1].status == TrialStatus.INTERRUPTED
    assert store.count_trials(study.id, TrialStatus.FINISHED) == 1
    with pytest.raises(ValueError, match="failed or interrupted"):
        store.fail_trial(a.id, error_type="x", error="y", status="complete")


def test_trial_numbers_are_unique_per_study(store: TrialStore) -> None:
    study = store.create_study(_study())
    store.start_trial(_trial(study, 0))
    with pytest.raises(StoreError):
        store.start_trial(_trial(study, 0))
    other = store.create_study(_study("s2"))
    store.start_trial(_trial(other, 0))  # same number, other study: fine


def test_filters(store: TrialStore) -> None:
    s1 = store.create_study(_study("s1", "faiss"))
    s2 = store.create_study(_study("s2", "scripted"))
    for study in (s1, s2):
        for n in range(3):
            t = store.start_trial(_trial(study, n, hardware_key="1x-nvidia-h200" if n == 2
                                         else "cpu-x-2c"))
            if n == 0:
                store.fail_trial(t.id, error_type="crash", error="boom")
            else:
                store.complete_trial(t.id, metrics={"qps": float(n)}, engine_versions={},
                                     details={}, margins=[], feasible=n == 1,
                                     objective_value=float(n), duration_s=0.0)
    assert len(store.list_trials()) == 6
    assert len(store.list_trials(TrialFilter(target="faiss"))) == 3
    assert len(store.list_trials(TrialFilter(study="s2"))) == 3
    assert len(store.list_trials(TrialFilter(status=TrialStatus.FAILED))) == 2
    assert [t.number for t in store.list_trials(TrialFilter(study="s1", feasible=True))] == [1]
    assert len(store.list_trials(TrialFilter(hardware_key="h200"))) == 2
    # The filter is a substring, not a pattern: SQL wildcards match only themselves.
    assert store.list_trials(TrialFilter(hardware_key="%")) == []
    assert store.list_trials(TrialFilter(hardware_key="nvidia_h200")) == []
    for flt in (TrialFilter(), TrialFilter(study="s2"), TrialFilter(hardware_key="h200"),
                TrialFilter(status=TrialStatus.FAILED), TrialFilter(workload_hash="none"),
                TrialFilter(target="faiss", limit=1, offset=1)):
        unpaged = TrialFilter(**{**vars(flt), "limit": None, "offset": 0})
        assert store.count_matching(flt) == len(store.list_trials(unpaged))
    page = store.list_trials(TrialFilter(limit=2, offset=1))
    assert [t.id for t in page] == [t.id for t in store.list_trials()][1:3]


def test_heartbeat_and_stale_detection(store: TrialStore) -> None:
    study = store.create_study(_study())
    t = store.start_trial(_trial(study, 0))
    before = store.get_trial(t.id).heartbeat_at  # type: ignore[union-attr]
    store.heartbeat(t.id)
    assert store.get_trial(t.id).heartbeat_at >= before  # type: ignore[union-attr]
    assert store.stale_running_trials(study.id, utcnow() - timedelta(hours=1)) == []
    stale = store.stale_running_trials(study.id, utcnow() + timedelta(seconds=1))
    assert [s.id for s in stale] == [t.id]


def test_unreachable_database_is_a_clear_error() -> None:
    with pytest.raises(StoreError, match="cannot reach trial store"):
        TrialStore("postgresql+psycopg://nobody:secret@127.0.0.1:1/none")

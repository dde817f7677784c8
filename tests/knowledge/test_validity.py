"""Invalid trials in the store (SQLite and PostgreSQL): the one usability rule, stored with their
figures and reason, counted as finished, never complete; a JSONL trial whose validity label is
unusable imports as invalid, and a re-labelled file takes a trial already imported out of use."""

from __future__ import annotations

import io
import json

import pytest

from knowledge import (
    SLOMarginRecord,
    StudyRecord,
    TrialFilter,
    TrialRecord,
    TrialStatus,
    TrialStore,
)
from knowledge.queries import study_counts
from knowledge.transfer import export_jsonl, import_jsonl
from knowledge.validity import USABLE_VALIDITY, invalid_reason, is_usable, validity_of


def test_the_usability_rule() -> None:
    assert is_usable(None) and is_usable({}) and is_usable({"pid": 1})  # no label: FAISS & co
    assert {"valid", "unchecked", "frontend_delay"} == USABLE_VALIDITY
    for label in USABLE_VALIDITY:
        assert is_usable({"validity": label}) and invalid_reason({"validity": label}) is None
    for label in ("client_bound", "server_disagrees", "legacy_unverified", "anything-else"):
        assert not is_usable({"validity": label})
        assert invalid_reason({"validity": label}) == label
    assert invalid_reason({"validity": "client_bound",
                           "validity_reason": "client lag 5x"}) == "client_bound: client lag 5x"
    assert validity_of({"validity": {"status": "server_disagrees", "reason": "ttft 3x"}}) == \
        "server_disagrees"
    assert not is_usable({"validity": {"status": "server_disagrees"}})


def _study(store: TrialStore, name: str = "v") -> StudyRecord:
    return store.create_study(StudyRecord(
        name=name, target="scripted", slo="p95_latency_ms<=1", objective_metric="qps",
        objective_direction="maximize", workload_spec={"kind": "scripted"}, workload_hash="w1",
        sampler="tpe", n_trials=3, hardware_key="cpu-x-2c", advisor_version="0"))


def _measured(store: TrialStore, study: StudyRecord, number: int, details: dict[str, object],
              status: str = TrialStatus.COMPLETE) -> TrialRecord:
    t = store.start_trial(TrialRecord(
        study_id=study.id or 0, number=number, target="scripted", config={"x": number},
        config_hash=f"h{number}", workload_spec={"kind": "scripted"}, workload_hash="w1",
        hardware={"key": "cpu-x-2c"}, hardware_key="cpu-x-2c", advisor_version="0"))
    margins = [SLOMarginRecord(trial_id=0, metric="p95_latency_ms", op="<=", threshold=1.0,
                               value=0.5, margin=-0.5)]
    return store.complete_trial(t.id or 0, metrics={"qps": 100.0 + number, "p95_latency_ms": 0.5},
                                engine_versions={}, details=details, margins=margins,
                                feasible=status == TrialStatus.COMPLETE,
                                objective_value=100.0 + number, duration_s=1.0, status=status)


def test_invalid_trials_are_stored_finished_and_never_complete(store: TrialStore) -> None:
    study = _study(store)
    ok = _measured(store, study, 0, {"validity": "valid"})
    bad = _measured(store, study, 1, {"validity": "client_bound"}, status=TrialStatus.INVALID)
    assert bad.status == TrialStatus.INVALID and bad.feasible is False
    assert bad.metrics["qps"] == 101.0 and len(store.margins(bad.id or 0)) == 1
    assert store.count_trials(study.id or 0, list(TrialStatus.FINISHED)) == 2
    complete = store.list_trials(TrialFilter(status=TrialStatus.COMPLETE))
    assert [t.id for t in complete] == [ok.id]
    assert [t.id for t in store.list_trials(TrialFilter(status=TrialStatus.INVALID))] == [bad.id]
    counts = study_counts(store, [study.id or 0])[study.id or 0]
    assert (counts.complete, counts.invalid, counts.finished) == (1, 1, 2)
    with pytest.raises(ValueError, match="status"):
        store.complete_trial(0, metrics={}, engine_versions={}, details={}, margins=[],
                             feasible=False, objective_value=None, duration_s=0.0,
                             status=TrialStatus.FAILED)
    updated = store.update_provenance(study.id or 0, {"paired_comparison": {"status": "x"}})
    assert updated.data_provenance["paired_comparison"] == {"status": "x"}


def _lines(store: TrialStore) -> list[str]:
    buf = io.StringIO()
    export_jsonl(store, buf)
    return buf.getvalue().splitlines()


def test_unusable_labels_import_as_invalid(store: TrialStore, tmp_path: object) -> None:
    source = TrialStore(f"sqlite:///{tmp_path}/src.db")
    study = _study(source, "shipped")
    for number in range(3):
        _measured(source, study, number, {})
    lines = _lines(source)
    # A shipped file whose second trial was later marked unverified, still saying "complete".
    relabelled = []
    for line in lines:
        row = json.loads(line)
        if row["trial"]["number"] == 1:
            row["trial"]["details"]["validity"] = "legacy_unverified"
        relabelled.append(json.dumps(row))
    summary = import_jsonl(store, relabelled)
    assert (summary.trials_imported, summary.trials_invalid) == (3, 1)
    by_number = {t.number: t for t in store.list_trials()}
    assert by_number[1].status == TrialStatus.INVALID and by_number[1].feasible is False
    assert by_number[1].metrics["qps"] == 101.0  # figures kept
    assert {by_number[0].status, by_number[2].status} == {TrialStatus.COMPLETE}
    source.close()


def test_a_relabelled_file_takes_imported_trials_out_of_use(store: TrialStore,
                                                             tmp_path: object) -> None:
    source = TrialStore(f"sqlite:///{tmp_path}/src.db")
    study = _study(source, "shipped")
    for number in range(2):
        _measured(source, study, number, {"validity": "unchecked"})
    lines = _lines(source)
    assert import_jsonl(store, lines).trials_invalid == 0
    marked = []
    for line in lines:
        row = json.loads(line)
        row["trial"]["details"]["validity"] = "legacy_unverified"
        marked.append(json.dumps(row))
    again = import_jsonl(store, marked)
    assert (again.trials_imported, again.trials_skipped, again.trials_invalid) == (0, 2, 2)
    assert {t.status for t in store.list_trials()} == {TrialStatus.INVALID}
    assert all(t.details["validity"] == "legacy_unverified" for t in store.list_trials())
    # A label never puts a trial back into use.
    assert import_jsonl(store, lines).trials_invalid == 0
    assert {t.status for t in store.list_trials()} == {TrialStatus.INVALID}
    source.close()

"""JSONL export/import between stores (SQLite and PostgreSQL): lossless, idempotent, atomic."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from advisor.driver import StudyDriver
from advisor.errors import StoreError, StudyError
from advisor.settings import Settings
from knowledge import StudyStatus, TrialFilter, TrialStore
from knowledge.transfer import export_jsonl, import_file, import_jsonl, import_shipped_knowledge
from tests.advisor.test_driver import _spec


@pytest.fixture
def source(settings: Settings) -> TrialStore:
    store = TrialStore(settings.db_url)
    StudyDriver(store, settings).run(_spec(name="src", n=4))
    return store


def _export(store: TrialStore, flt: TrialFilter | None = None) -> list[str]:
    buf = io.StringIO()
    export_jsonl(store, buf, flt)
    return buf.getvalue().splitlines()


def test_roundtrip_is_lossless_and_idempotent(source: TrialStore, store: TrialStore) -> None:
    lines = _export(source)
    assert len(lines) == 4
    first = import_jsonl(store, lines)
    assert (first.studies_created, first.trials_imported, first.trials_skipped) == (1, 4, 0)
    again = import_jsonl(store, lines)
    assert (again.studies_created, again.trials_imported, again.trials_skipped) == (0, 0, 4)
    study = store.get_study("src")
    assert study is not None and study.status == StudyStatus.IMPORTED
    got = {t.uid: t for t in store.trials_of_study(study.id or 0)}
    for line in lines:
        row = json.loads(line)
        t = got[row["trial"]["uid"]]
        assert t.config == row["trial"]["config"] and t.metrics == row["trial"]["metrics"]
        assert t.hardware == row["trial"]["hardware"] and t.status == row["trial"]["status"]
        assert t.started_at.isoformat().startswith(row["trial"]["started_at"][:19])
        assert [m.margin for m in store.margins(t.id or 0)] == [m["margin"] for m in
                                                                  row["margins"]]
    def without_status(line: str) -> dict:
        row = json.loads(line)
        row["study"].pop("status")
        return row

    # Exporting the import reproduces the file, except that the study is now `imported`.
    assert [without_status(x) for x in _export(store)] == [without_status(x) for x in lines]


def test_bad_lines_import_nothing(source: TrialStore, store: TrialStore) -> None:
    lines = _export(source)
    with pytest.raises(StoreError, match=r"<stdin>:3: not JSON"):
        import_jsonl(store, [*lines[:2], "{broken", *lines[2:]])
    assert store.list_trials() == []
    with pytest.raises(StoreError, match="not a slo-advisor-trial/1 line"):
        import_jsonl(store, ['{"format": "other"}'])


def test_name_clash_with_a_different_study_is_refused(source: TrialStore, store: TrialStore,
                                                      settings: Settings) -> None:
    lines = _export(source)
    other = json.loads(lines[0])
    other["study"]["uid"] = "f" * 32
    with pytest.raises(StoreError, match="different study named 'src'"):
        import_jsonl(store, [lines[0], json.dumps(other)])


def test_imported_studies_cannot_be_resumed(source: TrialStore, settings: Settings,
                                            tmp_path: Path) -> None:
    target = TrialStore(f"sqlite:///{tmp_path / 'b.db'}")
    import_jsonl(target, _export(source))
    with pytest.raises(StudyError, match="imported from another store"):
        StudyDriver(target, settings).resume("src")


def test_files_and_shipped_directory_import_once(source: TrialStore, tmp_path: Path) -> None:
    shipped = tmp_path / "data"
    shipped.mkdir()
    (shipped / "a.jsonl").write_text("\n".join(_export(source)) + "\n")
    target = TrialStore(f"sqlite:///{tmp_path / 'c.db'}")
    first = import_shipped_knowledge(target, shipped)
    assert first["a.jsonl"].trials_imported == 4
    assert import_shipped_knowledge(target, shipped) == {}
    assert import_file(target, shipped / "a.jsonl") is None


def test_export_filters(source: TrialStore) -> None:
    assert len(_export(source, TrialFilter(study="src", status="complete"))) == sum(
        t.status == "complete" for t in source.list_trials())
    assert _export(source, TrialFilter(target="faiss")) == []

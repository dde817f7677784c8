"""JSONL export/import between stores (SQLite and PostgreSQL): lossless, idempotent, atomic."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import select

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


def _open_and_import(url: str, barrier: Any, results: Any) -> None:
    """One CLI-like process on a fresh store: open it (creating its tables), import the shipped
    knowledge."""
    barrier.wait(timeout=60)
    try:
        store = TrialStore(url)
        done = import_shipped_knowledge(store)
        results.put(("ok", sorted(done)))
        store.close()
    except BaseException as exc:  # any error is the failure under test
        results.put(("error", f"{type(exc).__name__}: {exc}"))


def test_two_processes_opening_a_fresh_store_import_the_shipped_knowledge_once(
        db_url: str) -> None:
    """Two commands started at once on a fresh store (PostgreSQL: the loser used to die on a
    UniqueViolation): both succeed, every shipped file is imported exactly once, by one of them."""
    import multiprocessing

    from knowledge.cache import content_key
    from knowledge.models import ImportRecord
    from knowledge.transfer import shipped_files, trials_file_name

    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_open_and_import, args=(db_url, barrier, results))
             for _ in range(2)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    assert [kind for kind, _ in outcomes] == ["ok", "ok"], outcomes
    shipped = sorted(trials_file_name(p) for p in shipped_files())
    imported_by = sorted(name for _, names in outcomes for name in names)
    assert imported_by == shipped, "each file imported by exactly one of the two"
    store = TrialStore(db_url)
    with store.session() as s:
        records = s.exec(select(ImportRecord)).all()
    assert sorted(r.source for r in records) == shipped
    assert len(store.list_trials()) == sum(r.trials for r in records)
    assert content_key(store) is not None  # exactly its imports: it shares the shipped fit
    store.close()


def test_a_compressed_file_is_the_same_source_as_its_jsonl(source: TrialStore,
                                                           tmp_path: Path) -> None:
    """The shipped knowledge is kept gzip-compressed: a ``.jsonl.gz`` imports like its JSONL,
    under the same name, and a store that imported the JSONL does not import it again."""
    import gzip

    from knowledge.transfer import read_trials_text, shipped_files, trials_file_name

    text = "\n".join(_export(source)) + "\n"
    plain, packed = tmp_path / "plain" / "t.jsonl", tmp_path / "packed" / "t.jsonl.gz"
    plain.parent.mkdir(), packed.parent.mkdir()
    plain.write_text(text)
    with gzip.open(packed, "wt", encoding="utf-8") as f:
        f.write(text)
    assert read_trials_text(packed) == text
    assert [trials_file_name(p) for p in shipped_files(packed.parent)] == ["t.jsonl"]
    fresh = TrialStore(f"sqlite:///{tmp_path / 'a.db'}")
    assert list(import_shipped_knowledge(fresh, packed.parent)) == ["t.jsonl"]
    assert len(fresh.list_trials()) == 4
    assert import_file(fresh, plain) is None  # same content: already imported
    other = TrialStore(f"sqlite:///{tmp_path / 'b.db'}")
    summary = import_file(other, plain)
    assert summary is not None and summary.trials_imported == 4
    assert import_file(other, packed) is None


def test_a_corrupt_compressed_file_is_one_clear_error(store: TrialStore, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(b"not gzip at all")
    with pytest.raises(StoreError, match=r"bad\.jsonl\.gz: cannot read trials"):
        import_file(store, bad)

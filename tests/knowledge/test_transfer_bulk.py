"""The bulk import of a trials file (knowledge/transfer.py) stores exactly what importing it one
row at a time stored: the same rows, ids included, in every table, on SQLite and PostgreSQL, for
the shipped knowledge and for the cases that take the other branches (trials already present, a
file re-labelled since, a trial twice in one file, a study shared between files)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Table
from sqlmodel import Session, SQLModel, select

from advisor.errors import StoreError
from knowledge import TrialStore
from knowledge.models import (
    ImportRecord,
    SLOMarginRecord,
    StudyRecord,
    StudyStatus,
    TrialRecord,
    TrialStatus,
)
from knowledge.transfer import (
    FORMAT,
    ImportSummary,
    import_jsonl,
    read_trials_text,
    shipped_files,
    trials_file_name,
)
from knowledge.validity import is_usable
from tests.conftest import _postgres_url

#: The tables an import writes, compared row by row (the import record's time aside).
TABLES = ("advisor_study", "advisor_trial", "advisor_slo_margin", "advisor_import")


def _row_by_row(store: TrialStore, lines: Iterable[str], *, source: str = "<stdin>",
                record: ImportRecord | None = None) -> ImportSummary:
    """The import as it was before the bulk path: one ORM flush per study, trial and margin
    (kept here as the reference the bulk path must match; profiles are not part of it)."""
    rows = [json.loads(line) for line in lines if line.strip()]
    rows = [row for row in rows if row.get("format") == FORMAT]
    created = imported = skipped = invalid = 0
    with store.session() as s:
        if record is not None:
            s.add(record)
            s.flush()
        for row in rows:
            study = _study(s, row["study"], source)
            if study.id is None:
                s.add(study)
                s.flush()
                created += 1
            data = row["trial"]
            present = s.exec(select(TrialRecord).where(TrialRecord.uid == data["uid"])).first()
            if present is not None:
                skipped += 1
                if present.status == TrialStatus.COMPLETE and not is_usable(data.get("details")):
                    present.details = {**present.details, **data["details"]}
                    present.status, present.feasible = TrialStatus.INVALID, False
                    s.add(present)
                    invalid += 1
                continue
            trial = TrialRecord.model_validate({**data, "study_id": study.id})
            if trial.status == TrialStatus.COMPLETE and not is_usable(trial.details):
                trial.status, trial.feasible = TrialStatus.INVALID, False
                invalid += 1
            if s.exec(select(TrialRecord).where(TrialRecord.study_id == study.id,
                                                TrialRecord.number == trial.number)).first():
                raise StoreError(f"{source}: study {study.name!r} already has a different "
                                 f"trial number {trial.number}; refusing to mix histories")
            s.add(trial)
            s.flush()
            for m in row.get("margins", []):
                s.add(SLOMarginRecord(trial_id=trial.id or 0, **m))
            imported += 1
        if record is not None:
            record.studies, record.trials = created, imported
            s.add(record)
        s.commit()
    return ImportSummary(created, imported, skipped, invalid)


def _study(s: Session, data: dict[str, Any], source: str) -> StudyRecord:
    existing = s.exec(select(StudyRecord).where(StudyRecord.uid == data["uid"])).first()
    if existing is not None:
        return existing
    if s.exec(select(StudyRecord).where(StudyRecord.name == data["name"])).first() is not None:
        raise StoreError(f"{source}: a different study named {data['name']!r} exists")
    study = StudyRecord.model_validate({**data, "status": StudyStatus.IMPORTED})
    study.id = None
    return study


def _contents(store: TrialStore) -> dict[str, list[dict[str, Any]]]:
    """Every row of the tables an import writes, in id order, as the store reads them back."""
    out: dict[str, list[dict[str, Any]]] = {}
    with store.engine.connect() as conn:
        for name in TABLES:
            table: Table = SQLModel.metadata.tables[name]
            rows = conn.execute(table.select().order_by(table.c.id)).mappings()
            out[name] = [{k: v for k, v in row.items() if k != "imported_at"} for row in rows]
    return out


@pytest.fixture
def rows_url(db_url: str, tmp_path: Path) -> Iterator[str]:
    """A second empty store of the kind ``db_url`` is, for the row-by-row import."""
    if db_url.startswith("sqlite"):
        yield f"sqlite:///{tmp_path / 'rows.db'}"
    else:
        yield from _postgres_url()


def _shipped() -> list[tuple[str, list[str]]]:
    return [(trials_file_name(p), read_trials_text(p).splitlines()) for p in shipped_files()]


def _import_all(store: TrialStore, files: list[tuple[str, list[str]]], path: Any
                ) -> list[ImportSummary]:
    """The trial part of each file's summary (profile lines are imported by their own path,
    which the row-by-row reference here does not model)."""
    return [dataclasses.replace(
                path(store, lines, source=name, record=ImportRecord(source=name, sha256=name)),
                profiles_imported=0, profiles_skipped=0)
            for name, lines in files]


def test_the_shipped_knowledge_imports_in_bulk_as_row_by_row(db_url: str, rows_url: str) -> None:
    """Every shipped file, in the order a fresh store imports them: same summaries, and the same
    rows in every table (ids, JSON documents, times, margins) as the row-by-row import."""
    files = _shipped()
    bulk_store = TrialStore(db_url)
    rows_store = TrialStore(rows_url)
    try:
        assert _import_all(bulk_store, files, import_jsonl) == _import_all(
            rows_store, files, _row_by_row)
        bulk, rows = _contents(bulk_store), _contents(rows_store)
        assert len(bulk["advisor_trial"]) == sum(
            1 for _, lines in files for line in lines if line.strip()
            and json.loads(line).get("format") == FORMAT) > 1000
        for name in TABLES:
            assert bulk[name] == rows[name], name
        per_study = {st.name: len(bulk_store.trials_of_study(st.id or 0))
                     for st in bulk_store.list_studies()}
        assert per_study == {st.name: len(rows_store.trials_of_study(st.id or 0))
                             for st in rows_store.list_studies()}
    finally:
        bulk_store.close()
        rows_store.close()


def _edge_files() -> tuple[list[str], list[str]]:
    """A first file of two studies, and a second that repeats some of its trials (one of them
    re-labelled unusable since), adds new ones to one of its studies, names one trial twice, and
    brings a third study."""
    files = _shipped()
    lines = [line for _, ls in files for line in ls if line.strip()
             and json.loads(line).get("format") == FORMAT]
    by_study: dict[str, list[str]] = {}
    for line in lines:
        by_study.setdefault(json.loads(line)["study"]["uid"], []).append(line)
    a, b, c = [v for v in by_study.values() if len(v) >= 4][:3]
    first = [*a[:-2], *b[:2]]
    relabelled = json.loads(a[0])
    assert relabelled["trial"]["status"] == TrialStatus.COMPLETE
    relabelled["trial"]["details"] = {**relabelled["trial"]["details"],
                                      "validity": "legacy_unverified"}
    second = [json.dumps(relabelled), *a[1:], b[2], b[2], *c[:3]]
    return first, second


def test_the_other_branches_import_in_bulk_as_row_by_row(db_url: str, rows_url: str) -> None:
    """Trials already present (skipped, one taken out of use by a re-labelled file), new trials
    of a study already in the store, a trial twice in one file, a new study: same summaries and
    the same rows as row by row; a second import of the same lines changes nothing."""
    first, second = _edge_files()
    bulk_store = TrialStore(db_url)
    rows_store = TrialStore(rows_url)
    try:
        for lines in (first, second, second):
            got = import_jsonl(bulk_store, lines)
            assert got == _row_by_row(rows_store, lines)
        bulk = _contents(bulk_store)
        assert bulk == _contents(rows_store)
        invalid = [t for t in bulk["advisor_trial"] if t["status"] == TrialStatus.INVALID]
        assert [t["uid"] for t in invalid] == [json.loads(second[0])["trial"]["uid"]]
        assert len({t["uid"] for t in bulk["advisor_trial"]}) == len(bulk["advisor_trial"])
    finally:
        bulk_store.close()
        rows_store.close()


def test_a_clashing_trial_number_imports_nothing(store: TrialStore) -> None:
    """A file giving a study's trial number to a second trial is refused whole, as row by row."""
    _, lines = next((n, ls) for n, ls in _shipped() if len(ls) >= 2)
    first, clash = json.loads(lines[0]), json.loads(lines[1])
    clash["study"] = first["study"]
    clash["trial"]["uid"] = "e" * 32
    clash["trial"]["number"] = first["trial"]["number"]
    with pytest.raises(StoreError, match="already has a different trial number"):
        import_jsonl(store, [lines[0], json.dumps(clash)])
    assert store.list_trials() == [] and store.list_studies() == []

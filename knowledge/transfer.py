"""Move trials between stores as JSONL, and seed a store with the shipped knowledge.

One line per trial, self-contained: the trial, its SLO margins and its study. Import is idempotent
(trials and studies are matched by their ``uid``), so exporting from a device machine and
importing here twice, or importing shipped data into a store that already holds it, duplicates
nothing. Imported studies are marked ``imported``: their Optuna history stayed behind, so they are
evidence for recommendations but cannot be resumed.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from sqlalchemy import Table, insert
from sqlmodel import Session, col, select

from advisor.errors import StoreConflictError, StoreError
from knowledge.models import (
    ImportRecord,
    SLOMarginRecord,
    StudyRecord,
    StudyStatus,
    TrialRecord,
    TrialStatus,
)
from knowledge.profiles import export_profile_lines, import_profile_rows, is_profile_row
from knowledge.store import TrialFilter, TrialStore
from knowledge.validity import is_usable

__all__ = ["FORMAT", "SHIPPED_DIR", "ImportSummary", "export_jsonl", "import_jsonl",
           "import_shipped_knowledge", "read_trials_text", "shipped_file", "shipped_files",
           "trials_file_name"]

FORMAT = "slo-advisor-trial/1"
SHIPPED_DIR = Path(__file__).resolve().parent / "data"
#: A trials file is JSONL, or JSONL compressed with gzip (how the shipped knowledge is kept: a
#: tenth of the size, so a checkout stays small enough to travel to a device machine whole).
GZIP_SUFFIX = ".gz"
_STUDY_SKIP = {"id"}
_TRIAL_SKIP = {"id", "study_id"}


@dataclass(frozen=True)
class ImportSummary:
    studies_created: int
    trials_imported: int
    trials_skipped: int
    #: Trials imported as (or, already present as complete, turned) ``invalid`` because the
    #: file labels their measurement unusable (knowledge/validity.py).
    trials_invalid: int = 0
    #: Hardware profiles (knowledge/profiles.py) imported, and skipped as already present.
    profiles_imported: int = 0
    profiles_skipped: int = 0


def _dump(model: Any, skip: set[str]) -> dict[str, Any]:
    data = model.model_dump(mode="json")
    return {k: v for k, v in data.items() if k not in skip}


def export_lines(store: TrialStore, flt: TrialFilter | None = None) -> Iterator[str]:
    """JSONL lines for the finished trials matching ``flt`` (all of them by default)."""
    studies: dict[int, dict[str, Any]] = {}
    for trial in store.list_trials(flt):
        if trial.status == TrialStatus.RUNNING:
            continue  # unfinished: nothing measured yet, and never resumable elsewhere
        if trial.study_id not in studies:
            study = store.get_study_by_id(trial.study_id)
            if study is None:
                raise StoreError(f"trial {trial.id} refers to missing study {trial.study_id}")
            studies[trial.study_id] = _dump(study, _STUDY_SKIP)
        margins = [{"metric": m.metric, "op": m.op, "threshold": m.threshold, "value": m.value,
                    "margin": m.margin} for m in store.margins(trial.id or 0)]
        yield json.dumps({"format": FORMAT, "study": studies[trial.study_id],
                          "trial": _dump(trial, _TRIAL_SKIP), "margins": margins},
                         sort_keys=True)


def export_jsonl(store: TrialStore, out: TextIO, flt: TrialFilter | None = None) -> int:
    """Write matching trials to ``out``, then the hardware profiles (of the filter's target;
    none when it names a study or a hardware key); returns how many trials."""
    n = 0
    for line in export_lines(store, flt):
        out.write(line + "\n")
        n += 1
    if flt is None or (flt.study is None and flt.hardware_key is None):
        for line in export_profile_lines(store, target=None if flt is None else flt.target):
            out.write(line + "\n")
    return n


def _parse(lines: Iterable[str], source: str) -> Iterator[dict[str, Any]]:
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise StoreError(f"{source}:{number}: not JSON: {exc}") from None
        if not isinstance(row, dict) or (row.get("format") != FORMAT
                                         and not is_profile_row(row)):
            raise StoreError(f"{source}:{number}: not a {FORMAT} line")
        yield row


def import_jsonl(store: TrialStore, lines: Iterable[str], *, source: str = "<stdin>",
                 record: ImportRecord | None = None) -> ImportSummary:
    """Import trials (and their studies) from JSONL lines, skipping those already present.

    Validates every line before writing any, and writes in one transaction: a bad file imports
    nothing. ``record`` (the file's :class:`ImportRecord`) is written first in that transaction,
    so of two processes importing the same content at once the second waits for the first and
    then fails on the record's unique digest (:func:`import_file` turns that into "already
    imported") instead of on a half-imported study.

    The trials and their margins are written in bulk (one multi-row insert per table, in the
    file's order, so ids are assigned as one insert per row would): a fresh store imports the
    shipped knowledge in a fraction of a second instead of seconds of one ORM flush per row.
    """
    rows = list(_parse(lines, source))
    profiles = [row for row in rows if is_profile_row(row)]
    rows = [row for row in rows if not is_profile_row(row)]
    skipped = invalid = 0
    with store.session() as s:
        if record is not None:
            s.add(record)
            s.flush()  # the first write: it takes the database's write lock (SQLite) or the
            # digest's unique-index entry (PostgreSQL) before anything is read
        studies, created = _studies_of(s, rows, source)
        known = _trials_by_uid(s, [row["trial"]["uid"] for row in rows])
        taken = _numbers_taken(s, [st.id for st in studies.values() if st.id is not None])
        new: list[tuple[TrialRecord, list[dict[str, Any]]]] = []
        for row in rows:
            study = studies[row["study"]["uid"]]
            trial_data = row["trial"]
            present = known.get(trial_data["uid"])
            if present is not None:
                skipped += 1
                # A file re-labelled since (e.g. shipped trials marked unverified) takes the
                # trial out of use here too; a label never puts a trial back into use. (A trial
                # read from the store is in the session: the change is written on commit.)
                if present.status == TrialStatus.COMPLETE and not is_usable(
                        trial_data.get("details")):
                    present.details = {**present.details, **trial_data["details"]}
                    _mark_invalid(present)
                    invalid += 1
                continue
            trial = TrialRecord.model_validate({**trial_data, "study_id": study.id})
            if trial.status == TrialStatus.COMPLETE and not is_usable(trial.details):
                _mark_invalid(trial)
                invalid += 1
            if (study.id, trial.number) in taken:
                raise StoreError(f"{source}: study {study.name!r} already has a different "
                                 f"trial number {trial.number}; refusing to mix histories")
            taken.add((study.id, trial.number))
            known[trial.uid] = trial
            new.append((trial, row.get("margins", [])))
        _insert_trials(s, new)
        if record is not None:
            record.studies, record.trials = created, len(new)
            s.add(record)
        s.commit()
    found = import_profile_rows(store, profiles, source=source) if profiles else (0, 0)
    return ImportSummary(created, len(new), skipped, invalid, *found)


#: Values bound in one ``IN (...)`` query: far below SQLite's (32766) and PostgreSQL's (65535)
#: limits on a statement's parameters.
_IN_CHUNK = 500
_TRIALS: Table = TrialRecord.__table__  # type: ignore[attr-defined]
_MARGINS: Table = SLOMarginRecord.__table__  # type: ignore[attr-defined]
_TRIAL_COLUMNS = tuple(c.name for c in _TRIALS.columns if c.name != "id")
_MARGIN_FIELDS = tuple(c.name for c in _MARGINS.columns if c.name not in ("id", "trial_id"))


def _chunks(values: list[Any]) -> Iterator[list[Any]]:
    for start in range(0, len(values), _IN_CHUNK):
        yield values[start:start + _IN_CHUNK]


def _studies_of(s: Session, rows: list[dict[str, Any]], source: str
                ) -> tuple[dict[str, StudyRecord], int]:
    """The study of every row, by uid: those in the store read in one query, the others
    created (in the order the file first names them) and flushed so they have their ids; and how
    many were created."""
    wanted: dict[str, dict[str, Any]] = {}
    for row in rows:
        wanted.setdefault(row["study"]["uid"], row["study"])
    studies = {st.uid: st for chunk in _chunks(list(wanted)) for st in s.exec(
        select(StudyRecord).where(col(StudyRecord.uid).in_(chunk)))}
    fresh = [data for uid, data in wanted.items() if uid not in studies]
    names = {st.name for chunk in _chunks([d["name"] for d in fresh]) for st in s.exec(
        select(StudyRecord).where(col(StudyRecord.name).in_(chunk)))}
    for data in fresh:
        if data["name"] in names:
            raise StoreError(f"{source}: a different study named {data['name']!r} exists in "
                             "this store; rename one of them before importing")
        names.add(data["name"])
        study = StudyRecord.model_validate({**data, "status": StudyStatus.IMPORTED})
        study.id = None
        s.add(study)
        s.flush()  # one row per study (a file holds a few): its id, in the file's order
        studies[study.uid] = study
    return studies, len(fresh)


def _trials_by_uid(s: Session, uids: list[str]) -> dict[str, TrialRecord]:
    """The trials of the store among ``uids``, by uid."""
    return {t.uid: t for chunk in _chunks(list(dict.fromkeys(uids))) for t in s.exec(
        select(TrialRecord).where(col(TrialRecord.uid).in_(chunk)))}


def _numbers_taken(s: Session, study_ids: list[int]) -> set[tuple[int | None, int]]:
    """The (study id, trial number) pairs the store holds for ``study_ids``."""
    return {(sid, number) for chunk in _chunks(study_ids) for sid, number in s.exec(
        select(TrialRecord.study_id, TrialRecord.number).where(
            col(TrialRecord.study_id).in_(chunk)))}


def _insert_trials(s: Session, new: list[tuple[TrialRecord, list[dict[str, Any]]]]) -> None:
    """Insert ``new`` trials, in order, then their margins: one multi-row insert each, the
    margins' trial ids read back by the trials' uids."""
    if not new:
        return
    conn = s.connection()  # the session's transaction
    conn.execute(insert(_TRIALS),
                 [{name: getattr(trial, name) for name in _TRIAL_COLUMNS} for trial, _ in new])
    ids = {uid: tid for chunk in _chunks([trial.uid for trial, _ in new])
           for tid, uid in s.exec(select(TrialRecord.id, TrialRecord.uid).where(
               col(TrialRecord.uid).in_(chunk)))}
    margins = [{"trial_id": ids[trial.uid], **{name: m.get(name) for name in _MARGIN_FIELDS}}
               for trial, ms in new for m in ms]
    if margins:
        conn.execute(insert(_MARGINS), margins)


def _mark_invalid(trial: TrialRecord) -> None:
    """A measured trial whose validity label is unusable: kept with its figures, never used."""
    trial.status, trial.feasible = TrialStatus.INVALID, False


def _get_or_create_study(s: Session, data: dict[str, Any], source: str) -> StudyRecord:
    existing = s.exec(select(StudyRecord).where(StudyRecord.uid == data["uid"])).first()
    if existing is not None:
        return existing
    clash = s.exec(select(StudyRecord).where(StudyRecord.name == data["name"])).first()
    if clash is not None:
        raise StoreError(f"{source}: a different study named {data['name']!r} exists in this "
                         "store; rename one of them before importing")
    study = StudyRecord.model_validate({**data, "status": StudyStatus.IMPORTED})
    study.id = None
    return study


def trials_file_name(path: Path) -> str:
    """The name a trials file is known by: its file name without a gzip suffix, so a file
    imported as JSONL and later shipped compressed is one source, not two."""
    return path.name.removesuffix(GZIP_SUFFIX)


def read_trials_text(path: Path) -> str:
    """The JSONL text of a trials file, decompressed when its name ends in ``.gz``."""
    try:
        if path.name.endswith(GZIP_SUFFIX):
            with gzip.open(path, "rt", encoding="utf-8") as f:
                return f.read()
        return path.read_text()
    except (OSError, EOFError, UnicodeDecodeError) as exc:  # BadGzipFile is an OSError
        raise StoreError(f"{path}: cannot read trials: {exc}") from None


def shipped_files(directory: Path = SHIPPED_DIR, pattern: str = "*") -> list[Path]:
    """The trials files in ``directory`` whose name (without ``.gz``) matches ``pattern`` +
    ``.jsonl``, sorted by that name."""
    found = [*directory.glob(f"{pattern}.jsonl"), *directory.glob(f"{pattern}.jsonl{GZIP_SUFFIX}")]
    return sorted(found, key=trials_file_name)


def shipped_file(name: str, directory: Path = SHIPPED_DIR) -> Path:
    """The shipped trials file called ``name`` (``x.jsonl``), compressed or not."""
    for path in (directory / name, directory / (name + GZIP_SUFFIX)):
        if path.exists():
            return path
    raise FileNotFoundError(f"no shipped trials file {name} (or {name}{GZIP_SUFFIX}) in "
                            f"{directory}")


def import_file(store: TrialStore, path: Path) -> ImportSummary | None:
    """Import ``path`` unless a file with the same content was imported before (None then).

    Safe when several processes open a fresh store at once (each CLI command imports the shipped
    knowledge): the file's trials and its import record are one transaction, and the process
    that finds the record written by another in the meantime returns None.
    """
    text = read_trials_text(path)
    digest = hashlib.sha256(text.encode()).hexdigest()  # of the JSONL, compressed or not
    if _imported(store, digest):
        return None
    name = trials_file_name(path)
    try:
        return import_jsonl(store, text.splitlines(), source=name,
                            record=ImportRecord(source=name, sha256=digest))
    except StoreConflictError:
        if _imported(store, digest):  # another process imported the same content just now
            return None
        raise


def _imported(store: TrialStore, digest: str) -> bool:
    with store.session() as s:
        return s.exec(select(ImportRecord).where(ImportRecord.sha256 == digest)).first() is not None


def import_shipped_knowledge(store: TrialStore, directory: Path = SHIPPED_DIR
                             ) -> dict[str, ImportSummary]:
    """Import every shipped ``*.jsonl`` (or ``*.jsonl.gz``) not yet imported into ``store``
    (cheap when done)."""
    done: dict[str, ImportSummary] = {}
    for path in shipped_files(directory):
        summary = import_file(store, path)
        if summary is not None:
            done[trials_file_name(path)] = summary
    return done

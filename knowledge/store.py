"""TrialStore: every study and trial, failed ones included, in SQLite or PostgreSQL.

One SQLAlchemy URL serves both this store and Optuna's RDB storage. Writes are short transactions
so a killed process leaves at most one trial in ``running`` state, which the study driver recovers
on ``--resume``.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import socket
import sqlite3
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import event, func, inspect, or_, text, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError, SQLAlchemyError
from sqlmodel import Session, SQLModel, col, create_engine, select

from advisor.errors import StoreConflictError, StoreError, TrialTakenError
from knowledge.models import (
    SLOMarginRecord,
    StudyRecord,
    SweepRunRecord,
    SweepRunStatus,
    TrialRecord,
    TrialStatus,
    utcnow,
)

__all__ = ["TrialFilter", "TrialStore", "check_sqlite_file", "make_engine", "redact_url",
           "sqlite_path"]

log = logging.getLogger(__name__)

#: Tables whose columns added after their first release are added to an older store on open.
_MIGRATED_TABLES = frozenset({"advisor_study", "advisor_trial"})


def sqlite_path(url: str) -> Path | None:
    """The file a SQLite ``url`` names; None for another database or an in-memory one."""
    if not url.startswith("sqlite") or "///" not in url:
        return None
    path = url.split("///", 1)[1].split("?", 1)[0]
    return None if not path or path == ":memory:" else Path(path)


#: Above this size a store's open reads its header, schema and length instead of every page
#: (SQLite's quick_check costs about 2.6 ms per MB with a warm page cache: 75 ms for the
#: shipped knowledge's 14 MB, 1.4 s for 550 MB); `advisor store check` reads every page of any.
QUICK_CHECK_MAX_BYTES = 256 * 1024 * 1024


def check_sqlite_file(path: Path, *, full: bool = False) -> list[str]:
    """The problems SQLite's own check finds in the store file ``path``: ``quick_check``
    (every page read, the B-trees' structure checked; linear in the file's size, no index
    cross-checks) or, with ``full``, ``integrity_check`` (indexes against their tables too).
    A file over :data:`QUICK_CHECK_MAX_BYTES` gets, instead of ``quick_check``, a check of its
    header, schema and length (not a database, a garbage header, a truncated file).
    An empty list means the file is sound (or absent or empty: a store about to be created).

    Raises :class:`StoreError` (one line naming the file and the check) when SQLite cannot read
    the file at all: not a database, or a header it cannot make sense of."""
    check = "integrity_check" if full else "quick_check"
    try:
        size = path.stat().st_size
        if size == 0:
            return []
        if not full and size > QUICK_CHECK_MAX_BYTES:
            check = "header and length check"
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise StoreError(f"cannot read trial store {path}: {exc.strerror}") from None
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=60)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open trial store {path}: {exc}") from None
    try:
        if check.startswith("header"):
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
            page = int(conn.execute("PRAGMA page_size").fetchone()[0])
            rows = (["ok"] if pages * page <= size else
                    [f"the file holds {size} bytes of the {pages * page} its header declares "
                     "(truncated)"])
        else:
            rows = [str(r[0]) for r in conn.execute(f"PRAGMA {check}")]
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"trial store {path} failed SQLite's {check}: {exc}; restore it "
                         "from a backup (docs/store.md)") from None
    finally:
        conn.close()
    return [] if rows == ["ok"] else rows


def _quick_check(url: str) -> None:
    """Refuse to open a SQLite store that SQLite's ``quick_check`` finds damaged (one line)."""
    path = sqlite_path(url)
    if path is None:
        return
    problems = check_sqlite_file(path)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise StoreError(f"trial store {path} failed SQLite's quick_check: "
                         f"{' '.join(problems[0].split())}{more}; restore it from a backup "
                         "(docs/store.md) or run `advisor store check` for the full report")


def make_engine(url: str, *, create_dir: bool = False) -> Engine:
    """An engine for ``url``; SQLite gets WAL mode and a busy timeout so the driver and Optuna's
    storage can share the file. A SQLite file's directory must exist — a typo in a URL must not
    silently create a tree of directories — unless ``create_dir`` (the default store's own
    location, which a fresh machine does not have yet)."""
    kwargs: dict[str, Any] = {"pool_pre_ping": True}
    if url.startswith("sqlite"):
        path = url.split("///", 1)[1] if "///" in url else ""
        if path and path != ":memory:" and not Path(path).parent.is_dir():
            if not create_dir:
                raise StoreError(f"cannot open trial store {redact_url(url)}: the directory "
                                 f"{Path(path).parent} does not exist; create it first")
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        kwargs["connect_args"] = {"timeout": 60, "check_same_thread": False}
    try:
        engine = create_engine(url, **kwargs)
    except (SQLAlchemyError, ImportError, ValueError) as exc:
        raise StoreError(f"cannot open trial store {redact_url(url)}: {exc}") from None
    if url.startswith("sqlite"):
        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=60000")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()
    return engine


def redact_url(url: str) -> str:
    """The URL without its password, for messages."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        return f"{scheme}://{creds.split(':', 1)[0]}:***@{host}"
    return url


def _finite_or_none(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class TrialFilter:
    """Filters for :meth:`TrialStore.list_trials`; ``None`` means any."""

    def __init__(self, *, target: str | None = None, study: str | None = None,
                 status: str | None = None, feasible: bool | None = None,
                 hardware_key: str | None = None, workload_hash: str | None = None,
                 limit: int | None = None, offset: int = 0) -> None:
        self.target, self.study, self.status = target, study, status
        self.feasible, self.hardware_key, self.workload_hash = feasible, hardware_key, workload_hash
        self.limit, self.offset = limit, offset


class TrialStore:
    """Reads and writes studies and trials. Safe to share between threads; one per process."""

    def __init__(self, url: str, *, create_dir: bool = False, check: bool = True) -> None:
        """Open the store at ``url``, creating its missing tables. A SQLite file is first read
        by SQLite's ``quick_check`` (``check``): a damaged store is refused before anything
        reads or writes it (:class:`StoreError`, one line)."""
        self.url = url
        self.engine = make_engine(url, create_dir=create_dir)
        if check:
            _quick_check(url)
        self._create_tables()
        _OPEN.add(self)

    def _create_tables(self) -> None:
        """Create the tables that are missing. Two processes opening a fresh store at once can
        both find a table missing; the loser's CREATE fails (PostgreSQL: on the catalog's
        unique index; SQLite: "already exists" or "locked"), and a later pass finds it there."""
        attempts = 5
        for attempt in range(attempts):
            try:
                SQLModel.metadata.create_all(self.engine)
                self._add_missing_columns()
                return
            except (IntegrityError, ProgrammingError, OperationalError) as exc:
                # SQLite says "table ... already exists", or "database is locked" while the
                # other process switches the new file to WAL (OperationalError); PostgreSQL
                # breaks the catalog's unique index (IntegrityError / ProgrammingError).
                lost_race = not isinstance(exc, OperationalError) or any(
                    why in str(exc) for why in ("already exists", "database is locked",
                                                "duplicate column"))
                if not lost_race:
                    raise StoreError(f"cannot reach trial store {redact_url(self.url)}: "
                                     f"{exc.orig}") from None
                if attempt == attempts - 1:
                    raise StoreError(f"cannot create the tables of trial store "
                                     f"{redact_url(self.url)}: {exc.orig}") from None
                time.sleep(0.2 * (attempt + 1))

    def _add_missing_columns(self) -> None:
        """Add the nullable columns later releases defined to a store an earlier one created
        (``create_all`` adds tables, never columns). Another process adding the same column at
        the same moment makes this ALTER fail as a duplicate: the caller's retry finds it."""
        for table in SQLModel.metadata.sorted_tables:
            if table.name not in _MIGRATED_TABLES:
                continue
            present = {c["name"] for c in inspect(self.engine).get_columns(table.name)}
            for column in table.columns:
                if column.name in present:
                    continue
                if not column.nullable:
                    raise StoreError(f"trial store {redact_url(self.url)} lacks the column "
                                     f"{table.name}.{column.name}, which cannot be added")
                kind = column.type.compile(dialect=self.engine.dialect)
                with self.engine.begin() as conn:
                    conn.execute(text(f'ALTER TABLE {table.name} ADD COLUMN "{column.name}" '
                                      f"{kind}"))

    @contextmanager
    def session(self) -> Iterator[Session]:
        with Session(self.engine, expire_on_commit=False) as session:
            try:
                yield session
            except IntegrityError as exc:
                session.rollback()
                raise StoreConflictError(f"trial store conflict: {exc.orig}") from exc
            except SQLAlchemyError as exc:
                session.rollback()
                raise StoreError(f"trial store error: {exc}") from exc

    def close(self, *, quiet: bool = False) -> None:
        """Release the store's connections. A SQLite store is checkpointed first, so its
        ``.db`` file alone holds every row (a copy of it is a complete backup) and SQLite removes
        the ``-wal`` file when this was the file's last connection. Called for every open store
        when the process exits (also after SIGTERM in the CLI and ``advisor serve``)."""
        if sqlite_path(self.url) is not None:
            try:
                with self.engine.connect() as conn:
                    conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            except SQLAlchemyError as exc:  # busy or gone: the WAL still holds every row
                (log.debug if quiet else log.warning)(
                    "cannot checkpoint trial store %s: %s", redact_url(self.url), exc)
        self.engine.dispose()
        _OPEN.discard(self)

    # studies -------------------------------------------------------------------------------

    def create_study(self, study: StudyRecord) -> StudyRecord:
        with self.session() as s:
            if s.exec(select(StudyRecord).where(StudyRecord.name == study.name)).first():
                raise StoreError(f"a study named {study.name!r} already exists")
            s.add(study)
            s.commit()
            s.refresh(study)
            return study

    def get_study(self, name: str) -> StudyRecord | None:
        with self.session() as s:
            return s.exec(select(StudyRecord).where(StudyRecord.name == name)).first()

    def get_study_by_id(self, study_id: int) -> StudyRecord | None:
        with self.session() as s:
            return s.get(StudyRecord, study_id)

    def list_studies(self, target: str | None = None) -> list[StudyRecord]:
        with self.session() as s:
            q = select(StudyRecord).order_by(col(StudyRecord.id))
            if target:
                q = q.where(StudyRecord.target == target)
            return list(s.exec(q))

    def update_provenance(self, study_id: int, items: Mapping[str, Any]) -> StudyRecord:
        """Set ``items`` in the study's ``data_provenance`` (other keys kept), in one
        transaction; returns the updated study."""
        with self.session() as s:
            study = s.get(StudyRecord, study_id)
            if study is None:
                raise StoreError(f"no study with id {study_id}")
            study.data_provenance = {**study.data_provenance, **items}
            study.updated_at = utcnow()
            s.add(study)
            s.commit()
            s.refresh(study)
            return study

    def adopt_study_spec(self, study_id: int, document: Mapping[str, Any]) -> StudyRecord:
        """Store ``document`` as the settings of a study an earlier release created (it has
        none yet); a study that has one keeps it, so two processes adopting at once cannot
        undo a change the first made since. Returns the study as stored."""
        with self.session() as s:
            s.exec(update(StudyRecord).where(col(StudyRecord.id) == study_id,
                                             col(StudyRecord.spec).is_(None))
                   .values(spec=dict(document)))
            s.commit()
            study = s.get(StudyRecord, study_id)
            if study is None:
                raise StoreError(f"no study with id {study_id}")
            s.refresh(study)
            return study

    def update_study_spec(self, study_id: int, changes: Mapping[str, Any], *,
                          provenance: Mapping[str, Any] | None = None) -> StudyRecord:
        """Set ``changes`` in the study's settings document (other settings kept) and, in the
        same transaction, ``provenance`` in its ``data_provenance``; a changed ``n_trials`` is
        also the study's budget column, which claims read. Returns the updated study."""
        with self.session() as s:
            study = s.get(StudyRecord, study_id)
            if study is None:
                raise StoreError(f"no study with id {study_id}")
            if study.spec is None:
                raise StoreError(f"study {study.name!r} has no settings document to update")
            study.spec = {**study.spec, **changes}
            if "n_trials" in changes:
                study.n_trials = int(changes["n_trials"])
            if provenance:
                study.data_provenance = {**study.data_provenance, **provenance}
            study.updated_at = utcnow()
            s.add(study)
            s.commit()
            s.refresh(study)
            return study

    def set_study_status(self, study_id: int, status: str) -> None:
        with self.session() as s:
            study = s.get(StudyRecord, study_id)
            if study is None:
                raise StoreError(f"no study with id {study_id}")
            study.status, study.updated_at = status, utcnow()
            s.add(study)
            s.commit()

    # trials --------------------------------------------------------------------------------

    def start_trial(self, trial: TrialRecord) -> TrialRecord:
        """Insert a trial as ``running`` before the engine starts, so a crash leaves a trace."""
        trial.status = TrialStatus.RUNNING
        trial.host = trial.host or socket.gethostname()
        trial.pid = trial.pid if trial.pid is not None else os.getpid()
        with self.session() as s:
            s.add(trial)
            s.commit()
            s.refresh(trial)
            return trial

    def claim_trial(self, trial: TrialRecord, budget: int) -> TrialRecord | None:
        """Insert ``trial`` as running only while its study has fewer than ``budget`` trials
        complete, failed or running; ``None`` when the budget is taken.

        Several workers share one study: the study row is updated first in the same transaction,
        which takes its write lock (a row lock on PostgreSQL, the database lock on SQLite), so
        two workers cannot both see the last free slot. Raises :class:`TrialTakenError` when a
        trial of the same number is stored already: Optuna's SQLite storage cannot lock a row,
        so two workers asking at the same moment can both be handed one queued trial, and the
        unique trial number decides which of them runs it.
        """
        trial.status = TrialStatus.RUNNING
        trial.host = trial.host or socket.gethostname()
        trial.pid = trial.pid if trial.pid is not None else os.getpid()
        try:
            with self.session() as s:
                s.exec(update(StudyRecord).where(col(StudyRecord.id) == trial.study_id)
                       .values(updated_at=utcnow()))
                taken = s.exec(select(func.count()).select_from(TrialRecord).where(
                    TrialRecord.study_id == trial.study_id,
                    col(TrialRecord.status).in_([*TrialStatus.FINISHED, TrialStatus.RUNNING]),
                    col(TrialRecord.swept_from).is_(None))).one()
                if int(taken) >= budget:
                    s.rollback()
                    return None
                s.add(trial)
                s.commit()
                s.refresh(trial)
                return trial
        except StoreConflictError as exc:
            if self.trial_by_number(trial.study_id, trial.number) is None:
                raise
            raise TrialTakenError(f"trial {trial.number} of study {trial.study_id} is claimed "
                                  "by another worker") from exc

    def restart_trial(self, trial_id: int) -> TrialRecord:
        """Mark a running trial as started again by this process (a Ray trial retried after its
        worker died): new host, pid and heartbeat, and ``details["attempts"]`` counts up."""
        with self.session() as s:
            trial = self._get_running(s, trial_id)
            trial.host, trial.pid = socket.gethostname(), os.getpid()
            trial.started_at = trial.heartbeat_at = utcnow()
            trial.details = {**trial.details,
                             "attempts": int(trial.details.get("attempts", 1)) + 1}
            s.add(trial)
            s.commit()
            s.refresh(trial)
            return trial

    def trial_by_number(self, study_id: int, number: int) -> TrialRecord | None:
        with self.session() as s:
            return s.exec(select(TrialRecord).where(TrialRecord.study_id == study_id,
                                                    TrialRecord.number == number)).first()

    def heartbeat(self, trial_id: int) -> None:
        with self.session() as s:
            trial = s.get(TrialRecord, trial_id)
            if trial is not None and trial.status == TrialStatus.RUNNING:
                trial.heartbeat_at = utcnow()
                s.add(trial)
                s.commit()

    def complete_trial(self, trial_id: int, *, metrics: Mapping[str, float],
                       engine_versions: Mapping[str, Any], details: Mapping[str, Any],
                       margins: Sequence[SLOMarginRecord], feasible: bool | None,
                       objective_value: float | None, duration_s: float,
                       status: str = TrialStatus.COMPLETE,
                       config: tuple[Mapping[str, Any], str] | None = None) -> TrialRecord:
        """Record a measured trial with its SLO margins, in one transaction. ``status`` is
        ``invalid`` for a measurement that failed its validity check (kept, never used).
        ``config`` (the config and its hash) replaces the one the trial started with: a trial
        that swept search knobs ends as the setting it chose."""
        if status not in TrialStatus.MEASURED:
            raise ValueError(f"`status` must be one of {TrialStatus.MEASURED}, got {status!r}")
        with self.session() as s:
            trial = self._get_running(s, trial_id)
            if config is not None:
                trial.config, trial.config_hash = dict(config[0]), config[1]
            trial.metrics = {k: _finite_or_none(float(v)) for k, v in metrics.items()}
            trial.engine_versions = dict(engine_versions)
            trial.details = {k: _finite_or_none(v) for k, v in details.items()}
            trial.feasible = feasible
            trial.objective_value = objective_value
            trial.status = status
            trial.finished_at = utcnow()
            trial.duration_s = duration_s
            s.add(trial)
            for margin in margins:
                margin.trial_id = trial_id
                s.add(margin)
            s.commit()
            s.refresh(trial)
            return trial

    def fail_trial(self, trial_id: int, *, error_type: str, error: str,
                   status: str = TrialStatus.FAILED, duration_s: float | None = None,
                   details: Mapping[str, Any] | None = None) -> TrialRecord:
        """Record why a trial produced no measurement (``failed``) or died with the driver
        (``interrupted``)."""
        if status not in (TrialStatus.FAILED, TrialStatus.INTERRUPTED):
            raise ValueError(f"`status` must be failed or interrupted, got {status!r}")
        with self.session() as s:
            trial = self._get_running(s, trial_id)
            trial.status, trial.error_type, trial.error = status, error_type, error
            trial.finished_at, trial.duration_s = utcnow(), duration_s
            if details:
                trial.details = {**trial.details, **details}
            s.add(trial)
            s.commit()
            s.refresh(trial)
            return trial

    @staticmethod
    def _get_running(s: Session, trial_id: int) -> TrialRecord:
        trial = s.get(TrialRecord, trial_id)
        if trial is None:
            raise StoreError(f"no trial with id {trial_id}")
        if trial.status != TrialStatus.RUNNING:
            raise StoreError(f"trial {trial_id} is {trial.status}, not running; refusing to "
                             "overwrite a finished trial")
        return trial

    def get_trial(self, trial_id: int) -> TrialRecord | None:
        with self.session() as s:
            return s.get(TrialRecord, trial_id)

    def margins(self, trial_id: int) -> list[SLOMarginRecord]:
        with self.session() as s:
            q = select(SLOMarginRecord).where(SLOMarginRecord.trial_id == trial_id)
            return list(s.exec(q.order_by(col(SLOMarginRecord.id))))

    def trials_of_study(self, study_id: int, statuses: Sequence[str] | None = None
                        ) -> list[TrialRecord]:
        with self.session() as s:
            q = select(TrialRecord).where(TrialRecord.study_id == study_id)
            if statuses:
                q = q.where(col(TrialRecord.status).in_(list(statuses)))
            return list(s.exec(q.order_by(col(TrialRecord.number), col(TrialRecord.id))))

    def count_trials(self, study_id: int, statuses: Sequence[str]) -> int:
        """How many of the study's trials with one of ``statuses`` took a slot of its budget
        (the settings a search sweep measured beside a trial did not)."""
        with self.session() as s:
            q = select(func.count()).select_from(TrialRecord).where(
                TrialRecord.study_id == study_id, col(TrialRecord.status).in_(list(statuses)),
                col(TrialRecord.swept_from).is_(None))
            return int(s.exec(q).one())

    def list_trials(self, flt: TrialFilter | None = None) -> list[TrialRecord]:
        """Trials matching ``flt``, oldest first."""
        flt = flt or TrialFilter()
        with self.session() as s:
            q = _filtered(select(TrialRecord), flt).order_by(col(TrialRecord.id))
            q = q.offset(flt.offset)
            if flt.limit is not None:
                q = q.limit(flt.limit)
            return list(s.exec(q))

    def count_matching(self, flt: TrialFilter) -> int:
        """How many trials match ``flt`` (its limit and offset ignored)."""
        with self.session() as s:
            return int(s.exec(_filtered(select(func.count()).select_from(TrialRecord), flt)).one())

    def stale_running_trials(self, study_id: int, older_than: datetime) -> list[TrialRecord]:
        """Running trials of a study whose heartbeat is older than ``older_than``."""
        with self.session() as s:
            q = select(TrialRecord).where(
                TrialRecord.study_id == study_id, TrialRecord.status == TrialStatus.RUNNING,
                col(TrialRecord.heartbeat_at) < older_than)
            return list(s.exec(q))

    # sweep runs ----------------------------------------------------------------------------

    def create_sweep_run(self, run: SweepRunRecord) -> SweepRunRecord:
        with self.session() as s:
            if s.exec(select(SweepRunRecord).where(SweepRunRecord.name == run.name)).first():
                raise StoreError(f"a sweep run named {run.name!r} already exists")
            s.add(run)
            s.commit()
            s.refresh(run)
            return run

    def get_sweep_run(self, name: str) -> SweepRunRecord | None:
        with self.session() as s:
            return s.exec(select(SweepRunRecord).where(SweepRunRecord.name == name)).first()

    def sweep_runs(self, sweep: str | None = None) -> list[SweepRunRecord]:
        """Runs of ``sweep`` (every sweep when ``None``), oldest first."""
        with self.session() as s:
            q = select(SweepRunRecord).order_by(col(SweepRunRecord.id))
            if sweep is not None:
                q = q.where(SweepRunRecord.sweep == sweep)
            return list(s.exec(q))

    def finish_sweep_run(self, run_id: int, summary: Mapping[str, Any],
                         status: str = SweepRunStatus.FINISHED) -> SweepRunRecord:
        with self.session() as s:
            run = s.get(SweepRunRecord, run_id)
            if run is None:
                raise StoreError(f"no sweep run with id {run_id}")
            run.status, run.summary, run.finished_at = status, dict(summary), utcnow()
            s.add(run)
            s.commit()
            s.refresh(run)
            return run


#: Stores open in this process, closed (checkpointed) when it exits.
_OPEN: weakref.WeakSet[TrialStore] = weakref.WeakSet()


@atexit.register
def _close_open_stores() -> None:
    for store in list(_OPEN):
        store.close(quiet=True)  # a test's store whose file is gone by now is no news


def _names_hardware(asked: str) -> Any:
    """The SQL condition of objectives/hardware.py ``hardware_matches``: the trial's hardware
    key is ``asked`` (any case) or holds it as a run of its dash-separated parts (``h200``,
    ``nvidia-h200``), never as a fragment of one (``0``); keys are lower case."""
    q = asked.lower().strip("-")
    key = col(TrialRecord.hardware_key)
    return or_(key == q, key.startswith(q + "-", autoescape=True),
               key.endswith("-" + q, autoescape=True),
               key.contains("-" + q + "-", autoescape=True))


def _filtered(q: Any, flt: TrialFilter) -> Any:
    """``q`` (a select over trials) restricted to the trials ``flt`` matches."""
    if flt.study is not None:
        q = q.join(StudyRecord, col(StudyRecord.id) == col(TrialRecord.study_id)).where(
            StudyRecord.name == flt.study)
    if flt.target is not None:
        q = q.where(TrialRecord.target == flt.target)
    if flt.status is not None:
        q = q.where(TrialRecord.status == flt.status)
    if flt.feasible is not None:
        q = q.where(TrialRecord.feasible == flt.feasible)
    if flt.hardware_key is not None:
        q = q.where(_names_hardware(flt.hardware_key))
    if flt.workload_hash is not None:
        q = q.where(TrialRecord.workload_hash == flt.workload_hash)
    return q

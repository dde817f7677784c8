"""A store that fails mid-study stops `advisor tune` with one line and a non-zero exit, never a
traceback: on a real full disk (a tiny tmpfs holding the SQLite store) the running trial is left
interrupted in the store and failed in Optuna with its config queued again, the lease released,
every finished trial kept; on PostgreSQL, whose connections are killed (pg_terminate_backend)
and which turns read-only under the driver, the same one line; and a resume once the store
takes writes again finishes the study with nothing lost."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from advisor.driver import optuna_storage
from knowledge import TrialStatus, TrialStore
from knowledge.models import StudyStatus
from tests.conftest import PG_ADMIN_URL

TRIALS = 8
#: Each trial sleeps 1 s; a scripted config with 0.90 <= x < 0.95 hangs until this kills it,
#: and which configs a run samples depends on where the failure lands, so a 60-s limit made a
#: run take 25 s or 150 s. 15 s leaves the 1-s trials room for a slow child start on a loaded
#: machine.
TRIAL_TIMEOUT_S = "15"


def _env(db_url: str, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "ADVISOR_DB_URL": db_url, "ADVISOR_CACHE_DIR": str(tmp_path / "cache"),
            "ADVISOR_IMPORT_SHIPPED": "false", "COLUMNS": "250"}


def _start(env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "advisor", "tune", "--target", "scripted", "--trials",
         str(TRIALS), "--name", "full", "--seed", "0", "--no-warm-start", "--trial-timeout",
         TRIAL_TIMEOUT_S, "--workload-param", "delay_s=1"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_trials(store: TrialStore, proc: subprocess.Popen[str], n: int) -> None:
    deadline = time.monotonic() + 180
    while True:
        study = store.get_study("full")
        if study is not None and store.count_trials(study.id or 0, [TrialStatus.COMPLETE]) >= n:
            return
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)


def _one_line_error(err: str) -> str:
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    assert "the trial store failed" in errors[0], err
    assert "advisor tune --target scripted --name full --resume" in errors[0]
    return errors[0]


def _resume_finishes(env: dict[str, str], store: TrialStore) -> None:
    resumed = subprocess.run([sys.executable, "-m", "advisor", "tune", "--target", "scripted",
                              "--name", "full", "--resume", "--trial-timeout", TRIAL_TIMEOUT_S],
                             env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    study = store.get_study("full")
    assert study is not None and study.status == StudyStatus.FINISHED
    trials = store.trials_of_study(study.id or 0)
    assert sum(t.status in TrialStatus.FINISHED for t in trials) == TRIALS
    assert not [t for t in trials if t.status == TrialStatus.RUNNING]
    for stopped in [t for t in trials if t.status == TrialStatus.INTERRUPTED]:
        # Re-measured: its config ran again after the resume.
        assert any(t.details.get("requeued_from_trial") == stopped.number for t in trials)


@contextlib.contextmanager
def _tiny_tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_a_full_disk_stops_the_study_in_one_line_and_loses_nothing(tmp_path: Path) -> None:
    with _tiny_tmpfs(tmp_path / "tiny", "8M") as disk:
        db_url = f"sqlite:///{disk / 'a.db'}"
        env = _env(db_url, tmp_path)
        store = TrialStore(db_url)
        tune = _start(env)
        _wait_for_trials(store, tune, 3)
        filler = disk / "filler"
        # Fill the disk up. The suppress goes first: closing the file flushes what is left in
        # its buffer, and that raised ENOSPC past a suppress that closed before it.
        with contextlib.suppress(OSError), filler.open("wb") as f:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        _, err = tune.communicate(timeout=120)
        assert tune.returncode != 0
        print(_one_line_error(err))
        study = store.get_study("full")
        assert study is not None and study.status == StudyStatus.INTERRUPTED
        trials = sorted(store.trials_of_study(study.id or 0), key=lambda t: t.number)
        assert [t.status for t in trials[:3]] == [TrialStatus.COMPLETE] * 3  # nothing lost
        assert not [t for t in trials if t.status == TrialStatus.RUNNING]
        ostudy = optuna.load_study(study_name="full", storage=optuna_storage(db_url))
        states = {t.number: t.state for t in ostudy.get_trials(deepcopy=False)}
        assert TrialState.RUNNING not in states.values()
        for t in trials:  # the store and Optuna agree on every trial
            assert states[t.number] == {TrialStatus.COMPLETE: TrialState.COMPLETE}.get(
                t.status, TrialState.FAIL), (t.number, t.status, states)
        # The trial the failure stopped (interrupted in the store, or never written there)
        # failed in Optuna with its config queued again.
        status = {t.number: t.status for t in trials}
        stopped = [n for n, state in states.items() if state == TrialState.FAIL
                   and status.get(n, TrialStatus.INTERRUPTED) == TrialStatus.INTERRUPTED]
        assert len(stopped) <= 1
        assert list(states.values()).count(TrialState.WAITING) == len(stopped)
        with store.session() as s:  # the lease was released
            from knowledge.models import StudyLeaseRecord
            assert not s.exec(__import__("sqlmodel").select(StudyLeaseRecord)).all()
        filler.unlink()  # the disk takes writes again: the study goes on
        _resume_finishes(env, store)
        store.close()


@pytest.mark.postgres
def test_a_postgres_store_turned_read_only_stops_the_study_in_one_line(tmp_path: Path) -> None:
    from tests.conftest import _postgres_url

    sqlalchemy = pytest.importorskip("sqlalchemy")
    urls = _postgres_url()
    db_url = next(urls)
    name = db_url.rsplit("/", 1)[1]
    admin = sqlalchemy.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        env = _env(db_url, tmp_path)
        store = TrialStore(db_url)
        tune = _start(env)
        _wait_for_trials(store, tune, 2)
        with admin.connect() as conn:  # every connection from now on is read-only
            conn.exec_driver_sql(f"ALTER DATABASE {name} SET default_transaction_read_only = on")
            conn.exec_driver_sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                 f"WHERE datname = '{name}' AND pid <> pg_backend_pid()")
        _, err = tune.communicate(timeout=120)
        assert tune.returncode != 0
        # The connection killed under a statement, or a new one refused the write.
        line = _one_line_error(err)
        assert "read-only transaction" in line or "connection" in line, line
        with admin.connect() as conn:
            conn.exec_driver_sql(f"ALTER DATABASE {name} SET default_transaction_read_only = off")
            conn.exec_driver_sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                 f"WHERE datname = '{name}' AND pid <> pg_backend_pid()")
        store.close()
        store = TrialStore(db_url)
        study = store.get_study("full")
        assert study is not None
        assert store.count_trials(study.id or 0, [TrialStatus.COMPLETE]) >= 2  # nothing lost
        _resume_finishes(env, store)
        store.close()
    finally:
        admin.dispose()
        with contextlib.suppress(StopIteration):
            next(urls)


def test_a_connection_lost_inside_a_transaction_is_named_as_such() -> None:
    """When PostgreSQL ends the connections of a database made read-only, the statement that
    hits it first may be one on a connection already invalidated: SQLAlchemy then only says to
    roll back (its code 8s2b), which told a user nothing (a suite run at 7dffb20 saw it)."""
    from sqlalchemy.exc import OperationalError, PendingRollbackError

    from advisor.driver import _first_line
    from knowledge.store import StoreError

    lost = PendingRollbackError("Can't reconnect until invalid transaction is rolled back.  "
                                "Please rollback() fully before proceeding", code="8s2b")
    wrapped = StoreError("trial store error: write failed")
    wrapped.__cause__ = lost
    assert _first_line(wrapped) == _first_line(lost) == (
        "the connection to the store was lost inside a transaction")
    refused = OperationalError("UPDATE trials", {}, Exception(
        "cannot execute UPDATE in a read-only transaction\nCONTEXT: ..."))
    assert _first_line(refused) == "cannot execute UPDATE in a read-only transaction"

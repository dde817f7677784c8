"""A damaged SQLite store is refused when it is opened, in one line naming the file and the check
that failed (SQLite's ``quick_check``), never read as if it were sound nor answered with a
traceback; a store closed cleanly leaves its rows in the ``.db`` file alone and no ``-wal``.
Every case works on a real file: a store of real trials, then truncated, one 16 KB stretch in
its middle flipped, its header overwritten, or a file that was never a database."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from advisor.errors import StoreError
from knowledge import TrialStore
from knowledge.transfer import import_file, shipped_files

ROOT = Path(__file__).resolve().parents[2]


def _trials(path: Path) -> int:
    """The trials SQLite reads from ``path`` opened alone (a copy, no -wal beside it)."""
    copy = path.parent / "alone" / path.name
    copy.parent.mkdir(exist_ok=True)
    shutil.copyfile(path, copy)
    conn = sqlite3.connect(copy)
    try:
        return int(conn.execute("SELECT count(*) FROM advisor_trial").fetchone()[0])
    finally:
        conn.close()


@pytest.fixture(scope="module")
def sound_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """A real store of shipped trials (several MB), closed; its file and trial count."""
    path = tmp_path_factory.mktemp("sound") / "store.db"
    store = TrialStore(f"sqlite:///{path}")
    imported = sum(s.trials_imported for p in shipped_files()[:4]
                   if (s := import_file(store, p)) is not None)
    store.close()
    assert imported > 0 and path.stat().st_size > 64 * 4096
    return path, imported


def test_a_closed_store_keeps_every_row_in_its_db_file_and_leaves_no_wal(
        sound_store: tuple[Path, int]) -> None:
    path, imported = sound_store
    assert not Path(f"{path}-wal").exists()
    assert _trials(path) == imported


def _truncated(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def _flipped_page(path: Path) -> None:
    """16 KB in the middle of the file, page-aligned, every bit inverted."""
    size = path.stat().st_size
    at = size // 2 // 4096 * 4096
    with path.open("r+b") as f:
        f.seek(at)
        block = f.read(16384)
        f.seek(at)
        f.write(bytes(b ^ 0xFF for b in block))


def _garbage_header(path: Path) -> None:
    with path.open("r+b") as f:
        f.write(b"\x13\x37" * 50)


def _not_a_database(path: Path) -> None:
    path.write_text("name,value\nthis is a CSV file someone pointed the store at,1\n" * 200)


DAMAGE: dict[str, Callable[[Path], None]] = {
    "truncated": _truncated, "flipped page": _flipped_page, "garbage header": _garbage_header,
    "not a database": _not_a_database}


@pytest.fixture(params=list(DAMAGE))
def damaged(request: pytest.FixtureRequest, sound_store: tuple[Path, int],
            tmp_path: Path) -> Path:
    path = tmp_path / "damaged.db"
    shutil.copyfile(sound_store[0], path)
    DAMAGE[request.param](path)
    return path


def test_a_damaged_store_is_refused_on_open_naming_the_file_and_the_check(damaged: Path
                                                                           ) -> None:
    with pytest.raises(StoreError) as caught:
        TrialStore(f"sqlite:///{damaged}")
    message = str(caught.value)
    assert "\n" not in message and str(damaged) in message and "quick_check" in message


def test_the_full_check_finds_what_the_quick_one_finds(damaged: Path) -> None:
    from knowledge.store import check_sqlite_file

    try:
        problems = check_sqlite_file(damaged, full=True)
    except StoreError as exc:  # unreadable as a whole
        assert str(damaged) in str(exc) and "integrity_check" in str(exc)
    else:
        assert problems


def test_the_sound_store_passes_both_checks(sound_store: tuple[Path, int]) -> None:
    from knowledge.store import check_sqlite_file

    assert check_sqlite_file(sound_store[0]) == []
    assert check_sqlite_file(sound_store[0], full=True) == []


@pytest.mark.parametrize("damage", ["flipped page", "not a database"])
def test_the_cli_says_one_line_and_exits_2_on_a_damaged_store(
        damage: str, sound_store: tuple[Path, int], tmp_path: Path) -> None:
    path = tmp_path / "damaged.db"
    shutil.copyfile(sound_store[0], path)
    DAMAGE[damage](path)
    before = path.read_bytes()
    env = {**os.environ, "ADVISOR_DB_URL": f"sqlite:///{path}",
           "ADVISOR_CACHE_DIR": str(tmp_path / "cache")}
    for command in (["trials"], ["store", "check"]):
        done = subprocess.run([sys.executable, "-m", "advisor", *command], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and str(path) in lines[0], (command, done.stderr)
        assert "quick_check" in lines[0] or "integrity_check" in lines[0]
        assert "Traceback" not in done.stderr
    assert path.read_bytes() == before, "a damaged store was written to"


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_a_cli_command_stopped_by_a_signal_leaves_its_rows_in_the_db_file(
        stop: signal.Signals, tmp_path: Path) -> None:
    """`advisor worker` (a command that runs until stopped) on a fresh store: the shipped trials
    it imported on open are in the .db file alone after SIGTERM or Ctrl-C, and no -wal is left."""
    db = tmp_path / "cli.db"
    env = {**os.environ, "ADVISOR_DB_URL": f"sqlite:///{db}",
           "ADVISOR_CACHE_DIR": str(tmp_path / "cache"), "ADVISOR_WORKER_POLL_INTERVAL_S": "0.2"}
    proc = subprocess.Popen([sys.executable, "-m", "advisor", "worker"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not _imported(db):  # the store is open and the shipped trials are in it
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        proc.send_signal(stop)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert not Path(f"{db}-wal").exists(), "the command left the -wal file"
    assert _trials(db) > 0


def _imported(db: Path) -> bool:
    """Whether the shipped files are all imported into ``db`` (read through its WAL)."""
    if not db.exists():
        return False
    try:
        conn = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True, timeout=1)
        try:
            done = conn.execute("SELECT count(*) FROM advisor_import").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error:
        return False
    return int(done) == len(shipped_files())

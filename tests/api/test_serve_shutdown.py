"""`advisor serve` stopped by SIGTERM (a service manager's stop) closes its store cleanly: the job
it accepted and the rows it wrote are in the SQLite ``.db`` file itself, no ``-wal`` file is left
beside it, and the process exits 0. A copy of the ``.db`` alone (a backup taken after the stop)
holds everything."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.api.conftest import AUTH, KEY

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rows(db: Path, table: str) -> int:
    """Rows of ``table`` in a copy of the ``.db`` file alone (no -wal, no -shm beside it)."""
    alone = db.parent / "backup" / db.name
    alone.parent.mkdir(exist_ok=True)
    shutil.copyfile(db, alone)
    conn = sqlite3.connect(alone)
    try:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    finally:
        conn.close()


def test_sigterm_leaves_every_row_in_the_db_file_and_no_wal(tmp_path: Path) -> None:
    db = tmp_path / "served.db"
    port = _free_port()
    env = {**os.environ, "ADVISOR_DB_URL": f"sqlite:///{db}",
           "ADVISOR_CACHE_DIR": str(tmp_path / "cache"), "ADVISOR_IMPORT_SHIPPED": "false",
           "ADVISOR_API_KEY": KEY}
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "advisor", "serve", "--port", str(port),
                             "--no-worker", "--log-level", "warning"], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, (
                (tmp_path / "serve.log").read_text())
            time.sleep(0.1)
        jobs = [httpx.post(f"{url}/v1/studies", headers=AUTH, timeout=30,
                           json={"target": "scripted", "name": f"kept-{i}", "trials": 2})
                for i in range(3)]
        assert [j.status_code for j in jobs] == [202] * 3, [j.text for j in jobs]
        assert Path(f"{db}-wal").exists()  # the rows are in the WAL while it runs
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, (tmp_path / "serve.log").read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        log.close()
    assert not Path(f"{db}-wal").exists(), "a clean stop left the -wal file"
    assert _rows(db, "advisor_job") == 3
    assert "store closed" in (tmp_path / "serve.log").read_text()

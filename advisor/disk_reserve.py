"""A little disk space held beside a SQLite store, given back when its disk fills up.

A study whose disk fills mid-trial must still record how it stopped (the running trial interrupted
in the store and in Optuna, its config queued again, the study's lease released); on a full disk
those writes fail too. So a driver holds :data:`RESERVE_BYTES` in a file next to the database
while it runs, and deletes it the moment a write fails for lack of space: the few writes that
close the study fit in what it frees. A server database (PostgreSQL) keeps its own disk: nothing
is held for it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from sqlalchemy.engine import make_url

__all__ = ["RESERVE_BYTES", "DiskReserve"]

log = logging.getLogger(__name__)

#: Space held beside a SQLite store: far more than the dozen rows that close a study need.
RESERVE_BYTES = 1 << 20


class DiskReserve:
    """The reserve file of the SQLite store ``url`` (none for another database)."""

    def __init__(self, url: str, size: int = RESERVE_BYTES) -> None:
        parsed = make_url(url)
        database = parsed.database if parsed.get_backend_name() == "sqlite" else None
        self.path = (Path(database).with_name(Path(database).name + ".reserve")
                     if database and database != ":memory:" else None)
        self.size = size

    def hold(self) -> bool:
        """Make sure the reserve exists (a full or read-only disk: it is simply not held);
        returns whether it is."""
        if self.path is None:
            return False
        with contextlib.suppress(FileNotFoundError):
            if self.path.stat().st_size >= self.size:
                return True
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                os.posix_fallocate(fd, 0, self.size)
            finally:
                os.close(fd)
        except OSError as exc:
            log.info("no disk reserve beside the store (%s)", exc)
            with contextlib.suppress(OSError):
                self.path.unlink()
            return False
        return True

    def release(self) -> bool:
        """Give the reserve back to the disk; returns whether there was one."""
        if self.path is None:
            return False
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        log.info("released the disk reserve %s", self.path.name)
        return True

"""Leases on studies: one driver runs a study at a time.

A driver (``advisor tune``, the service's worker, a sweep cell's coordinator) takes the study's
lease before it creates, recovers or runs the study, renews it in the background while it works
and gives it back when done. Another driver finds it held and is refused, told who holds it.
A lease can be taken over only when its holder is gone: a dead process on this host (checked at
once), or no renewal for the lease's time to live (any host). So recovery, which fails the trials
a dead driver left running, only ever touches the trials of a driver that is gone.

Acquisition is one insert (the study name is the primary key: of two drivers starting in the
same instant, one insert fails) or, for a takeover, one conditional update on the old holder's
token (compare-and-swap: of two takers, one update matches).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any

from sqlalchemy import delete, update
from sqlmodel import col

from advisor.errors import StoreConflictError, StoreError, StudyBusyError
from knowledge.jobs import pid_alive
from knowledge.models import StudyLeaseRecord, utcnow
from knowledge.store import TrialStore

__all__ = ["LeaseHolder", "StudyLease", "holder_of"]

log = logging.getLogger(__name__)
_ATTEMPTS = 5


@dataclass(frozen=True)
class LeaseHolder:
    """Who holds a study's lease, and until when without a renewal."""

    study: str
    owner: str
    host: str
    pid: int
    acquired_at: datetime
    expires_at: datetime

    @classmethod
    def of(cls, row: StudyLeaseRecord) -> LeaseHolder:
        return cls(row.study_name, row.owner, row.host, row.pid, row.acquired_at,
                   row.expires_at)

    def describe(self) -> str:
        return (f"pid {self.pid} on host {self.host} since "
                f"{self.acquired_at:%Y-%m-%d %H:%M:%S} UTC")

    def gone(self, now: datetime) -> str | None:
        """Why the holder counts as gone (its lease may be taken over), or None."""
        if self.host == socket.gethostname() and not pid_alive(self.pid):
            return "its process is gone"
        if self.expires_at < now:
            return f"no renewal since {self.expires_at:%H:%M:%S} UTC"
        return None


def holder_of(store: TrialStore, study: str) -> LeaseHolder | None:
    """The current holder of ``study``'s lease, or None when nobody holds it."""
    with store.session() as s:
        row = s.get(StudyLeaseRecord, study)
        return None if row is None else LeaseHolder.of(row)


class StudyLease:
    """The lease on one study, held from ``__enter__`` to ``__exit__`` and renewed meanwhile by a
    daemon thread every quarter of ``ttl_s``.

    ``__enter__`` raises :class:`StudyBusyError` naming the holder when another live driver holds
    it. :attr:`lost` turns true when a renewal finds the lease taken over (this process was frozen
    or cut off from the database for longer than ``ttl_s``); :meth:`check` then raises, and the
    driver stops before it asks for another trial or stores one it no longer owns.
    """

    def __init__(self, store: TrialStore, study: str, *, ttl_s: float) -> None:
        if ttl_s <= 0:
            raise ValueError(f"a lease needs a positive time to live, got {ttl_s}")
        self.store, self.study, self.ttl = store, study, timedelta(seconds=ttl_s)
        self.owner = uuid.uuid4().hex
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.lost_to: LeaseHolder | None = None
        self._lost = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # holding ---------------------------------------------------------------------------------

    def __enter__(self) -> StudyLease:
        self._acquire()
        self._thread = threading.Thread(target=self._renew_until_stopped, daemon=True,
                                        name=f"lease-{self.study}")
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        try:
            with self.store.session() as s:
                s.exec(delete(StudyLeaseRecord).where(
                    col(StudyLeaseRecord.study_name) == self.study,
                    col(StudyLeaseRecord.owner) == self.owner))
                s.commit()
        except StoreError as e:  # it expires by itself; never mask the block's own error
            log.warning("could not release the lease on study %r (%s); it expires in %s",
                        self.study, e, self.ttl)

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    def check(self) -> None:
        """Raise :class:`StudyBusyError` when the lease was taken over by another driver."""
        if self.lost:
            who = self.lost_to.describe() if self.lost_to else "another driver"
            raise StudyBusyError(f"study {self.study!r} was taken over by {who} while this "
                                 f"driver could not renew its lease; this driver stops")

    # the store -------------------------------------------------------------------------------

    def _mine(self, now: datetime) -> dict[str, Any]:
        return {"owner": self.owner, "host": self.host, "pid": self.pid, "acquired_at": now,
                "renewed_at": now, "expires_at": now + self.ttl}

    def _acquire(self) -> None:
        holder: LeaseHolder | None = None
        for _ in range(_ATTEMPTS):
            now = utcnow()
            try:
                with self.store.session() as s:
                    s.add(StudyLeaseRecord(study_name=self.study, **self._mine(now)))
                    s.commit()
                return
            except StoreConflictError:
                pass  # held, or a stale row left by a driver that is gone
            holder = holder_of(self.store, self.study)
            if holder is None:
                continue  # released in between: insert again
            why = holder.gone(now)
            if why is None:
                raise StudyBusyError(
                    f"study {self.study!r} is being run by {holder.describe()}; wait for it to "
                    f"finish or stop it (its lease expires {holder.expires_at:%H:%M:%S} UTC "
                    "without a renewal)")
            with self.store.session() as s:
                taken = s.exec(update(StudyLeaseRecord).where(
                    col(StudyLeaseRecord.study_name) == self.study,
                    col(StudyLeaseRecord.owner) == holder.owner).values(**self._mine(now)))
                s.commit()
            if taken.rowcount == 1:
                log.warning("took over the lease on study %r from %s: %s", self.study,
                            holder.describe(), why)
                return
        who = holder.describe() if holder else "another driver"
        raise StudyBusyError(f"study {self.study!r} is being taken by {who} at the same time; "
                             "try again")

    def _renew_until_stopped(self) -> None:
        interval = self.ttl.total_seconds() / 4
        while not self._stop.wait(interval):
            now = utcnow()
            try:
                with self.store.session() as s:
                    renewed = s.exec(update(StudyLeaseRecord).where(
                        col(StudyLeaseRecord.study_name) == self.study,
                        col(StudyLeaseRecord.owner) == self.owner).values(
                            renewed_at=now, expires_at=now + self.ttl))
                    s.commit()
            except StoreError as exc:  # the database is away: try again next time
                log.warning("could not renew the lease on study %r: %s", self.study, exc)
                continue
            if renewed.rowcount != 1:
                self.lost_to = holder_of(self.store, self.study)
                self._lost.set()
                log.error("the lease on study %r was taken over by %s", self.study,
                          self.lost_to.describe() if self.lost_to else "another driver")
                return

"""The job table of the REST service: studies requested over HTTP, queued for the worker.

A job moves ``queued -> running -> succeeded | failed | cancelled``. The worker claims a queued
job with a conditional update, so two workers never run the same job; a running job whose process
died (same host: pid gone; another host: heartbeat stale) is marked failed by the next worker.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import func, update
from sqlmodel import col, select

from advisor.errors import JobError, NotFoundError
from knowledge.models import JobRecord, JobStatus, utcnow
from knowledge.store import TrialStore

__all__ = ["JobStore", "pid_alive"]


def pid_alive(pid: int) -> bool:
    """Whether a process with ``pid`` runs on this host. A zombie (dead, not yet reaped: an
    orphan waits for the init process, which in some containers reaps late or never) is dead."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc (not Linux): the signal check is all there is
    return state != "Z"


class JobStore:
    """Reads and writes :class:`JobRecord` rows in a :class:`TrialStore`'s database."""

    def __init__(self, store: TrialStore) -> None:
        self.store = store

    def create(self, *, study_name: str, target: str, request: dict[str, Any]) -> JobRecord:
        """Queue a job. Refuses a second active job on the same study name."""
        with self.store.session() as s:
            active = s.exec(select(JobRecord).where(
                JobRecord.study_name == study_name,
                col(JobRecord.status).in_(list(JobStatus.ACTIVE)))).first()
            if active is not None:
                raise JobError(f"study {study_name!r} already has an active job {active.uid} "
                               f"({active.status}); cancel it or wait for it to finish")
            job = JobRecord(study_name=study_name, target=target, request=request)
            s.add(job)
            s.commit()
            s.refresh(job)
            return job

    def get(self, uid: str) -> JobRecord:
        with self.store.session() as s:
            job = s.exec(select(JobRecord).where(JobRecord.uid == uid)).first()
        if job is None:
            raise NotFoundError(f"no job with id {uid!r}")
        return job

    def page(self, *, status: str | None = None, limit: int = 50, offset: int = 0
             ) -> tuple[list[JobRecord], int]:
        """Jobs, newest first, and how many match in total."""
        with self.store.session() as s:
            q = select(JobRecord)
            n = select(func.count()).select_from(JobRecord)
            if status is not None:
                q, n = q.where(JobRecord.status == status), n.where(JobRecord.status == status)
            rows = list(s.exec(q.order_by(col(JobRecord.id).desc()).offset(offset).limit(limit)))
            return rows, int(s.exec(n).one())

    def count_by_status(self) -> dict[str, int]:
        with self.store.session() as s:
            q = select(JobRecord.status, func.count()).group_by(JobRecord.status)
            counts = {status: int(n) for status, n in s.exec(q)}
        return {status: counts.get(status, 0) for status in JobStatus.ALL}

    def request_cancel(self, uid: str) -> JobRecord:
        """Ask for a job to stop. A queued job is cancelled at once; a running one is stopped by
        its worker, which then marks it cancelled. Cancelling a finished job is an error."""
        with self.store.session() as s:
            job = s.exec(select(JobRecord).where(JobRecord.uid == uid)).first()
            if job is None:
                raise NotFoundError(f"no job with id {uid!r}")
            if job.status not in JobStatus.ACTIVE:
                raise JobError(f"job {uid} is already {job.status}; nothing to cancel")
            job.cancel_requested = True
            if job.status == JobStatus.QUEUED:
                job.status, job.finished_at = JobStatus.CANCELLED, utcnow()
                job.error = "cancelled before it started"
            s.add(job)
            s.commit()
            s.refresh(job)
            return job

    def claim_next(self, pid: int) -> JobRecord | None:
        """Atomically take the oldest queued job for the process ``pid`` on this host."""
        with self.store.session() as s:
            queued = list(s.exec(select(JobRecord.id).where(
                JobRecord.status == JobStatus.QUEUED).order_by(col(JobRecord.id)).limit(5)))
            for job_id in queued:
                now = utcnow()
                claimed = s.execute(
                    update(JobRecord)
                    .where(col(JobRecord.id) == job_id, col(JobRecord.status) == JobStatus.QUEUED)
                    .values(status=JobStatus.RUNNING, host=socket.gethostname(), pid=pid,
                            started_at=now, heartbeat_at=now))
                s.commit()
                if claimed.rowcount == 1:  # type: ignore[attr-defined]
                    return s.get(JobRecord, job_id)
        return None

    def set_pid(self, uid: str, pid: int) -> None:
        self._update(uid, pid=pid, heartbeat_at=utcnow())

    def heartbeat(self, uid: str) -> None:
        self._update(uid, heartbeat_at=utcnow())

    def finish(self, uid: str, status: str, error: str | None = None) -> None:
        if status in JobStatus.ACTIVE:
            raise ValueError(f"`status` must be a final state, got {status!r}")
        self._update(uid, status=status, error=error, finished_at=utcnow())

    def _update(self, uid: str, **values: Any) -> None:
        with self.store.session() as s:
            s.execute(update(JobRecord).where(col(JobRecord.uid) == uid).values(**values))
            s.commit()

    def abandoned(self, stale_after_s: float) -> list[JobRecord]:
        """Running jobs whose process is gone: on this host its pid no longer exists, elsewhere
        its heartbeat is older than ``stale_after_s``."""
        here = socket.gethostname()
        cutoff = utcnow() - timedelta(seconds=stale_after_s)
        found: list[JobRecord] = []
        for job in self.active(JobStatus.RUNNING):
            if job.host == here and job.pid is not None:
                if not pid_alive(job.pid):
                    found.append(job)
            elif job.heartbeat_at is None or job.heartbeat_at < cutoff:
                found.append(job)
        return found

    def active(self, *statuses: str) -> Sequence[JobRecord]:
        with self.store.session() as s:
            return list(s.exec(select(JobRecord).where(
                col(JobRecord.status).in_(list(statuses or JobStatus.ACTIVE)))))

"""The job worker (``advisor worker``): runs studies queued over the REST API, one at a time.

Each job runs in its own process (``python -m advisor.jobs JOB_ID``, an argv list, never a shell),
in its own process group, so a cancel can stop it mid-trial. One job at a time on purpose: two
studies measuring on the same machine would disturb each other's figures. ``advisor serve`` starts
the worker as a supervised child process; it can also run on its own (``advisor worker``), on any
machine that reaches the store.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

from advisor import recovery
from advisor.errors import AdvisorError, StoreError
from advisor.settings import Settings
from knowledge import TrialStore
from knowledge.jobs import JobStore
from knowledge.models import JobRecord, JobStatus, StudyStatus
from objectives.processes import die_with_parent, kill_process_group

__all__ = ["Worker", "WorkerSupervisor"]

log = logging.getLogger(__name__)

#: Seconds a job process gets to stop its trial and record the cancel before it is killed.
CANCEL_GRACE_S = 20.0


def _job_env(settings: Settings) -> dict[str, str]:
    # Settings travel through the environment, so no secret (a database password) shows in argv;
    # the API keys stay with the server (jobs and the engines they start never need them).
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADVISOR_API_KEY")}
    return {**env, "ADVISOR_DB_URL": settings.db_url,
            "ADVISOR_CACHE_DIR": str(settings.cache_dir),
            "ADVISOR_TRIAL_TIMEOUT_S": str(settings.trial_timeout_s),
            "ADVISOR_HEARTBEAT_INTERVAL_S": str(settings.heartbeat_interval_s),
            **({"ADVISOR_TRIAL_MEMORY_LIMIT_MB": str(settings.trial_memory_limit_mb)}
               if settings.trial_memory_limit_mb else {})}


class Worker:
    """Polls the job table: fails jobs whose process died, then runs the oldest queued job."""

    def __init__(self, settings: Settings, store: TrialStore | None = None) -> None:
        self.settings = settings
        self.store = store or TrialStore(settings.db_url)
        self.jobs = JobStore(self.store)
        self._stop = threading.Event()

    def stop(self) -> None:
        self._stop.set()

    def reconcile(self) -> list[str]:
        """Mark running jobs whose process is gone as failed (a restart of the server or worker
        must not leave a job "running" forever); returns their ids."""
        stale_after = max(30.0, 10 * self.settings.heartbeat_interval_s)
        failed = []
        for job in self.jobs.abandoned(stale_after):
            self.jobs.finish(job.uid, JobStatus.FAILED,
                             f"its worker process (pid {job.pid} on {job.host}) died; resume the "
                             f"study with `advisor tune --name {job.study_name} --resume ...` "
                             "or start a new job with resume=true")
            self._leave_study_consistent(job.study_name)
            failed.append(job.uid)
        return failed

    def _leave_study_consistent(self, study_name: str) -> None:
        """The study of a dead job: its trials whose process is gone (on this host) become
        interrupted, and the study interrupted, so no reader sees them "running" forever."""
        recovery.leave_consistent(self.store, study_name, owned=recovery.died_here,
                                  reason="the job running this trial died with its worker",
                                  only_when_idle=True)
        self._reconcile([study_name])

    def _reconcile(self, names: list[str]) -> list[str]:
        from advisor.driver import StudyDriver  # the worker's polling loop needs no optuna

        driver = StudyDriver(self.store, self.settings)
        done = []
        for name in names:
            try:
                if driver.reconcile(name):
                    done.append(name)
            except AdvisorError as exc:  # held by a live driver, or a trial still runs
                log.info("study %s not reconciled: %s", name, exc)
        return done

    def recover_studies(self) -> list[str]:
        """Reconcile Optuna with the store for every study a dead process left half-open (the
        store says running or interrupted, Optuna still has a running trial), as a resume
        would, so neither readers nor optuna-dashboard see a trial "running" forever; a study a
        live driver holds is left to it. Runs when the worker starts (``advisor serve`` starts
        one) and for the study of each dead job it finds. Returns the studies reconciled."""
        done = self._reconcile([s.name for s in self.store.list_studies()
                                if s.status in (StudyStatus.RUNNING, StudyStatus.INTERRUPTED)])
        if done:
            log.warning("reconciled Optuna with the store for %d studies a dead process left "
                        "open: %s", len(done), ", ".join(done))
        return done

    def run_once(self) -> JobRecord | None:
        """Reconcile, then run one queued job to its end (None when none was queued)."""
        self.reconcile()
        job = self.jobs.claim_next(os.getpid())
        if job is None:
            return None
        self._run(job)
        return self.jobs.get(job.uid)

    def run_forever(self, *, stop_when_idle: bool = False) -> None:
        self.reconcile()
        self.recover_studies()
        while not self._stop.is_set():
            if self.run_once() is None:
                if stop_when_idle:
                    return
                self._stop.wait(self.settings.worker_poll_interval_s)

    def _run(self, job: JobRecord) -> None:
        log.info("running job %s (study %s)", job.uid, job.study_name)
        proc = subprocess.Popen(
            [sys.executable, "-m", "advisor.jobs", job.uid], stdin=subprocess.DEVNULL,
            env=_job_env(self.settings), start_new_session=True, preexec_fn=die_with_parent)
        self.jobs.set_pid(job.uid, proc.pid)
        cancel_sent: float | None = None
        while True:
            try:
                code = proc.wait(timeout=self.settings.worker_poll_interval_s)
                break
            except subprocess.TimeoutExpired:
                pass
            try:
                self.jobs.heartbeat(job.uid)  # for workers on other hosts: this one is alive
                cancel = self.jobs.get(job.uid).cancel_requested
            except StoreError as exc:
                # A busy store (SQLite locked past its timeout, a dropped connection) must not
                # stop the worker: its job process dies with it and the job is lost. A missed
                # beat is harmless (a job is abandoned only after 30 s or more without one);
                # a cancel is read at the next poll.
                log.warning("job %s: the store did not answer this poll (%s); polling on",
                            job.uid, exc)
                cancel = False
            if self._stop.is_set() or cancel or cancel_sent is not None:
                if cancel_sent is None:
                    cancel_sent = time.monotonic()
                    with contextlib.suppress(ProcessLookupError):
                        proc.send_signal(signal.SIGTERM)
                elif time.monotonic() - cancel_sent > CANCEL_GRACE_S:
                    kill_process_group(proc, grace_s=1.0)
                    code = proc.returncode
                    break
        final = self.jobs.get(job.uid)
        if final.status in JobStatus.ACTIVE:
            # The job process died before recording its end (killed, crashed hard).
            cancelled = final.cancel_requested
            self.jobs.finish(job.uid, JobStatus.CANCELLED if cancelled else JobStatus.FAILED,
                             "cancelled on request; the job process was killed" if cancelled
                             else f"the job process exited with code {code} without a result")
        log.info("job %s ended: %s", job.uid, self.jobs.get(job.uid).status)


class WorkerSupervisor:
    """Keeps one ``advisor worker`` child process alive next to the server (restarts it when it
    dies, with a back-off) and stops it with the server."""

    def __init__(self, settings: Settings, *, argv: list[str] | None = None,
                 on_exit: Callable[[int], None] | None = None) -> None:
        self.settings = settings
        self.argv = argv or [sys.executable, "-m", "advisor", "worker"]
        self.on_exit = on_exit
        self.proc: subprocess.Popen[bytes] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="worker-supervisor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                env=_job_env(self.settings), start_new_session=True,
                                preexec_fn=die_with_parent)

    def _loop(self) -> None:
        backoff = 1.0
        while not self._stop.is_set():
            started = time.monotonic()
            self.proc = self._spawn()
            code = self.proc.wait()
            if self._stop.is_set():
                return
            log.warning("worker exited with code %s; restarting in %.0f s", code, backoff)
            if self.on_exit is not None:
                self.on_exit(code)
            backoff = 1.0 if time.monotonic() - started > 60 else min(backoff * 2, 30.0)
            self._stop.wait(backoff)

    def stop(self) -> None:
        """Stop the worker: it cancels its running job (recorded as cancelled) and exits."""
        self._stop.set()
        if self.proc is not None and self.proc.poll() is None:
            kill_process_group(self.proc, grace_s=CANCEL_GRACE_S + 5)
        self._thread.join(timeout=5)

"""Local backend: several worker processes on this machine share one study through the database.

Each worker is ``advisor sweep worker STUDY`` (:meth:`StudyDriver.join`): it asks the shared
Optuna study for a config, claims a slot of the budget in the store, runs the trial in its own
isolated child and tells the result, until the budget is taken or the study keeps failing. The
workers die with this process (a SIGKILLed sweep leaves no worker behind; the next run recovers
their trials). A worker that crashes loses only the trial it was running, which the next
recovery fails as interrupted and re-queues.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

from advisor.settings import Settings
from knowledge import TrialRecord, TrialStatus, TrialStore
from objectives.hardware import fingerprint, hardware_key, hardware_key_with_gpus
from objectives.processes import die_with_parent, kill_process_group

__all__ = ["LocalBackend", "WorkerExit"]

#: Exit code of a worker that stopped because its study keeps failing.
EXIT_FAILING = 3


@dataclass(frozen=True)
class WorkerExit:
    """How one worker process ended."""

    worker: int
    returncode: int
    stderr_tail: str


class LocalBackend:
    """Runs a study's remaining budget with ``workers`` processes on this machine."""

    name = "local"

    def __init__(self, store: TrialStore, settings: Settings, *, workers: int,
                 max_consecutive_failures: int, poll_interval_s: float = 1.0) -> None:
        self.store, self.settings = store, settings
        self.workers, self.max_consecutive_failures = workers, max_consecutive_failures
        self.poll_interval_s = poll_interval_s

    def run_study(self, study_name: str,
                  on_trial: Callable[[TrialRecord], None] | None = None) -> list[WorkerExit]:
        """Run ``study_name`` until its budget is taken; ``on_trial`` sees each finished trial
        (polled from the store, so the parent draws progress without talking to the workers)."""
        study = self.store.get_study(study_name)
        assert study is not None, study_name
        taken = self.store.count_trials(study.id or 0,
                                        [*TrialStatus.FINISHED, TrialStatus.RUNNING])
        n = max(0, min(self.workers, study.n_trials - taken))
        env = {**os.environ, "ADVISOR_DB_URL": self.settings.db_url,
               "ADVISOR_CACHE_DIR": str(self.settings.cache_dir),
               "ADVISOR_TRIAL_TIMEOUT_S": str(self.settings.trial_timeout_s),
               "ADVISOR_HEARTBEAT_INTERVAL_S": str(self.settings.heartbeat_interval_s),
               "ADVISOR_IMPORT_SHIPPED": "false"}
        if self.settings.trial_memory_limit_mb is not None:
            env["ADVISOR_TRIAL_MEMORY_LIMIT_MB"] = str(self.settings.trial_memory_limit_mb)
        gpus = _gpu_share(n)
        procs: list[tuple[int, subprocess.Popen[bytes]]] = []
        seen = {t.id for t in self.store.trials_of_study(study.id or 0)
                if t.status != TrialStatus.RUNNING}
        with tempfile.TemporaryDirectory(prefix="advisor-workers-") as logs:
            try:
                for worker in range(n):
                    cmd = [sys.executable, "-m", "advisor", "sweep", "worker", study_name,
                           "--worker", str(worker), "--max-consecutive-failures",
                           str(self.max_consecutive_failures)]
                    # A file, not a pipe: a chatty worker must never block on a full pipe.
                    worker_env = dict(env)
                    if gpus:
                        worker_env["CUDA_VISIBLE_DEVICES"] = gpus[worker]
                    with open(os.path.join(logs, f"worker-{worker}.log"), "wb") as log_file:
                        procs.append((worker, subprocess.Popen(
                            cmd, env=worker_env, stdout=subprocess.DEVNULL, stderr=log_file,
                            preexec_fn=die_with_parent, start_new_session=True)))
                while any(p.poll() is None for _, p in procs):
                    time.sleep(self.poll_interval_s)
                    seen = self._report_new(study.id or 0, seen, on_trial)
                self._report_new(study.id or 0, seen, on_trial)
            except BaseException:
                for _, p in procs:
                    kill_process_group(p)
                raise
            return [WorkerExit(w, p.returncode if p.returncode is not None else -1,
                               _tail(os.path.join(logs, f"worker-{w}.log")))
                    for w, p in procs]

    def trial_hardware_key(self) -> str:
        """The hardware one trial runs on: one GPU when the workers split the GPUs."""
        if _gpu_share(self.workers):
            return hardware_key_with_gpus(1)
        return hardware_key()

    def _report_new(self, study_id: int, seen: set[int | None],
                    on_trial: Callable[[TrialRecord], None] | None) -> set[int | None]:
        for t in self.store.trials_of_study(study_id):
            if t.status != TrialStatus.RUNNING and t.id not in seen:
                seen.add(t.id)
                if on_trial is not None:
                    on_trial(t)
        return seen


def _tail(path: str, chars: int = 2000) -> str:
    with open(path, "rb") as f:
        return f.read().decode(errors="replace")[-chars:]


def _gpu_share(workers: int) -> list[str]:
    """One visible GPU per worker (``CUDA_VISIBLE_DEVICES``) when there are at least as many
    GPUs as workers and more than one worker, so parallel trials never share a GPU; else none
    (the workers inherit the environment as it is)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = ([v for v in visible.split(",") if v.strip()] if visible is not None
           else [str(g["index"]) for g in fingerprint()["gpus"]])
    if workers < 2 or len(ids) < workers:
        return []
    return ids[:workers]

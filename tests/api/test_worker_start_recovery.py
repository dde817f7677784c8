"""Recovery when the service starts: a job whose worker was killed mid-trial leaves a trial
running in Optuna and in the store; the next worker (``advisor serve`` starts one) reconciles
them at its start, as a resume would, before anyone resumes the study: the trial is interrupted
in both, its never-measured config is queued again, and the resumed study measures it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from fastapi.testclient import TestClient
from optuna.trial import TrialState
from pydantic import SecretStr

from advisor.driver import optuna_storage
from advisor.settings import Settings
from advisor.worker import Worker
from api import create_app
from knowledge import TrialStatus, TrialStore
from knowledge.models import JobStatus, StudyStatus
from tests.api.conftest import AUTH, KEY, make_settings


@pytest.fixture
def settings(db_url: str, tmp_path: Path) -> Settings:
    return make_settings(db_url, tmp_path, api_key=SecretStr(KEY))


@pytest.fixture
def api(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as c:
        yield c


def _states(settings: Settings, name: str) -> list[TrialState]:
    study = optuna.load_study(study_name=name, storage=optuna_storage(settings.db_url))
    return [t.state for t in study.get_trials(deepcopy=False)]


def test_a_new_worker_reconciles_optuna_with_the_store(api: TestClient,
                                                       settings: Settings) -> None:
    job = api.post("/v1/studies", headers=AUTH, json={
        "target": "scripted", "name": "orphan", "trials": 2, "seed": 0, "warm_start": False,
        "include_default": False, "fixed": {"x": 0.5},
        "workload": {"params": {"delay_s": 30}}}).json()
    env = {**os.environ, "ADVISOR_DB_URL": settings.db_url,
           "ADVISOR_CACHE_DIR": str(settings.cache_dir), "ADVISOR_IMPORT_SHIPPED": "false",
           "ADVISOR_WORKER_POLL_INTERVAL_S": "0.2", "ADVISOR_TRIAL_TIMEOUT_S": "60"}
    worker = subprocess.Popen([sys.executable, "-m", "advisor", "worker"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              start_new_session=True)
    store = TrialStore(settings.db_url)
    deadline = time.monotonic() + 120
    while True:  # until the job's first trial runs
        study = store.get_study("orphan")
        if study is not None and store.trials_of_study(study.id or 0, [TrialStatus.RUNNING]):
            break
        assert worker.poll() is None and time.monotonic() < deadline, worker.communicate()
        time.sleep(0.2)
    os.killpg(worker.pid, signal.SIGKILL)  # the worker, its job process and the trial's
    worker.wait(timeout=30)
    time.sleep(1.0)  # the job process dies with its parent (its death signal)
    assert _states(settings, "orphan") == [TrialState.RUNNING]

    restarted = Worker(settings)
    restarted.run_forever(stop_when_idle=True)  # what a restarted `advisor serve` runs
    assert api.get(f"/v1/jobs/{job['id']}").json()["status"] == JobStatus.FAILED
    study = store.get_study("orphan")
    assert study is not None and study.status == StudyStatus.INTERRUPTED
    assert [t.status for t in store.trials_of_study(study.id or 0)] == [
        TrialStatus.INTERRUPTED]
    # Optuna agrees: the asked trial failed, its config waits to run again.
    assert _states(settings, "orphan") == [TrialState.FAIL, TrialState.WAITING]
    store.close()

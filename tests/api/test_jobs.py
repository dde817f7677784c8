"""Studies started over the API run in the worker's job process, on SQLite and PostgreSQL:
validated requests only, progress from the store, cancel mid-study leaves the store consistent and
resumable, and jobs survive a restart of the server or worker."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from advisor.errors import StoreError
from advisor.jobs import _JobReporter
from advisor.settings import Settings
from advisor.worker import Worker
from api import create_app
from knowledge import StudyRecord, StudyStatus, TrialRecord, TrialStatus, TrialStore
from knowledge.jobs import JobStore
from knowledge.models import JobStatus
from tests.api.conftest import AUTH, KEY, make_settings

FIXED_X = {"x": 0.5}  # away from the scripted target's crash/hang/reject regions


@pytest.fixture
def settings(db_url: str, tmp_path: Path) -> Settings:  # overrides the root fixture: both stores
    return make_settings(db_url, tmp_path, api_key=SecretStr(KEY))


@pytest.fixture
def api(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as c:
        yield c


def _start(api: TestClient, **body: Any) -> dict[str, Any]:
    resp = api.post("/v1/studies", json={"target": "scripted", "seed": 0, **body}, headers=AUTH)
    assert resp.status_code == 202, resp.text
    return resp.json()


def _wait(what: str, check: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_job_runs_the_study_with_fixed_knobs_and_reports_progress(
        api: TestClient, settings: Settings) -> None:
    job = _start(api, name="api-study", trials=4, fixed={**FIXED_X, "mode": "b"},
                 enqueue=[{"y": 16}])
    assert job["status"] == "queued" and job["progress"] is None
    assert job["request"]["fixed"] == {"x": 0.5, "mode": "b"}
    # Enqueued configs are stored completed (fixed knobs, then the engine defaults).
    assert job["request"]["enqueue"][0]["y"] == 16 and job["request"]["enqueue"][0]["x"] == 0.5
    ran = Worker(settings).run_once()
    assert ran is not None and ran.status == JobStatus.SUCCEEDED, ran and ran.error
    job = api.get(f"/v1/jobs/{job['id']}").json()
    assert job["status"] == "succeeded" and job["finished_at"] is not None
    progress = job["progress"]
    assert progress["trials_finished"] == progress["trials_total"] == 4
    study = api.get(f"/v1/studies/{job['study_id']}").json()
    assert study["name"] == "api-study" and study["status"] == "finished"
    assert study["trials"] == 4 == study["trials_complete"] + study["trials_failed"]
    trials = api.get("/v1/trials", params={"study": "api-study"}).json()
    assert trials["total"] == 4
    assert all(t["config"]["x"] == 0.5 and t["config"]["mode"] == "b" for t in trials["items"])
    by_number = {t["number"]: t for t in trials["items"]}
    assert by_number[0]["config"]["y"] == 16  # the default clashes with mode=b: enqueued first
    if progress["best_trial_id"] is not None:
        feasible = [t for t in trials["items"] if t["feasible"]]
        assert progress["best_objective_value"] == max(t["objective_value"] for t in feasible)
    page = api.get("/v1/trials", params={"study": "api-study", "limit": 3, "offset": 2}).json()
    assert page["total"] == 4 and [t["number"] for t in page["items"]] == [2, 3]
    assert api.get("/v1/studies", params={"target": "scripted"}).json()["total"] == 1
    listed = api.get("/v1/jobs", params={"status": "succeeded"}).json()
    assert [j["id"] for j in listed["items"]] == [job["id"]]


@pytest.mark.parametrize(("body", "status", "type_", "text"), [
    ({"target": "nope"}, 422, "unknown_target_error", "registered targets"),
    ({"target": "scripted", "fixed": {"w": 1}}, 422, "search_space_error", "unknown knob 'w'"),
    ({"target": "scripted", "fixed": {"x": 2.0}}, 422, "search_space_error", "x:"),
    ({"target": "scripted", "fixed": {"mode": "c"}}, 422, "search_space_error", "mode:"),
    ({"target": "scripted", "enqueue": [{"x": 0.2}, {"w": 1}]}, 422, "search_space_error",
     "enqueued config 2"),
    ({"target": "scripted", "fixed": {"mode": "a"}, "enqueue": [{"mode": "b"}]}, 422,
     "search_space_error", "fixes"),
    ({"target": "scripted", "enqueue": [{"x": 0.2}], "resume": True}, 409, "study_error",
     "cannot go with `resume`"),
    ({"target": "scripted", "slo": "bogus<=1"}, 422, "slo_parse_error", "unknown metric"),
    ({"target": "scripted", "objective": "maximize:ttft_p95_ms"}, 409, "study_error",
     "does not report"),
    ({"target": "scripted", "workload": {"preset": "other"}}, 422, "workload_error", "presets"),
    ({"target": "scripted", "workload": {"params": {"cmd": "rm -rf /"}}}, 422, "workload_error",
     "has no param 'cmd'"),
    ({"target": "scripted", "workload": {"params": {"delay_s": "1; ls"}}}, 422,
     "workload_error", "finite number"),
    ({"target": "faiss", "workload": {"preset": "stdlib-docs-2k",
                                      "params": {"dataset": "../../etc/passwd"}}}, 422,
     "workload_error", "no paths"),
    ({"target": "vllm", "workload": {"preset": "chat", "params": {"model": "/models/llama"}}},
     422, "workload_error", "no paths"),
    ({"target": "vllm", "workload": {"preset": "chat", "params": {"model": "gpt-5"}}}, 422,
     "workload_error", "unknown model shape"),
    ({"target": "scripted", "command": "sh -c id"}, 422, "validation_error", "command"),
    ({"target": "scripted", "name": "../x"}, 422, "validation_error", "name"),
    ({"target": "scripted", "workload": {"file": "/etc/passwd"}}, 422, "validation_error",
     "file"),
    # absurd sizes and unsatisfiable SLOs (a 40 PB dataset used to be queued; 400-digit
    # numbers gave 500)
    ({"target": "faiss", "workload": {"preset": "synthetic-1m",
                                      "params": {"n_base": 1e11, "dim": 100000}}}, 422,
     "workload_error", "n_base"),
    ({"target": "faiss", "workload": {"preset": "synthetic-1m",
                                      "params": {"n_base": 100_000_000, "dim": 65_536}}}, 422,
     "workload_error", "GiB"),
    ({"target": "faiss", "workload": {"preset": "stdlib-docs-2k", "params": {"n_base": 1e12}}},
     422, "workload_error", "n_base"),
    ({"target": "faiss", "workload": {"preset": "stdlib-docs-2k",
                                      "params": {"n_base": int("9" * 400)}}}, 422,
     "validation_error", "400-digit"),
    ({"target": "faiss", "fixed": {"nlist": int("9" * 400)}}, 422, "validation_error",
     "400-digit"),
    ({"target": "faiss", "enqueue": [{"nlist": int("9" * 400)}]}, 422, "validation_error",
     "400-digit"),
    ({"target": "scripted", "slo": ","}, 422, "slo_parse_error", "has no bound"),
    ({"target": "scripted", "slo": "p95_latency_ms<=-1"}, 422, "slo_parse_error",
     "can never hold"),
    ({"target": "scripted", "slo": "p95_latency_ms<=1,recall_at_10>=0"}, 422, "slo_parse_error",
     "always holds"),
    ({"target": "scripted", "trials": 1_000_000_000}, 422, "validation_error", "trials"),
])
def test_invalid_study_requests_are_refused(api: TestClient, body: dict[str, Any], status: int,
                                            type_: str, text: str) -> None:
    resp = api.post("/v1/studies", json=body, headers=AUTH)
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert err["type"] == type_ and text in err["message"] + str(err["detail"])
    assert api.get("/v1/jobs").json()["total"] == 0


def test_duplicates_conflict_and_resume_continues(api: TestClient, settings: Settings) -> None:
    first = _start(api, name="dup", trials=2, fixed=FIXED_X)
    resp = api.post("/v1/studies", json={"target": "scripted", "name": "dup", "resume": True},
                    headers=AUTH)
    assert resp.status_code == 409 and resp.json()["error"]["type"] == "job_error"
    Worker(settings).run_once()
    resp = api.post("/v1/studies", json={"target": "scripted", "name": "dup"}, headers=AUTH)
    assert resp.status_code == 409 and "resume=true" in resp.json()["error"]["message"]
    again = _start(api, name="dup", trials=3, fixed=FIXED_X, resume=True)
    assert again["id"] != first["id"]
    assert Worker(settings).run_once().status == JobStatus.SUCCEEDED  # type: ignore[union-attr]
    assert api.get(f"/v1/jobs/{again['id']}").json()["progress"]["trials_finished"] == 3
    assert api.post(f"/v1/jobs/{again['id']}/cancel", headers=AUTH).status_code == 409


def test_a_store_that_does_not_answer_a_poll_loses_no_job(
        api: TestClient, settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's heartbeat failing (SQLite locked past its busy timeout, seen under CI load)
    once stopped the worker, and its job process died with it: the job was marked failed."""
    job = _start(api, name="busy-store", trials=3, fixed=FIXED_X,
                 workload={"params": {"delay_s": 0.3}})
    worker = Worker(settings)
    beat, failed = worker.jobs.heartbeat, list[str]()

    def locked_twice(uid: str) -> None:
        if len(failed) < 2:
            failed.append(uid)
            raise StoreError("trial store error: (sqlite3.OperationalError) database is locked")
        beat(uid)

    monkeypatch.setattr(worker.jobs, "heartbeat", locked_twice)
    ran = worker.run_once()
    assert failed == [job["id"]] * 2
    assert ran is not None and ran.status == JobStatus.SUCCEEDED, ran
    assert api.get(f"/v1/jobs/{job['id']}").json()["progress"]["trials_finished"] == 3


def test_a_busy_store_at_a_progress_check_does_not_fail_the_job(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside the job process: a progress check the store cannot answer is skipped, not
    raised into the study (which would fail the job between two trials)."""
    jobs = JobStore(TrialStore(settings.db_url))

    def locked(uid: str) -> None:
        raise StoreError("trial store error: (sqlite3.OperationalError) database is locked")

    monkeypatch.setattr(jobs, "get", locked)
    _JobReporter(jobs, "0" * 32).trial_finished(None, 1, None)  # type: ignore[arg-type]
    jobs.store.close()


def test_cancel_mid_study_leaves_the_store_consistent_and_resumable(
        api: TestClient, settings: Settings) -> None:
    job = _start(api, name="long", trials=40, fixed=FIXED_X,
                 workload={"params": {"delay_s": 0.4}})
    worker = Worker(settings)
    thread = threading.Thread(target=worker.run_forever, daemon=True)
    thread.start()
    try:
        def progress() -> dict[str, Any]:
            return api.get(f"/v1/jobs/{job['id']}").json()

        _wait("two finished trials",
              lambda: (progress()["progress"] or {}).get("trials_finished", 0) >= 2)
        assert progress()["status"] == "running"
        resp = api.post(f"/v1/jobs/{job['id']}/cancel", headers=AUTH)
        assert resp.status_code == 200 and resp.json()["cancel_requested"] is True
        _wait("the cancel", lambda: progress()["status"] == "cancelled", timeout_s=30)
    finally:
        worker.stop()
        thread.join(timeout=30)
    store = TrialStore(settings.db_url)
    study = store.get_study("long")
    assert study is not None and study.status == StudyStatus.INTERRUPTED
    trials = store.trials_of_study(study.id or 0)
    assert not [t for t in trials if t.status == TrialStatus.RUNNING]
    finished = sum(t.status in TrialStatus.FINISHED for t in trials)
    assert 2 <= finished < 40
    # A later resume (here: a new job) continues the same study to its new total.
    resumed = _start(api, name="long", trials=finished + 2, fixed=FIXED_X, resume=True,
                     workload={"params": {"delay_s": 0.4}})
    assert Worker(settings).run_once().status == JobStatus.SUCCEEDED  # type: ignore[union-attr]
    after = store.trials_of_study(study.id or 0)
    assert not [t for t in after if t.status == TrialStatus.RUNNING]
    assert sum(t.status in TrialStatus.FINISHED for t in after) == finished + 2
    assert api.get(f"/v1/jobs/{resumed['id']}").json()["status"] == "succeeded"
    store.close()


def test_queued_jobs_survive_a_restart_and_dead_running_jobs_fail(
        api: TestClient, settings: Settings) -> None:
    jobs = JobStore(TrialStore(settings.db_url))
    dead = _start(api, name="orphan", trials=2, fixed=FIXED_X)
    claimed = jobs.claim_next(pid=1)
    assert claimed is not None and claimed.uid == dead["id"]
    proc = subprocess.Popen(["true"])
    proc.wait()
    jobs.set_pid(dead["id"], proc.pid)  # its process is gone...
    store = jobs.store  # ...and so is the trial it was running
    study = store.create_study(StudyRecord(
        name="orphan", target="scripted", slo="qps>=1", objective_metric="qps",
        objective_direction="maximize", workload_spec={}, workload_hash="h", sampler="tpe",
        n_trials=2, hardware_key="hw", advisor_version="0"))
    store.start_trial(TrialRecord(
        study_id=study.id or 0, number=0, target="scripted", config={}, config_hash="c",
        workload_spec={}, workload_hash="h", hardware={}, hardware_key="hw",
        advisor_version="0", pid=proc.pid))
    queued = _start(api, name="waiting", trials=2, fixed=FIXED_X)
    queued_cancel = _start(api, name="never", trials=2, fixed=FIXED_X)
    resp = api.post(f"/v1/jobs/{queued_cancel['id']}/cancel", headers=AUTH)
    assert resp.json()["status"] == "cancelled"  # a queued job is cancelled at once
    # "Restart": a new app and a new worker on the same store.
    restarted = TestClient(create_app(settings))
    worker = Worker(settings)
    ran = worker.run_once()
    assert ran is not None and ran.uid == queued["id"] and ran.status == JobStatus.SUCCEEDED
    orphan = restarted.get(f"/v1/jobs/{dead['id']}").json()
    assert orphan["status"] == "failed" and "died" in orphan["error"]
    assert store.get_study("orphan").status == StudyStatus.INTERRUPTED  # type: ignore[union-attr]
    assert [t.status for t in store.trials_of_study(study.id or 0)] == [TrialStatus.INTERRUPTED]
    assert worker.run_once() is None  # the cancelled job is never run
    assert restarted.get(f"/v1/jobs/{queued_cancel['id']}").json()["status"] == "cancelled"

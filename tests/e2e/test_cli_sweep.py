"""`advisor sweep` end to end, as cron runs it: real subprocesses, real worker processes sharing a
study through SQLite or PostgreSQL, SIGKILL and rerun, failing cells, and drift reports (the Ray
backend: test_cli_sweep_ray.py).

The scripted target (a known response surface; ``qps_scale`` makes its workload "heavier") drives
the robustness and drift rules deterministically; real FAISS runs check the same on a real engine
(test_cli_sweep_faiss.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from knowledge import TrialStatus, TrialStore
from knowledge.jobs import pid_alive
from tests.conftest import _postgres_url
from tests.e2e.sweep_helpers import (
    ROOT,
    advisor,
    assert_consistent,
    scripted_cell,
    study_trials,
    summary_of,
    sweep_file,
)


@pytest.fixture
def pg_url() -> Iterator[str]:
    yield from _postgres_url()


@pytest.fixture
def env(db_url: str, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "ADVISOR_DB_URL": db_url, "ADVISOR_CACHE_DIR": str(tmp_path / "cache"),
            "ADVISOR_IMPORT_SHIPPED": "false", "ADVISOR_HEARTBEAT_INTERVAL_S": "1",
            "COLUMNS": "200"}


@pytest.fixture
def sqlite_env(tmp_path: Path) -> dict[str, str]:
    """For rules that do not depend on the database (the shared-study tests cover both)."""
    return {**os.environ, "ADVISOR_DB_URL": f"sqlite:///{tmp_path / 'sweep.db'}",
            "ADVISOR_CACHE_DIR": str(tmp_path / "cache"), "ADVISOR_IMPORT_SHIPPED": "false",
            "ADVISOR_HEARTBEAT_INTERVAL_S": "1", "COLUMNS": "200"}


# shared studies ------------------------------------------------------------------------------


def test_two_workers_share_one_study_without_overshooting(env: dict[str, str], tmp_path: Path
                                                          ) -> None:
    # Each worker's first trial waits for the other's: both take part however slowly one of
    # them starts (one worker used to take all 9 trials on a loaded 2-core machine).
    spec = scripted_cell(rendezvous_dir=str(tmp_path / "rendezvous"), rendezvous_n=2)
    path = sweep_file(tmp_path, f"share{uuid.uuid4().hex[:6]}", [spec], trials=9, repeats=0)
    result = advisor("sweep", "run", str(path), "--json", "--no-refit", env=env)
    assert result.returncode == 0, result.stderr
    summary = summary_of(result)
    cell = summary["cells"][0]
    store = TrialStore(env["ADVISOR_DB_URL"])
    assert_consistent(store, cell["study"], 9)
    pids = {t.pid for t in study_trials(store, cell["study"])}
    assert len(pids) == 2, f"both worker processes ran trials; the sweep said: {result.stderr}"
    assert cell["counts"]["complete"] + cell["counts"]["failed"] == 9


# kill and resume -----------------------------------------------------------------------------


@pytest.mark.postgres
def test_sigkill_mid_sweep_then_rerun_loses_and_duplicates_nothing(tmp_path: Path,
                                                                  pg_url: str) -> None:
    db = pg_url
    env = {**os.environ, "ADVISOR_DB_URL": db, "ADVISOR_CACHE_DIR": str(tmp_path / "cache"),
           "ADVISOR_IMPORT_SHIPPED": "false", "ADVISOR_HEARTBEAT_INTERVAL_S": "1",
           "COLUMNS": "200"}
    name = f"kill{uuid.uuid4().hex[:6]}"
    # Cell a's trials after its 3rd wait until released: the kill lands while both workers
    # run one (a kill timed on polling alone sometimes found both between trials).
    hold = tmp_path / "hold"
    path = sweep_file(tmp_path, name, [scripted_cell("a", delay_s=0.3, hold_dir=str(hold),
                                                     hold_after=3),
                                       scripted_cell("b", delay_s=0.2, qps_scale=2.0)],
                      trials=7, repeats=1)
    proc = subprocess.Popen([sys.executable, "-m", "advisor", "sweep", "run", str(path),
                             "--json", "--no-refit"], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    store = TrialStore(db)
    first = f"{name}@"
    deadline = time.monotonic() + 120
    running_pids: set[int] = set()
    while time.monotonic() < deadline:  # kill once 3 trials finished and the next ones wait
        studies = [s for s in store.list_studies("scripted") if s.name.startswith(first)]
        if studies and len(list(hold.glob("held-*"))) >= 2:
            trials = store.trials_of_study(studies[0].id or 0)
            running = [t for t in trials if t.status == TrialStatus.RUNNING]
            if sum(t.status in TrialStatus.FINISHED for t in trials) >= 3 and running:
                running_pids = {t.pid for t in running if t.pid}
                break
        time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail("the sweep never reached the point to kill it")
    proc.send_signal(signal.SIGKILL)  # the sweep process alone, as a crash would
    proc.wait(timeout=10)
    deadline = time.monotonic() + 15
    while any(pid_alive(p) for p in running_pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(pid_alive(p) for p in running_pids), "workers outlived the killed sweep"

    (hold / "release").touch()
    rerun = advisor("sweep", "run", str(path), "--json", "--no-refit", env=env)
    assert rerun.returncode == 0, rerun.stderr
    summary = summary_of(rerun)
    assert summary["run"].startswith(first) and len(summary["cells"]) == 2
    runs = store.sweep_runs(name)
    assert len(runs) == 1 and runs[0].status == "finished", "the rerun resumed the same run"
    for cell in summary["cells"]:
        assert cell["status"] == "ok"
        # budget 7 + 1 repeat of the best config: all finished, none stuck or duplicated
        assert_consistent(store, cell["study"], 8)
    trials = study_trials(store, summary["cells"][0]["study"])
    interrupted = [t for t in trials if t.status == TrialStatus.INTERRUPTED]
    assert interrupted, "the trials the kill cut short are recorded as interrupted"
    assert all("died" in (t.error or "") for t in interrupted)
    requeued = {t.details.get("requeued_from_trial") for t in trials} - {None}
    assert requeued >= {t.number for t in interrupted}, "their configs were measured again"


# failing cells -------------------------------------------------------------------------------


def test_a_cell_that_keeps_failing_is_reported_not_retried(sqlite_env: dict[str, str],
                                                           tmp_path: Path) -> None:
    path = sweep_file(tmp_path, f"fail{uuid.uuid4().hex[:6]}",
                      [scripted_cell("bad", fail=True), {**scripted_cell("good"), "trials": 3}],
                      trials=20, workers=1, repeats=1, max_consecutive_failures=3)
    result = advisor("sweep", "run", str(path), "--json", "--no-refit", env=sqlite_env)
    assert result.returncode == 4, result.stderr
    summary = summary_of(result)
    bad, good = summary["cells"]
    assert bad["status"] == "failing" and "scripted failure" in bad["error"]
    assert bad["counts"]["failed"] == 3, "stopped after 3 failures in a row, not 20"
    assert good["status"] == "ok" and good["counts"]["complete"] + good["counts"]["failed"] == 4
    assert summary["failing_cells"] == 1 and summary["exit_code"] == 4


# drift -----------------------------------------------------------------------------------------


def test_drift_flags_a_planted_regression_and_stays_quiet_on_a_rerun(
        sqlite_env: dict[str, str], tmp_path: Path) -> None:
    env = sqlite_env
    name = f"drift{uuid.uuid4().hex[:6]}"

    def run(**params: Any) -> dict[str, Any]:
        path = sweep_file(tmp_path, name, [scripted_cell(**params)], trials=3, repeats=2,
                          workers=1)
        result = advisor("sweep", "run", str(path), "--json", "--no-refit", env=env)
        summary = summary_of(result)
        assert result.returncode == summary["exit_code"], result.stderr
        return summary

    first = run()
    assert first["exit_code"] == 0 and first["cells"][0]["drift"]["status"] == "no-baseline"
    again = run()
    assert again["previous_run"] == first["run"]
    assert again["exit_code"] == 0 and again["cells"][0]["drift"]["status"] == "steady"
    assert again["cells"][0]["best"]["source"] in ("previous-run", "best-known", None)
    heavier = run(qps_scale=0.5)  # the same cell, its workload made heavier
    drift = heavier["cells"][0]["drift"]
    assert heavier["exit_code"] == 3 and heavier["regressions"] == 1
    assert drift["status"] == "regressed"
    qps = next(m for m in drift["metrics"] if m["metric"] == "qps")
    assert qps["verdict"] == "regressed" and qps["change"] == pytest.approx(-0.5, abs=0.01)
    assert any("workload spec changed" in n for n in drift["notes"])
    listed = json.loads(advisor("sweep", "list", "--sweep", name, "--json", env=env).stdout)
    assert [r["exit_code"] for r in listed] == [0, 0, 3]
    report = advisor("sweep", "report", heavier["run"], "--json", env=env)
    assert report.returncode == 3 and json.loads(report.stdout)["run"] == heavier["run"]

"""One driver per study (knowledge/leases.py): a second driver is refused with who holds the study,
a dead or silent holder's lease is taken over, and two drivers started in the same instant never
overshoot the budget, interrupt a live trial or leave Optuna and the store disagreeing — on
SQLite and on PostgreSQL, with real processes."""

from __future__ import annotations

import multiprocessing
import os
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from advisor.driver import StudyDriver, StudySpec
from advisor.errors import StudyBusyError, StudyError
from advisor.objective import Objective
from advisor.settings import Settings
from knowledge import TrialStatus, TrialStore
from knowledge.leases import StudyLease, holder_of
from knowledge.models import StudyLeaseRecord, utcnow
from objectives import parse_slo
from tests.e2e.sweep_helpers import assert_consistent, study_trials
from tests.scripted_target import ScriptedTarget

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 20


def _spec(name: str, n: int) -> StudySpec:
    # x fixed where the scripted engine neither hangs nor crashes: a round costs its trials'
    # process starts only (~0.3 s), so 20 rounds on each database stay cheap.
    return StudySpec(name=name, target="scripted",
                     slo=parse_slo("p95_latency_ms<=1,recall_at_10>=0.8"),
                     objective=Objective.parse("maximize:qps"),
                     workload=ScriptedTarget().default_workload(), n_trials=n, seed=0,
                     fixed={"x": 0.6})


# the lease itself ------------------------------------------------------------------------------


def test_a_held_lease_refuses_a_second_holder_and_is_free_after_release(store: TrialStore
                                                                         ) -> None:
    with StudyLease(store, "s", ttl_s=30):
        holder = holder_of(store, "s")
        assert holder is not None and holder.pid == os.getpid()
        with pytest.raises(StudyBusyError) as refused, StudyLease(store, "s", ttl_s=30):
            pass
        message = str(refused.value)
        assert f"pid {os.getpid()} on host {socket.gethostname()}" in message
        assert "\n" not in message
    assert holder_of(store, "s") is None
    with StudyLease(store, "s", ttl_s=30):  # free again
        pass


def _plant(store: TrialStore, *, host: str, pid: int, expires_in_s: float) -> None:
    now = utcnow()
    with store.session() as s:
        s.add(StudyLeaseRecord(study_name="s", owner="planted", host=host, pid=pid,
                               acquired_at=now, renewed_at=now,
                               expires_at=now + timedelta(seconds=expires_in_s)))
        s.commit()


def test_a_dead_holder_on_this_host_is_taken_over_at_once(store: TrialStore) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _plant(store, host=socket.gethostname(), pid=dead.pid, expires_in_s=3600)
    with StudyLease(store, "s", ttl_s=30):
        holder = holder_of(store, "s")
        assert holder is not None and holder.pid == os.getpid()


def test_another_hosts_holder_is_taken_over_only_once_its_lease_expired(store: TrialStore
                                                                         ) -> None:
    _plant(store, host="elsewhere.example", pid=1, expires_in_s=3600)
    with pytest.raises(StudyBusyError, match=r"pid 1 on host elsewhere\.example"), \
            StudyLease(store, "s", ttl_s=30):
        pass
    with store.session() as s:
        row = s.get(StudyLeaseRecord, "s")
        assert row is not None
        row.expires_at = utcnow() - timedelta(seconds=1)
        s.add(row)
        s.commit()
    with StudyLease(store, "s", ttl_s=30):
        holder = holder_of(store, "s")
        assert holder is not None and holder.host == socket.gethostname()


def test_a_driver_whose_lease_was_taken_over_stops(store: TrialStore) -> None:
    with StudyLease(store, "s", ttl_s=2) as held:  # renewed every 0.5 s
        with store.session() as s:  # what a taker does once the holder went silent
            row = s.get(StudyLeaseRecord, "s")
            assert row is not None
            row.owner, row.host, row.pid = "taker", "elsewhere.example", 1
            s.add(row)
            s.commit()
        deadline = time.monotonic() + 10
        while not held.lost and time.monotonic() < deadline:
            time.sleep(0.1)
        with pytest.raises(StudyBusyError, match="taken over by pid 1 on host elsewhere"):
            held.check()
    holder = holder_of(store, "s")  # releasing what it no longer holds removes nothing
    assert holder is not None and holder.owner == "taker"


# two drivers in the same instant ---------------------------------------------------------------


def _drive(db_url: str, cache: str, name: str, n_trials: int, create: bool,
           barrier: Any, results: Any) -> None:
    """One driver process: wait for the other, then run or resume the study."""
    settings = Settings(db_url=db_url, cache_dir=Path(cache), trial_timeout_s=30,
                        heartbeat_interval_s=0.5)
    store = TrialStore(db_url)
    barrier.wait(timeout=60)
    driver = StudyDriver(store, settings)
    try:
        if create:
            driver.run(_spec(name, n_trials))
        else:
            driver.resume(name, n_trials)
        results.put((os.getpid(), "ran", ""))
    except StudyBusyError as exc:
        results.put((os.getpid(), "refused", str(exc)))
    except StudyError as exc:  # a creator that came after the whole first run
        kind = "exists" if create and "already exists" in str(exc) else "error"
        results.put((os.getpid(), kind, str(exc)))
    except BaseException as exc:  # any other outcome is the failure under test
        results.put((os.getpid(), "error", f"{type(exc).__name__}: {exc}"))
    finally:
        store.close()


def _race(db_url: str, tmp_path: Path, name: str, n_trials: int, create: bool
          ) -> list[tuple[int, str, str]]:
    ctx = multiprocessing.get_context("fork")  # no re-import: a round costs its trials only
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_drive, args=(db_url, str(tmp_path / "cache"), name, n_trials,
                                              create, barrier, results)) for _ in range(2)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    return outcomes


def _assert_consistent(store: TrialStore, name: str, budget: int) -> None:
    """The shared check (exact budget, nothing stuck or duplicated, Optuna = store), and no
    trial interrupted: a refused driver never recovered the live one's trial."""
    assert_consistent(store, name, budget)
    assert not [t for t in study_trials(store, name) if t.status == TrialStatus.INTERRUPTED]


@pytest.mark.slow
def test_two_drivers_started_at_once_never_share_a_study(db_url: str, tmp_path: Path) -> None:
    """Round 0 creates the study from both drivers at once; rounds 1..20 resume it from both,
    two more trials each time. Each round: one driver runs, the other is refused with one line
    (or, having lost the start by a whole run, finds the budget met and runs nothing); the budget
    is exact, no trial was interrupted, Optuna agrees with the store."""
    name = "raced"
    budget = 2
    refusals = 0
    for round_ in range(ROUNDS + 1):
        # Round 0 opens the fresh store from both processes at once: its tables too.
        outcomes = _race(db_url, tmp_path, name, budget, create=round_ == 0)
        store = TrialStore(db_url)
        kinds = sorted(kind for _, kind, _ in outcomes)
        assert "error" not in kinds, outcomes
        assert "ran" in kinds, outcomes
        for _, kind, message in outcomes:
            if kind == "refused":
                refusals += 1
                assert "is being run by pid" in message and "\n" not in message, message
        _assert_consistent(store, name, budget)
        assert holder_of(store, name) is None, "both drivers gave the lease back"
        store.close()
        budget += 2
    assert refusals >= ROUNDS // 2, f"only {refusals} refusals: the drivers did not overlap"


def test_the_second_cli_driver_exits_2_with_one_line(tmp_path: Path) -> None:
    """The reproduction: `advisor tune --name X --resume` while another one runs it. The first
    resume's trial is held (the scripted target's ``hold_dir``) until the second has answered:
    with trials of a fixed 0.5 s, a second CLI that took longer to start than the first took
    for its four trials (a loaded machine) found the study finished and free, ran nothing and
    exited 0."""
    env = {**os.environ, "ADVISOR_DB_URL": f"sqlite:///{tmp_path / 'cli.db'}",
           "ADVISOR_CACHE_DIR": str(tmp_path / "cache"), "ADVISOR_IMPORT_SHIPPED": "false",
           "COLUMNS": "200"}
    hold = tmp_path / "hold"
    args = [sys.executable, "-m", "advisor", "tune", "--target", "scripted", "--name", "cron",
            "--workload-param", "delay_s=0.1", "--workload-param", f"hold_dir={hold}",
            "--workload-param", "hold_after=2", "--seed", "0"]
    first = subprocess.run([*args, "--trials", "2"], env=env, capture_output=True, text=True,
                           timeout=300)
    assert first.returncode == 0, first.stderr
    store = TrialStore(env["ADVISOR_DB_URL"])
    resume = [*args, "--trials", "6", "--resume"]
    running = subprocess.Popen(resume, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        deadline = time.monotonic() + 120
        while not (hold / "held-3").exists():  # the first resume holds the study, in a trial
            assert running.poll() is None and time.monotonic() < deadline, running.communicate()
            time.sleep(0.05)
        assert holder_of(store, "cron") is not None
        second = subprocess.run(resume, env=env, capture_output=True, text=True, timeout=300)
    finally:
        (hold / "release").touch()
    _, err = running.communicate(timeout=300)
    assert running.returncode == 0, err[-3000:]
    assert second.returncode == 2, second.stderr[-3000:]
    assert "is being run by pid" in second.stderr and "Traceback" not in second.stderr
    assert len(second.stderr.strip().splitlines()) == 1, second.stderr
    _assert_consistent(store, "cron", 6)

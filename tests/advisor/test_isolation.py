"""Trial isolation: crashes, hangs, rejections and OOMs become failed outcomes with a reason."""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from pathlib import Path

import psutil
import pytest

from advisor.isolation import run_isolated
from tests.scripted_target import ScriptedTarget, response

WL = ScriptedTarget().default_workload()
OK = {"x": 0.5, "y": 8, "mode": "a"}


def test_successful_trial_returns_the_measurement(tmp_path: Path) -> None:
    outcome = run_isolated("scripted", OK, WL, tmp_path, timeout_s=30)
    assert outcome.ok, outcome.reason
    assert outcome.measurement is not None
    assert dict(outcome.measurement.metrics) == pytest.approx(response(OK))
    assert outcome.measurement.details["pid"] != os.getpid()  # really ran in a child


def test_crash_is_a_failed_outcome_with_the_signal(tmp_path: Path) -> None:
    outcome = run_isolated("scripted", {**OK, "x": 0.97}, WL, tmp_path, timeout_s=30)
    assert outcome.status == "failed"
    assert outcome.error_type == "crash"
    assert "SIGABRT" in (outcome.reason or "")


def test_hang_is_killed_at_the_timeout_with_its_process_group(tmp_path: Path) -> None:
    ticks = []
    start = time.monotonic()
    mark = uuid.uuid4().hex  # tells this test's trial processes from other runs on the machine
    outcome = run_isolated("scripted", {**OK, "x": 0.92}, WL, tmp_path, timeout_s=2,
                           on_tick=lambda: ticks.append(1), tick_s=0.2,
                           env={"ADVISOR_TEST_MARK": mark})
    assert outcome.error_type == "timeout"
    assert "2 s timeout" in (outcome.reason or "")
    assert time.monotonic() - start < 20
    assert ticks  # the heartbeat hook ran while waiting
    assert _marked_processes(mark) == []


def _marked_processes(mark: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.environ().get("ADVISOR_TEST_MARK") == mark:
                found.append(proc)
    return found


def test_rejected_config_carries_the_engine_reason(tmp_path: Path) -> None:
    outcome = run_isolated("scripted", {**OK, "x": 0.01}, WL, tmp_path, timeout_s=30)
    assert outcome.error_type == "rejected"
    assert "below the engine's minimum" in (outcome.reason or "")


def test_out_of_memory_is_a_failed_outcome(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    monkeypatch.setenv("SCRIPTED_ALLOCATE_MB", "4096")
    outcome = run_isolated("scripted", OK, WL, tmp_path, timeout_s=60, memory_limit_mb=512)
    assert outcome.status == "failed"
    assert outcome.error_type == "oom"
    assert "over its limit of 512 MiB" in (outcome.reason or "")


def test_a_memory_limit_does_not_break_imports_that_reserve_more_than_they_use(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """150 MiB used to fail FAISS trials as "faiss-cpu cannot be imported" (an address-space
    limit counts reservations); a resident limit lets a small trial through."""
    pytest.importorskip("faiss")
    from objectives.workload import Workload as W

    small = W("vector-search", "tiny", {"dataset": "synthetic", "n_base": 500, "n_queries": 20,
                                       "k": 10, "dim": 16, "n_clusters": 4})
    from objectives.registry import get_target

    faiss = get_target("faiss")
    faiss.prepare(small, tmp_path)
    config = {**faiss.space().default_config(), "nlist": 16, "nprobe": 4}
    outcome = run_isolated("faiss", config, small, tmp_path, timeout_s=120, memory_limit_mb=1024)
    assert outcome.ok, outcome.reason


def test_unknown_target_fails_cleanly(tmp_path: Path) -> None:
    outcome = run_isolated("no-such-target", OK, WL, tmp_path, timeout_s=30)
    assert outcome.error_type == "error"
    assert "unknown target 'no-such-target'" in (outcome.reason or "")


def test_scratch_dirs_of_dead_drivers_are_removed_and_live_ones_kept(tmp_path: Path) -> None:
    """A SIGKILLed driver skips its trial's TemporaryDirectory cleanup; the next trial on this
    host removes what a dead driver left, and only that."""
    import subprocess
    import sys

    from advisor.isolation import remove_orphaned_scratch

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    left = tmp_path / f"advisor-trial-{dead.pid}-abc"
    (left / "sub").mkdir(parents=True)
    (left / "sub" / "log.txt").write_text("x")
    mine = tmp_path / f"advisor-trial-{os.getpid()}-def"
    alive = tmp_path / "advisor-trial-1-ghi"  # pid 1 is always alive
    other = tmp_path / "advisor-trial-old-format"
    for d in (mine, alive, other):
        d.mkdir()
    assert remove_orphaned_scratch(tmp_path) == 1
    assert not left.exists() and mine.exists() and alive.exists() and other.exists()

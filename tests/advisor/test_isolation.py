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
    outcome = run_isolated("scripted", OK, WL, tmp_path, timeout_s=60, memory_limit_mb=1024)
    assert outcome.status == "failed"
    assert outcome.error_type == "oom"
    assert "MemoryError" in (outcome.reason or "")


def test_unknown_target_fails_cleanly(tmp_path: Path) -> None:
    outcome = run_isolated("no-such-target", OK, WL, tmp_path, timeout_s=30)
    assert outcome.error_type == "error"
    assert "unknown target 'no-such-target'" in (outcome.reason or "")

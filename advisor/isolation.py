"""Run one trial in an isolated child process with a timeout and an optional memory limit.

A crash, an OOM, a hang or a config the engine rejects becomes a failed :class:`TrialOutcome` with
its reason; the caller's process (and so the study) carries on. The child gets its own process
group, which is killed as a whole on timeout, and dies with the parent (PR_SET_PDEATHSIG) so a
SIGKILLed driver leaves no orphaned engine behind.

The memory limit is on the *resident* memory of the trial's whole process tree (the child and the
engine servers it starts), polled every :data:`MEMORY_POLL_S`: over it, the group is killed and
the trial fails as ``oom`` with the figure. An address-space limit (``RLIMIT_AS``) would count
virtual reservations instead — CUDA, serving engines and even importing a vector index library
reserve far more than they use — and fail imports with a misleading reason. Between two polls an
allocation can overshoot; the kernel's OOM killer stays the last guard.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from knowledge.jobs import pid_alive
from objectives.measurement import Measurement
from objectives.processes import die_with_parent, kill_process_group
from objectives.workload import Workload

__all__ = ["MEMORY_POLL_S", "SKIPPED", "SweepRequest", "TrialOutcome", "remove_orphaned_scratch",
           "run_isolated", "tree_rss_mb"]

_LOG_TAIL_CHARS = 4000
#: The status of a co-measured workload the target left unmeasured on purpose.
SKIPPED = "skipped"


@dataclass(frozen=True)
class TrialOutcome:
    """What came back from the child: a measurement, or why there is none."""

    #: "complete" or "failed"; a co-measured workload may also be "skipped": left unmeasured on
    #: purpose (the target's reason says why), so no trial is recorded for it.
    status: str
    measurement: Measurement | None = None
    error_type: str | None = None
    reason: str | None = None
    duration_s: float = 0.0
    exit_code: int | None = None
    #: Outcomes of the co-measured workloads, in order (empty when none were asked for). A failure
    #: of the trial itself fails them all with the same reason.
    co_measured: tuple[TrialOutcome, ...] = ()
    #: A search sweep's settings (full config, measurement), in measuring order; the first is
    #: also :attr:`measurement`. Empty when no sweep was asked for or the trial failed.
    swept: tuple[tuple[dict[str, Any], Measurement], ...] = ()

    @property
    def ok(self) -> bool:
        return self.status == "complete" and self.measurement is not None


@dataclass(frozen=True)
class SweepRequest:
    """What a trial that sweeps search knobs is asked to do (:meth:`Target.run_sweep`)."""

    knobs: frozenset[str]
    #: Seconds after which no new setting is started.
    budget_s: float
    #: The study's SLO, which may steer which settings are timed.
    slo: str
    #: Whether the config's own values of the knobs are a setting to measure (a queued config);
    #: a sampled config's are only the knobs' defaults.
    include_own: bool

    def to_json(self) -> dict[str, Any]:
        return {"knobs": sorted(self.knobs), "budget_s": self.budget_s, "slo": self.slo,
                "include_own": self.include_own}


#: How often the trial's resident memory is read when it has a limit.
MEMORY_POLL_S = 0.2


def _child_setup() -> None:
    die_with_parent()  # an engine must never outlive the driver that measures it


def tree_rss_mb(pid: int) -> float:
    """Resident memory of process ``pid`` and all its descendants, in MiB (0 when gone)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            total += proc.memory_info().rss
    return total / 2**20


@dataclass(frozen=True)
class _OverMemory:
    """Why :func:`_wait` stopped the child: its tree's resident memory passed the limit."""

    rss_mb: float
    limit_mb: int


#: A trial's scratch directory: ``advisor-trial-<driver pid>-<random>`` in the system temp dir.
_SCRATCH_PREFIX = "advisor-trial-"
_SCRATCH_RE = re.compile(rf"^{_SCRATCH_PREFIX}(\d+)-")


def remove_orphaned_scratch(root: Path | None = None) -> int:
    """Delete the scratch directories of trials whose driver died (a SIGKILL skips the
    ``TemporaryDirectory`` cleanup): those named after a pid that no longer exists on this host.
    Returns how many were removed. Cheap (one listing of the temp dir); run before each trial."""
    root = Path(root or tempfile.gettempdir())
    removed = 0
    try:
        entries = list(root.iterdir())
    except OSError:
        return 0
    for entry in entries:
        match = _SCRATCH_RE.match(entry.name)
        if match is None or int(match[1]) == os.getpid() or pid_alive(int(match[1])):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed += not entry.exists()
    return removed


def _tail(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-_LOG_TAIL_CHARS:].decode(errors="replace").strip()


def _describe_exit(code: int) -> tuple[str, str]:
    if code < 0:
        sig = signal.Signals(-code)
        if sig == signal.SIGKILL:
            return "oom", "killed by SIGKILL (most likely out of memory)"
        return "crash", f"killed by signal {sig.name}"
    return "crash", f"exited with code {code} without a result"


def run_isolated(target: str, config: Mapping[str, Any], workload: Workload, cache_dir: Path,
                 *, timeout_s: float, memory_limit_mb: int | None = None,
                 on_tick: Callable[[], None] | None = None, tick_s: float = 1.0,
                 env: Mapping[str, str] | None = None,
                 co_workloads: Sequence[Workload] = (),
                 sweep: SweepRequest | None = None, fresh_build: bool = False,
                 slo: str | None = None) -> TrialOutcome:
    """Run ``target`` on ``config`` in a child process and return its outcome.

    ``co_workloads`` are measured after ``workload`` in the same child with the same config
    (:meth:`Target.run_series`: a server target starts its engine once for all of them); their
    outcomes come back in :attr:`TrialOutcome.co_measured`. With ``sweep`` the child sweeps
    its knobs instead (:meth:`Target.run_sweep`), starting no new
    setting after that many seconds; the settings come back in :attr:`TrialOutcome.swept`.
    With ``fresh_build`` the child builds the config anew instead of reusing a cached build
    (:attr:`Target.reuse_builds`), so the trial measures a build of its own. ``slo`` (the
    study's) reaches the target as :attr:`Target.trial_slo`: a measurement may stop once the
    trial's miss of it is settled, and a co-measured workload that the miss makes pointless may
    come back ``skipped``.

    ``on_tick`` is called about every ``tick_s`` seconds while the child runs (the driver uses it
    for heartbeats). ``KeyboardInterrupt`` in the parent kills the child before propagating.
    """
    start = time.monotonic()
    remove_orphaned_scratch()
    with tempfile.TemporaryDirectory(prefix=f"{_SCRATCH_PREFIX}{os.getpid()}-") as tmp:
        tmpdir = Path(tmp)
        request, result, log = tmpdir / "request.json", tmpdir / "result.json", tmpdir / "log.txt"
        request.write_text(json.dumps({
            "target": target, "config": dict(config), "workload": workload.spec,
            "co_workloads": [w.spec for w in co_workloads], "cache_dir": str(cache_dir),
            "sweep": None if sweep is None else sweep.to_json(), "fresh_build": fresh_build,
            "slo": slo,
        }))
        child_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
        with log.open("wb") as log_file:
            proc = subprocess.Popen(
                [sys.executable, "-m", "objectives.runner", str(request), str(result)],
                stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=_child_setup, env=child_env,
            )
            try:
                code = _wait(proc, start, timeout_s, on_tick, tick_s, memory_limit_mb)
            except BaseException:
                kill_process_group(proc, grace_s=1.0)
                raise
        elapsed = time.monotonic() - start
        if code is None or isinstance(code, _OverMemory):
            kill_process_group(proc)
        if isinstance(code, _OverMemory):
            outcome = TrialOutcome(
                "failed", error_type="oom", duration_s=elapsed,
                reason=f"out of memory: the trial's processes held {code.rss_mb:,.0f} MiB "
                       f"resident, over its limit of {code.limit_mb:,} MiB, and were killed"
                       f"\n--- log tail ---\n{_tail(log)}".rstrip())
        else:
            outcome = _read_outcome(result, log, code, elapsed, timeout_s)
    return _with_co_measured(outcome, len(co_workloads))


def _read_outcome(result: Path, log: Path, code: int | None, elapsed: float,
                  timeout_s: float) -> TrialOutcome:
    """The child's outcome from RESULT, or why there is none (timeout, crash)."""
    if code is None:
        return TrialOutcome("failed", error_type="timeout", duration_s=elapsed,
                            reason=f"trial exceeded its {timeout_s:g} s timeout and was "
                                   f"killed\n--- log tail ---\n{_tail(log)}".rstrip())
    if result.exists():
        data = json.loads(result.read_text())
        if data["status"] == "complete":
            co = tuple(_co_outcome(item) for item in data.get("co_measured", []))
            swept = tuple((dict(item["config"]), Measurement.from_dict(item["measurement"]))
                          for item in data.get("swept", []))
            return TrialOutcome("complete", Measurement.from_dict(data["measurement"]),
                                duration_s=elapsed, exit_code=code, co_measured=co, swept=swept)
        return TrialOutcome("failed", error_type=data["error_type"], reason=data["reason"],
                            duration_s=elapsed, exit_code=code)
    error_type, why = _describe_exit(code)
    return TrialOutcome("failed", error_type=error_type, duration_s=elapsed, exit_code=code,
                        reason=f"trial process {why}\n--- log tail ---\n{_tail(log)}".rstrip())


def _co_outcome(item: Mapping[str, Any]) -> TrialOutcome:
    if item["status"] == "complete":
        m = Measurement.from_dict(item["measurement"])
        return TrialOutcome("complete", m, duration_s=m.duration_s)
    if item["status"] == SKIPPED:
        return TrialOutcome(SKIPPED, reason=item["reason"])
    return TrialOutcome("failed", error_type=item["error_type"], reason=item["reason"])


def _with_co_measured(outcome: TrialOutcome, n: int) -> TrialOutcome:
    """Give a failed trial's co-measured workloads its failure: none of them was measured."""
    if n == 0 or outcome.co_measured:
        return outcome
    failed = TrialOutcome("failed", error_type=outcome.error_type or "error",
                          reason=f"not measured: the trial failed ({outcome.reason or ''})",
                          duration_s=outcome.duration_s, exit_code=outcome.exit_code)
    return dataclasses.replace(outcome, co_measured=(failed,) * n)


def _wait(proc: subprocess.Popen[bytes], start: float, timeout_s: float,
          on_tick: Callable[[], None] | None, tick_s: float,
          memory_limit_mb: int | None = None) -> int | _OverMemory | None:
    """Wait for the child: its exit code, None on timeout, or :class:`_OverMemory` when its
    tree's resident memory passed ``memory_limit_mb``."""
    poll_s = tick_s if memory_limit_mb is None else min(tick_s, MEMORY_POLL_S)
    last_tick = time.monotonic()
    while True:
        remaining = timeout_s - (time.monotonic() - start)
        if remaining <= 0:
            return None
        try:
            return proc.wait(timeout=min(poll_s, remaining))
        except subprocess.TimeoutExpired:
            pass
        if memory_limit_mb is not None and (rss := tree_rss_mb(proc.pid)) > memory_limit_mb:
            return _OverMemory(rss, memory_limit_mb)
        if on_tick is not None and time.monotonic() - last_tick >= tick_s:
            on_tick()
            last_tick = time.monotonic()

"""A scripted target for driver tests: a known response surface, plus configs that really crash,
hang, get rejected or run out of memory in the trial's child process.

Registered for tests through ``ADVISOR_EXTRA_TARGETS=scripted=tests.scripted_target:ScriptedTarget``
(the child processes inherit the variable). It complements, never replaces, the real-engine tests.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from advisor.errors import ConfigRejectedError, NotMeasuredError, WorkloadError
from objectives.measurement import Measurement
from objectives.search_sweep import explore, power_ladder
from objectives.target import ProgressFn, Target
from objectives.workload import Workload
from search_spaces import SearchSpace

SPACE = {
    "target": "scripted",
    "engine": "scripted",
    "knobs": [
        {"name": "x", "type": "float", "low": 0.0, "high": 1.0, "default": 0.5, "stage": "search"},
        {"name": "y", "type": "int", "low": 1, "high": 64, "log": True, "default": 8,
         "stage": "build", "flag": "--y"},
        {"name": "mode", "type": "categorical", "choices": ["a", "b"], "default": "a"},
        {"name": "z", "type": "int", "low": 1, "high": 100, "default": 5, "high_from": "y",
         "when": {"mode": ["b"]}},
    ],
}

CRASH_X = 0.95  # x >= CRASH_X aborts the child (SIGABRT)
HANG_X = 0.90  # HANG_X <= x < CRASH_X sleeps forever
REJECT_X = 0.02  # x < REJECT_X is rejected by the "engine"


def response(config: Mapping[str, Any]) -> dict[str, float]:
    """The known response surface: qps peaks near x=0.6 and grows with y; latency grows with x*y."""
    x, y = float(config["x"]), int(config["y"])
    return {
        "qps": 1000.0 * (1 - (x - 0.6) ** 2) * math.log2(y + 1) / 6,
        "p95_latency_ms": 0.2 + 2.0 * x * y / 64,
        "recall_at_10": min(1.0, 0.5 + 0.6 * x),
    }


def _rendezvous(directory: Path, n: int, timeout_s: float = 20.0) -> None:
    """Wait until trials of ``n`` different drivers (the trial's parent process) have reached
    this point: a test of workers sharing a study then knows each of them ran a trial, however
    slowly one of them started on a loaded machine. After one wait times out (a driver that
    never came), later trials do not wait: the test's own assertion says what is missing."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"driver-{os.getppid()}").touch()
    deadline = time.monotonic() + timeout_s
    while (len(list(directory.glob("driver-*"))) < n and not (directory / "gave-up").exists()
           and time.monotonic() < deadline):
        time.sleep(0.05)
    if len(list(directory.glob("driver-*"))) < n:
        (directory / "gave-up").touch()


def _hold_after(directory: Path, n: int, timeout_s: float = 120.0) -> None:
    """Trials past the ``n``-th to reach this point wait (up to ``timeout_s``) until a file
    ``release`` appears in ``directory``: a test that kills a sweep then knows trials are
    running at that moment, instead of hoping its kill lands inside one (on a loaded 2-core
    machine both workers were sometimes between trials). Each trial takes the next ordinal with
    an exclusive create, so two trials starting together never both count as the ``n``-th."""
    directory.mkdir(parents=True, exist_ok=True)
    ordinal = 1
    while True:
        try:
            os.close(os.open(directory / f"trial-{ordinal}", os.O_CREAT | os.O_EXCL))
            break
        except FileExistsError:
            ordinal += 1
    if ordinal <= n:
        return
    (directory / f"held-{ordinal}").touch()
    deadline = time.monotonic() + timeout_s
    while not (directory / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.05)


class ScriptedTarget(Target):
    name = "scripted"
    engine = "scripted"
    description = "scripted response surface for tests"
    default_objective = "maximize:qps"
    default_slo = "p95_latency_ms<=1,recall_at_10>=0.8"
    install_hint = "nothing to install"

    def reported_metrics(self) -> frozenset[str]:
        return frozenset({"qps", "p95_latency_ms", "recall_at_10"})

    def space(self) -> SearchSpace:
        return SearchSpace.from_dict(SPACE, source="tests/scripted_target.py")

    def check_available(self) -> None:
        return None

    def engine_versions(self) -> dict[str, str]:
        return {"scripted": "1.0"}

    def default_workload(self) -> Workload:
        return Workload("scripted", "scripted-default", {"delay_s": 0.0})

    def prepare(self, workload: Workload, cache_dir: Path, progress: ProgressFn | None = None
                ) -> dict[str, Any]:
        return {"scripted": True}

    def run(self, config: Mapping[str, Any], workload: Workload, cache_dir: Path) -> Measurement:
        x = float(config["x"])
        if rendezvous := workload.params.get("rendezvous_dir"):
            _rendezvous(Path(rendezvous), int(workload.params.get("rendezvous_n", 2)))
        if hold := workload.params.get("hold_dir"):
            _hold_after(Path(hold), int(workload.params.get("hold_after", 0)))
        if x >= CRASH_X:
            os.abort()
        if x >= HANG_X:
            time.sleep(3600)
        if x < REJECT_X:
            raise ConfigRejectedError(f"x={x} is below the engine's minimum {REJECT_X}")
        if os.environ.get("SCRIPTED_ALLOCATE_MB"):
            blob = bytearray(int(os.environ["SCRIPTED_ALLOCATE_MB"]) * 2**20)
            for page in range(0, len(blob), 4096):  # touch every page: resident, not reserved
                blob[page] = 1
                if page % 2**26 == 0:
                    time.sleep(0.01)  # ~64 MiB at a time, as a growing engine would
            del blob
        if workload.params.get("fail"):  # a workload this "engine" cannot run
            raise WorkloadError(f"scripted failure of workload {workload.name!r}")
        if reason := workload.params.get("not_measured"):  # left unmeasured on purpose
            raise NotMeasuredError(str(reason))
        time.sleep(float(workload.params.get("delay_s", 0.0)))
        metrics = response(config)
        metrics["qps"] *= float(workload.params.get("qps_scale", 1.0))  # a heavier/lighter load
        details: dict[str, Any] = {"pid": os.getpid()}
        # A validity label as an LLM target's gate attaches one (knowledge/validity.py).
        if (label := workload.params.get("validity")) is not None:
            details["validity"] = label
        if workload.params.get("report_slo"):  # the study's SLO as the trial saw it
            details["trial_slo"] = None if self.trial_slo is None else str(self.trial_slo)
        if (above := workload.params.get("invalid_above_x")) is not None and x > float(above):
            details["validity"] = "client_bound"
        return Measurement(metrics, self.engine_versions(), details)

    def launch_command(self, config: Mapping[str, Any], workload: Workload | None = None) -> str:
        return "scripted " + " ".join(f"--{k} {v}" for k, v in config.items())


#: The scripted sweep's quality saturates (1.0, its ceiling) from y=15 on, so larger y are pruned.
def sweep_quality(y: int) -> float:
    return min(1.0, math.log2(y + 1) / 4)


class SweepingScriptedTarget(ScriptedTarget):
    """The scripted target with ``y`` swept within each trial (objectives/search_sweep.py): every
    setting of y's power-of-two ladder up to the first whose quality reaches the ceiling."""

    name = "scripted-sweep"

    def swept_knobs(self) -> frozenset[str]:
        return frozenset({"y"})

    def run_sweep(self, config: Mapping[str, Any], workload: Workload, cache_dir: Path, *,
                  knobs: frozenset[str], budget_s: float, slo: Any = None,
                  include_own: bool = True) -> list[tuple[dict[str, Any], Measurement]]:
        clean = self.validate_config(config)
        if workload.params.get("fail_sweep"):
            raise ConfigRejectedError("scripted sweep failure")

        def measure(setting: dict[str, Any]) -> Measurement:
            m = self.run({**clean, **setting}, workload, cache_dir)
            return Measurement(m.metrics, m.engine_versions, {**m.details, "y": setting["y"]})

        result = explore({"y": power_ladder(1, 64, [int(clean["y"])])}, measure,
                         quality=lambda m: sweep_quality(int(m.details["y"])),
                         cost=lambda m: m.metrics["p95_latency_ms"], quality_ceiling=1.0,
                         budget_s=budget_s)
        return [({**clean, **setting}, Measurement(
            m.metrics, m.engine_versions, {**m.details, "search_sweep": {
                "point": i, **result.summary()}})) for i, (setting, m) in enumerate(result.points)]


#: How much lower the rebuilding scripted target's recall comes out on a build of a trial's own.
REBUILD_DROP = 0.03


class RebuildingScriptedTarget(ScriptedTarget):
    """The scripted target whose recall depends on the build: a build made for one trial
    (``reuse_builds`` off, a paired re-measurement) reaches ``REBUILD_DROP`` less recall."""

    name = "scripted-rebuild"
    rebuild_varying_metrics = frozenset({"recall_at_10"})

    def run(self, config: Mapping[str, Any], workload: Workload, cache_dir: Path) -> Measurement:
        m = super().run(config, workload, cache_dir)
        if self.reuse_builds:
            return m
        metrics = {**m.metrics, "recall_at_10": m.metrics["recall_at_10"] - REBUILD_DROP}
        return Measurement(metrics, m.engine_versions, m.details)

"""A warm start survives a kill during the study's creation: the study records it pending from the
moment it exists, so `advisor tune --resume` queues the same configs a creation left to run would
have queued, once, right after recovering the study."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from advisor.driver import StudyDriver, StudySpec
from advisor.objective import Objective
from advisor.settings import Settings
from advisor.study_spec import WARM_START_PENDING, WARM_START_QUEUED
from knowledge import TrialStore
from objectives import parse_slo
from tests.conftest import ROOT
from tests.scripted_target import ScriptedTarget

GOOD = {"x": 0.6, "y": 16, "mode": "a"}

#: Loaded at interpreter start (sitecustomize): the warm start's search kills its own process
#: with SIGKILL, as a kill during the model fit would, after the study was created.
_KILL_IN_FIT = textwrap.dedent("""
    import os, signal
    import advisor.warm_start as ws
    def _killed(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)
    ws.study_warm_start = _killed
""")


def test_a_kill_during_the_warm_start_leaves_it_to_the_resume(settings: Settings,
                                                              tmp_path: Path) -> None:
    store = TrialStore(settings.db_url)
    target = ScriptedTarget()
    StudyDriver(store, settings).run(StudySpec(  # an earlier study whose best is GOOD
        name="first", target="scripted", slo=parse_slo(target.default_slo),
        objective=Objective.parse(target.default_objective),
        workload=target.default_workload(), n_trials=2, enqueued=(GOOD,)))
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_KILL_IN_FIT)
    env = {**os.environ, "ADVISOR_DB_URL": settings.db_url,
           "ADVISOR_CACHE_DIR": str(settings.cache_dir), "ADVISOR_IMPORT_SHIPPED": "false",
           "COLUMNS": "250"}
    args = [sys.executable, "-m", "advisor", "tune", "--target", "scripted", "--name", "ws",
            "--trials", "4", "--seed", "0", "--trial-timeout", "10"]
    killed = subprocess.run(args, env={**env, "PYTHONPATH": f"{hook}{os.pathsep}{ROOT}"},
                            capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    study = store.get_study("ws")
    assert study is not None and study.spec is not None
    assert study.spec["warm_start"] == WARM_START_PENDING
    assert store.trials_of_study(study.id or 0) == []

    resumed = subprocess.run([*args[:3], "tune", "--target", "scripted", "--name", "ws",
                              "--resume", "--trial-timeout", "10"], env=env,
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert "warm start: 1 config(s) queued (1 best-known)" in resumed.stderr
    study = store.get_study("ws")
    assert study is not None and study.spec is not None
    assert study.spec["warm_start"] == WARM_START_QUEUED
    trials = sorted(store.trials_of_study(study.id or 0), key=lambda t: t.number)
    assert [t.details.get("role") for t in trials[:2]] == ["engine-default", "warm-start"]
    assert trials[1].config == GOOD and trials[1].details["source"] == "best-known"
    assert len(trials) == 4
    # Resumed again: the warm start is not queued twice.
    again = subprocess.run(resumed.args, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "warm start" not in again.stderr
    store.close()

"""`advisor tune` warm-starts a new study from the store: the best config an earlier study
measured under the same SLO, workload and hardware runs right after the engine default, with its
source in the trial's details; `--no-warm-start`, an empty store and `--resume` queue nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import optuna
import pytest

from advisor.driver import StudyDriver, StudySpec, optuna_storage
from advisor.objective import Objective
from advisor.settings import Settings
from knowledge import TrialRecord, TrialStore
from objectives import parse_slo
from tests.scripted_target import ScriptedTarget

#: Better than the engine default (x=0.5, y=8) and inside the scripted target's default SLO.
GOOD = {"x": 0.6, "y": 16, "mode": "a"}


@pytest.fixture
def env(settings: Settings) -> dict[str, str]:
    return {**os.environ, "ADVISOR_DB_URL": settings.db_url,
            "ADVISOR_CACHE_DIR": str(settings.cache_dir), "ADVISOR_IMPORT_SHIPPED": "false",
            "COLUMNS": "250"}


def tune(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`advisor tune` of the scripted target, seeded, each trial limited (its hang region)."""
    return subprocess.run([sys.executable, "-m", "advisor", "tune", "--target", "scripted",
                           "--seed", "0", "--trial-timeout", "10", *args], env=env,
                          capture_output=True, text=True, timeout=300)


def _first_study(settings: Settings) -> TrialRecord:
    """A measured study under the scripted target's defaults whose best config is GOOD."""
    store = TrialStore(settings.db_url)
    target = ScriptedTarget()
    result = StudyDriver(store, settings).run(StudySpec(
        name="first", target="scripted", slo=parse_slo(target.default_slo),
        objective=Objective.parse(target.default_objective),
        workload=target.default_workload(), n_trials=2, enqueued=(GOOD,)))
    store.close()
    assert result.best is not None and result.best.config == GOOD
    return result.best


def _trials(settings: Settings, study: str) -> list[TrialRecord]:
    store = TrialStore(settings.db_url)
    found = store.get_study(study)
    assert found is not None
    trials = sorted(store.trials_of_study(found.id or 0), key=lambda t: t.number)
    store.close()
    return trials


def _roles(trials: list[TrialRecord]) -> list[Any]:
    return [t.details.get("role") for t in trials]


def test_a_second_study_starts_with_the_first_ones_best(settings: Settings,
                                                        env: dict[str, str]) -> None:
    best = _first_study(settings)
    second = tune("--name", "second", "--trials", "3", "--json", env=env)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["trials"] == 3  # the progress line stays out of --json
    assert "warm start: 1 config(s) queued (1 best-known)" in second.stderr
    trials = _trials(settings, "second")
    assert _roles(trials) == ["engine-default", "warm-start", None]
    assert trials[1].config == best.config and trials[1].details["source"] == "best-known"
    # A measured trial of the Optuna study, so it counts towards TPE's random start-up.
    ostudy = optuna.load_study(study_name="second", storage=optuna_storage(settings.db_url))
    assert ostudy.trials[1].state == optuna.trial.TrialState.COMPLETE
    # A resume never queues the warm start again.
    again = tune("--name", "second", "--resume", "--trials", "5", env=env)
    assert again.returncode == 0, again.stderr
    assert "warm start" not in again.stderr
    assert _roles(_trials(settings, "second")) == ["engine-default", "warm-start", None, None,
                                                   None]


def test_no_warm_start_and_an_empty_store_queue_nothing(settings: Settings,
                                                        env: dict[str, str]) -> None:
    empty = tune("--name", "empty", "--trials", "2", env=env)
    assert empty.returncode == 0, empty.stderr
    assert "warm start: nothing to queue for this SLO, workload and hardware" in empty.stderr
    assert _roles(_trials(settings, "empty")) == ["engine-default", None]
    _first_study(settings)
    off = tune("--name", "off", "--trials", "2", "--no-warm-start", env=env)
    assert off.returncode == 0, off.stderr
    assert "warm start" not in off.stderr
    assert _roles(_trials(settings, "off")) == ["engine-default", None]

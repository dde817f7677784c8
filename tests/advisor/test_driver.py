"""The study loop on the scripted target: every trial stored, failures recorded, constraints reach
Optuna, and a SIGKILLed study resumes with no lost, duplicated or stuck-running trial."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from advisor.driver import StudyDriver, StudySpec, optuna_storage
from advisor.errors import SearchSpaceError, StudyError, TrialTakenError
from advisor.objective import Objective
from advisor.settings import Settings
from knowledge import TrialStatus, TrialStore
from knowledge.models import TrialRecord
from objectives import parse_slo
from tests.scripted_target import ScriptedTarget, response


def _spec(name: str = "s", n: int = 8, **kw: object) -> StudySpec:
    fields: dict[str, object] = dict(
        name=name, target="scripted", slo=parse_slo("p95_latency_ms<=1,recall_at_10>=0.8"),
        objective=Objective.parse("maximize:qps"), workload=ScriptedTarget().default_workload(),
        n_trials=n, seed=0)
    fields.update(kw)
    return StudySpec(**fields)  # type: ignore[arg-type]


def test_study_stores_every_trial_with_margins_and_constraints(settings: Settings) -> None:
    store = TrialStore(settings.db_url)
    result = StudyDriver(store, settings).run(_spec(n=8))
    assert len(result.trials) == 8
    assert all(t.status in TrialStatus.FINISHED for t in result.trials)
    assert result.trials[0].details["role"] == "engine-default"
    assert result.trials[0].config == ScriptedTarget().space().default_config()
    slo = parse_slo("p95_latency_ms<=1,recall_at_10>=0.8")
    ostudy = optuna.load_study(study_name="s", storage=optuna_storage(settings.db_url))
    by_number = {t.number: t for t in ostudy.trials}
    for t in result.trials:
        frozen = by_number[t.number]
        if t.status == TrialStatus.COMPLETE:
            assert t.metrics == pytest.approx(response(t.config))
            margins = store.margins(t.id)  # typed rows, sign <=> met
            assert {f"{m.metric}{m.op}{m.threshold:g}": m.margin for m in margins} == \
                pytest.approx(slo.margins(t.metrics))
            assert t.feasible == slo.is_met(t.metrics)
            assert frozen.state == TrialState.COMPLETE
            # Reach Optuna (in the list form optuna-dashboard reads; names in the study attrs).
            named = dict(zip(ostudy.user_attrs["slo_constraints"], frozen.constraints.values(),
                             strict=True))
            assert named == pytest.approx(slo.margins(t.metrics))
        else:
            assert t.error and frozen.state == TrialState.FAIL
    if result.best is not None:
        feasible = [t for t in result.trials if t.feasible]
        assert result.best.objective_value == max(t.objective_value for t in feasible)


def test_crashes_hangs_and_rejections_fail_only_their_trial(settings: Settings) -> None:
    settings = settings.model_copy(update={"trial_timeout_s": 2.0})
    store = TrialStore(settings.db_url)
    driver = StudyDriver(store, settings)
    ostudy = optuna.create_study(study_name="f", storage=optuna_storage(settings.db_url),
                                 direction="maximize")
    for x in (0.97, 0.92, 0.01):  # crash, hang, reject: queued first
        ostudy.enqueue_trial({"x": x, "y": 8, "mode": "a"})
    result = driver.run(_spec(name="f", n=5, include_default=False))
    by_number = {t.number: t for t in result.trials}
    assert (by_number[0].error_type, by_number[1].error_type, by_number[2].error_type) == (
        "crash", "timeout", "rejected")
    assert "SIGABRT" in (by_number[0].error or "")
    assert "below the engine's minimum" in (by_number[2].error or "")
    assert len(result.trials) == 5 and result.study.status == "finished"


def test_refuses_to_overwrite_and_to_resume_missing(settings: Settings) -> None:
    store = TrialStore(settings.db_url)
    driver = StudyDriver(store, settings)
    driver.run(_spec(name="dup", n=2))
    with pytest.raises(StudyError, match=r"already exists .*--resume"):
        driver.run(_spec(name="dup", n=2))
    with pytest.raises(StudyError, match="no study named 'nope'"):
        driver.resume("nope")


def test_enqueued_configs_run_first_completed_with_the_defaults(settings: Settings) -> None:
    store = TrialStore(settings.db_url)
    default = ScriptedTarget().space().default_config()
    result = StudyDriver(store, settings).run(_spec(
        name="q", n=4, enqueued=({"x": 0.3}, {"y": 32, "mode": "b"})))
    trials = sorted(result.trials, key=lambda t: t.number)
    assert [t.details.get("role") for t in trials[:3]] == ["engine-default", "enqueued",
                                                          "enqueued"]
    assert trials[1].config == {**default, "x": 0.3}  # one knob off the default
    # mode=b turns on a knob the default leaves off; it takes its own default.
    space = ScriptedTarget().space()
    assert trials[2].config == space.validate_config({**default, "y": 32, "mode": "b"},
                                                     fill_defaults=True)
    assert set(trials[2].config) > set(default)
    assert trials[1].metrics == pytest.approx(response(trials[1].config))
    assert "role" not in trials[3].details  # then the sampler takes over


def test_a_bad_enqueued_config_fails_before_anything_is_stored(settings: Settings) -> None:
    store = TrialStore(settings.db_url)
    driver = StudyDriver(store, settings)
    with pytest.raises(SearchSpaceError, match=r"enqueued config 2: .*unknown knob 'nope'"):
        driver.run(_spec(name="bad", n=2, enqueued=({"x": 0.1}, {"nope": 1})))
    with pytest.raises(SearchSpaceError, match=r"enqueued config 1: .*x: "):
        driver.run(_spec(name="bad", n=2, enqueued=({"x": 7.0},)))
    with pytest.raises(SearchSpaceError, match="fixes"):
        driver.run(_spec(name="bad", n=2, fixed={"mode": "a"}, enqueued=({"mode": "b"},)))
    assert store.get_study("bad") is None


def test_resume_runs_only_the_remaining_trials(settings: Settings) -> None:
    store = TrialStore(settings.db_url)
    StudyDriver(store, settings).run(_spec(name="r", n=3))
    result = StudyDriver(store, settings).resume("r", n_trials=6)
    assert [t.number for t in result.trials] == list(range(6))
    assert result.study.n_trials == 6


def _wait_for(predicate, timeout_s: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError("condition not reached in time")


def test_sigkill_then_resume_loses_nothing(db_url: str, tmp_path: Path) -> None:
    """The issue's scenario: kill -9 the CLI mid-study, rerun with --resume."""
    env = {**os.environ, "ADVISOR_DB_URL": db_url, "ADVISOR_CACHE_DIR": str(tmp_path / "c")}
    cmd = [sys.executable, "-m", "advisor", "tune", "--target", "scripted", "--trials", "10",
           "--name", "killme", "--seed", "1", "--timeout", "3",
           "--workload-param", "delay_s=0.4"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    store = TrialStore(db_url)
    try:
        def mid_trial() -> bool:
            study = store.get_study("killme")
            if study is None:
                return False
            trials = store.trials_of_study(study.id or 0)
            return (sum(t.status in TrialStatus.FINISHED for t in trials) >= 3
                    and any(t.status == TrialStatus.RUNNING for t in trials))
        _wait_for(mid_trial, 120)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    study = store.get_study("killme")
    assert study is not None
    running = store.trials_of_study(study.id or 0, [TrialStatus.RUNNING])
    assert len(running) == 1  # the trial the kill interrupted
    interrupted_config = running[0].config

    done = subprocess.run([*cmd, "--resume"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr

    trials = store.trials_of_study(study.id or 0)
    finished = [t for t in trials if t.status in TrialStatus.FINISHED]
    assert len(finished) == 10
    assert not [t for t in trials if t.status == TrialStatus.RUNNING]
    interrupted = [t for t in trials if t.status == TrialStatus.INTERRUPTED]
    assert [t.number for t in interrupted] == [running[0].number]
    requeued = [t for t in finished if t.details.get("requeued_from_trial") == running[0].number]
    assert len(requeued) == 1 and requeued[0].config == interrupted_config
    numbers = [t.number for t in trials]
    assert len(numbers) == len(set(numbers))  # nothing duplicated
    ostudy = optuna.load_study(study_name="killme", storage=optuna_storage(db_url))
    states = [t.state for t in ostudy.trials]
    assert TrialState.RUNNING not in states
    assert states.count(TrialState.COMPLETE) == sum(
        t.status == TrialStatus.COMPLETE for t in trials)


def test_a_worker_handed_another_workers_queued_trial_asks_again(settings: Settings) -> None:
    # Optuna's SQLite storage cannot lock a row: two workers asking at the same moment can both
    # pop the study's queued default (seen on a loaded 2-core CI run: one worker died with
    # "UNIQUE constraint failed" and the other ran every trial). Here worker A has claimed
    # trial 0 in the store while Optuna still hands it out, the state the race leaves.
    store = TrialStore(settings.db_url)
    driver = StudyDriver(store, settings)
    study = driver.create(_spec(name="shared", n=4))
    first = driver.shared_study("shared")[2].trials[0]
    assert first.state == TrialState.WAITING and first.number == 0
    def row() -> TrialRecord:
        return TrialRecord(study_id=study.id or 0, number=0, target="scripted",
                           config=dict(first.params), config_hash="a", workload_spec={},
                           workload_hash="w", hardware={}, hardware_key="h",
                           advisor_version="t", pid=os.getpid())

    assert store.claim_trial(row(), 4) is not None
    with pytest.raises(TrialTakenError):
        store.claim_trial(row(), 4)

    result = driver.join("shared", worker=1)

    assert (result.trials_run, result.stopped_because) == (3, "budget")
    numbers = sorted(t.number for t in store.trials_of_study(study.id or 0))
    assert numbers == [0, 1, 2, 3]
    ostudy = optuna.load_study(study_name="shared", storage=optuna_storage(settings.db_url))
    # The trial worker A runs is left to it: not failed by the worker that lost the claim.
    assert ostudy.trials[0].state == TrialState.RUNNING

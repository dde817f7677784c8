"""The failure gate in the study driver and the recommender, on the scripted target with a hidden
constraint (x·y over a limit crashes at start) that two earlier studies ran into: a third study
skips such configs without starting them, tells Optuna they failed and says why; configs someone
asked for always run; with too little data nothing is skipped; the recommender drops predicted
failures; `advisor knowledge eval --failures` prints the held-out figures."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

import advisor.driver as driver_module
from advisor.answers.model_based import RecommendationQuery, recommend
from advisor.cli import main
from advisor.driver import StudyDriver, StudySpec, failure_streak, optuna_storage
from advisor.errors import StudyError
from advisor.failure_gate import FailureGate, failure_model
from advisor.isolation import TrialOutcome
from advisor.objective import Objective
from advisor.settings import Settings
from knowledge import TrialStatus, TrialStore
from knowledge.cache import KnowledgeModels
from knowledge.failures import (
    DEFAULT_THRESHOLD,
    PREDICTED_FAILURE,
    StartFacts,
    labelled_starts,
)
from objectives import parse_slo
from objectives.hardware import fingerprint
from objectives.measurement import Measurement
from tests.knowledge.failure_trials import FAILED_START_S, constrained_study, violates
from tests.scripted_target import ScriptedTarget, response


class FakeRunner:
    """Stands in for the isolated trial process: the scripted surface, and a crash for configs
    over the limit; records every config it was asked to start."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.started: list[dict[str, Any]] = []

    def __call__(self, target: str, config: Mapping[str, Any], *args: Any, **kw: Any
                 ) -> TrialOutcome:
        self.started.append(dict(config))
        if violates(config, self.limit):
            return TrialOutcome("failed", error_type="crash", duration_s=FAILED_START_S,
                                reason="engine aborted at start")
        return TrialOutcome("complete", Measurement(response(config), {"scripted": "1.0"}),
                            duration_s=1.0)


def _spec(name: str, n: int, **kw: Any) -> StudySpec:
    fields: dict[str, Any] = dict(
        name=name, target="scripted", slo=parse_slo("p95_latency_ms<=1,recall_at_10>=0.8"),
        objective=Objective.parse("maximize:qps"), workload=ScriptedTarget().default_workload(),
        n_trials=n, sampler="random", seed=7)
    fields.update(kw)
    return StudySpec(**fields)


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> FakeRunner:
    fake = FakeRunner(12.0)
    monkeypatch.setattr(driver_module, "run_isolated", fake)
    return fake


@pytest.fixture
def learnt(settings: Settings) -> TrialStore:
    """A store holding two earlier studies that ran into the constraint."""
    store = TrialStore(settings.db_url)
    constrained_study(store, "earlier-1", n_configs=150, seed=1)
    constrained_study(store, "earlier-2", n_configs=150, seed=2)
    return store


class _Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def preparing(self, message: str) -> None:
        self.lines.append(message)

    def started(self, *a: Any) -> None: ...
    def trial_finished(self, *a: Any) -> None: ...
    def finished(self, *a: Any) -> None: ...


def test_a_third_study_skips_predicted_failures_without_starting_them(
        learnt: TrialStore, settings: Settings, runner: FakeRunner) -> None:
    over = {"x": 0.85, "y": 64, "mode": "a"}  # asked for: runs although it will crash
    reporter = _Lines()
    result = StudyDriver(learnt, settings, reporter).run(_spec("third", 40, enqueued=(over,)))
    skipped = [t for t in result.trials if t.error_type == PREDICTED_FAILURE]
    started = [t for t in result.trials if t.error_type != PREDICTED_FAILURE]
    assert len(skipped) >= 3
    # Skips are not charged to the search budget (one free skip per budgeted trial): 40 configs
    # were measured beside them, and the summary's tally says so.
    assert len(started) == 40 and len(result.trials) == 40 + len(skipped)
    assert result.tally is not None and result.tally.search_done == 40
    assert result.tally.skipped_free == len(skipped) and result.tally.skipped_charged == 0
    assert result.study.n_trials == len(result.trials)  # the store budget covers the skips
    # No engine was started for a skipped config; every other trial was run.
    assert len(runner.started) == len(started)
    assert {json.dumps(t.config, sort_keys=True) for t in started} == {
        json.dumps(c, sort_keys=True) for c in runner.started}
    assert sum(violates(t.config) for t in skipped) >= 0.8 * len(skipped)
    ostudy = optuna.load_study(study_name="third", storage=optuna_storage(settings.db_url))
    states = {t.number: t.state for t in ostudy.trials}
    for t in skipped:
        assert t.status == TrialStatus.FAILED and states[t.number] == TrialState.FAIL
        assert not t.details.get("role")  # only sampled configs are ever skipped
        gate = t.details["failure_gate"]
        assert gate["probability"] >= DEFAULT_THRESHOLD and gate["evidence"]
        reason = t.error or ""
        assert f"p={gate['probability']:.2f} >= {DEFAULT_THRESHOLD:g}" in reason
        assert "nearest failed: trial" in reason and "of study earlier-" in reason
        assert "is over 12" in reason  # the evidence's own reason
        assert "--no-failure-gate" in reason
        assert (t.duration_s or 0) < 5  # no engine start paid for
    for t in started:  # the gate judged every sampled config it let through, and said so
        if not t.details.get("role"):
            gate = t.details["failure_gate"]
            assert gate["skipped"] is False and gate["probability"] < DEFAULT_THRESHOLD
        else:
            assert "failure_gate" not in t.details
    by_role = {t.details.get("role"): t for t in started}
    assert by_role["engine-default"].status == TrialStatus.COMPLETE
    assert by_role["enqueued"].config == {**ScriptedTarget().space().default_config(), **over}
    assert by_role["enqueued"].error_type == "crash"
    assert any(line.startswith("failure gate: on") for line in reporter.lines)
    assert result.study.data_provenance["failure_gate"] == {
        "enabled": True, "threshold": DEFAULT_THRESHOLD}
    # The skips are predictions: never labels of the model that made them.
    ids = {r.trial_id for r in labelled_starts(learnt)}
    assert not ids & {t.id for t in skipped}
    # A skip says nothing about whether the engine still starts: it is no failure streak.
    finished = sorted((t for t in result.trials if t.finished_at is not None),
                      key=lambda t: t.finished_at)  # type: ignore[arg-type,return-value]
    streak = 0
    for t in reversed([t for t in finished if t.error_type != PREDICTED_FAILURE]):
        if t.status != TrialStatus.FAILED:
            break
        streak += 1
    assert failure_streak(learnt, result.study.id or 0) == streak


def test_the_default_and_enqueued_configs_run_even_when_predicted_to_fail(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    store = TrialStore(settings.db_url)
    # Under this limit the engine default (x=0.5, y=8) itself fails.
    constrained_study(store, "low-1", n_configs=100, seed=1, limit=3.0)
    constrained_study(store, "low-2", n_configs=100, seed=2, limit=3.0)
    fake = FakeRunner(3.0)
    monkeypatch.setattr(driver_module, "run_isolated", fake)
    target = ScriptedTarget()
    default = target.space().default_config()
    over = {**default, "x": 0.9, "y": 40}
    gate = FailureGate(store, target, target.default_workload())
    sampled = gate.check(default, fingerprint(), queued=False)
    assert sampled is not None and sampled.skip  # had the sampler asked, it would be skipped
    assert gate.check(default, fingerprint(), queued=True) is None
    result = StudyDriver(store, settings).run(_spec("asked", 2, enqueued=(over,)))
    assert fake.started == [default, over]
    assert [t.error_type for t in result.trials] == ["crash", "crash"]


def test_too_little_data_skips_nothing(settings: Settings, runner: FakeRunner) -> None:
    store = TrialStore(settings.db_url)
    constrained_study(store, "only", n_configs=20, seed=1)
    reporter = _Lines()
    result = StudyDriver(store, settings, reporter).run(_spec("young", 12))
    assert not [t for t in result.trials if t.error_type == PREDICTED_FAILURE]
    assert len(runner.started) == 12
    assert any("skips nothing yet" in line and "need >= 30" in line for line in reporter.lines)


def test_the_gate_can_be_turned_off_and_a_resume_keeps_the_choice(
        learnt: TrialStore, settings: Settings, runner: FakeRunner) -> None:
    driver = StudyDriver(learnt, settings)
    result = driver.run(_spec("off", 10, failure_gate=False))
    assert not [t for t in result.trials if t.error_type == PREDICTED_FAILURE]
    assert len(runner.started) == 10
    assert result.study.data_provenance["failure_gate"]["enabled"] is False
    resumed = driver.resume("off", 16)
    assert not [t for t in resumed.trials if t.error_type == PREDICTED_FAILURE]
    assert len(runner.started) == 16
    # Turned on at a resume, from then on.
    again = driver.resume("off", 40, failure_gate=True, failure_threshold=0.8)
    assert again.study.data_provenance["failure_gate"] == {"enabled": True, "threshold": 0.8}
    assert [t for t in again.trials if t.error_type == PREDICTED_FAILURE]
    with pytest.raises(StudyError, match="failure threshold"):
        _spec("bad", 3, failure_threshold=1.5)


def test_the_recommender_drops_predicted_failures(learnt: TrialStore) -> None:
    models = KnowledgeModels.fit(learnt, target="scripted", score=False)
    query = RecommendationQuery(target="scripted", slo="p95_latency_ms<=5")
    kept = recommend(learnt, query, models=models)
    everything = recommend(learnt, query, models=models, drop_predicted_failures=False)
    dropped = [n for n in kept.notes if n.startswith("dropped ")]
    assert len(dropped) == 1 and "predicts to fail to start" in dropped[0]
    n = int(dropped[0].split()[1])
    assert kept.candidates_considered == everything.candidates_considered - n > 0
    assert not [n for n in everything.notes if n.startswith("dropped ")]
    model = failure_model(learnt, "scripted")
    assert kept.config is not None
    facts = StartFacts({}, None, model.hardware[kept.hardware_key or ""], None)
    assert model.predict([kept.config], facts)[0] < model.threshold


def test_eval_failures_prints_held_out_precision_and_recall(
        learnt: TrialStore, settings: Settings, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("ADVISOR_DB_URL", settings.db_url)
    monkeypatch.setenv("ADVISOR_CACHE_DIR", str(settings.cache_dir))
    monkeypatch.setenv("ADVISOR_IMPORT_SHIPPED", "false")
    monkeypatch.setenv("COLUMNS", "200")
    main(["knowledge", "eval", "--failures", "--target", "scripted"])
    text = capsys.readouterr().out
    assert "precision" in text and "recall" in text and "scripted" in text
    assert "leave one study out" in text and "net saved" in text
    main(["knowledge", "eval", "--failures", "--json", "--failure-threshold", "0.8"])
    report = json.loads(capsys.readouterr().out)
    assert report["threshold"] == 0.8 and report["data"]["scripted"]["failures"] > 10
    schemes = {s["scheme"]: s for s in report["scores"] if s["target"] == "scripted"}
    assert set(schemes) == {"config", "study"}
    assert all(0.9 <= (s["precision"] or 0) <= 1 and 0 < s["recall"] <= 1
               for s in schemes.values())


@pytest.mark.parametrize(("args", "needle"), [
    (["tune", "--target", "scripted", "--failure-threshold", "1.5"], "0 < failure threshold"),
    (["tune", "--target", "scripted", "--failure-threshold", "0"], "0 < failure threshold"),
    (["knowledge", "eval", "--failures", "--audit"], "--failures scores the failure model"),
    (["knowledge", "eval", "--failure-threshold", "0.8"], "apply with --failures only"),
    (["knowledge", "eval", "--failures", "--failure-family", "svm"], "is not one of forest"),
])
def test_bad_failure_flags_are_one_line_errors(args: list[str], needle: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("ADVISOR_DB_URL", f"sqlite:///{tmp_path / 'a.db'}")
    monkeypatch.setenv("ADVISOR_IMPORT_SHIPPED", "false")
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], lines


def test_tune_names_the_starts_it_skipped(learnt: TrialStore, settings: Settings,
                                          runner: FakeRunner, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("ADVISOR_DB_URL", settings.db_url)
    monkeypatch.setenv("ADVISOR_CACHE_DIR", str(settings.cache_dir))
    monkeypatch.setenv("ADVISOR_IMPORT_SHIPPED", "false")
    monkeypatch.setenv("COLUMNS", "200")
    main(["tune", "--target", "scripted", "--trials", "25", "--sampler", "random", "--seed",
          "7", "--name", "cli", "--no-warm-start", "--json"])
    summary = json.loads(capsys.readouterr().out)
    assert summary["failure_gate"] == {"enabled": True, "threshold": DEFAULT_THRESHOLD}
    skipped = summary["predicted_failures"]
    assert skipped and len(runner.started) == 25  # the skips took none of the 25 trials
    assert summary["budget"] == {"search_trials": 25, "search_done": 25, "paired_repeats": 0,
                                 "skipped_free": len(skipped), "skipped_charged": 0}
    main(["tune", "--target", "scripted", "--name", "cli", "--resume"])
    text = " ".join(capsys.readouterr().out.split())  # as read, whatever the line width
    assert f"{len(skipped)} configs skipped: predicted to fail, never started, not charged " \
           "to the search budget" in text
    assert "budget: search 25/25 trials" in text
    assert len(runner.started) == 25  # the resume kept the study's budget: nothing more ran

"""The study driver's end: the best config and the engine default re-measured interleaved, their
paired comparison stored with the study (SQLite and PostgreSQL), never queued twice on resume,
shared by co-measured studies; and invalid trials kept but never used, told to Optuna as failed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pydantic
import pytest
from optuna.trial import TrialState

from advisor.driver import CoMeasured, StudyDriver, StudyResult, StudySpec, optuna_storage
from advisor.errors import StudyError
from advisor.objective import Objective
from advisor.pairing import PROVENANCE_KEY, stored_comparison
from advisor.settings import Settings
from knowledge import StudyRecord, TrialRecord, TrialStatus, TrialStore
from objectives import parse_slo
from objectives.workload import Workload
from tests.scripted_target import ScriptedTarget, response

SLO = "p95_latency_ms<=1,recall_at_10>=0.8"
DEFAULT = ScriptedTarget().space().default_config()


def _settings(db_url: str, tmp_path: Path, **kw: Any) -> Settings:
    return Settings(db_url=db_url, cache_dir=tmp_path / "cache", trial_timeout_s=5,
                    heartbeat_interval_s=0.5, **kw)


def _spec(name: str = "p", n: int = 6, **kw: Any) -> StudySpec:
    fields: dict[str, Any] = dict(
        name=name, target="scripted", slo=parse_slo(SLO), objective=Objective.parse("maximize:qps"),
        workload=Workload("scripted", "base", {"delay_s": 0.0}), n_trials=n, seed=0,
        # Random configs (TPE's start-up, seeded): these tests are about the paired block, and
        # TPE's model could propose a config in the scripted engine's failing range.
        sampler="random", paired_repeats=3)
    fields.update(kw)
    return StudySpec(**fields)


def _paired(trials: list[TrialRecord]) -> list[TrialRecord]:
    return [t for t in trials if str(t.details.get("role", "")).startswith("paired-")]


def assert_paired_block(result: StudyResult, n_search: int, repeats: int = 3) -> None:
    """The study's last 2*repeats trials alternate best, default; the stored comparison is
    computed from exactly them."""
    trials = sorted(result.trials, key=lambda t: t.number)
    paired = _paired(trials)
    assert len(trials) == n_search + 2 * repeats and trials[n_search:] == paired
    assert [t.details["role"] for t in paired] == ["paired-best", "paired-default"] * repeats
    assert [t.details["paired_round"] for t in paired] == [r for r in range(repeats)
                                                           for _ in (0, 1)]
    search_best = max((t for t in trials[:n_search] if t.feasible),
                      key=lambda t: t.objective_value or 0)
    assert all(t.config == search_best.config for t in paired[0::2])
    assert all(t.config == DEFAULT for t in paired[1::2])
    assert len({t.details["paired_block"] for t in paired}) == 1
    data = result.study.data_provenance[PROVENANCE_KEY]
    assert data["status"] == "compared"
    comparison = stored_comparison(result.study)
    assert comparison is not None
    assert list(comparison.x_trials) == [t.id for t in paired[0::2]]
    assert list(comparison.y_trials) == [t.id for t in paired[1::2]]
    assert comparison.x_config == search_best.config and comparison.y_config == DEFAULT
    assert {m.metric for m in comparison.metrics} == {"qps", "p95_latency_ms", "recall_at_10"}
    for m in comparison.metrics:
        lo, hi = m.interval
        assert lo <= m.difference <= hi
        assert (m.verdict == "within_noise") == (lo <= 0 <= hi)


def test_the_end_remeasures_best_and_default_interleaved(db_url: str, tmp_path: Path) -> None:
    settings = _settings(db_url, tmp_path)
    store = TrialStore(db_url)
    result = StudyDriver(store, settings).run(_spec(n=6))
    assert_paired_block(result, 6)
    assert result.study.n_trials == 12 and result.study.status == "finished"
    comparison = stored_comparison(result.study)
    assert comparison is not None
    # The scripted engine repeats itself exactly, so the known surface decides every verdict.
    truth_x, truth_y = response(comparison.x_config or {}), response(DEFAULT)
    qps = comparison.metric("qps")
    assert qps is not None and qps.mean_x == pytest.approx(truth_x["qps"])
    assert qps.verdict == ("better" if truth_x["qps"] > truth_y["qps"] else "worse")
    ostudy = optuna.load_study(study_name="p", storage=optuna_storage(db_url))
    assert len(ostudy.trials) == 12 and all(t.state == TrialState.COMPLETE for t in ostudy.trials)
    store.close()


class _StopAfter:
    """A reporter that interrupts the study (as Ctrl-C would) once ``n`` trials finished."""

    def __init__(self, n: int) -> None:
        self.n = n

    def preparing(self, message: str) -> None:
        pass

    def started(self, study: StudyRecord, done: int, total: int) -> None:
        pass

    def trial_finished(self, trial: TrialRecord, done: int, best: TrialRecord | None) -> None:
        if done == self.n:
            raise KeyboardInterrupt

    def finished(self, result: StudyResult) -> None:
        pass


def test_resume_never_queues_the_repeats_twice(db_url: str, tmp_path: Path) -> None:
    settings = _settings(db_url, tmp_path)
    store = TrialStore(db_url)
    with pytest.raises(KeyboardInterrupt):  # stopped after the first paired repeat
        StudyDriver(store, settings, _StopAfter(7)).run(_spec(n=6))
    # Resumed as `advisor tune --resume --trials 6` does: the budget given is the search's.
    result = StudyDriver(store, settings).resume("p", 6, paired_repeats=3)
    assert_paired_block(result, 6)
    again = StudyDriver(store, settings).resume("p", 6, paired_repeats=3)
    assert len(again.trials) == 12  # measured block: nothing queued again
    assert again.study.data_provenance[PROVENANCE_KEY] == \
        result.study.data_provenance[PROVENANCE_KEY]
    # A longer search with the same best re-uses the block; Optuna holds no waiting trial.
    longer = StudyDriver(store, settings).resume("p", 14, paired_repeats=3)
    paired = _paired(longer.trials)
    blocks = {t.details["paired_block"] for t in paired}
    assert len(paired) == 6 * len(blocks)
    ostudy = optuna.load_study(study_name="p", storage=optuna_storage(db_url))
    assert not ostudy.get_trials(states=(TrialState.WAITING, TrialState.RUNNING))
    store.close()


def test_co_measured_studies_compare_from_the_same_repeats(settings: Settings) -> None:
    store = TrialStore(settings.db_url)
    result = StudyDriver(store, settings).run(_spec(
        n=6, co_measured=(CoMeasured("p@2x", Workload("scripted", "p@2x", {"qps_scale": 2.0})),)))
    assert_paired_block(result, 6)
    (co,) = result.co_measured
    lead = {t.number: t for t in result.trials}
    co_paired = _paired(co.trials)
    assert [lead[t.details["co_measured_with"]["trial"]].details["role"] for t in co_paired] == \
        [t.details["role"] for t in co_paired]
    comparison = stored_comparison(co.study)
    assert comparison is not None and comparison.context["best_of_study"] == "p"
    assert list(comparison.x_trials) == [t.id for t in co_paired[0::2]]
    lead_cmp = stored_comparison(result.study)
    assert lead_cmp is not None
    assert comparison.metric("qps").mean_x == pytest.approx(  # type: ignore[union-attr]
        2 * lead_cmp.metric("qps").mean_x)  # type: ignore[union-attr]


def test_nothing_is_paired_when_off_or_when_the_best_is_the_default(settings: Settings) -> None:
    store = TrialStore(settings.db_url)
    driver = StudyDriver(store, settings)
    off = driver.run(_spec(name="off", n=4, paired_repeats=0))
    assert len(off.trials) == 4 and not _paired(off.trials)
    assert off.study.data_provenance[PROVENANCE_KEY]["status"] == "skipped"
    fixed = driver.run(_spec(name="fixed", n=3, fixed=dict(DEFAULT)))
    assert len(fixed.trials) == 3 and not _paired(fixed.trials)
    assert "is the engine default" in fixed.study.data_provenance[PROVENANCE_KEY]["reason"]


def test_one_or_two_repeats_are_refused_up_front() -> None:
    with pytest.raises(StudyError, match="0 \\(off\\) or 3 to 50"):
        _spec(paired_repeats=2)
    with pytest.raises(pydantic.ValidationError):
        Settings(paired_repeats=1)
    assert Settings(paired_repeats=0).paired_repeats == 0


def test_invalid_measurements_are_kept_never_used_and_fail_in_optuna(settings: Settings) -> None:
    store = TrialStore(settings.db_url)
    spec = _spec(name="inv", n=10, sampler="random", paired_repeats=3,
                 workload=Workload("scripted", "gated", {"invalid_above_x": 0.55}))
    result = StudyDriver(store, settings).run(spec)
    invalid = [t for t in result.trials if t.status == TrialStatus.INVALID]
    assert invalid, "the random search should sample some x above 0.55"
    ostudy = optuna.load_study(study_name="inv", storage=optuna_storage(settings.db_url))
    frozen = {t.number: t for t in ostudy.trials}
    for t in invalid:
        assert t.details["validity"] == "client_bound" and float(t.config["x"]) > 0.55
        assert t.metrics == pytest.approx(response(t.config))  # figures kept (provenance)
        assert len(store.margins(t.id or 0)) == 2 and t.feasible is False
        assert frozen[t.number].state == TrialState.FAIL
    assert all(float(t.config["x"]) <= 0.55 for t in result.trials
               if t.status == TrialStatus.COMPLETE)
    assert result.best is not None and result.best.status == TrialStatus.COMPLETE
    # Invalid trials count against the budget like failed ones.
    assert len([t for t in result.trials if not str(t.details.get("role", "")).startswith(
        "paired-")]) == 10

"""The one bridge to Optuna, the one stored settings document and the one recovery: a trial is
told in one encoding whichever path ran it, a study's settings read back as they were written —
also from a store an earlier release created — and a dead process's trials are closed."""

from __future__ import annotations

import optuna
import pytest
from sqlalchemy import inspect, text

from advisor import recovery
from advisor.driver import StudyDriver, StudySpec, optuna_storage
from advisor.objective import Objective
from advisor.optuna_bridge import DASHBOARD_CONSTRAINTS_KEY, OptunaBridge
from advisor.samplers import SAMPLER_FACTORIES, SAMPLERS, make_sampler, sampler_names
from advisor.settings import Settings
from advisor.study_spec import StoredStudy
from knowledge import StudyRecord, TrialRecord, TrialStatus, TrialStore
from knowledge.models import StudyStatus
from knowledge.queries import best_feasible
from objectives import parse_slo
from tests.scripted_target import ScriptedTarget

SLO = "p95_latency_ms<=1,recall_at_10>=0.8"


def _spec(name: str, n: int, **kw: object) -> StudySpec:
    fields: dict[str, object] = dict(
        name=name, target="scripted", slo=parse_slo(SLO),
        objective=Objective.parse("maximize:qps"),
        workload=ScriptedTarget().default_workload(), n_trials=n, seed=0, paired_repeats=0)
    fields.update(kw)
    return StudySpec(**fields)  # type: ignore[arg-type]


# samplers ---------------------------------------------------------------------------------------


def test_the_sampler_names_are_the_registry_s_and_each_builds_its_sampler() -> None:
    assert SAMPLERS == sampler_names() == tuple(SAMPLER_FACTORIES) == ("tpe", "gp", "random")
    kinds = {"tpe": optuna.samplers.TPESampler, "gp": optuna.samplers.GPSampler,
             "random": optuna.samplers.RandomSampler}
    for name in SAMPLERS:
        assert isinstance(make_sampler(name, 0), kinds[name])
    with pytest.raises(ValueError, match="unknown sampler 'cma'"):
        make_sampler("cma", 0)


# the settings document --------------------------------------------------------------------------


def test_a_study_s_settings_document_reads_back_as_written(settings: Settings) -> None:
    store = TrialStore(settings.db_url)
    StudyDriver(store, settings).run(_spec("doc", 1, fixed={"x": 0.6}, startup_trials=3,
                                           failure_threshold=0.9))
    study = store.get_study("doc")
    assert study is not None and study.spec is not None
    stored = StoredStudy.of(study)
    assert StoredStudy.from_document(stored.to_document()) == stored
    assert dict(stored.spec.fixed) == {"x": 0.6} and stored.spec.startup_trials == 3
    assert stored.spec.failure_threshold == 0.9 and stored.spec.n_trials == study.n_trials
    resumed = stored.resume_spec(4)
    # Its paired repeats are the ones resolved when it started (ADVISOR_PAIRED_REPEATS=0 here).
    assert resumed.n_trials == 4 and resumed.paired_repeats == 0 and not resumed.enqueued


def _as_an_earlier_release_left_it(db_url: str) -> None:
    """The study's settings scattered again (no document), in a store without the column."""
    store = TrialStore(db_url)
    with store.engine.begin() as conn:
        conn.execute(text("ALTER TABLE advisor_study DROP COLUMN spec"))
    store.close()


def test_a_study_an_earlier_release_created_resumes_with_its_settings(db_url: str,
                                                                      settings: Settings) -> None:
    settings = settings.model_copy(update={"db_url": db_url})
    store = TrialStore(db_url)
    StudyDriver(store, settings).run(_spec("old", 2, fixed={"x": 0.6}, startup_trials=2,
                                           failure_gate=False))
    written = store.get_study("old")
    assert written is not None and written.spec is not None
    store.close()
    _as_an_earlier_release_left_it(db_url)

    reopened = TrialStore(db_url)
    assert "spec" in {c["name"] for c in inspect(reopened.engine).get_columns("advisor_study")}
    legacy = reopened.get_study("old")
    assert legacy is not None and legacy.spec is None
    result = StudyDriver(reopened, settings).resume("old", 3)
    assert result.count(TrialStatus.COMPLETE) + result.count(TrialStatus.FAILED) == 3
    adopted = reopened.get_study("old")
    assert adopted is not None and adopted.spec is not None
    for key in ("fixed", "startup_trials", "swept", "failure_gate", "sampler", "seed", "slo",
                "objective", "workload", "co_measured", "measured_with"):
        assert adopted.spec[key] == written.spec[key], key
    assert adopted.spec["n_trials"] == adopted.n_trials == 3
    assert all(t.config["x"] == 0.6 for t in result.trials)
    ostudy = optuna.load_study(study_name="old", storage=optuna_storage(db_url))
    assert ostudy.user_attrs["advisor_startup_trials"] == 2
    reopened.close()


# telling Optuna ---------------------------------------------------------------------------------


def _trial(status: str, value: float | None, feasible: bool | None, number: int = 0, *,
           study_id: int = 1, pid: int | None = None) -> TrialRecord:
    return TrialRecord(study_id=study_id, number=number, pid=pid, target="scripted", config={},
                       config_hash="c", workload_spec={}, workload_hash="w", hardware={},
                       hardware_key="h", advisor_version="t", status=status, objective_value=value,
                       feasible=feasible, metrics={"p95_latency_ms": 0.5, "recall_at_10": 0.9})


def test_a_told_trial_carries_one_constraint_list_and_no_named_constraints(
        settings: Settings) -> None:
    bridge = OptunaBridge(settings.db_url)
    ostudy = optuna.create_study(study_name="tell", storage=bridge.storage,
                                 direction="maximize")
    ok, failed, unstored = ostudy.ask(), ostudy.ask(), ostudy.ask()
    slo = parse_slo(SLO)
    bridge.tell_stored(ostudy, ok._trial_id, ok.number, slo,
                       _trial(TrialStatus.COMPLETE, 7.0, True))
    bridge.tell_stored(ostudy, failed._trial_id, failed.number, slo,
                       _trial(TrialStatus.INVALID, 7.0, False))
    bridge.tell_stored(ostudy, unstored._trial_id, unstored.number, slo, None)
    frozen = {t.number: t for t in ostudy.get_trials()}
    assert frozen[ok.number].state == optuna.trial.TrialState.COMPLETE
    assert frozen[ok.number].value == 7.0
    assert frozen[ok.number].system_attrs[DASHBOARD_CONSTRAINTS_KEY] == pytest.approx(
        list(slo.margins({"p95_latency_ms": 0.5, "recall_at_10": 0.9}).values()))
    assert not [k for k in frozen[ok.number].system_attrs if k.startswith("constraints:")]
    assert frozen[ok.number].user_attrs["slo_met"] is True
    assert frozen[failed.number].state == frozen[unstored.number].state == \
        optuna.trial.TrialState.FAIL


def test_the_best_feasible_trial_is_the_first_best_of_the_complete_feasible_ones() -> None:
    trials = [_trial(TrialStatus.COMPLETE, 5.0, False, 0),
              _trial(TrialStatus.COMPLETE, 3.0, True, 1),
              _trial(TrialStatus.INVALID, 9.0, False, 2),
              _trial(TrialStatus.COMPLETE, 3.0, True, 3),
              _trial(TrialStatus.FAILED, None, None, 4),
              _trial(TrialStatus.COMPLETE, 1.0, True, 5)]
    best = best_feasible(trials, "maximize")
    assert best is not None and best.number == 1
    lowest = best_feasible(trials, "minimize")
    assert lowest is not None and lowest.number == 5
    assert best_feasible(trials, "maximize", exclude=lambda t: t.number == 1) is trials[3]
    assert best_feasible(trials[:1], "maximize") is None
    with pytest.raises(ValueError, match="direction"):
        best_feasible(trials, "max")


# recovery ---------------------------------------------------------------------------------------


def test_leaving_a_study_consistent_closes_only_the_owned_trials(store: TrialStore) -> None:
    study = store.create_study(StudyRecord(
        name="left", target="scripted", slo=SLO, objective_metric="qps",
        objective_direction="maximize", workload_spec={}, workload_hash="w", sampler="tpe",
        n_trials=2, hardware_key="h", advisor_version="t"))
    mine = store.start_trial(_trial(TrialStatus.RUNNING, None, None, 0, study_id=study.id or 0,
                                    pid=1))
    other = store.start_trial(_trial(TrialStatus.RUNNING, None, None, 1, study_id=study.id or 0,
                                     pid=2))
    recovery.leave_consistent(store, "left", owned=lambda t: t.pid == 1, reason="gone",
                              only_when_idle=True)
    closed = store.get_trial(mine.id or 0)
    assert closed is not None and closed.status == TrialStatus.INTERRUPTED
    assert closed.error_type == "interrupted" and closed.error == "gone"
    still = store.get_trial(other.id or 0)
    assert still is not None and still.status == TrialStatus.RUNNING
    current = store.get_study("left")
    assert current is not None and current.status == StudyStatus.RUNNING  # one still runs
    recovery.leave_consistent(store, "left", owned=lambda t: False, reason="-",
                              only_when_idle=False)
    current = store.get_study("left")
    assert current is not None and current.status == StudyStatus.INTERRUPTED

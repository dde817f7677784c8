"""Two-level search in the driver: the sampler picks the knobs a target does not sweep, the
target sweeps the rest within the trial, and every swept setting is a trial of its own — in the
store (``swept_from``, outside the budget) and in Optuna (so the sampler sees the front)."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

from advisor.driver import StudyDriver, StudySpec, optuna_storage
from advisor.objective import Objective
from advisor.settings import Settings
from knowledge import TrialStatus, TrialStore
from objectives import parse_slo
from tests.e2e.sweep_helpers import assert_consistent
from tests.scripted_target import SweepingScriptedTarget, response

SLO = "p95_latency_ms<=1,recall_at_10>=0.8"


def _spec(name: str, n: int, **kw: object) -> StudySpec:
    fields: dict[str, object] = dict(
        name=name, target="scripted-sweep", slo=parse_slo(SLO),
        objective=Objective.parse("maximize:qps"),
        workload=SweepingScriptedTarget().default_workload(), n_trials=n, seed=0,
        search_sweep=True)
    fields.update(kw)
    return StudySpec(**fields)  # type: ignore[arg-type]


def _best_feasible_y(config: dict[str, object], ys: list[int]) -> int | None:
    slo = parse_slo(SLO)
    met = [y for y in ys if slo.is_met(response({**config, "y": y}))]
    return max(met, key=lambda y: response({**config, "y": y})["qps"]) if met else None


def test_each_trial_sweeps_and_every_setting_is_stored_once(settings: Settings) -> None:
    store = TrialStore(settings.db_url)
    result = StudyDriver(store, settings).run(_spec("sw", 4))
    study = result.study
    trials = store.trials_of_study(study.id or 0)
    sampled = [t for t in trials if t.swept_from is None]
    swept = [t for t in trials if t.swept_from is not None]
    assert len(sampled) == 4 and store.count_trials(study.id or 0, TrialStatus.FINISHED) == 4
    assert len({t.number for t in trials}) == len(trials)
    assert_consistent(store, study.name, 4)
    by_number = {t.number: t for t in trials}
    ostudy = optuna.load_study(study_name="sw", storage=optuna_storage(settings.db_url))
    frozen = {t.number: t for t in ostudy.trials}
    assert set(frozen) == set(by_number)  # every setting is an Optuna trial too
    measured = [t for t in sampled if t.status == TrialStatus.COMPLETE]
    assert len(measured) >= 2
    for parent in measured:  # a failed trial (the scripted hang, crash) sweeps nothing
        children = [t for t in swept if t.swept_from == parent.number]
        ys = sorted(int(t.config["y"]) for t in [parent, *children])
        assert ys == [1, 2, 4, 8, 16]  # the ladder up to the first saturated setting
        record = parent.details["search_sweep"]
        assert record["swept"] == ["y"] and record["measured"] == 5 and record["pruned"] == 2
        assert frozen[parent.number].params["y"] == parent.config["y"]
        assert parent.metrics == response(parent.config)
        if parent.details.get("role") == "engine-default":
            assert parent.config == SweepingScriptedTarget().space().default_config()
        else:  # a sampled trial keeps its best setting under the SLO
            base = {k: v for k, v in parent.config.items() if k != "y"}
            best = _best_feasible_y(base, ys)
            if best is not None:
                assert parent.config["y"] == best and parent.feasible
        for child in children:
            assert child.details["search_sweep"]["trial"] == parent.number
            assert "role" not in child.details
            assert child.metrics == response(child.config)
            assert frozen[child.number].state == TrialState.COMPLETE
            assert frozen[child.number].user_attrs["advisor_swept_from"] == parent.number
            assert frozen[child.number].value == child.objective_value
            assert frozen[child.number].user_attrs["slo_met"] == child.feasible
    assert result.best is not None
    assert result.best.objective_value == max(t.objective_value for t in trials if t.feasible)


def test_resume_keeps_sweeping_and_the_budget_counts_sampled_trials(settings: Settings) -> None:
    store = TrialStore(settings.db_url)
    driver = StudyDriver(store, settings)
    driver.run(_spec("r", 2))
    driver.resume("r", 3)
    study = store.get_study("r")
    assert study is not None
    trials = store.trials_of_study(study.id or 0)
    assert sum(t.swept_from is None for t in trials) == 3
    assert all(t.details.get("search_sweep") for t in trials if t.status == TrialStatus.COMPLETE)


def test_paired_repeats_measure_their_config_without_sweeping(settings: Settings) -> None:
    store = TrialStore(settings.db_url)
    StudyDriver(store, settings).run(_spec("p", 3, paired_repeats=3))
    study = store.get_study("p")
    assert study is not None
    trials = store.trials_of_study(study.id or 0)
    repeats = [t for t in trials if str(t.details.get("role", "")).startswith("paired-")]
    assert len(repeats) == 6
    assert all("search_sweep" not in t.details for t in repeats)
    assert not [t for t in trials if t.swept_from in {r.number for r in repeats}]


def test_turned_off_every_knob_is_sampled(settings: Settings) -> None:
    store = TrialStore(settings.db_url)
    StudyDriver(store, settings).run(_spec("off", 4, search_sweep=False))
    study = store.get_study("off")
    assert study is not None
    trials = store.trials_of_study(study.id or 0)
    assert len(trials) == 4 and all(t.swept_from is None for t in trials)
    assert all("search_sweep" not in t.details for t in trials)


def test_workers_sharing_a_study_sweep_without_overshooting(settings: Settings) -> None:
    store = TrialStore(settings.db_url)
    driver = StudyDriver(store, settings)
    driver.create(_spec("j", 3))
    first = driver.join("j", worker=0)
    assert first.trials_run == 3
    assert driver.join("j", worker=1).trials_run == 0  # the budget is taken
    assert_consistent(store, "j", 3)


def test_a_failed_sweep_is_one_failed_trial(settings: Settings) -> None:
    store = TrialStore(settings.db_url)
    spec = _spec("f", 2, workload=SweepingScriptedTarget().default_workload().__class__(
        "scripted", "fails", {"fail_sweep": True}))
    StudyDriver(store, settings).run(spec)
    study = store.get_study("f")
    assert study is not None
    trials = store.trials_of_study(study.id or 0)
    assert len(trials) == 2 and all(t.status == TrialStatus.FAILED for t in trials)
    assert all("scripted sweep failure" in (t.error or "") for t in trials)

"""Co-measured studies: every config of a study is also measured under other workloads in the
same trial process and recorded as a trial of their own studies, failures included, resumable
only through the study that samples."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from advisor.driver import CoMeasured, StudyDriver, StudySpec, optuna_storage
from advisor.errors import StudyError
from advisor.objective import Objective
from advisor.settings import Settings
from knowledge import TrialStatus, TrialStore
from objectives import parse_slo
from objectives.workload import Workload
from tests.scripted_target import response

SLO = "p95_latency_ms<=1,recall_at_10>=0.8"


def _spec(name: str, n: int, *co: tuple[str, dict[str, object]], **kw: object) -> StudySpec:
    return StudySpec(
        name=name, target="scripted", slo=parse_slo(SLO), objective=Objective.parse("maximize:qps"),
        workload=Workload("scripted", "base", {"delay_s": 0.0}), n_trials=n, seed=0,
        co_measured=tuple(CoMeasured(co_name, Workload("scripted", co_name, params))
                          for co_name, params in co), **kw)  # type: ignore[arg-type]


def test_every_config_is_recorded_in_each_co_measured_study(settings: Settings) -> None:
    store = TrialStore(settings.db_url)
    result = StudyDriver(store, settings).run(
        _spec("lead", 6, ("lead@2x", {"qps_scale": 2.0}), ("lead@half", {"qps_scale": 0.5})))
    assert [c.study.name for c in result.co_measured] == ["lead@2x", "lead@half"]
    assert result.study.data_provenance["co_measured_studies"] == ["lead@2x", "lead@half"]
    lead = {t.number: t for t in result.trials}
    slo = parse_slo(SLO)
    for co, scale in zip(result.co_measured, (2.0, 0.5), strict=True):
        assert co.study.data_provenance["co_measured_with"] == "lead"
        assert co.study.status == "finished" and co.study.workload_spec["name"] == co.study.name
        assert len(co.trials) == 6
        ostudy = optuna.load_study(study_name=co.study.name,
                                   storage=optuna_storage(settings.db_url))
        frozen = {t.number: t for t in ostudy.trials}
        for t in co.trials:
            origin = lead[t.details["co_measured_with"]["trial"]]
            assert t.config == origin.config and t.config_hash == origin.config_hash
            assert t.workload_hash != origin.workload_hash
            # Where the sampler lands is not this test's concern: a config the scripted engine
            # rejects fails in every study, and one it measures is complete in every study.
            assert t.status == origin.status
            if t.status != TrialStatus.COMPLETE:
                assert frozen[t.number].state == TrialState.FAIL
                continue
            assert t.metrics["qps"] == pytest.approx(response(t.config)["qps"] * scale)
            assert t.feasible == slo.is_met(t.metrics)
            assert frozen[t.number].state == TrialState.COMPLETE
            named = dict(zip(ostudy.user_attrs["slo_constraints"],
                             frozen[t.number].constraints.values(), strict=True))
            assert named == pytest.approx(slo.margins(t.metrics))
            assert frozen[t.number].value == pytest.approx(t.metrics["qps"])
        assert co.trials[0].details["role"] == "engine-default"
        assert sum(t.status == TrialStatus.COMPLETE for t in co.trials) >= 4


def test_a_failed_trial_fails_its_co_measured_trials_too(settings: Settings) -> None:
    store = TrialStore(settings.db_url)
    ostudy = optuna.create_study(study_name="rej", storage=optuna_storage(settings.db_url),
                                 direction="maximize")
    ostudy.enqueue_trial({"x": 0.01, "y": 8, "mode": "a"})  # the engine rejects it
    result = StudyDriver(store, settings).run(
        _spec("rej", 2, ("rej@2x", {"qps_scale": 2.0}), include_default=False))
    co = result.co_measured[0].trials
    assert result.trials[0].status == TrialStatus.FAILED
    assert co[0].status == TrialStatus.FAILED and co[0].error_type == "rejected"
    assert "not measured: the trial failed" in (co[0].error or "")
    assert "below the engine's minimum" in (co[0].error or "")
    assert co[1].status == TrialStatus.COMPLETE


def test_a_failing_co_measured_workload_fails_alone(settings: Settings) -> None:
    store = TrialStore(settings.db_url)
    result = StudyDriver(store, settings).run(_spec("alone", 2, ("alone@bad", {"fail": True})))
    assert all(t.status == TrialStatus.COMPLETE for t in result.trials)
    bad = result.co_measured[0].trials
    assert [t.status for t in bad] == [TrialStatus.FAILED] * 2
    assert all("scripted failure" in (t.error or "") for t in bad)


def test_resume_goes_on_with_both_and_refuses_the_recording_study(settings: Settings) -> None:
    store = TrialStore(settings.db_url)
    StudyDriver(store, settings).run(_spec("res", 2, ("res@2x", {"qps_scale": 2.0})))
    result = StudyDriver(store, settings).resume("res", n_trials=4)
    assert len(result.trials) == 4
    co = result.co_measured[0]
    assert len(co.trials) == 4 and co.study.n_trials == 4
    assert [t.details["co_measured_with"]["trial"] for t in co.trials] == [0, 1, 2, 3]
    with pytest.raises(StudyError, match="measured alongside study 'res'"):
        StudyDriver(store, settings).resume("res@2x")


def test_names_must_be_new_and_distinct(settings: Settings) -> None:
    store = TrialStore(settings.db_url)
    with pytest.raises(StudyError, match="names of their own"):
        _spec("same", 1, ("same", {}))
    StudyDriver(store, settings).run(_spec("taken", 1))
    with pytest.raises(StudyError, match="'taken' already exists"):
        StudyDriver(store, settings).run(_spec("new", 1, ("taken", {})))
    assert store.get_study("new") is None  # nothing half-created


def test_a_co_measured_workload_left_unmeasured_records_no_trial(settings: Settings) -> None:
    # The target leaves the companion unmeasured on purpose (a serving target does once a lower
    # rate missed the SLO on the same engine start): no trial of it, failed or measured.
    store = TrialStore(settings.db_url)
    why = "not measured: ttft_p95_ms missed the SLO at 5 req/s on the same engine start"
    result = StudyDriver(store, settings).run(
        _spec("lean", 3, ("lean@2x", {"not_measured": why}), ("lean@half", {"qps_scale": 0.5})))
    assert len(result.trials) == 3
    skipped, kept = result.co_measured
    assert skipped.trials == [] and skipped.study.status == "finished"
    assert [t.status for t in kept.trials] == [t.status for t in result.trials]


def test_trials_see_the_studys_slo_and_paired_repeats_do_not(settings: Settings) -> None:
    store = TrialStore(settings.db_url)
    spec = StudySpec(
        name="seen", target="scripted", slo=parse_slo(SLO),
        objective=Objective.parse("maximize:qps"),
        workload=Workload("scripted", "base", {"delay_s": 0.0, "report_slo": True}), n_trials=4,
        seed=0, sampler="random", paired_repeats=3)
    result = StudyDriver(store, settings).run(spec)
    measured = [t for t in result.trials if t.status == TrialStatus.COMPLETE]
    search = [t for t in measured if not str(t.details.get("role", "")).startswith("paired-")]
    repeats = [t for t in measured if str(t.details.get("role", "")).startswith("paired-")]
    assert search and all(t.details["trial_slo"] == str(parse_slo(SLO)) for t in search)
    assert repeats and all(t.details["trial_slo"] is None for t in repeats)

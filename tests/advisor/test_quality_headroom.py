"""Quality headroom: the paired re-measurements build afresh where a target's quality depends on
the build, and both recommenders keep the largest build-to-build spread measured as a margin on
the SLO's quality bounds — and say when no rebuild was measured."""

from __future__ import annotations

import pytest

from advisor.answers.headroom import FRESH_BUILD, Headroom, margins_with_headroom, measured_headroom
from advisor.answers.model_based import RecommendationQuery, recommend, recommend_measured
from advisor.driver import StudyDriver, StudySpec
from advisor.objective import Objective
from advisor.settings import Settings
from knowledge import TrialRecord, TrialStatus, TrialStore
from objectives import parse_slo
from objectives.workload import Workload
from tests.advisor.defaults_store import HARDWARE, new_study, write_trial
from tests.scripted_target import REBUILD_DROP, response

SLO = "p95_latency_ms<=1,recall_at_10>=0.8"
QPS = Objective.parse("maximize:qps")


def _trial(config_hash: str, recall: float, *, fresh: bool = False,
           status: str = TrialStatus.COMPLETE) -> TrialRecord:
    return TrialRecord(study_id=1, number=0, target="t", config={}, config_hash=config_hash,
                       workload_spec={}, workload_hash="w", hardware={}, hardware_key="h",
                       engine_versions={}, advisor_version="test", status=status,
                       metrics={"recall_at_10": recall},
                       details={FRESH_BUILD: True} if fresh else {})


def test_headroom_is_the_largest_spread_between_builds_of_one_config() -> None:
    trials = [
        # config a: one cached build measured twice (one build) and two fresh builds
        _trial("a", 0.95), _trial("a", 0.95), _trial("a", 0.94, fresh=True),
        _trial("a", 0.96, fresh=True),
        # config b: cached repeats only: one build, not a rebuild check
        _trial("b", 0.90), _trial("b", 0.90),
        # config c: a fresh build beside the cached one, and a failed trial that never counts
        _trial("c", 0.80), _trial("c", 0.795, fresh=True),
        _trial("c", 0.10, fresh=True, status=TrialStatus.FAILED),
    ]
    (h,) = measured_headroom(trials, ["recall_at_10"]).values()
    assert h == Headroom("recall_at_10", pytest.approx(0.02), configs_checked=2, builds=5)
    assert h.measured and "2 rebuilt config(s), 5 builds" in h.basis


def test_without_rebuilds_the_headroom_is_zero_and_says_it_was_not_measured() -> None:
    (h,) = measured_headroom([_trial("b", 0.9), _trial("b", 0.9)], ["recall_at_10"]).values()
    assert h.value == 0.0 and not h.measured
    assert h.basis.startswith("not measured")
    assert h.to_dict()["measured"] is False


def test_headroom_moves_each_bound_to_its_worse_side() -> None:
    slo = parse_slo("recall_at_10>=0.9,p95_latency_ms<=1")
    headroom = {"recall_at_10": Headroom("recall_at_10", 0.02, 1, 2)}
    margins = margins_with_headroom(slo, {"recall_at_10": 0.91, "p95_latency_ms": 0.5}, headroom)
    # Margins are relative to the bound: 0.91 - 0.02 misses 0.9 by 0.01 / 0.9.
    assert margins["recall_at_10>=0.9"] == pytest.approx(0.01 / 0.9)
    assert margins["p95_latency_ms<=1"] == pytest.approx(-0.5)  # no headroom on latency
    upper = parse_slo("recall_at_10<=0.95")
    assert margins_with_headroom(upper, {"recall_at_10": 0.94}, headroom)[
        "recall_at_10<=0.95"] == pytest.approx(0.01 / 0.95)


def _study(settings: Settings, target: str) -> list[TrialRecord]:
    spec = StudySpec(name=f"h-{target}", target=target, slo=parse_slo(SLO), objective=QPS,
                     workload=Workload("scripted", "base", {"delay_s": 0.0}), n_trials=6, seed=0,
                     paired_repeats=3)
    return StudyDriver(TrialStore(settings.db_url), settings).run(spec).trials


def test_paired_repeats_build_afresh_where_quality_depends_on_the_build(
        settings: Settings) -> None:
    trials = _study(settings, "scripted-rebuild")
    paired = [t for t in trials if str(t.details.get("role", "")).startswith("paired-")]
    assert len(paired) == 6
    for t in trials:
        expected = response(t.config)["recall_at_10"]
        if t in paired:
            assert t.details[FRESH_BUILD] is True
            assert t.metrics["recall_at_10"] == pytest.approx(expected - REBUILD_DROP)
        else:
            assert FRESH_BUILD not in t.details
            if t.status == TrialStatus.COMPLETE:
                assert t.metrics["recall_at_10"] == pytest.approx(expected)
    store = TrialStore(settings.db_url)
    answer = recommend_measured(store, target="scripted-rebuild", slo=parse_slo(SLO),
                                objective=QPS)
    h = answer.quality_headroom["recall_at_10"]
    assert h.value == pytest.approx(REBUILD_DROP) and h.configs_checked == 2
    assert h.builds == 8  # best and default: the cached build and 3 fresh ones each
    assert answer.to_dict()["quality_headroom"]["recall_at_10"]["headroom"] == h.value
    # A trial meets the SLO only with the rebuild spread to spare on its recall.
    slo = parse_slo(SLO)
    spare = [t for t in trials if t.status == TrialStatus.COMPLETE and slo.is_met(
        {**t.metrics, "recall_at_10": t.metrics["recall_at_10"] - h.value})]
    assert answer.feasible_count == len(spare)
    assert answer.feasible_count < sum(bool(t.feasible) for t in trials)
    if answer.trial is not None:
        assert answer.trial.metrics["recall_at_10"] - REBUILD_DROP >= 0.8


def test_a_target_whose_quality_is_fixed_by_the_config_never_rebuilds(
        settings: Settings) -> None:
    trials = _study(settings, "scripted")
    assert any(str(t.details.get("role", "")).startswith("paired-") for t in trials)
    assert all(FRESH_BUILD not in t.details for t in trials)
    answer = recommend_measured(TrialStore(settings.db_url), target="scripted",
                                slo=parse_slo(SLO), objective=QPS)
    assert answer.quality_headroom == {} and answer.found


def _rebuilt_store(store: TrialStore) -> None:
    """Configs whose recall sits 0.01-0.04 above the bound 0.9; one of them rebuilt, 0.02
    apart: only configs with >= 0.02 to spare meet the SLO with the headroom."""
    study = new_study(store, "rebuilt", target="scripted-rebuild")
    rows = [({"x": 0.7, "y": 8, "mode": "a"}, 0.91, 900.0),   # fastest, 0.01 to spare
            ({"x": 0.6, "y": 8, "mode": "a"}, 0.93, 700.0),   # 0.03 to spare
            ({"x": 0.5, "y": 8, "mode": "a"}, 0.94, 500.0)]
    number = 0
    for config, recall, qps in rows:
        write_trial(store, study, number, config,
                    {"qps": qps, "p95_latency_ms": 0.5, "recall_at_10": recall})
        number += 1
    config, recall, _ = rows[2]
    for drop in (0.0, 0.02, 0.01):
        write_trial(store, study, number, config,
                    {"qps": 500.0, "p95_latency_ms": 0.5, "recall_at_10": recall - drop},
                    details={FRESH_BUILD: True})
        number += 1


def test_the_measured_answer_keeps_the_headroom_on_the_recall_bound(store: TrialStore) -> None:
    _rebuilt_store(store)
    slo = parse_slo("recall_at_10>=0.9,p95_latency_ms<=1")
    answer = recommend_measured(store, target="scripted-rebuild", slo=slo, objective=QPS,
                                hardware_key=HARDWARE)
    assert answer.quality_headroom["recall_at_10"].value == pytest.approx(0.02)
    assert answer.trial is not None and answer.trial.config["x"] == 0.6  # not the 0.91 one
    assert answer.margins["recall_at_10>=0.9"] == pytest.approx(-0.01 / 0.9)


def test_the_model_answer_reports_the_headroom_of_its_context(store: TrialStore) -> None:
    _rebuilt_store(store)
    answer = recommend(store, RecommendationQuery(
        target="scripted-rebuild", slo="recall_at_10>=0.9,p95_latency_ms<=1",
        hardware=HARDWARE, workload={"n_vectors": 2000}))
    assert answer.status != "not_covered", answer.confidence_reason
    h = answer.quality_headroom["recall_at_10"]
    assert h.value == pytest.approx(0.02) and h.configs_checked == 1
    assert answer.to_dict()["quality_headroom"]["recall_at_10"]["measured"] is True

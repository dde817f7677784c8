"""A study on a GPU known only from a calibration profile starts from the calibrated answer
(issue 44, item 5: "warm-started from the calibrated predictions"): the warm start asks the one
planner every door asks, so the config it queues is the config `advisor recommend` names for
the same question, or, where that answer is `undecided`, the candidate it says to measure."""

from __future__ import annotations

import pytest

from advisor.answers import RecommendationRequest, plan_recommendation
from advisor.driver import StudySpec
from advisor.objective import Objective
from advisor.settings import Settings
from advisor.warm_start import study_warm_start
from knowledge import TrialStore
from knowledge.transfer import import_file, shipped_file
from objectives import parse_slo
from objectives.registry import get_target

H100 = "1x-nvidia-h100-80gb-hbm3"
SLO = "ttft_p95_ms<=300,tpot_p95_ms<=40"


def _store(url: str, *files: str) -> TrialStore:
    store = TrialStore(url)
    for name in files:
        import_file(store, shipped_file(name))
    return store


def _spec(rate: float) -> StudySpec:
    chat = get_target("vllm").named_workloads()["chat"]
    workload = chat.with_params(model="llama-3-8b",
                                arrival={"process": "poisson", "rate_rps": rate},
                                n_requests=int(rate * 8))
    return StudySpec(name="h100-study", target="vllm", slo=parse_slo(SLO),
                     objective=Objective.parse("maximize:output_tokens_per_s"),
                     workload=workload, n_trials=12, seed=0)


def _planned(store: TrialStore, rate: float) -> dict[str, object] | None:
    answer = plan_recommendation(store, RecommendationRequest(
        target="vllm", slo=SLO, hardware=H100, model="llama-3-8b",
        workload={"class": "chat", "rate_rps": rate}))
    assert answer.basis == "calibration"
    if answer.found:
        return answer.config
    assert answer.status == "undecided" and answer.closest is not None
    return dict(answer.closest["config"])


def test_a_calibrated_gpu_queues_the_config_the_planner_would_measure(
        tmp_path_factory: pytest.TempPathFactory, settings: Settings) -> None:
    # The profile and its probe windows: the defaults missed at 64 req/s and met at 52, so at
    # 60 req/s the planner is undecided and names a batch-limit variant to measure.
    url = f"sqlite:///{tmp_path_factory.mktemp('warm-h100') / 'h100.db'}"
    store = _store(url, "h100-vllm-profile-2026-12-06.jsonl",
                   "h100-vllm-heldout-2026-12-06.jsonl")
    queued = study_warm_start(store, settings, _spec(60), hardware_key=H100)
    calibrated = [w for w in queued if w.source == "calibration"]
    planned = _planned(store, 60)
    space = get_target("vllm").space()
    assert planned is not None
    assert [w.config for w in calibrated] == [
        space.validate_config({**space.default_config(), **planned})]
    assert calibrated[0].config != space.default_config()


def test_where_the_planner_names_the_defaults_nothing_more_is_queued(
        tmp_path_factory: pytest.TempPathFactory, settings: Settings) -> None:
    # The profile alone (no window measured): the defaults straddle the SLO and lean to meeting,
    # so the candidate to measure is the defaults, which a study measures first anyway.
    url = f"sqlite:///{tmp_path_factory.mktemp('warm-h100') / 'h100.db'}"
    store = _store(url, "h100-vllm-profile-2026-12-06.jsonl")
    space = get_target("vllm").space()
    planned = _planned(store, 60)
    assert planned is not None
    assert space.validate_config({**space.default_config(), **planned}) == space.default_config()
    assert study_warm_start(store, settings, _spec(60), hardware_key=H100) == []


def test_no_profile_of_this_gpu_queues_nothing_from_the_planner(
        tmp_path_factory: pytest.TempPathFactory, settings: Settings) -> None:
    url = f"sqlite:///{tmp_path_factory.mktemp('warm-h100') / 'h100.db'}"
    store = _store(url, "h100-vllm-profile-2026-12-06.jsonl")
    queued = study_warm_start(store, settings, _spec(60), hardware_key="1x-nvidia-a100-80gb")
    assert [w.source for w in queued] == []

"""A study on a GPU known only from a calibration profile starts from the calibrated answer
(issue 44, item 5: "warm-started from the calibrated predictions"): the warm start asks the one
planner every door asks, so the config it queues is the config `advisor recommend` names for
the same question, or, where that answer is `undecided`, the first candidates it says to measure
(never an engine default the study measures anyway or was told not to), and the config the
planner recommends from the windows of the machine with the most trials of the model."""

from __future__ import annotations

import dataclasses

import pytest

from advisor.answers import Answer, RecommendationRequest, plan_recommendation
from advisor.driver import StudySpec
from advisor.objective import Objective
from advisor.settings import Settings
from advisor.warm_start import (
    UNDECIDED_QUEUED,
    StudyQuestion,
    most_measured_elsewhere,
    study_warm_start,
)
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


def _answer(store: TrialStore, rate: float, hardware: str = H100,
            measured: bool = False) -> Answer:
    return plan_recommendation(store, RecommendationRequest(
        target="vllm", slo=SLO, hardware=hardware, model="llama-3-8b", measured=measured,
        workload={"class": "chat", "rate_rps": rate}))


def _to_measure(store: TrialStore, rate: float) -> list[dict[str, object]]:
    """The candidates the calibrated answer would measure, most promising first, completed."""
    answer = _answer(store, rate)
    assert answer.basis == "calibration" and answer.status == "undecided"
    space = get_target("vllm").space()
    named = answer.details["calibration"]["to_measure"]
    assert named and named[0] == answer.closest["config"]
    return [space.validate_config({**space.default_config(), **c}) for c in named]


def test_a_calibrated_gpu_queues_the_candidates_the_planner_would_measure(
        tmp_path_factory: pytest.TempPathFactory, settings: Settings) -> None:
    # The profile and its probe windows: the defaults missed at 64 req/s and met at 52, so at
    # 60 req/s the planner is undecided and names the candidates to measure, in order.
    url = f"sqlite:///{tmp_path_factory.mktemp('warm-h100') / 'h100.db'}"
    store = _store(url, "h100-vllm-profile-2026-12-06.jsonl",
                   "h100-vllm-heldout-2026-12-06.jsonl")
    queued = study_warm_start(store, settings, _spec(60), hardware_key=H100)
    default = get_target("vllm").space().default_config()
    named = [c for c in _to_measure(store, 60) if c != default]
    assert len(named) >= UNDECIDED_QUEUED
    assert [w.config for w in queued if w.source == "calibration"] == named[:UNDECIDED_QUEUED]


def test_the_defaults_the_planner_names_are_measured_once(
        tmp_path_factory: pytest.TempPathFactory, settings: Settings) -> None:
    # The profile alone (no window measured): at 55 req/s, below the capacity the profile
    # predicts, the defaults straddle the SLO and lean to meeting, so they come first among the
    # candidates to measure. A study measures them first anyway: its warm start queues the
    # next ones. Without the default trial, the default is a candidate like any other.
    url = f"sqlite:///{tmp_path_factory.mktemp('warm-h100') / 'h100.db'}"
    store = _store(url, "h100-vllm-profile-2026-12-06.jsonl")
    default = get_target("vllm").space().default_config()
    named = _to_measure(store, 55)
    assert named[0] == default
    queued = study_warm_start(store, settings, _spec(55), hardware_key=H100)
    assert [w.config for w in queued] == named[1:1 + UNDECIDED_QUEUED]
    alone = study_warm_start(store, settings, dataclasses.replace(_spec(55),
                                                                  include_default=False),
                             hardware_key=H100)
    assert [w.config for w in alone] == named[:UNDECIDED_QUEUED]


def test_a_calibrated_gpu_also_tries_the_best_config_measured_elsewhere(
        tmp_path_factory: pytest.TempPathFactory, settings: Settings) -> None:
    # Beside the H100's calibration, the H200's measured knob ladder of the 8B: the warm start
    # adds the config the planner recommends from the H200's windows for the same question.
    url = f"sqlite:///{tmp_path_factory.mktemp('warm-h100') / 'h100.db'}"
    store = _store(url, "h100-vllm-profile-2026-12-06.jsonl",
                   "h200-vllm-knobs-2026-12-04.jsonl")
    question = StudyQuestion.of(_spec(60), H100)
    elsewhere = most_measured_elsewhere(store, question)
    assert elsewhere is not None and "h200" in elsewhere
    answer = _answer(store, 60, hardware=elsewhere, measured=True)
    assert answer.found and answer.config is not None
    space = get_target("vllm").space()
    expected = space.validate_config({**space.default_config(), **answer.config})
    assert expected != space.default_config()
    queued = study_warm_start(store, settings, _spec(60), hardware_key=H100)
    assert [w.config for w in queued if w.source == "elsewhere"] == [expected]
    # the calibrated answer is undecided there: the config measured elsewhere goes first
    assert _answer(store, 60).status == "undecided" and queued[0].source == "elsewhere"
    # "elsewhere" is never the asked machine: asked about the H200, no other machine measured
    # the 8B here (the H100 has a profile and no window)
    assert most_measured_elsewhere(store, StudyQuestion.of(_spec(60), elsewhere)) is None


def test_no_profile_of_this_gpu_queues_nothing_from_the_planner(
        tmp_path_factory: pytest.TempPathFactory, settings: Settings) -> None:
    url = f"sqlite:///{tmp_path_factory.mktemp('warm-h100') / 'h100.db'}"
    store = _store(url, "h100-vllm-profile-2026-12-06.jsonl")
    queued = study_warm_start(store, settings, _spec(60), hardware_key="1x-nvidia-a100-80gb")
    assert [w.source for w in queued] == []

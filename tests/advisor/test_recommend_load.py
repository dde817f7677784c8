"""The recommender on the shipped H200 vLLM knowledge, answered through the load curves: inside
the measured region a config with predicted metrics whose conservative bounds meet the SLO
(the engine default among the candidates); above every measured capacity, not covered with
the dimension named and a tune command."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.answers.model_based import ModelRecommendation, RecommendationQuery, recommend
from advisor.answers.rule import windows_needed
from knowledge import TrialStore
from knowledge.cache import KnowledgeModels

SLO = "ttft_p95_ms<=300,tpot_p95_ms<=40"
H200 = tuple[TrialStore, KnowledgeModels]


def _shipped() -> Path:
    from knowledge.transfer import shipped_file

    return shipped_file("h200-vllm-crosscheck-2026-12-01.jsonl")  # it ships: missing fails


@pytest.fixture(scope="module")
def h200(tmp_path_factory: pytest.TempPathFactory) -> H200:
    path = _shipped()
    from knowledge.transfer import import_file

    store = TrialStore(f"sqlite:///{tmp_path_factory.mktemp('h200') / 'k.db'}")
    import_file(store, path)
    return store, KnowledgeModels.fit(store, target="vllm", score=False)


def ask(h200: H200, model: str, rate: float) -> ModelRecommendation:
    store, models = h200
    return recommend(store, RecommendationQuery(
        target="vllm", slo=SLO, hardware="h200", model=model, workload={"rate_rps": rate}),
        models=models, drop_predicted_failures=False)


@pytest.mark.parametrize("model", ["llama-3-8b", "llama-3.2-1b"])
def test_inside_the_measured_region_a_config_is_recommended(h200: H200, model: str) -> None:
    rec = ask(h200, model, 50.0)
    assert rec.status == "recommended", rec.confidence_reason
    assert rec.config is not None
    # It meets the SLO by the one rule: its windows here where it has them, else the
    # conservative end of every interval (the end on the wrong side of its bound).
    assert rec.verdict is not None and rec.verdict.meets is True
    if rec.verdict.basis == "predicted":
        assert all(m <= 0 for m in rec.conservative_margins.values())
    else:
        assert rec.verdict.windows_met >= windows_needed(rec.verdict.windows)
    for metric, p in rec.predicted.items():
        assert p.low <= p.value <= p.high, metric
    assert any("load curve" in n for n in rec.notes)
    # Its accuracy is the curve's at held-out rates, not the surrogate's on held-out configs.
    ttft = rec.model_quality["ttft_p95_ms"]
    assert ttft["basis"].startswith("load curve") and 0 < ttft["mape"] < 1 and ttft["n"] > 0
    assert "held-out-rate MAPE" in rec.confidence_reason
    # The engine default was measured here and meets the SLO: it is the answer or was beaten
    # beyond the noise.
    assert rec.baseline is not None
    assert rec.default_verdict is not None and rec.default_verdict.meets is True


def test_above_every_capacity_is_not_covered_and_says_why(h200: H200) -> None:
    _, models = h200
    ctx = next(c for c in models.for_target("vllm") if c.key.model == "llama-3-8b")
    assert ctx.load_curves is not None
    seen = [c for c in ctx.load_curves.curves_.values() if c.seen]
    top = max(c.capacity for c in seen)
    highest = max(max(c.rates) for c in seen)
    assert highest > top  # the shipped 8B defaults were measured past their knee
    rec = ask(h200, "llama-3-8b", round(highest * 1.3))
    assert rec.status == "not_covered"
    assert "above the capacity of every measured config" in rec.confidence_reason
    assert rec.tune_command and '"rate_rps": ' in rec.tune_command
    # Just below the highest capacity the question is inside the region, and so is a rate
    # measured past it (the curves hold the backlog measured there; the SLO decides).
    assert ask(h200, "llama-3-8b", round(top * 0.9)).status != "not_covered"
    assert ask(h200, "llama-3-8b", highest).status != "not_covered"


def test_near_capacity_the_answer_warns_that_a_sustained_load_queues_longer(h200: H200) -> None:
    """Curves fitted on short measurement windows understate a sustained queue near capacity
    (measured: docs/knowledge.md, measurement windows); an answer there says so, one at light
    load does not."""
    store, models = h200
    ctx = next(c for c in models.for_target("vllm") if c.key.model == "llama-3-8b")
    assert ctx.load_curves is not None
    highest = max(max(c.rates) for c in ctx.load_curves.curves_.values() if c.seen)

    def notes(rate: float) -> list[str]:
        rec = recommend(store, RecommendationQuery(
            target="vllm", slo="tpot_p95_ms<=1000", hardware="h200", model="llama-3-8b",
            workload={"rate_rps": rate}), models=models, drop_predicted_failures=False)
        assert rec.status == "recommended", rec.confidence_reason
        return list(rec.notes)

    assert any("sustained for longer queues longer" in n for n in notes(highest))
    light = notes(15.0)
    assert any("load curve" in n for n in light)
    assert not any("sustained" in n for n in light)


def test_the_default_matches_its_trials_from_before_and_after_a_knob_was_added() -> None:
    """Trials measured before a knob existed lack it (they ran at its default); a later study
    records it. Both are the engine default; one that sets any knob off its default is not."""
    from types import SimpleNamespace
    from typing import Any, cast

    from advisor.answers.model_based import _default_as_measured

    default = {"a": 1, "b": 0.5, "c": "x", "added": 1}
    old = {"a": 1, "b": 0.5, "c": "x"}
    new = {"a": 1, "b": 0.5, "c": "x", "added": 1}
    other = {"a": 2, "b": 0.5, "c": "x", "added": 1}

    def ctx(*configs: dict[str, Any]) -> Any:
        return cast(Any, SimpleNamespace(configs=list(configs)))

    assert _default_as_measured(default, ctx(old, old, new, other)) == old  # most trials
    assert _default_as_measured(default, ctx(old, new, new)) == new
    assert _default_as_measured(default, ctx(other)) == default  # never measured
    assert _default_as_measured(default, ctx()) == default

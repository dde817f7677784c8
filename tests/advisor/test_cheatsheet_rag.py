"""The cheat-sheet for the rag target, from the shipped H200 RAG trials: RAG tiers, and each row
names the stage that dominates its latency budget with that budget's per-stage figures."""

from __future__ import annotations

import json

import pytest

from advisor.cheatsheet import build_cheatsheet
from knowledge import TrialStore
from knowledge.cache import KnowledgeModels
from knowledge.transfer import import_file, read_trials_text, shipped_file

SHIPPED = shipped_file("h200-rag-2026-11-30.jsonl")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> TrialStore:
    s = TrialStore(f"sqlite:///{tmp_path_factory.mktemp('rag-sheet') / 'k.db'}")
    import_file(s, SHIPPED)
    return s


def test_rag_rows_name_the_dominant_stage(store: TrialStore) -> None:
    # Unscored models: cross-validating ~40 metrics of 6 trials only slows the test.
    sheet = build_cheatsheet(store, target="rag",
                             models=KnowledgeModels.fit(store, target="rag", score=False))
    assert sheet.rows and {r.tier.name for r in sheet.rows} == {
        "interactive", "standard", "throughput"}
    trials = [json.loads(line)["trial"] for line in read_trials_text(SHIPPED).splitlines()]
    measured = [t for t in trials if t["status"] == "complete"]
    for row in sheet.rows:
        assert "recall_at_5" in row.tier.slo
        budget = row.stage_budget_ms
        assert set(budget) == {"embed", "retrieve", "prefill", "decode"}
        assert row.dominant_stage == max(budget, key=lambda s: budget[s])
        if row.answer.config is None:
            # No config met the tier: the budget is the measured mean over the trials.
            assert row.stage_budget_source.startswith("measured")
            mean_decode = sum(t["metrics"]["decode_mean_ms"] for t in measured) / len(measured)
            assert budget["decode"] == pytest.approx(mean_decode)
    # On this saturated H200 run decode took the largest share in every trial.
    assert {r.dominant_stage for r in sheet.rows} == {"decode"}
    markdown = sheet.to_markdown()
    assert "dominant stage: decode" in markdown
    assert "dominant stage: decode" in sheet.to_html()

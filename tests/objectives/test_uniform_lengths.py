"""A workload whose lengths are uniform (rag-long-prompt: prompts of 1,500-3,500 tokens) has
length features, so its windows are never read as another workload at the same rate (the
H100's rag-long-prompt window at 12.2 req/s once capped the chat capacity)."""

from __future__ import annotations

from knowledge.surrogates import workload_distance, workload_features
from objectives.kinds._values import median_of
from objectives.llm.workload import load_preset


def test_a_uniform_length_reads_as_its_midpoint() -> None:
    assert median_of({"dist": "uniform", "low": 1500, "high": 3500}) == 2500.0
    assert median_of({"dist": "uniform", "low": True, "high": 3}) is None
    assert median_of({"dist": "lognormal", "median": 256.0, "sigma": 0.8}) == 256.0


def test_rag_long_prompt_is_not_chat_at_the_same_rate() -> None:
    rag = workload_features(load_preset("rag-long-prompt").spec)
    chat = workload_features(load_preset("chat").spec)
    assert rag["prompt_len"] == 2500.0 and rag["output_len"] == 160.0
    shape = {k: v for k, v in rag.items() if k != "rate_rps"}
    other = {k: v for k, v in chat.items() if k != "rate_rps"}
    assert workload_distance(shape, other) > 1.0

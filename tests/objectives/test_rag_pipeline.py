"""The RAG pipeline's timing and prefetch logic against a scripted engine and retrieval: stages
sum to TTFT and E2E exactly, prefetch_ratio moves when the prefix is submitted, embedding batches
only what has arrived, and a dead engine fails the requests it strands."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import numpy as np
import pytest

from objectives.llm.metrics import per_request, summarize
from objectives.rag.pipeline import (
    EngineOutput,
    PipelineConfig,
    Query,
    QueuedOutputs,
    drive,
    stage_metrics,
    stage_times,
)


class FakeEngine(QueuedOutputs):
    """Streams ``output_len`` tokens per request, ``step_s`` apart, after ``prefill_s``; records
    every submission with its time."""

    def __init__(self, prefill_s: float = 0.01, step_s: float = 0.002, dead: bool = False) -> None:
        super().__init__()
        self.prefill_s, self.step_s, self.dead = prefill_s, step_s, dead
        self.submitted: list[tuple[str, float, int]] = []
        self.lock = threading.Lock()

    def submit(self, request_id: str, prompt_ids: Sequence[int], max_new_tokens: int,
               *, stream: bool) -> bool:
        with self.lock:
            self.submitted.append((request_id, time.perf_counter(), len(prompt_ids)))
        if self.dead:
            return True  # accepted, never answered

        def produce() -> None:
            time.sleep(self.prefill_s)
            for n in range(1, max_new_tokens + 1):
                if stream or n == max_new_tokens:
                    self.out.put(EngineOutput(request_id, n, n == max_new_tokens))
                time.sleep(self.step_s)

        threading.Thread(target=produce, daemon=True).start()
        return True

    def alive(self) -> bool:
        return not self.dead


class FakeRetrieval:
    def __init__(self, embed_s: float = 0.02) -> None:
        self.embed_s = embed_s
        self.batches: list[int] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.batches.append(len(texts))
        time.sleep(self.embed_s)
        return np.ones((len(texts), 4), dtype=np.float32)

    def search(self, vectors: np.ndarray) -> np.ndarray:
        return np.tile(np.arange(10), (vectors.shape[0], 1))

    def prompt(self, query: Query, ids: np.ndarray) -> list[int]:
        return [*query.prefix_ids, *[int(i) + 3 for i in ids[:2]]]


def _queries(n: int, gap_s: float = 0.03, out: int = 5) -> list[Query]:
    return [Query(i, i * gap_s, f"q{i}", (5, 6, 7), out) for i in range(n)]


def test_stages_sum_to_ttft_and_e2e_exactly() -> None:
    records = drive(FakeEngine(), _queries(6), FakeRetrieval(), PipelineConfig(1, 1.0),
                    tag="t")
    assert all(r.llm.ok for r in records)
    for rec in records:
        stages = stage_times(rec)
        measured = per_request(rec.llm)
        assert all(v >= 0 for v in stages.values()), stages
        assert stages["embed"] + stages["retrieve"] + stages["prefill"] == pytest.approx(
            measured.ttft_s, abs=1e-12)
        assert sum(stages.values()) == pytest.approx(measured.e2e_s, abs=1e-12)
        assert rec.prompt_len == 5 and rec.embed_batch == 1
    metrics = stage_metrics(records) | summarize([r.llm for r in records], duration_s=1.0)
    assert (metrics["embed_mean_ms"] + metrics["retrieve_mean_ms"] + metrics["prefill_mean_ms"]
            + metrics["decode_mean_ms"]) == pytest.approx(metrics["e2e_mean_ms"], rel=1e-9)


def test_prefetch_ratio_moves_when_the_prefix_is_submitted() -> None:
    serial_engine, early_engine = FakeEngine(), FakeEngine()
    serial = drive(serial_engine, _queries(5), FakeRetrieval(), PipelineConfig(1, 1.0), tag="s")
    early = drive(early_engine, _queries(5), FakeRetrieval(), PipelineConfig(1, 0.0), tag="e")
    # ratio 1 is the serial pipeline: no prefix request at all.
    assert not any(rid.endswith("-prefix") for rid, _, _ in serial_engine.submitted)
    assert all(r.prefetch_s is None for r in serial)
    # ratio 0: every prefix goes in at arrival, before its retrieval finished, and ahead of the
    # full prompt; it finishes (one token) and is not counted as a measured request.
    for rec in early:
        assert rec.prefetch_s is not None and rec.retrieve_end_s is not None
        assert rec.prefetch_s - rec.llm.scheduled_s < 0.015
        assert rec.prefetch_s < rec.retrieve_end_s
        assert rec.prefix_done_s is not None
    order = [rid for rid, _, _ in early_engine.submitted]
    for i in range(5):
        assert order.index(f"e-{i}-prefix") < order.index(f"e-{i}")
    prefix_lens = {rid: n for rid, _, n in early_engine.submitted if rid.endswith("-prefix")}
    assert set(prefix_lens.values()) == {3}  # the query-only prefix, no chunks


def test_prefetch_in_the_middle_waits_for_the_retrieval_estimate() -> None:
    records = drive(FakeEngine(), _queries(4, gap_s=0.2), FakeRetrieval(embed_s=0.1),
                    PipelineConfig(1, 0.5), tag="m", retrieval_estimate_s=0.1)
    for rec in records:
        assert rec.prefetch_s is not None
        lead = rec.prefetch_s - rec.llm.scheduled_s
        assert 0.035 < lead < 0.09  # half of the ~0.1 s retrieval stage
        assert rec.prefetch_s < rec.retrieve_end_s  # type: ignore[operator]


def test_embedding_batches_what_has_arrived_up_to_the_batch_size() -> None:
    retrieval = FakeRetrieval(embed_s=0.05)
    records = drive(FakeEngine(), _queries(7, gap_s=0.0), retrieval, PipelineConfig(3, 1.0),
                    tag="b")
    assert retrieval.batches == [3, 3, 1]
    assert [r.embed_batch for r in records] == [3, 3, 3, 3, 3, 3, 1]
    # A batch's queries share their embed end; later batches waited for the embedder.
    assert records[0].embed_end_s == records[2].embed_end_s
    assert stage_times(records[6])["embed"] > stage_times(records[0])["embed"]


def test_a_dead_engine_fails_the_requests_it_holds() -> None:
    records = drive(FakeEngine(dead=True), _queries(3, gap_s=0.0), FakeRetrieval(0.0),
                    PipelineConfig(4, 1.0), tag="d")
    assert all(not r.llm.ok and r.llm.error for r in records)
    assert stage_metrics(records) == {}


def test_a_retrieval_error_is_raised_in_the_caller() -> None:
    class Broken(FakeRetrieval):
        def search(self, vectors: np.ndarray) -> np.ndarray:
            raise RuntimeError("index exploded")

    with pytest.raises(RuntimeError, match="index exploded"):
        drive(FakeEngine(), _queries(2), Broken(), PipelineConfig(1, 1.0), tag="x")

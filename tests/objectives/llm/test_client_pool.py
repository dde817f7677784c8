"""The multi-process load client: how requests are dealt out, how many processes a load gets,
and whole runs against a local streaming server (tests/objectives/llm/fake_openai_server.py)."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from objectives.llm.client import run_load
from objectives.llm.client_pool import (
    MAX_AUTO_PROCESSES,
    STREAMED_TOKENS_PER_PROCESS,
    _split_cap,
    auto_processes,
    run_load_sharded,
    shard_requests,
)
from objectives.llm.metrics import per_request, summarize
from objectives.llm.requests import RequestSpec
from objectives.llm.server import free_port

FAKE_SERVER = Path(__file__).with_name("fake_openai_server.py")


def reqs(arrivals: list[float], output_len: int = 4) -> list[RequestSpec]:
    return [RequestSpec(index=i, arrival_s=a, prompt_token_ids=(5, 6, 7), output_len=output_len)
            for i, a in enumerate(arrivals)]


def test_shards_deal_round_robin_in_arrival_order() -> None:
    requests = reqs([0.5, 0.0, 0.3, 0.1, 0.2])
    shards = shard_requests(requests, 2)
    assert [[pos for pos, _ in s] for s in shards] == [[1, 4, 0], [3, 2]]
    assert sorted(pos for s in shards for pos, _ in s) == list(range(5))
    with pytest.raises(ValueError, match="processes >= 1"):
        shard_requests(requests, 0)


def test_a_concurrency_cap_is_split_without_losing_slots() -> None:
    assert _split_cap(None, 3) == [None, None, None]
    assert _split_cap(7, 3) == [3, 2, 2]
    assert sum(_split_cap(64, 5)) == 64


def test_auto_processes_follows_the_streamed_token_rate() -> None:
    # 100 requests x 128 tokens over 9.9 s: ~1,290 tokens/s -> one process.
    light = reqs([i * 0.1 for i in range(100)], output_len=128)
    assert auto_processes(light, cpu_count=32) == 1
    # 600 requests x 128 tokens over 8 s: 9,600 tokens/s -> ceil(9600 / 2000) = 5.
    heavy = reqs([i * 8 / 599 for i in range(600)], output_len=128)
    expected = -(-600 * 128 / 8 // STREAMED_TOKENS_PER_PROCESS)
    assert auto_processes(heavy, cpu_count=32) == expected == 5
    assert auto_processes(heavy, cpu_count=4) == 2  # at most half the CPUs
    assert auto_processes(heavy, cpu_count=2) == 1
    burst = reqs([0.0] * 4096, output_len=512)  # all at once: a span of at least one second
    assert auto_processes(burst, cpu_count=128) == MAX_AUTO_PROCESSES
    assert auto_processes([], cpu_count=32) == 1
    # A host's own figure: twice the tokens per process, half the processes (rounded up).
    fast = {"ADVISOR_CLIENT_TOKENS_PER_PROCESS": "4000"}
    assert auto_processes(heavy, cpu_count=32, env=fast) == 3
    with pytest.raises(ValueError, match="ADVISOR_CLIENT_TOKENS_PER_PROCESS must be a number"):
        auto_processes(heavy, cpu_count=32, env={"ADVISOR_CLIENT_TOKENS_PER_PROCESS": "fast"})


@pytest.fixture(scope="module")
def fake_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    log = tmp_path_factory.mktemp("fake") / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, str(FAKE_SERVER), "model", "--port", str(port)],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1.0, trust_env=False).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_sharded_run_matches_the_contract_of_run_load(fake_server: str) -> None:
    requests = reqs([i * 0.02 for i in range(24)], output_len=6)
    result = run_load_sharded(fake_server, "model", requests, processes=3,
                              extra_body={"ignore_eos": True}, timeout_s=30.0)
    assert [r.index for r in result.records] == list(range(24))
    assert result.processes == 3
    for req, rec in zip(requests, result.records, strict=True):
        assert rec.ok, rec.error
        assert rec.output_tokens == 6 and len(rec.chunk_times_s) == 6
        # One time zero for all three processes: no request went out before its arrival time,
        # and none long after it (the bound leaves room for a loaded 2-core CI machine, where
        # 0.55 s was seen once beside a busy suite).
        assert rec.sent_s is not None and 0 <= rec.sent_s - req.arrival_s < 1.5
        assert all(b > a for a, b in itertools.pairwise(rec.chunk_times_s))
        p = per_request(rec)
        assert rec.end_s is not None
        # E2E = TTFT + sum(ITL) + the stream's tail after its last text chunk (usage, [DONE]).
        assert p.e2e_s - (p.ttft_s + sum(p.itl_s)) == pytest.approx(
            rec.end_s - rec.chunk_times_s[-1], abs=1e-9)
    ends = [r.end_s for r in result.records if r.end_s is not None]
    assert result.duration_s == pytest.approx(max(ends))
    assert summarize(result.records, duration_s=result.duration_s)["failed_requests"] == 0
    assert result.loop_lag_s and all(x >= 0 for x in result.loop_lag_s)


def test_sharded_cutoff_and_concurrency_cap(fake_server: str) -> None:
    # 2 slots split 1 + 1; 40-token streams at >= 1 ms a token; a 0.05 s cutoff cuts the queue.
    requests = reqs([0.0] * 12, output_len=40)
    result = run_load_sharded(fake_server, "model", requests, processes=2, max_concurrency=2,
                              extra_body={"ignore_eos": True}, timeout_s=30.0, cutoff_s=0.05)
    cut = [r for r in result.records if r.cut_s is not None]
    assert cut and all(r.error and "cut off" in r.error for r in cut)
    assert len(result.records) == 12


def test_one_process_is_the_plain_client(fake_server: str) -> None:
    requests = reqs([0.0, 0.01], output_len=3)
    one = run_load_sharded(fake_server, "model", requests, processes=1,
                           extra_body={"ignore_eos": True})
    plain = run_load(fake_server, "model", requests, extra_body={"ignore_eos": True})
    assert [r.output_tokens for r in one.records] == [r.output_tokens for r in plain.records]
    # More processes than requests or slots: no idle workers are started.
    capped = run_load_sharded(fake_server, "model", requests, processes=8, max_concurrency=1,
                              extra_body={"ignore_eos": True})
    assert all(r.ok for r in capped.records) and capped.processes == 1


def test_a_worker_that_fails_raises_with_its_traceback(fake_server: str) -> None:
    with pytest.raises(RuntimeError, match=r"client process \d failed:(.|\n)*timeout_s > 0"):
        run_load_sharded(fake_server, "model", reqs([0.0, 0.0]), processes=2, timeout_s=-1.0)

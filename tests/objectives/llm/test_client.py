"""The streaming load client against a fake OpenAI server (httpx.MockTransport): chunk timing,
usage, failures (HTTP 500, empty or malformed streams, transport errors, timeouts), the
concurrency cap and the arrival schedule."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from objectives.llm.client import run_load, stream_request
from objectives.llm.metrics import per_request
from objectives.llm.models import prompt_text
from objectives.llm.requests import RequestSpec

BASE = "http://fake-openai"


def sse(obj: Any) -> bytes:
    return f"data: {json.dumps(obj)}\n\n".encode()


def spec(index: int = 0, *, arrival: float = 0.0, prompt: int = 4, output: int = 3
         ) -> RequestSpec:
    return RequestSpec(index=index, arrival_s=arrival,
                       prompt_token_ids=tuple(range(10, 10 + prompt)), output_len=output)


class FakeServer:
    """A fake OpenAI streaming server: one text chunk per requested token, ``delay_s`` apart,
    then a usage chunk and [DONE]. Counts requests in flight and records every body."""

    def __init__(self, *, delay_s: float = 0.002, usage: bool = True, chat: bool = False,
                 tokens_per_chunk: int = 1) -> None:
        self.delay_s = delay_s
        self.usage = usage
        self.chat = chat
        self.tokens_per_chunk = tokens_per_chunk
        self.in_flight = 0
        self.peak = 0
        self.bodies: list[dict[str, Any]] = []

    def chunk(self, text: str) -> dict[str, Any]:
        if self.chat:
            return {"choices": [{"index": 0, "delta": {"content": text}}]}
        return {"choices": [{"index": 0, "text": text}]}

    async def stream(self, n: int) -> AsyncIterator[bytes]:
        if self.chat:
            yield sse({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
        for i in range(0, n, self.tokens_per_chunk):
            await asyncio.sleep(self.delay_s)
            yield sse(self.chunk(" t5" * min(self.tokens_per_chunk, n - i)))
        yield sse({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]})
        if self.usage:
            yield sse({"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": n}})
        # Done before the last line: the client stops reading at [DONE], so code after this
        # final yield would only run when the generator is garbage-collected.
        self.in_flight -= 1
        yield b"data: [DONE]\n\n"

    async def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        return httpx.Response(200, content=self.stream(int(body["max_tokens"])),
                              headers={"content-type": "text/event-stream"})

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)


def fixed_response(status: int, content: bytes) -> httpx.MockTransport:
    async def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=content)
    return httpx.MockTransport(handle)


def test_records_have_increasing_chunk_times_and_usage_tokens() -> None:
    fake = FakeServer()
    reqs = [spec(i, arrival=0.01 * i, output=4 + i) for i in range(5)]
    result = run_load(BASE, "m", reqs, transport=fake.transport())
    assert [r.index for r in result.records] == list(range(5))
    for req, rec in zip(reqs, result.records, strict=True):
        assert rec.ok, rec.error
        assert rec.output_tokens == req.output_len
        assert len(rec.chunk_times_s) == req.output_len
        assert all(b > a for a, b in itertools.pairwise(rec.chunk_times_s))
        assert rec.scheduled_s == req.arrival_s <= rec.sent_s <= rec.chunk_times_s[0]  # type: ignore[operator]
        assert rec.end_s is not None and rec.end_s >= rec.chunk_times_s[-1]
        per_request(rec)
    assert result.duration_s == pytest.approx(max(r.end_s for r in result.records))  # type: ignore[type-var]


def test_request_body_completions_and_chat() -> None:
    fake = FakeServer()
    run_load(BASE, "my-model", [spec(output=2)], transport=fake.transport(),
             extra_body={"ignore_eos": True, "min_tokens": 2}, api_key="k")
    body = fake.bodies[0]
    assert body["prompt"] == prompt_text(spec().prompt_token_ids)
    assert body["model"] == "my-model" and body["max_tokens"] == 2 and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True} and body["temperature"] == 0
    assert body["ignore_eos"] is True and body["min_tokens"] == 2

    chat = FakeServer(chat=True)
    result = run_load(BASE, "m", [spec(output=3)], endpoint="chat", transport=chat.transport())
    body = chat.bodies[0]
    assert body["messages"] == [{"role": "user", "content": prompt_text(spec().prompt_token_ids)}]
    assert body["max_tokens"] == body["max_completion_tokens"] == 3
    rec = result.records[0]
    assert rec.ok and len(rec.chunk_times_s) == 3  # the role-only chunk carries no token


def test_without_usage_tokens_are_counted_from_chunks() -> None:
    fake = FakeServer(usage=False, tokens_per_chunk=2)
    rec = run_load(BASE, "m", [spec(output=6)], transport=fake.transport()).records[0]
    assert rec.ok and rec.output_tokens == 3 == len(rec.chunk_times_s)
    with_usage = FakeServer(tokens_per_chunk=2)
    rec = run_load(BASE, "m", [spec(output=6)], transport=with_usage.transport()).records[0]
    assert rec.output_tokens == 6 and len(rec.chunk_times_s) == 3


def test_scripted_clock_gives_exact_times() -> None:
    ticks = iter(float(t) for t in range(100))
    stream = (sse({"choices": [{"text": "a"}]}) + b": keep-alive\n\n"
              + sse({"choices": [{"text": "b"}]}) + sse({"choices": [{"text": ""}]})
              + b"data: [DONE]\n\n")

    async def go() -> Any:
        async with httpx.AsyncClient(transport=fixed_response(200, stream)) as client:
            return await stream_request(client, BASE, "m", spec(), scheduled_s=-1.0,
                                        clock=lambda: next(ticks))

    rec = asyncio.run(go())
    # Clock reads: sent=0, one per line read (a, blank, comment, blank, b, blank, "", blank,
    # DONE) -> "a" at 1, "b" at 5; the end after the stream.
    assert rec.sent_s == 0.0 and rec.chunk_times_s == [1.0, 5.0] and rec.end_s == 10.0
    p = per_request(rec)
    assert (p.ttft_s, p.itl_s, p.e2e_s, p.queue_delay_s) == (2.0, (4.0,), 11.0, 1.0)


@pytest.mark.parametrize("transport,error", [
    (fixed_response(500, b"internal " * 100), r"^HTTP 500: internal"),
    (fixed_response(200, b"data: [DONE]\n\n"), "^empty stream$"),
    (fixed_response(200, b""), "^empty stream$"),
    (fixed_response(200, sse({"choices": [{"text": "x"}]}) + b"data: {not json\n\n"),
     "malformed stream: invalid JSON"),
    (fixed_response(200, b"data: [1, 2]\n\n"), "malformed stream: chunk is not a JSON object"),
    (fixed_response(200, sse({"choices": "nope"})), "malformed stream"),
    (fixed_response(200, sse({"error": "CUDA out of memory"})), "server error in stream: CUDA"),
])
def test_failures_become_errors(transport: httpx.MockTransport, error: str) -> None:
    rec = run_load(BASE, "m", [spec()], transport=transport).records[0]
    assert not rec.ok
    assert rec.error is not None and re.search(error, rec.error), rec.error
    if error.startswith("^HTTP"):
        assert len(rec.error) <= len("HTTP 500: ") + 500


def test_transport_error_and_timeout_become_errors() -> None:
    async def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    rec = run_load(BASE, "m", [spec()], transport=httpx.MockTransport(refuse)).records[0]
    assert rec.error == "ConnectError: connection refused"

    slow = FakeServer(delay_s=0.5)
    result = run_load(BASE, "m", [spec(output=10)], transport=slow.transport(), timeout_s=0.2)
    assert result.records[0].error == "timed out after 0.2 s"


def test_a_bug_in_the_client_is_not_turned_into_a_failed_request() -> None:
    async def broken(request: httpx.Request) -> httpx.Response:
        raise RuntimeError("bug")

    with pytest.raises(RuntimeError, match="bug"):
        run_load(BASE, "m", [spec()], transport=httpx.MockTransport(broken))


def test_max_concurrency_caps_requests_in_flight() -> None:
    fake = FakeServer(delay_s=0.005)
    reqs = [spec(i, output=4) for i in range(12)]
    result = run_load(BASE, "m", reqs, max_concurrency=3, transport=fake.transport())
    assert all(r.ok for r in result.records)
    assert fake.peak == 3
    # Held-back requests were sent after their scheduled arrival (0).
    assert max(r.sent_s or 0.0 for r in result.records) > 0.01
    uncapped = FakeServer(delay_s=0.005)
    run_load(BASE, "m", reqs, transport=uncapped.transport())
    assert uncapped.peak == 12


def test_arrival_schedule_is_respected() -> None:
    fake = FakeServer(delay_s=0.001)
    arrivals = [0.0, 0.05, 0.1, 0.2, 0.21]
    reqs = [spec(i, arrival=a, output=2) for i, a in enumerate(arrivals)]
    result = run_load(BASE, "m", reqs, transport=fake.transport())
    for a, rec in zip(arrivals, result.records, strict=True):
        assert rec.sent_s is not None and a <= rec.sent_s < a + 0.15
    assert result.duration_s >= 0.21


def test_records_come_back_in_request_order_even_if_unsorted() -> None:
    fake = FakeServer()
    reqs = [spec(0, arrival=0.05), spec(1, arrival=0.0)]
    recs = run_load(BASE, "m", reqs, transport=fake.transport()).records
    assert [r.index for r in recs] == [0, 1]
    assert recs[1].sent_s < recs[0].sent_s  # type: ignore[operator]


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="max_concurrency"):
        run_load(BASE, "m", [spec()], max_concurrency=0)
    with pytest.raises(ValueError, match="timeout_s"):
        run_load(BASE, "m", [spec()], timeout_s=0)


def test_cutoff_cancels_what_is_unfinished_and_keeps_what_was_timed() -> None:
    fake = FakeServer(delay_s=0.05)  # 20 tokens: a second per request
    reqs = [spec(0, output=20), spec(1, arrival=0.01, output=20), spec(2, arrival=0.02, output=1)]
    result = run_load(BASE, "m", reqs, max_concurrency=2, transport=fake.transport(),
                      cutoff_s=0.3)
    running, waiting = result.records[0], result.records[2]
    for rec in result.records[:2]:
        assert rec.cut_s is not None and rec.cut_s >= 0.3 and rec.end_s is None
        assert (rec.error or "").startswith("cut off at 0.3 s") and not rec.ok
    assert 1 <= len(running.chunk_times_s) < 20  # the chunks seen before the cut are kept
    assert waiting.sent_s is None and waiting.cut_s is not None  # held back by the cap
    assert result.duration_s == pytest.approx(max(r.cut_s for r in result.records))  # type: ignore[type-var]
    with pytest.raises(ValueError, match="cutoff_s > 0"):
        run_load(BASE, "m", reqs, transport=fake.transport(), cutoff_s=0)


def test_without_cutoff_every_request_finishes() -> None:
    fake = FakeServer(delay_s=0.001)
    result = run_load(BASE, "m", [spec(i, arrival=0.005 * i) for i in range(4)],
                      transport=fake.transport(), cutoff_s=30.0)
    assert all(r.ok and r.cut_s is None for r in result.records)


def test_timings_streamed_with_the_last_chunk_are_kept() -> None:
    # llama.cpp's server sends its own timings of the request with its last chunk.
    timings = {"prompt_n": 4, "prompt_ms": 12.5, "predicted_n": 3, "predicted_ms": 7.25,
               "predicted_per_token_ms": 3.6, "cache_n": 0}

    async def handler(request: httpx.Request) -> httpx.Response:
        async def body() -> AsyncIterator[bytes]:
            for _ in range(3):
                yield sse({"choices": [{"index": 0, "text": " t5"}]})
            yield sse({"choices": [], "usage": {"completion_tokens": 3}, "timings": timings})
            yield b"data: [DONE]\n\n"
        return httpx.Response(200, content=body())

    result = run_load(BASE, "m", [spec()], transport=httpx.MockTransport(handler))
    (record,) = result.records
    assert record.ok and record.output_tokens == 3
    assert record.server_timings == {"prompt_ms": 12.5, "decode_ms": 7.25, "decode_tokens": 3.0}


def test_a_partial_timings_object_is_not_kept() -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        async def body() -> AsyncIterator[bytes]:
            yield sse({"choices": [{"index": 0, "text": " t5"}], "timings": {"prompt_ms": 1.0}})
            yield b"data: [DONE]\n\n"
        return httpx.Response(200, content=body())

    (record,) = run_load(BASE, "m", [spec(output=1)],
                         transport=httpx.MockTransport(handler)).records
    assert record.ok and record.server_timings is None

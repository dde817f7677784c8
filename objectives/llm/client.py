"""The async load client every OpenAI-compatible LLM target shares (vLLM, TensorRT-LLM, any
endpoint): it replays a workload's arrival schedule and times each streamed response.

The timing loop lives here once. ``stream_request`` times one streamed completion; ``run_load``
sends a list of requests on schedule (each at its ``arrival_s`` after time zero, at most
``max_concurrency`` in flight) and returns one :class:`RequestRecord` per request. Only transport
errors, HTTP errors and malformed stream data become failed requests; anything else is a bug and
propagates. Requests are never retried: a retry would hide the failure and distort latencies.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from objectives.llm.early_stop import GRACE_S, POLL_S, Settled
from objectives.llm.models import prompt_text
from objectives.llm.requests import RequestRecord, RequestSpec

__all__ = ["FAULT_STALL_ENV", "Endpoint", "LoadResult", "StopCheck", "fault_stall_s", "run_load",
           "run_load_async", "stream_request"]

Endpoint = Literal["completions", "chat"]
_PATHS: dict[str, str] = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
_ERROR_BODY_CHARS = 500


#: How often the event-loop watcher wakes up to measure how late it woke (seconds).
LOOP_LAG_PERIOD_S = 0.005


@dataclass(frozen=True)
class LoadResult:
    """All records, in request order, and the time from the run's start to its last completion.

    ``loop_lag_s`` holds how late the client's event loop woke a ``LOOP_LAG_PERIOD_S`` timer,
    sampled through the run: when it grows to milliseconds, the client itself is busy and every
    timestamp it takes (chunk arrivals above all) is late by up to that much. It is how a
    measurement shows it was client-bound rather than server-bound.
    """

    records: list[RequestRecord]
    duration_s: float
    loop_lag_s: tuple[float, ...] = ()
    #: How many client processes timed the run (see :mod:`objectives.llm.client_pool`).
    processes: int = 1
    #: When a stop check stopped the run (seconds from time zero); None: it ran to its end.
    stopped_at_s: float | None = None
    #: Why it stopped: the SLO miss that was settled (:mod:`objectives.llm.early_stop`).
    settled: Settled | None = None


#: Fault injection for tests of the validity gate: with this environment variable set to N, a
#: load run in a single client process blocks its event loop for N ms every
#: :data:`_STALL_PERIOD_S`, as a client too busy to keep up would (several processes never stall).
FAULT_STALL_ENV = "ADVISOR_FAULT_CLIENT_STALL_MS"
_STALL_PERIOD_S = 0.02


def fault_stall_s() -> float:
    """The injected per-period stall in seconds (0 unless :data:`FAULT_STALL_ENV` is set)."""
    raw = os.environ.get(FAULT_STALL_ENV, "")
    try:
        return max(0.0, float(raw) / 1e3) if raw else 0.0
    except ValueError:
        return 0.0


async def _stall_loop(stall_s: float) -> None:
    while True:
        await asyncio.sleep(_STALL_PERIOD_S)
        time.sleep(stall_s)  # blocks the loop on purpose (fault injection)


async def _watch_loop(samples: list[float]) -> None:
    """Append, every ``LOOP_LAG_PERIOD_S``, how much later than asked the loop woke us (on the
    loop's own monotonic clock: a scripted test clock must not be read by the watcher)."""
    loop = asyncio.get_running_loop()
    while True:
        before = loop.time()
        await asyncio.sleep(LOOP_LAG_PERIOD_S)
        samples.append(max(0.0, loop.time() - before - LOOP_LAG_PERIOD_S))


class _MalformedStreamError(ValueError):
    """A stream line that is not the OpenAI streaming format."""


def _request_body(model: str, spec: RequestSpec, endpoint: Endpoint,
                  extra_body: Mapping[str, Any] | None) -> dict[str, Any]:
    prompt = prompt_text(spec.prompt_token_ids)
    body: dict[str, Any] = {
        "model": model, "max_tokens": spec.output_len, "stream": True,
        "stream_options": {"include_usage": True}, "temperature": 0.0,
    }
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
        body["max_completion_tokens"] = spec.output_len
    else:
        body["prompt"] = prompt
    body.update(extra_body or {})
    return body


def _chunk_text(data: Mapping[str, Any], endpoint: Endpoint) -> str:
    """The output text a stream chunk carries ('' for role-only, usage-only, finish chunks)."""
    choices = data.get("choices")
    if not choices:
        return ""
    if not isinstance(choices, list) or not isinstance(choices[0], Mapping):
        raise _MalformedStreamError(f"`choices` is not a list of objects: {choices!r:.200}")
    choice = choices[0]
    if endpoint == "chat":
        delta = choice.get("delta") or {}
        if not isinstance(delta, Mapping):
            raise _MalformedStreamError(f"`delta` is not an object: {delta!r:.200}")
        text = delta.get("content")
    else:
        text = choice.get("text")
    if text is not None and not isinstance(text, str):
        raise _MalformedStreamError(f"chunk text is not a string: {text!r:.200}")
    return text or ""


def _usage_tokens(data: Mapping[str, Any]) -> int | None:
    usage = data.get("usage")
    if not isinstance(usage, Mapping) or usage.get("completion_tokens") is None:
        return None
    tokens = usage["completion_tokens"]
    if isinstance(tokens, bool) or not isinstance(tokens, int):
        raise _MalformedStreamError(f"`usage.completion_tokens` is not an integer: {tokens!r}")
    return tokens


#: A stream's per-request ``timings`` object (llama.cpp's server sends one with its last chunk)
#: -> the names :attr:`RequestRecord.server_timings` uses (``SERVER_TIMING_KEYS``).
_TIMINGS_FIELDS: dict[str, str] = {"prompt_ms": "prompt_ms", "predicted_ms": "decode_ms",
                                   "predicted_n": "decode_tokens"}


def _server_timings(data: Mapping[str, Any]) -> dict[str, float] | None:
    """The per-request timings a chunk carries (None when it carries none or not all of them:
    a partial set cannot be checked against the client's)."""
    timings = data.get("timings")
    if not isinstance(timings, Mapping):
        return None
    out: dict[str, float] = {}
    for field, key in _TIMINGS_FIELDS.items():
        value = timings.get(field)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        out[key] = float(value)
    return out


async def _consume_stream(response: httpx.Response, record: RequestRecord,
                          clock: Callable[[], float], endpoint: Endpoint) -> int | None:
    """Read SSE lines into ``record.chunk_times_s`` (and the server's own timings of the request
    into ``record.server_timings`` where it reports them); returns the usage's completion
    tokens."""
    usage_tokens: int | None = None
    async for raw in response.aiter_lines():
        now = clock()  # taken before parsing, so parsing cost does not inflate latencies
        line = raw.strip()
        if not line.startswith("data:"):
            continue  # blank separators, ": keep-alive" comments, "event:"/"id:" fields
        payload = line[len("data:"):].strip()
        if payload == "[DONE]":
            break
        try:
            data = json.loads(payload)
        except json.JSONDecodeError as exc:
            raise _MalformedStreamError(f"invalid JSON ({exc}): {payload[:200]!r}") from None
        if not isinstance(data, Mapping):
            raise _MalformedStreamError(f"chunk is not a JSON object: {payload[:200]!r}")
        if data.get("error") is not None:
            record.error = f"server error in stream: {str(data['error'])[:_ERROR_BODY_CHARS]}"
            break
        if _chunk_text(data, endpoint):
            record.chunk_times_s.append(now)
        tokens = _usage_tokens(data)
        if tokens is not None:
            usage_tokens = tokens
        if (timings := _server_timings(data)) is not None:
            record.server_timings = timings
    return usage_tokens


async def stream_request(client: httpx.AsyncClient, base_url: str, model: str, spec: RequestSpec,
                         *, scheduled_s: float, clock: Callable[[], float],
                         endpoint: Endpoint = "completions", api_key: str | None = None,
                         extra_body: Mapping[str, Any] | None = None,
                         timeout_s: float | None = None,
                         record: RequestRecord | None = None) -> RequestRecord:
    """Send ``spec`` now as one streamed completion and time it with ``clock``.

    ``/v1/completions`` gets the prompt text, ``/v1/chat/completions`` one user message; both ask
    for ``spec.output_len`` tokens, greedy, with usage in the stream; ``extra_body`` is merged in
    last (vLLM: ``{"ignore_eos": True, "min_tokens": n}``). Each SSE chunk carrying text is timed
    on arrival; ``output_tokens`` is the final usage's ``completion_tokens`` when the server
    reports it, else the number of text chunks. Non-200 answers, transport errors, malformed
    stream data, an error event, a stream without text and (with ``timeout_s``) a request
    running longer than ``timeout_s`` seconds give a record with ``error`` set. ``record``, when
    given, is filled in place (so a caller that cancels the request keeps what was timed).
    """
    if record is None:
        record = RequestRecord(index=spec.index, scheduled_s=scheduled_s,
                               prompt_len=spec.prompt_len)
    url = base_url.rstrip("/") + _PATHS[endpoint]
    body = _request_body(model, spec, endpoint, extra_body)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    usage_tokens: int | None = None
    record.sent_s = clock()
    try:
        async with asyncio.timeout(timeout_s), client.stream(
                "POST", url, json=body, headers=headers) as response:
            if response.status_code != 200:
                text = (await response.aread()).decode("utf-8", errors="replace")
                record.error = f"HTTP {response.status_code}: {text[:_ERROR_BODY_CHARS]}"
            else:
                usage_tokens = await _consume_stream(response, record, clock, endpoint)
    except TimeoutError:
        record.error = f"timed out after {timeout_s:g} s"
    except (httpx.TransportError, httpx.DecodingError) as exc:
        record.error = f"{type(exc).__name__}: {exc}"
    except _MalformedStreamError as exc:
        record.error = f"malformed stream: {exc}"
    record.end_s = clock()
    if record.error is not None:
        return record
    if not record.chunk_times_s:
        record.error = "empty stream"
    elif usage_tokens is not None and usage_tokens < 1:
        record.error = (f"server reported {usage_tokens} completion tokens but streamed "
                        f"{len(record.chunk_times_s)} text chunks")
    record.output_tokens = usage_tokens if usage_tokens is not None else len(record.chunk_times_s)
    return record


#: The stop check :func:`run_load_async` polls: given every record so far and the seconds since
#: time zero, True stops the run (see :mod:`objectives.llm.early_stop`).
StopCheck = Callable[[Sequence[RequestRecord], float], bool]


async def run_load_async(base_url: str, model: str, requests: Sequence[RequestSpec], *,
                         max_concurrency: int | None = None, api_key: str | None = None,
                         endpoint: Endpoint = "completions",
                         extra_body: Mapping[str, Any] | None = None, timeout_s: float = 600.0,
                         clock: Callable[[], float] = time.perf_counter,
                         transport: httpx.AsyncBaseTransport | None = None,
                         cutoff_s: float | None = None,
                         start_at: float | None = None, stall_s: float = 0.0,
                         stop: StopCheck | None = None, stop_grace_s: float = GRACE_S
                         ) -> LoadResult:
    """:func:`run_load` for callers already inside an event loop.

    ``start_at`` is time zero as a ``clock()`` reading (default: now); the run waits for it. Client
    processes sharing one schedule pass the same value (``time.perf_counter`` is system-wide).
    """
    if cutoff_s is not None and not cutoff_s > 0:
        raise ValueError(f"`cutoff_s > 0` must hold, but got {cutoff_s=}")
    if max_concurrency is not None and max_concurrency < 1:
        raise ValueError(f"`max_concurrency >= 1` must hold, but got {max_concurrency=}")
    if not timeout_s > 0:
        raise ValueError(f"`timeout_s > 0` must hold, but got {timeout_s=}")
    # One connection per request in flight, so the pool never queues a request the schedule
    # released; trust_env=False keeps proxy variables from routing benchmark traffic elsewhere.
    limits = httpx.Limits(max_connections=max_concurrency,
                          max_keepalive_connections=max_concurrency)
    gate: contextlib.AbstractAsyncContextManager[Any] = (
        asyncio.Semaphore(max_concurrency) if max_concurrency else contextlib.nullcontext())
    records = [RequestRecord(index=spec.index, scheduled_s=spec.arrival_s,
                             prompt_len=spec.prompt_len) for spec in requests]
    cutting = False
    cut_reason = f"cut off at {cutoff_s:g} s, unfinished" if cutoff_s is not None else ""
    stopping = asyncio.Event()
    stopped_at: float | None = None
    lag: list[float] = []
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(timeout_s),
                                 transport=transport, trust_env=False) as client:
        if start_at is not None:
            while (wait := start_at - clock()) > 0:
                await asyncio.sleep(wait)
        t0 = clock() if start_at is None else start_at
        watcher = asyncio.create_task(_watch_loop(lag))
        staller = asyncio.create_task(_stall_loop(stall_s)) if stall_s > 0 else None

        def rel() -> float:
            return clock() - t0

        async def check_stop() -> None:
            nonlocal stopped_at
            assert stop is not None
            while not stop(records, rel()):
                await asyncio.sleep(POLL_S)
            stopped_at = rel()
            stopping.set()

        stopper = asyncio.create_task(check_stop()) if stop is not None else None

        async def one(pos: int, spec: RequestSpec) -> None:
            record = records[pos]
            try:
                async with gate:
                    if stopping.is_set():  # held back by the cap until the window stopped
                        record.cut_s = rel()
                        record.error = "cut off unsent: the window stopped (SLO miss settled)"
                        return
                    await stream_request(
                        client, base_url, model, spec, scheduled_s=spec.arrival_s, clock=rel,
                        endpoint=endpoint, api_key=api_key, extra_body=extra_body,
                        timeout_s=timeout_s, record=record)
            except asyncio.CancelledError:
                if not cutting:
                    raise  # the whole run is being cancelled, not cut off
                record.cut_s = rel()
                record.error = cut_reason

        order = sorted(range(len(requests)), key=lambda k: requests[k].arrival_s)
        started: list[int] = []
        tasks: list[asyncio.Task[None]] = []
        for pos in order:
            spec = requests[pos]
            # Loop: the event loop may wake a timer up to its clock resolution early.
            while not stopping.is_set() and (delay := spec.arrival_s - rel()) > 0:
                if stopper is None:
                    await asyncio.sleep(delay)
                else:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stopping.wait(), timeout=delay)
            if stopping.is_set():
                break  # the window is settled: later arrivals are not sent
            started.append(pos)
            tasks.append(asyncio.create_task(one(pos, spec)))
        if stopper is None:
            if cutoff_s is None:
                await asyncio.gather(*tasks)
            else:
                _, pending = await asyncio.wait(tasks, timeout=max(0.0, cutoff_s - rel()))
                cutting = True
                for task in pending:
                    task.cancel()
                await asyncio.gather(*tasks)
        else:
            await _drain(tasks, stopping, None if cutoff_s is None else cutoff_s - rel())
            if not stopping.is_set():
                stopper.cancel()  # (no await since the drain: it cannot stop a finished run)
            else:
                grace = stop_grace_s if cutoff_s is None else min(
                    stop_grace_s, max(0.0, cutoff_s - rel()))
                if any(not t.done() for t in tasks):
                    await asyncio.wait(tasks, timeout=grace)
                cut_reason = (f"cut off {grace:g} s after the SLO miss was settled, "
                              "unfinished")
            cutting = True
            for task in tasks:
                if not task.done():
                    task.cancel()
            await asyncio.gather(*tasks)
        end = rel()
        for helper in (watcher, staller, stopper):
            if helper is not None:
                helper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await helper
    sent = [records[pos] for pos in sorted(started)]
    ends = [r.end_s for r in sent if r.end_s is not None]
    ends += [r.cut_s for r in sent if r.cut_s is not None]
    return LoadResult(sent, max(ends) if ends else end, tuple(lag), stopped_at_s=stopped_at)


async def _drain(tasks: Sequence[asyncio.Task[None]], stopping: asyncio.Event,
                 timeout_s: float | None) -> None:
    """Wait until every task is done, ``stopping`` is set or ``timeout_s`` has passed."""
    if not tasks or stopping.is_set():
        return
    everything = asyncio.ensure_future(asyncio.wait(tasks))
    stopped = asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait({everything, stopped}, return_when=asyncio.FIRST_COMPLETED,
                           timeout=None if timeout_s is None else max(0.0, timeout_s))
    finally:
        for waiter in (everything, stopped):
            waiter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiter


def run_load(base_url: str, model: str, requests: Sequence[RequestSpec], *,
             max_concurrency: int | None = None, api_key: str | None = None,
             endpoint: Endpoint = "completions", extra_body: Mapping[str, Any] | None = None,
             timeout_s: float = 600.0, clock: Callable[[], float] = time.perf_counter,
             transport: httpx.AsyncBaseTransport | None = None,
             cutoff_s: float | None = None, start_at: float | None = None,
             stall_s: float = 0.0, stop: StopCheck | None = None,
             stop_grace_s: float = GRACE_S) -> LoadResult:
    """Replay ``requests`` against ``{base_url}/v1/...`` and time every response.

    Time zero is the start of the run; request i is sent at ``arrival_s`` (or later, when
    ``max_concurrency`` requests are already in flight: then ``sent_s > scheduled_s``). Each
    request may take at most ``timeout_s`` seconds. Records come back in request order, with
    times relative to time zero; ``duration_s`` runs from time zero to the last completion.
    ``transport`` replaces the network (tests pass an ``httpx.MockTransport``). With
    ``cutoff_s``, requests still unfinished (or not yet sent) ``cutoff_s`` seconds after time zero
    are cancelled and come back with ``cut_s`` set: an overloaded server's queue is not drained
    to the end, which would take minutes and tell nothing more. ``start_at`` sets time zero (a
    ``clock()`` reading; see :func:`run_load_async`). One process and one event loop time every
    stream; :func:`objectives.llm.client_pool.run_load_sharded` spreads a heavy load over several.
    ``stall_s`` > 0 blocks the loop that long every 20 ms (fault injection, see
    :data:`FAULT_STALL_ENV`).

    ``stop`` is polled every 50 ms with the records so far and the seconds since time zero; once
    it answers True, no further request is sent (nor is one held back by the cap), those in
    flight may finish for ``stop_grace_s`` and are then cut (``cut_s`` set, as at the drain
    limit), and the run ends: ``stopped_at_s`` says when, and ``records`` holds only the
    requests whose arrival came before it (:mod:`objectives.llm.early_stop`).
    """
    return asyncio.run(run_load_async(
        base_url, model, requests, max_concurrency=max_concurrency, api_key=api_key,
        endpoint=endpoint, extra_body=extra_body, timeout_s=timeout_s, clock=clock,
        transport=transport, cutoff_s=cutoff_s, start_at=start_at, stall_s=stall_s,
        stop=stop, stop_grace_s=stop_grace_s))

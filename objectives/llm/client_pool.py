"""The load client spread over several processes, for loads one event loop cannot time.

One asyncio loop parses every SSE line of every stream. On the H200, at ~12,600 streamed tokens/s
(Llama-3.2-1B shape, 150 req/s), a single client process fell behind: it read chunks in bursts, so
inter-token latencies came out as 0 ms and 99 ms where ``vllm bench serve`` saw 19 and 35 ms
(docs/metrics.md, when the client is the bottleneck). :func:`run_load_sharded` splits the requests
round-robin by arrival over ``processes`` spawned workers, each running
:func:`objectives.llm.client.run_load_async` on its share, all from one time zero: the parent
starts them, waits until every worker is ready (imports done, loop running), then hands out one
``time.perf_counter`` reading a moment ahead, which every process can compare against because
the clock is system-wide (CLOCK_MONOTONIC on Linux). Records come back merged in request order.

A concurrency cap is divided between the workers (as evenly as possible; a worker never gets
less than one slot, so there are never more workers than slots). :func:`auto_processes` picks
how many workers a load needs from the tokens/s it will stream.
"""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
import os
import queue
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from objectives.llm.client import Endpoint, LoadResult, fault_stall_s, run_load, run_load_async
from objectives.llm.early_stop import POLL_S, LocalJudge, MissWatch, Settled, ShardReport
from objectives.llm.requests import RequestRecord, RequestSpec
from objectives.processes import die_with_parent

__all__ = ["STREAMED_TOKENS_PER_PROCESS", "TOKENS_PER_PROCESS_ENV", "auto_processes",
           "process_ceiling", "run_load_sharded", "shard_requests", "tokens_per_process"]

#: Streamed output tokens/s one client process times without falling behind, with margin: one
#: process kept up at ~11,000 tokens/s and fell behind at ~12,600 on the H200's host CPU, but on
#: the H100's host (2026-12-07, 8B `chat`) two processes at ~3,450 tokens/s each were found
#: client-bound by the validity gate in both trials (measured again with 4), two at ~2,300 each
#: were not. A process too few costs a whole window measured twice; one too many costs nothing.
STREAMED_TOKENS_PER_PROCESS = 2000.0
#: Environment variable overriding :data:`STREAMED_TOKENS_PER_PROCESS` for this host (a client
#: process keeps up with more on a fast CPU, fewer on a slow one), a number > 0.
TOKENS_PER_PROCESS_ENV = "ADVISOR_CLIENT_TOKENS_PER_PROCESS"
#: The most client processes :func:`auto_processes` picks.
MAX_AUTO_PROCESSES = 8
#: How long workers may take to start (spawn imports httpx and the package).
READY_TIMEOUT_S = 120.0
#: Time zero is this far after the last worker reported ready.
START_MARGIN_S = 0.05


def process_ceiling(cpu_count: int | None = None) -> int:
    """The most client processes a measurement may use: half the CPUs (the rest are left to the
    server and the driver), at most :data:`MAX_AUTO_PROCESSES`, at least one."""
    cpus = cpu_count if cpu_count is not None else (os.cpu_count() or 1)
    return max(1, min(MAX_AUTO_PROCESSES, cpus // 2))


def tokens_per_process(env: Mapping[str, str] | None = None) -> float:
    """The streamed tokens/s one client process is given: ``$ADVISOR_CLIENT_TOKENS_PER_PROCESS``
    if set, else :data:`STREAMED_TOKENS_PER_PROCESS`; raises ValueError on a value that is not a
    number > 0 (a typo must not silently change how a window is measured)."""
    raw = (os.environ if env is None else env).get(TOKENS_PER_PROCESS_ENV, "").strip()
    if not raw:
        return STREAMED_TOKENS_PER_PROCESS
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not value > 0 or math.isinf(value):
        raise ValueError(f"${TOKENS_PER_PROCESS_ENV} must be a number > 0, got {raw!r}")
    return value


def auto_processes(requests: Sequence[RequestSpec], *, cpu_count: int | None = None,
                   env: Mapping[str, str] | None = None) -> int:
    """How many client processes ``requests`` need: the tokens/s the schedule asks to stream
    (total output tokens over the arrival span, at least one second) divided by
    :func:`tokens_per_process`, rounded up, at most :data:`MAX_AUTO_PROCESSES` and at most half
    the CPUs (the rest are left to the server and the driver)."""
    if not requests:
        return 1
    arrivals = [r.arrival_s for r in requests]
    span = max(1.0, max(arrivals) - min(arrivals))
    rate = sum(r.output_len for r in requests) / span
    return max(1, min(process_ceiling(cpu_count), math.ceil(rate / tokens_per_process(env))))


def shard_requests(requests: Sequence[RequestSpec], processes: int
                   ) -> list[list[tuple[int, RequestSpec]]]:
    """``processes`` shares of ``(position, request)``, dealt round-robin in arrival order, so
    every share spans the whole schedule at 1/``processes`` of its rate."""
    if processes < 1:
        raise ValueError(f"`processes >= 1` must hold, but got {processes=}")
    order = sorted(range(len(requests)), key=lambda k: requests[k].arrival_s)
    return [[(pos, requests[pos]) for pos in order[k::processes]] for k in range(processes)]


def _split_cap(cap: int | None, processes: int) -> list[int | None]:
    if cap is None:
        return [None] * processes
    return [cap // processes + (1 if k < cap % processes else 0) for k in range(processes)]


def _worker(index: int, requests: list[RequestSpec], kwargs: dict[str, Any],
            ready: Any, start: Any, results: Any, stop: ShardReport | None = None) -> None:
    """One client process: report ready, wait for time zero, run its share, send the result."""
    import asyncio

    die_with_parent()  # a killed trial must not leave clients sending requests
    try:
        ready.put(index)
        start_at = start.get(timeout=READY_TIMEOUT_S * 2)
        result = asyncio.run(run_load_async(requests=requests, start_at=start_at, stop=stop,
                                            **kwargs))
        results.put((index, result, None))
    except BaseException:  # everything goes back to the parent, which raises
        results.put((index, None, traceback.format_exc()))


def run_load_sharded(base_url: str, model: str, requests: Sequence[RequestSpec], *,
                     processes: int, max_concurrency: int | None = None,
                     api_key: str | None = None, endpoint: Endpoint = "completions",
                     extra_body: Mapping[str, Any] | None = None, timeout_s: float = 600.0,
                     cutoff_s: float | None = None, watch: MissWatch | None = None
                     ) -> LoadResult:
    """:func:`objectives.llm.client.run_load` over ``processes`` worker processes.

    The same contract: records in request order, times relative to one time zero,
    ``duration_s`` to the last completion; ``loop_lag_s`` pools every worker's samples and
    ``processes`` says how many ran: never more than the requests or the concurrency slots, and
    a single one runs in this process. A worker that crashes raises ``RuntimeError`` with its
    traceback.

    With a ``watch`` (:mod:`objectives.llm.early_stop`) the run stops once it settles an SLO
    miss: every worker writes its share's counts of known exceedances into shared memory, this
    process judges their sum every 50 ms and sets one stop event they all poll. ``settled``
    then says which bound, when, and how many requests were sent.
    """
    if processes < 1:
        raise ValueError(f"`processes >= 1` must hold, but got {processes=}")
    if max_concurrency is not None and max_concurrency < 1:
        raise ValueError(f"`max_concurrency >= 1` must hold, but got {max_concurrency=}")
    processes = min(processes, max(1, len(requests)),
                    max_concurrency if max_concurrency is not None else processes)
    if watch is not None and not watch.bounds:
        watch = None
    if processes == 1:
        judge = LocalJudge(watch) if watch is not None else None
        result = run_load(base_url, model, requests, max_concurrency=max_concurrency,
                          api_key=api_key, endpoint=endpoint, extra_body=extra_body,
                          timeout_s=timeout_s, cutoff_s=cutoff_s, stall_s=fault_stall_s(),
                          stop=judge)
        return _with_settled(result, judge.settled if judge is not None else None)
    shares = shard_requests(requests, processes)
    caps = _split_cap(max_concurrency, processes)
    ctx = multiprocessing.get_context("spawn")  # no fork: the driver may hold threads and sockets
    ready, start, results = ctx.Queue(), ctx.Queue(), ctx.Queue()
    counts: Any = None
    stop: Any = None
    if watch is not None:
        counts, stop = ctx.RawArray("q", processes * len(watch.bounds)), ctx.Event()
    workers = []
    for k, share in enumerate(shares):
        kwargs = {"base_url": base_url, "model": model, "max_concurrency": caps[k],
                  "api_key": api_key, "endpoint": endpoint,
                  "extra_body": dict(extra_body) if extra_body is not None else None,
                  "timeout_s": timeout_s, "cutoff_s": cutoff_s}
        report = (ShardReport(watch.bounds, counts, k, stop) if watch is not None else None)
        workers.append(ctx.Process(target=_worker, name=f"load-client-{k}", daemon=True,
                                   args=(k, [spec for _, spec in share], kwargs, ready, start,
                                         results, report)))
    settled: Settled | None = None
    try:
        for worker in workers:
            worker.start()
        _wait_ready(ready, workers)
        start_at = time.perf_counter() + START_MARGIN_S
        for _ in workers:
            start.put(start_at)
        last_arrival = max((r.arrival_s for r in requests), default=0.0)
        deadline = time.monotonic() + (cutoff_s if cutoff_s is not None
                                       else last_arrival + timeout_s) + READY_TIMEOUT_S
        tick = None
        if watch is not None:
            def tick() -> None:
                nonlocal settled
                if settled is not None:
                    return
                n = len(watch.bounds)
                sums = [sum(counts[k * n + j] for k in range(processes)) for j in range(n)]
                settled = watch.judge(sums, time.perf_counter() - start_at)
                if settled is not None:
                    stop.set()
        outcomes = _collect(results, workers, deadline, tick)
    finally:
        for worker in workers:
            if worker.is_alive():
                worker.terminate()
            worker.join(timeout=10)
    records: list[RequestRecord | None] = [None] * len(requests)
    lag: list[float] = []
    duration = 0.0
    stopped: list[float] = []
    for k, share in enumerate(shares):
        result = outcomes[k]
        if len(result.records) == len(share):
            for (pos, _), record in zip(share, result.records, strict=True):
                records[pos] = record
        else:  # a stopped worker returns the requests it started only
            where = {spec.index: pos for pos, spec in share}
            for record in result.records:
                records[where[record.index]] = record
        lag.extend(result.loop_lag_s)
        duration = max(duration, result.duration_s)
        if result.stopped_at_s is not None:
            stopped.append(result.stopped_at_s)
    merged = LoadResult([r for r in records if r is not None], duration, tuple(lag), processes,
                        stopped_at_s=min(stopped, default=None))
    return _with_settled(merged, settled)


def _with_settled(result: LoadResult, settled: Settled | None) -> LoadResult:
    """``result`` with the miss that stopped it, and how many requests were sent in all; a
    miss judged only after every worker had finished stopped nothing and is left out."""
    if settled is None or result.stopped_at_s is None:
        return result
    sent = sum(1 for r in result.records if r.sent_s is not None)
    return dataclasses.replace(result, settled=dataclasses.replace(settled, sent=sent))


def _wait_ready(ready: Any, workers: Sequence[Any]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    pending = len(workers)
    while pending:
        try:
            ready.get(timeout=1.0)
            pending -= 1
        except queue.Empty:
            dead = [w for w in workers if w.exitcode is not None]
            if dead or time.monotonic() > deadline:
                why = (f"client process {dead[0].name} exited with code {dead[0].exitcode}"
                       if dead else f"client processes not ready after {READY_TIMEOUT_S:g} s")
                raise RuntimeError(f"the load client could not start: {why}") from None


def _collect(results: Any, workers: Sequence[Any], deadline: float,
             tick: Callable[[], None] | None = None) -> dict[int, LoadResult]:
    """Every worker's result; ``tick`` (if any) is called every :data:`POLL_S` meanwhile."""
    outcomes: dict[int, LoadResult] = {}
    while len(outcomes) < len(workers):
        try:
            if tick is not None:
                tick()
            index, result, error = results.get(timeout=POLL_S if tick is not None else 1.0)
        except queue.Empty:
            gone = [w for k, w in enumerate(workers)
                    if k not in outcomes and w.exitcode is not None]
            if gone:
                # A result put just before exiting may still be in the pipe: one last look.
                try:
                    index, result, error = results.get(timeout=2.0)
                except queue.Empty:
                    raise RuntimeError(f"client process {gone[0].name} died (exit code "
                                       f"{gone[0].exitcode}) before reporting") from None
            elif time.monotonic() > deadline:
                raise RuntimeError("the load client's processes did not finish in time") from None
            else:
                continue
        if error is not None:
            raise RuntimeError(f"client process {index} failed:\n{error}")
        outcomes[index] = result
    return outcomes

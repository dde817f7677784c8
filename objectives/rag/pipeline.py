"""The RAG request pipeline, driven against an LLM engine: query arrival -> embed -> search ->
prompt assembly -> LLM, with the optional prefetch of the query-only prefix, and the per-stage
accounting of every request.

Times are seconds on one ``time.perf_counter`` clock from the start of the run. For a request
that arrived at ``a``, was embedded in a batch that ended at ``e``, had its chunks retrieved and
its prompt assembled at ``r``, and whose answer streamed its first token at ``c_1`` and ended at
``z``, the stages are::

    embed    = e - a      (waiting for the embedder included: that is the query's time there)
    retrieve = r - e      (FAISS search and prompt assembly)
    prefill  = c_1 - r    (the LLM's queueing and prefill of what the prefix cache lacks)
    decode   = z - c_1

so ``embed + retrieve + prefill == TTFT`` and ``... + decode == E2E`` exactly, TTFT and E2E as
:mod:`objectives.llm.metrics` defines them (from the scheduled arrival).

With ``prefetch_ratio < 1`` a second thread submits the query-only prefix (the request's system
prompt and history plus the query's tokens) as a one-token request at ``a + ratio * R``, where
``R`` is the running mean of earlier requests' retrieval stage (arrival to chunks retrieved): the
engine prefills it while retrieval runs, and the full prompt, which starts with the same tokens,
reuses its complete KV pages through prefix caching. ``ratio = 1`` submits nothing extra: the
serial pipeline. A prefix not yet submitted when retrieval finishes is skipped.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from advisor.errors import EngineStartError
from objectives.llm.metrics import _family
from objectives.llm.requests import RequestRecord, RequestSpec

__all__ = [
    "STAGES",
    "EndpointEngine",
    "Engine",
    "EngineOutput",
    "ManagerEngine",
    "PipelineConfig",
    "Query",
    "QueuedOutputs",
    "RagRecord",
    "Retrieval",
    "drive",
    "stage_metrics",
    "stage_times",
]

STAGES: tuple[str, ...] = ("embed", "retrieve", "prefill", "decode")
#: A request in flight that sees no output for this long fails the run's remaining requests.
STALL_TIMEOUT_S = 120.0
_POLL_S = 0.2


@dataclass(frozen=True, slots=True)
class EngineOutput:
    """One streamed update of one request: tokens generated so far, finished, error."""

    request_id: str
    tokens: int
    finished: bool
    error: str | None = None
    #: An engine that times the stream itself (an HTTP client) reports its chunk and end times
    #: (``time.perf_counter``) with the finished output instead of one output per chunk.
    chunk_times: tuple[float, ...] | None = None
    end_time: float | None = None


class Engine(Protocol):
    """What the pipeline needs from an LLM engine (thread-safe ``submit`` and ``poll``)."""

    def submit(self, request_id: str, prompt_ids: Sequence[int], max_new_tokens: int,
               *, stream: bool) -> bool:
        """Queue a request; False when the engine refuses it (stopping or dead)."""

    def poll(self, timeout_s: float) -> EngineOutput | None:
        """The next output of any request, or None after ``timeout_s``."""

    def alive(self) -> bool:
        """Whether the engine's generation loop still runs."""


class Retrieval(Protocol):
    """The retrieval stages: embed queries, search the index, assemble a prompt."""

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...

    def search(self, vectors: np.ndarray) -> np.ndarray: ...

    def prompt(self, query: Query, ids: np.ndarray) -> list[int]: ...


@dataclass(frozen=True, slots=True)
class Query:
    """One RAG request: arrival, query text, the query-only prefix's token ids, answer length."""

    index: int
    arrival_s: float
    text: str
    prefix_ids: tuple[int, ...]
    output_len: int


@dataclass(frozen=True, slots=True)
class PipelineConfig:
    embed_batch_size: int
    prefetch_ratio: float


@dataclass(slots=True)
class RagRecord:
    """What happened to one request: the LLM's view (``llm``) plus the retrieval stages."""

    llm: RequestRecord
    embed_start_s: float | None = None
    embed_end_s: float | None = None
    retrieve_end_s: float | None = None
    embed_batch: int = 0
    prompt_len: int = 0
    prefetch_s: float | None = None
    prefix_done_s: float | None = None
    prefetch_skipped: bool = False
    found: list[int] = field(default_factory=list)


def stage_times(rec: RagRecord) -> dict[str, float]:
    """The four stages of a successful request in seconds (see the module docstring)."""
    llm = rec.llm
    if not llm.ok or None in (rec.embed_end_s, rec.retrieve_end_s) or llm.end_s is None:
        raise ValueError(f"request {llm.index} did not complete every stage")
    assert rec.embed_end_s is not None and rec.retrieve_end_s is not None
    first = llm.chunk_times_s[0]
    return {"embed": rec.embed_end_s - llm.scheduled_s,
            "retrieve": rec.retrieve_end_s - rec.embed_end_s,
            "prefill": first - rec.retrieve_end_s,
            "decode": llm.end_s - first}


def stage_metrics(records: Sequence[RagRecord]) -> dict[str, float]:
    """``<stage>_{p50,p90,p95,p99,mean}_ms`` over the successful requests."""
    times = [stage_times(r) for r in records if r.llm.ok]
    out: dict[str, float] = {}
    for stage in STAGES:
        out |= _family(stage, [t[stage] for t in times])
    return out


def drive(engine: Engine, queries: Sequence[Query], retrieval: Retrieval, config: PipelineConfig,
          *, tag: str, cutoff_s: float | None = None, retrieval_estimate_s: float | None = None,
          clock: Callable[[], float] = time.perf_counter) -> list[RagRecord]:
    """Run ``queries`` through the pipeline at their arrival times and return their records.

    ``retrieval_estimate_s`` seeds the running mean of the retrieval stage that places prefetches
    (the warm-up's mean). At ``cutoff_s`` the run stops waiting: unfinished requests are cut off.
    """
    t0 = clock()

    def now() -> float:
        return clock() - t0

    n = len(queries)
    records = [RagRecord(RequestRecord(index=q.index, scheduled_s=q.arrival_s, prompt_len=0))
               for q in queries]
    lock = threading.Lock()
    stop = threading.Event()
    submitted = [False] * n
    durations: list[float] = [] if retrieval_estimate_s is None else [retrieval_estimate_s]
    errors: list[BaseException] = []

    def retrieve_all() -> None:
        i = 0
        while i < n and not stop.is_set():
            wait = queries[i].arrival_s - now()
            if wait > 0:
                stop.wait(wait)
                continue
            t = now()
            j = i + 1
            while (j < n and j - i < config.embed_batch_size
                   and queries[j].arrival_s <= t):
                j += 1
            batch = queries[i:j]
            embed_start = now()
            vectors = retrieval.embed([q.text for q in batch])
            embed_end = now()
            found = retrieval.search(vectors)
            prompts = [retrieval.prompt(q, found[k]) for k, q in enumerate(batch)]
            retrieve_end = now()
            for k, q in enumerate(batch):
                rec = records[i + k]
                rec.embed_start_s, rec.embed_end_s = embed_start, embed_end
                rec.retrieve_end_s, rec.embed_batch = retrieve_end, len(batch)
                rec.prompt_len = rec.llm.prompt_len = len(prompts[k])
                rec.found = [int(x) for x in found[k]]
                with lock:
                    submitted[i + k] = True
                    rec.llm.sent_s = now()
                    if not engine.submit(f"{tag}-{q.index}", prompts[k], q.output_len,
                                         stream=True):
                        rec.llm.error = "the engine refused the request (stopping or dead)"
                durations.append(retrieve_end - q.arrival_s)
            i = j

    def prefetch_all() -> None:
        for k, q in enumerate(queries):
            estimate = sum(durations) / len(durations) if durations else 0.0
            at = q.arrival_s + config.prefetch_ratio * estimate
            while not stop.is_set() and (left := at - now()) > 0:
                stop.wait(left)
            if stop.is_set():
                return
            with lock:
                if submitted[k]:
                    records[k].prefetch_skipped = True
                    continue
                records[k].prefetch_s = now()
                engine.submit(f"{tag}-{q.index}-prefix", q.prefix_ids, 1, stream=False)

    def guarded(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # re-raised in the caller's thread below
                errors.append(exc)
                stop.set()
        return run

    threads = [threading.Thread(target=guarded(retrieve_all), name="rag-retrieval", daemon=True)]
    if config.prefetch_ratio < 1.0:
        threads.append(threading.Thread(target=guarded(prefetch_all), name="rag-prefetch",
                                        daemon=True))
    for thread in threads:
        thread.start()
    try:
        _collect(engine, queries, records, tag, now, t0, stop, errors, cutoff_s)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
    if errors:
        raise errors[0]
    return records


def _collect(engine: Engine, queries: Sequence[Query], records: list[RagRecord], tag: str,
             now: Callable[[], float], t0: float, stop: threading.Event,
             errors: list[BaseException], cutoff_s: float | None) -> None:
    """Consume the engine's outputs into ``records`` until every request ended or was cut."""
    position = {f"{tag}-{q.index}": k for k, q in enumerate(queries)}
    seen = [0] * len(queries)
    done = 0
    last_output = now()
    while done < len(queries):
        if errors:
            return
        t = now()
        if cutoff_s is not None and t >= cutoff_s:
            for rec in records:
                if rec.llm.end_s is None and rec.llm.error is None:
                    rec.llm.cut_s, rec.llm.error = t, f"cut off at {cutoff_s:g} s, unfinished"
            return
        out = engine.poll(_POLL_S)
        t = now()
        if out is None:
            in_flight = any(r.llm.sent_s is not None and r.llm.end_s is None
                            and r.llm.error is None for r in records)
            if in_flight and (not engine.alive() or t - last_output > STALL_TIMEOUT_S):
                why = ("the engine's generation loop stopped" if not engine.alive()
                       else f"no output for {STALL_TIMEOUT_S:.0f} s")
                for rec in records:
                    if rec.llm.end_s is None and rec.llm.error is None:
                        rec.llm.error = why
                return
            done = sum(1 for r in records if r.llm.end_s is not None or r.llm.error is not None)
            continue
        last_output = t
        if out.request_id.endswith("-prefix"):
            k = position.get(out.request_id.removesuffix("-prefix"))
            if k is not None and out.finished:
                records[k].prefix_done_s = t
            continue
        k = position.get(out.request_id)
        if k is None:
            continue
        llm = records[k].llm
        if out.chunk_times is not None and out.end_time is not None:
            llm.chunk_times_s = [c - t0 for c in out.chunk_times]
            llm.output_tokens, t = out.tokens, out.end_time - t0
        elif out.tokens > seen[k]:
            llm.chunk_times_s.append(t)
            seen[k] = llm.output_tokens = out.tokens
        if out.finished:
            llm.end_s = t
            if out.error is not None:
                llm.error = out.error
            done += 1
    stop.set()


class ManagerEngine:
    """:class:`Engine` over a transformers continuous-batching manager (the online API)."""

    def __init__(self, manager: Any) -> None:
        self.manager = manager

    def submit(self, request_id: str, prompt_ids: Sequence[int], max_new_tokens: int,
               *, stream: bool) -> bool:
        added = self.manager.add_request(list(prompt_ids), request_id=request_id,
                                         max_new_tokens=max_new_tokens, streaming=stream,
                                         eos_token_id=-1)
        return added is not None

    def poll(self, timeout_s: float) -> EngineOutput | None:
        out = self.manager.get_result(timeout=timeout_s)
        if out is None:
            return None
        return EngineOutput(out.request_id, len(out.generated_tokens), out.is_finished(),
                            None if out.error is None else str(out.error))

    def alive(self) -> bool:
        return bool(self.manager.is_running())


def check_started(records: Sequence[RagRecord], what: str) -> None:
    """Raise :class:`EngineStartError` when every request of a warm-up failed."""
    if records and not any(r.llm.ok for r in records):
        raise EngineStartError(f"every {what} request failed; first error: "
                               f"{records[0].llm.error}")


class QueuedOutputs:
    """``poll`` over a queue that an engine's own threads put :class:`EngineOutput` into."""

    def __init__(self) -> None:
        self.out: queue.Queue[EngineOutput] = queue.Queue()

    def poll(self, timeout_s: float) -> EngineOutput | None:
        try:
            return self.out.get(timeout=timeout_s)
        except queue.Empty:
            return None


class EndpointEngine(QueuedOutputs):
    """:class:`Engine` over an OpenAI-compatible endpoint (vLLM, TensorRT-LLM, any server): each
    request is one streamed completion, timed chunk by chunk by the client every serving target
    shares (:func:`objectives.llm.client.stream_request`), on an event loop of its own thread."""

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None,
                 extra_body: Mapping[str, object] | None = None, timeout_s: float = 600.0
                 ) -> None:
        import httpx

        super().__init__()
        self.base_url, self.model, self.api_key = base_url, model, api_key
        self.extra_body, self.timeout_s = dict(extra_body or {}), timeout_s
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="rag-endpoint",
                                       daemon=True)
        self.thread.start()
        self.client = httpx.AsyncClient(timeout=None, limits=httpx.Limits(max_connections=None))

    def submit(self, request_id: str, prompt_ids: Sequence[int], max_new_tokens: int,
               *, stream: bool) -> bool:
        spec = RequestSpec(index=0, arrival_s=0.0, prompt_token_ids=tuple(prompt_ids),
                           output_len=max_new_tokens)
        asyncio.run_coroutine_threadsafe(self._one(request_id, spec), self.loop)
        return True

    async def _one(self, request_id: str, spec: RequestSpec) -> None:
        from objectives.llm.client import stream_request

        try:
            rec = await stream_request(self.client, self.base_url, self.model, spec,
                                       scheduled_s=0.0, clock=time.perf_counter,
                                       api_key=self.api_key, extra_body=self.extra_body,
                                       timeout_s=self.timeout_s)
        except BaseException as exc:  # a bug must still end the request, not hang the run
            self.out.put(EngineOutput(request_id, 0, True, f"{type(exc).__name__}: {exc}"))
            raise
        self.out.put(EngineOutput(request_id, rec.output_tokens, True, rec.error,
                                  tuple(rec.chunk_times_s), rec.end_s))

    def alive(self) -> bool:
        return self.thread.is_alive()

    def close(self) -> None:
        """Close the client and stop the loop (requests still in flight are cancelled)."""
        asyncio.run_coroutine_threadsafe(self.client.aclose(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)

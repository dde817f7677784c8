"""What one LLM request is (before it runs) and what was measured for it (after).

Times are seconds on one monotonic clock (``time.perf_counter``), relative to the start of the
measured run; every public metric converts to milliseconds at the boundary.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["SERVER_TIMING_KEYS", "RequestRecord", "RequestSpec"]

#: The per-request timings a server may report with its last stream chunk, as
#: :attr:`RequestRecord.server_timings` keeps them: ``prompt_ms`` from when the engine took the
#: request up to its first token (queueing before that is not in it), ``decode_ms`` from the
#: first token to the last, ``decode_tokens`` the tokens generated.
SERVER_TIMING_KEYS: tuple[str, ...] = ("prompt_ms", "decode_ms", "decode_tokens")


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request of a workload: when it arrives and how long its prompt and output are.

    ``prompt_token_ids`` are ids in the model's vocabulary (random-weight models use a word-level
    vocabulary ``t<i>``, see :mod:`objectives.llm.models`); the first ``shared_prefix_len`` ids are
    shared with every other request of the same ``prefix_group`` (None: no shared prefix).
    ``output_len`` is exact: engines are run with EOS ignored so outputs have fixed lengths.
    """

    index: int
    arrival_s: float
    prompt_token_ids: tuple[int, ...]
    output_len: int
    prefix_group: int | None = None
    shared_prefix_len: int = 0

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_token_ids)


@dataclass(slots=True)
class RequestRecord:
    """What happened to one request.

    ``scheduled_s`` is its arrival time from the workload; ``sent_s`` when the client actually
    sent it (later if the client fell behind or a concurrency cap held it back);
    ``chunk_times_s`` the arrival time of each streamed chunk that carried output tokens (a chunk
    may carry several; this is what ``vllm bench serve`` times ITL over); ``end_s`` when the
    response finished; ``output_tokens`` the number of tokens generated (from the server's usage
    report when it gives one). ``error`` is set, with the reason, when the request failed.
    ``cut_s`` is set when the measurement stopped waiting for it (the workload's drain limit):
    it had not finished by then, and its latencies are known only as lower bounds.
    ``server_timings`` holds the per-request timings the server reported at the end of the
    stream, where it reports any (:data:`SERVER_TIMING_KEYS`): the validity gate holds the
    client's own timings against them.
    """

    index: int
    scheduled_s: float
    prompt_len: int
    sent_s: float | None = None
    chunk_times_s: list[float] = field(default_factory=list)
    end_s: float | None = None
    output_tokens: int = 0
    error: str | None = None
    cut_s: float | None = None
    server_timings: dict[str, float] | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.end_s is not None and bool(self.chunk_times_s)

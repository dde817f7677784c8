"""Reference harnesses: an independent load generator replaying the workload's own requests on the
same server, so the advisor's client can be checked against it (``advisor crosscheck``).

A harness is anything that implements :class:`ReferenceHarness`; the serving targets say which
one fits their engine (``ServingTarget.reference_harness``). The requests travel as a ShareGPT
JSON file (:func:`sharegpt_dataset`): each request's prompt text as the human turn and a
completion of exactly its output length as the model's turn, which a harness that counts output
tokens from the completion (as ``vllm bench serve --dataset-name sharegpt`` does) turns back into
the same request. A harness may refuse some lengths (:class:`LengthLimits`); ``advisor
crosscheck`` clamps the workload to them so both harnesses send the same requests.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from advisor.errors import WorkloadError
from objectives.llm.models import N_SPECIAL_TOKENS, prompt_text
from objectives.llm.requests import RequestRecord, RequestSpec
from objectives.llm.workload import KIND, LengthDist, LLMWorkloadSpec
from objectives.workload import Workload

__all__ = ["LengthLimits", "ReferenceHarness", "ReferenceRun", "clamp_lengths",
           "records_from_timings", "sharegpt_dataset"]


@dataclass(frozen=True)
class LengthLimits:
    """The request lengths a harness replays (others it drops)."""

    min_len: int = 1
    max_prompt_len: int | None = None
    max_total_len: int | None = None

    def accepts(self, request: RequestSpec) -> bool:
        if request.prompt_len < self.min_len or request.output_len < self.min_len:
            return False
        if self.max_prompt_len is not None and request.prompt_len > self.max_prompt_len:
            return False
        total = request.prompt_len + request.output_len
        return self.max_total_len is None or total <= self.max_total_len


def _clamped(dist: LengthDist, low: int, high: int) -> LengthDist:
    if dist.dist == "fixed":
        return dataclasses.replace(dist, value=min(max(dist.value, low), high))
    if dist.dist == "uniform":
        new_high = min(dist.high, high)
        return dataclasses.replace(dist, low=min(max(dist.low, low), new_high), high=new_high)
    new_max = min(dist.max, high)
    return dataclasses.replace(dist, min=min(max(dist.min, low), new_max), max=new_max)


def clamp_lengths(workload: Workload, limits: LengthLimits, *,
                  target_keys: frozenset[str] = frozenset()) -> tuple[Workload, dict[str, Any]]:
    """``workload`` with its length distributions clamped into ``limits`` (every request it can
    produce is then accepted), and what changed (empty when nothing did). ``target_keys`` are
    parameters the target reads itself (kept as they are). A trace workload, whose lengths are
    data, is refused with :class:`WorkloadError`."""
    spec = LLMWorkloadSpec.from_params({k: v for k, v in workload.params.items()
                                        if k not in target_keys})
    if spec.prompt_len is None or spec.output_len is None:
        raise WorkloadError(f"workload {workload.name!r} replays a trace; its lengths cannot be "
                            "clamped to what the reference harness accepts")
    prompt_high = limits.max_prompt_len or spec.prompt_len.upper
    prompt = _clamped(spec.prompt_len, limits.min_len, prompt_high)
    output_high = spec.output_len.upper
    if limits.max_total_len is not None:
        output_high = min(output_high, limits.max_total_len - prompt.upper)
    output = _clamped(spec.output_len, limits.min_len, output_high)
    changed = {key: {"from": before.to_params(), "to": after.to_params()}
               for key, before, after in (("prompt_len", spec.prompt_len, prompt),
                                          ("output_len", spec.output_len, output))
               if before != after}
    if not changed:
        return workload, {}
    clamped = dataclasses.replace(spec, prompt_len=prompt, output_len=output)
    return Workload(KIND, workload.name, {**workload.params, **clamped.to_params()}), changed


@dataclass(frozen=True)
class ReferenceRun:
    """One run of a reference harness: its own summary in the advisor's metric names, the
    per-request timings rebuilt as :class:`RequestRecord` (times from each request's own send,
    so the validity gate can compare them with the server), and what it was run with."""

    harness: str
    argv: list[str]
    summary: dict[str, float]
    records: list[RequestRecord]
    duration_s: float
    raw: dict[str, Any] = field(default_factory=dict)


class ReferenceHarness(Protocol):
    """An independent load generator. :meth:`run` replays ``requests`` (in order, on its own
    arrival process at ``rate_rps``) against an OpenAI-compatible server and must not return
    before every request finished or failed."""

    name: str
    limits: LengthLimits

    def unavailable_reason(self) -> str | None:
        """None when the harness can run here, else why not (one line)."""
        ...

    def run(self, *, base_url: str, served_model: str, tokenizer: Path,
            requests: Sequence[RequestSpec], rate_rps: float, seed: int, workdir: Path,
            timeout_s: float) -> ReferenceRun: ...

    def close(self) -> None:
        """Release what the harness keeps between runs (a worker process); called once at the
        end."""
        ...


def sharegpt_dataset(requests: Sequence[RequestSpec]) -> list[dict[str, Any]]:
    """``requests`` as ShareGPT entries, in order: the prompt's text and a completion of exactly
    ``output_len`` tokens of the word-level vocabulary (:mod:`objectives.llm.models`)."""
    entries = []
    for r in requests:
        completion = [N_SPECIAL_TOKENS + (k % 97) for k in range(r.output_len)]
        entries.append({"id": f"advisor-{r.index}", "conversations": [
            {"from": "human", "value": prompt_text(r.prompt_token_ids)},
            {"from": "gpt", "value": prompt_text(completion)}]})
    return entries


def records_from_timings(requests: Sequence[RequestSpec], *, start_s: Sequence[float],
                         ttft_s: Sequence[float], itl_s: Sequence[Sequence[float]],
                         output_tokens: Sequence[int], errors: Sequence[str | None]
                         ) -> list[RequestRecord]:
    """Per-request records from a harness's timings (each request timed from its own send: its
    scheduled time is its send time, so send lateness is not judged). Chunk times are the first
    token's time plus the cumulative inter-token gaps; the end is the last chunk."""
    if not (len(requests) == len(start_s) == len(ttft_s) == len(itl_s) == len(output_tokens)
            == len(errors)):
        raise ValueError("a harness returned timings of different lengths")
    t0 = min(start_s, default=0.0)
    records = []
    for spec, start, ttft, gaps, tokens, error in zip(requests, start_s, ttft_s, itl_s,
                                                      output_tokens, errors, strict=True):
        sent = start - t0
        record = RequestRecord(index=spec.index, scheduled_s=sent, prompt_len=spec.prompt_len,
                               sent_s=sent)
        if error:
            record.error = str(error)
        elif ttft is not None and ttft > 0:
            first = sent + ttft
            record.chunk_times_s = [first, *(first + s for s in itertools.accumulate(gaps))]
            record.end_s = record.chunk_times_s[-1]
            record.output_tokens = int(tokens) if tokens else len(record.chunk_times_s)
        else:
            record.error = "no first token"
        records.append(record)
    return records

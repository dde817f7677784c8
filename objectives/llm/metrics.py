"""Per-request LLM serving metrics and their per-trial summary, defined once for every LLM target.

The definitions follow ``vllm bench serve`` (``vllm/benchmarks/serve.py``), with one deliberate
difference: latencies are measured from the request's *scheduled* arrival, not from when the
client sent it. A client that falls behind (or a concurrency cap that holds a request back) then
counts against the server, as a user who arrived on schedule would see it. When the client keeps
up, sent == scheduled and the numbers equal vLLM's. For a request with scheduled arrival ``a``,
send time ``s``, chunk times ``c_1 < ... < c_k`` (chunks that carried output text), end time
``e`` and ``n`` output tokens:

- TTFT = c_1 − a
- E2E = e − a
- ITL = (c_2 − c_1, ..., c_k − c_{k−1}), one value per chunk gap, pooled over all requests
  (a chunk may carry several tokens; this is what vLLM times)
- TPOT = (E2E − TTFT) / (n − 1) for n > 1; undefined (left out of the TPOT statistics) for n = 1
- queue_delay = s − a (kept per request; 0 when the client keeps up)

When the stream ends with its last token chunk (e == c_k), E2E = TTFT + sum(ITL) exactly.
Percentiles use numpy's default (linear) interpolation, as vLLM does. docs/metrics.md says more.

A request *cut off* at the workload's drain limit (``RequestRecord.cut_s = x``: still running, or
not even sent, when the measurement stopped waiting) has no TTFT or E2E, only lower bounds:
TTFT >= (c_1 or x) − a and E2E >= x − a. Those bounds enter the TTFT and E2E statistics in its
place (leaving it out would keep exactly the slowest requests out of the percentiles), its chunk
gaps enter ITL, its chunks count as output tokens, it has no TPOT, it is never good, and
``cut_requests`` counts it. The statistics are then lower bounds too: an SLO they violate is
violated. This is sound for SLO bounds below the drain limit, which every cut request exceeds.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from advisor.errors import SLOParseError, TrialFailedError
from objectives.llm.requests import RequestRecord
from objectives.measurement import Measurement
from objectives.slo import SLO

__all__ = [
    "GOODPUT_KEYS",
    "PERCENTILES",
    "GoodputFromSLO",
    "PerRequest",
    "cut_lower_bounds",
    "goodput_bounds_from_slo",
    "goodput_from_samples",
    "latency_percentile",
    "per_request",
    "request_samples",
    "summarize",
    "with_goodput",
]

PERCENTILES: tuple[int, ...] = (50, 90, 95, 99)
#: The per-request bounds goodput understands, in milliseconds.
GOODPUT_KEYS: tuple[str, ...] = ("ttft_ms", "tpot_ms", "e2e_ms")
_LATENCY_METRIC = re.compile(r"^(?P<family>ttft|tpot|e2e)_(?:p(?P<percentile>\d+)|mean)_ms$")
_MAX_REASONS = 3


@dataclass(frozen=True, slots=True)
class PerRequest:
    """The latencies of one successful request, in seconds (see the module docstring)."""

    index: int
    ttft_s: float
    e2e_s: float
    itl_s: tuple[float, ...]
    tpot_s: float | None
    output_tokens: int
    queue_delay_s: float

    def meets(self, bounds_ms: Mapping[str, float]) -> bool:
        """Whether every per-request bound in ``bounds_ms`` (keys of :data:`GOODPUT_KEYS`) holds.

        A request with one output token has no TPOT and passes a TPOT bound, as in vLLM.
        """
        values = {"ttft_ms": self.ttft_s * 1e3, "e2e_ms": self.e2e_s * 1e3,
                  "tpot_ms": None if self.tpot_s is None else self.tpot_s * 1e3}
        for key, limit in bounds_ms.items():
            if key not in values:
                raise SLOParseError(f"unknown goodput bound {key!r}; valid: "
                                    f"{', '.join(GOODPUT_KEYS)}")
            value = values[key]
            if value is not None and value > limit:
                return False
        return True


def per_request(record: RequestRecord) -> PerRequest:
    """The metrics of one record; a failed or inconsistent record raises :class:`ValueError`."""
    i = record.index
    if record.error is not None:
        raise ValueError(f"request {i} failed: {record.error}")
    chunks = record.chunk_times_s
    if not chunks:
        raise ValueError(f"request {i} has no token chunk")
    if record.end_s is None:
        raise ValueError(f"request {i} has no end time")
    if record.sent_s is None:
        raise ValueError(f"request {i} has chunks but no send time")
    if record.output_tokens < 1:
        raise ValueError(f"request {i} reports {record.output_tokens} output tokens")
    if any(b < a for a, b in itertools.pairwise(chunks)):
        raise ValueError(f"request {i}: chunk times are not in order: {chunks}")
    if not record.scheduled_s <= record.sent_s <= chunks[0]:
        raise ValueError(f"`scheduled_s <= sent_s <= first chunk` must hold for request {i}, but "
                         f"got ({record.scheduled_s=}, {record.sent_s=}, {chunks[0]=})")
    if record.end_s < chunks[-1]:
        raise ValueError(f"request {i} ends ({record.end_s}) before its last chunk "
                         f"({chunks[-1]})")
    ttft = chunks[0] - record.scheduled_s
    e2e = record.end_s - record.scheduled_s
    n = record.output_tokens
    return PerRequest(
        index=i, ttft_s=ttft, e2e_s=e2e,
        itl_s=tuple(b - a for a, b in itertools.pairwise(chunks)),
        tpot_s=(e2e - ttft) / (n - 1) if n > 1 else None,
        output_tokens=n, queue_delay_s=record.sent_s - record.scheduled_s,
    )


def _family(prefix: str, values_s: Sequence[float]) -> dict[str, float]:
    if not values_s:
        return {}
    ms = np.asarray(values_s, dtype=float) * 1e3
    out = {f"{prefix}_p{q}_ms": float(np.percentile(ms, q)) for q in PERCENTILES}
    out[f"{prefix}_mean_ms"] = float(ms.mean())
    return out


def _failure_reason(record: RequestRecord) -> str:
    if record.error is not None:
        return record.error
    return "no token chunk" if not record.chunk_times_s else "no end time"


def summarize(records: Sequence[RequestRecord], *, duration_s: float,
              goodput_slo_ms: Mapping[str, float] | None = None) -> dict[str, float]:
    """The trial's LLM metrics, named as in :mod:`objectives.metrics`.

    Latency families (``ttft``, ``tpot``, ``itl``, ``e2e``: p50/p90/p95/p99/mean in ms) are taken
    over successful requests (plus the lower bounds of requests cut off at the drain limit, see
    the module docstring); a family with no sample at all (TPOT when every request produced
    one token, ITL when every stream had one chunk) is left out rather than reported as 0, so an
    SLO on it counts as violated. Throughputs divide by ``duration_s`` (run start to last
    completion). Goodput counts successful requests meeting every bound in ``goodput_slo_ms``
    (keys ``ttft_ms``, ``tpot_ms``, ``e2e_ms``); without bounds it equals ``requests_per_s``.

    Failed records (``not record.ok``) count in ``failed_requests``; a record that claims success
    but is inconsistent raises :class:`ValueError` (a measuring bug, not a failed request). If no
    request succeeded, raises :class:`TrialFailedError` with the first reasons.
    """
    if not duration_s > 0:
        raise ValueError(f"`duration_s > 0` must hold, but got {duration_s=}")
    bounds = dict(goodput_slo_ms or {})
    unknown = sorted(set(bounds) - set(GOODPUT_KEYS))
    if unknown:
        raise SLOParseError(f"unknown goodput bound(s) {', '.join(map(repr, unknown))}; valid: "
                            f"{', '.join(GOODPUT_KEYS)}")
    ok = [per_request(r) for r in records if r.ok]
    cut = [r for r in records if r.cut_s is not None]
    failed = [r for r in records if not r.ok and r.cut_s is None]
    if not ok and not cut:
        reasons = "; ".join(f"request {r.index}: {_failure_reason(r)}"
                            for r in failed[:_MAX_REASONS])
        raise TrialFailedError(f"all {len(records)} requests failed"
                               + (f" ({reasons})" if reasons else ""))
    good = sum(1 for p in ok if p.meets(bounds))
    cut_bounds = [cut_lower_bounds(r) for r in cut]
    out: dict[str, float] = {}
    out |= _family("ttft", [p.ttft_s for p in ok] + [b[0] for b in cut_bounds])
    out |= _family("tpot", [p.tpot_s for p in ok if p.tpot_s is not None])
    out |= _family("itl", [x for p in ok for x in p.itl_s]
                   + [b - a for r in cut for a, b in itertools.pairwise(r.chunk_times_s)])
    out |= _family("e2e", [p.e2e_s for p in ok] + [b[1] for b in cut_bounds])
    tokens = sum(p.output_tokens for p in ok) + sum(len(r.chunk_times_s) for r in cut)
    out["output_tokens_per_s"] = tokens / duration_s
    out["requests_per_s"] = len(ok) / duration_s
    out["goodput_requests_per_s"] = good / duration_s
    out["failed_requests"] = float(len(failed))
    out["cut_requests"] = float(len(cut))
    return out


def cut_lower_bounds(record: RequestRecord) -> tuple[float, float]:
    """(TTFT, E2E) lower bounds in seconds of a request cut off at ``record.cut_s``."""
    if record.cut_s is None:
        raise ValueError(f"request {record.index} was not cut off")
    first = record.chunk_times_s[0] if record.chunk_times_s else record.cut_s
    return first - record.scheduled_s, record.cut_s - record.scheduled_s


def latency_percentile(metric: str) -> tuple[str, float] | None:
    """The per-request latency (a key of :data:`GOODPUT_KEYS`) and quantile (0.95 for ``p95``)
    that a percentile metric such as ``ttft_p95_ms`` summarizes; None for any other metric (a
    mean, ITL, whose gaps are pooled over requests, or a non-latency metric)."""
    match = _LATENCY_METRIC.match(metric)
    if match is None or match["percentile"] is None:
        return None
    return f"{match['family']}_ms", int(match["percentile"]) / 100


def goodput_bounds_from_slo(slo: SLO) -> dict[str, float]:
    """Per-request goodput thresholds (ms) implied by an SLO's upper bounds on latency metrics.

    An upper bound on any statistic of a per-request latency becomes that latency's per-request
    threshold: ``ttft_p95_ms <= 300`` makes 300 ms the TTFT threshold (a request is good when its
    own TTFT is <= 300 ms). Several bounds on one latency keep the strictest. ITL bounds have no
    per-request counterpart and are ignored, as are lower bounds and other metrics.
    """
    out: dict[str, float] = {}
    for bound in slo.bounds:
        match = _LATENCY_METRIC.match(bound.metric)
        if bound.op != "<=" or match is None:
            continue
        key = f"{match['family']}_ms"
        out[key] = min(out.get(key, bound.threshold), bound.threshold)
    return out


def request_samples(records: Sequence[RequestRecord]) -> dict[str, list[Any]]:
    """Per-request figures to store with a trial (column-wise, request order; None = failed;
    a ``cut`` column, when some request was cut off, marks those whose figures are lower bounds).

    Kept so that goodput can be recomputed for any SLO after the fact (a trial measures the same
    whatever the study's SLO) and so that a trial's distribution can be re-examined later.
    """
    cols: dict[str, list[Any]] = {"index": [], "ttft_ms": [], "tpot_ms": [], "e2e_ms": [],
                                  "output_tokens": []}
    if any(r.cut_s is not None for r in records):
        cols["cut"] = [r.cut_s is not None for r in records]
    for record in records:
        p = per_request(record) if record.ok else None
        cols["index"].append(record.index)
        if record.cut_s is not None:  # lower bounds; never good (see goodput_from_samples)
            ttft, e2e = cut_lower_bounds(record)
            cols["ttft_ms"].append(round(ttft * 1e3, 4))
            cols["tpot_ms"].append(None)
            cols["e2e_ms"].append(round(e2e * 1e3, 4))
            cols["output_tokens"].append(len(record.chunk_times_s))
            continue
        cols["ttft_ms"].append(None if p is None else round(p.ttft_s * 1e3, 4))
        cols["tpot_ms"].append(None if p is None or p.tpot_s is None
                               else round(p.tpot_s * 1e3, 4))
        cols["e2e_ms"].append(None if p is None else round(p.e2e_s * 1e3, 4))
        cols["output_tokens"].append(None if p is None else p.output_tokens)
    return cols


def goodput_from_samples(samples: Mapping[str, Sequence[Any]], *, duration_s: float,
                         bounds_ms: Mapping[str, float]) -> float:
    """Requests per second that succeeded and met every per-request bound (DistServe goodput),
    from :func:`request_samples`. A request without a TPOT (one output token) passes TPOT."""
    if not duration_s > 0:
        raise ValueError(f"`duration_s > 0` must hold, but got {duration_s=}")
    good = 0
    cut = samples.get("cut") or [False] * len(samples["e2e_ms"])
    for i in range(len(samples["e2e_ms"])):
        if samples["e2e_ms"][i] is None or cut[i]:
            continue  # failed, or cut off unfinished
        values = {key: samples[key][i] for key in GOODPUT_KEYS}
        if all(values[key] is None or values[key] <= limit for key, limit in bounds_ms.items()):
            good += 1
    return good / duration_s


def with_goodput(measurement: Measurement, slo: SLO) -> Measurement:
    """``measurement`` with ``goodput_requests_per_s`` recomputed for ``slo``'s per-request
    bounds (see :func:`goodput_bounds_from_slo`), when it carries per-request samples."""
    samples = measurement.details.get("requests")
    duration = measurement.details.get("load_duration_s")
    if not samples or not duration:
        return measurement
    bounds = goodput_bounds_from_slo(slo)
    metrics = dict(measurement.metrics)
    metrics["goodput_requests_per_s"] = goodput_from_samples(samples, duration_s=duration,
                                                             bounds_ms=bounds)
    details = {**measurement.details, "goodput_bounds_ms": bounds}
    return dataclasses.replace(measurement, metrics=metrics, details=details)


class GoodputFromSLO:
    """Mixin for LLM targets: the driver's SLO sets the per-request bounds of goodput."""

    def apply_slo(self, measurement: Measurement, slo: SLO) -> Measurement:
        return with_goodput(measurement, slo)

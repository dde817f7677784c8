"""The validity gate: a serving measurement counts only when the client's timings agree with the
server's own and the client kept up with its schedule.

The client is the only one that sees what a user sees (the network, the HTTP path, the queue
before admission); the server's histograms are the only ones immune to a lagging client. A trial
is ``valid`` when both agree within :class:`Tolerance` on every figure both have, and the client's
event loop and send schedule stayed within :data:`MAX_LOOP_LAG_P99_MS` and
:data:`MAX_SEND_LATE_P99_MS`. Otherwise it gets a named reason:

- ``client_bound``: the client's own health failed — its event loop woke late or it sent requests
  behind schedule — so every timestamp it took may be late; re-measuring with more client
  processes is the remedy;
- ``server_disagrees``: the client kept up but saw *less* than the server, or the request and
  token counts differ (other traffic on the server, a proxy, requests the server never saw);
- ``unchecked``: the endpoint exposes no usable metrics, so only the client's own lag was checked.

- ``frontend_delay``: the client kept up and read *more* than the server beyond the tolerance.
  vLLM stamps a request's arrival in its API server after the HTTP layer and tokenisation, so a
  busy frontend delays requests before its histograms start (seen on the H200: client lag p99
  1.1 ms with 8 processes, TTFT and E2E means both ~260 ms above the server's at 75 req/s, and
  ``vllm bench serve`` reading above the server too). That is latency a user sees: such a window
  is used, labelled, with the gap kept as ``frontend_delay_ms`` (client minus server TTFT mean).

``valid`` therefore always means client and server agree within :class:`Tolerance`.

Servers without latency histograms are checked with what they do report. llama.cpp's server
streams each request's own timings with its last chunk (:attr:`RequestRecord.server_timings`):
per-request TPOT is then compared exactly (mean and p95), and the client's TTFT must not lie
below the server's prompt time, which starts when a slot takes the request up (a floor: the wait
for a free slot is not in it). Its ``tokens_predicted_seconds_total`` counter sums the same
first-to-last-token spans over the window, and the client's spans must add up to it.

Percentile checks use the bucket a server percentile is known to lie in (``p95_bracket_ms`` from
:mod:`objectives.llm.server_metrics`): the client's value agrees when it is within tolerance of
that bracket. Means are exact on both sides and checked directly. docs/metrics.md justifies the
bounds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from objectives.llm.requests import RequestRecord

__all__ = [
    "CLIENT_BOUND",
    "FRONTEND_DELAY",
    "GATE_VERSION",
    "MAX_LOOP_LAG_P99_MS",
    "MAX_SEND_LATE_P99_MS",
    "SERVER_DISAGREES",
    "UNCHECKED",
    "VALID",
    "Check",
    "Tolerance",
    "Verdict",
    "judge",
    "rejudge",
    "unchecked_details",
]

#: Bumped when the gate's rules change (stored with every verdict). 1: a client reading more than
#: the server was client-bound; 2: only the client's own health makes it client-bound, a healthy
#: client reading more was valid; 3: that case is ``frontend_delay``, ``valid`` means agreement;
#: 4: per-request timings streamed by the server and a decode-seconds counter are checked too.
GATE_VERSION = 4
VALID, UNCHECKED, CLIENT_BOUND, SERVER_DISAGREES, FRONTEND_DELAY = (
    "valid", "unchecked", "client_bound", "server_disagrees", "frontend_delay")
#: A client whose event loop woke later than this at the 99th percentile timed chunks late by as
#: much: half the TTFT tolerance's absolute floor.
MAX_LOOP_LAG_P99_MS = 10.0
#: Requests sent later than their arrival by more than this (p99, no concurrency cap) mean the
#: client could not keep its schedule.
MAX_SEND_LATE_P99_MS = 10.0


@dataclass(frozen=True)
class Tolerance:
    """How far client and server may differ: ``max(relative * server value, floor_ms)``.

    15 % is the agreement the reference cross-check asks for. The floors cover what lies between
    the engine's timestamp and the client's read on one host (SSE framing, detokenisation, the
    HTTP stack): ~milliseconds for TTFT and E2E, and far less per token for TPOT, which divides
    the first-to-last-chunk span by the output length (>= 16 tokens in the presets)."""

    relative: float = 0.15
    ttft_floor_ms: float = 20.0
    e2e_floor_ms: float = 20.0
    tpot_floor_ms: float = 1.0
    #: Request counts and streamed tokens are exact on both sides, but a request cut off at the
    #: drain limit may have produced tokens the client never read.
    count_relative: float = 0.05

    def allowed_ms(self, family: str, reference_ms: float) -> float:
        floor = {"ttft": self.ttft_floor_ms, "e2e": self.e2e_floor_ms,
                 "tpot": self.tpot_floor_ms}[family]
        return max(self.relative * abs(reference_ms), floor)


@dataclass(frozen=True)
class Check:
    """One figure compared: the client's value, the server's (with its bracket for a percentile)
    and whether they agree. ``excess`` > 0 means the client read more than the server allows."""

    name: str
    client: float
    server: float
    allowed: float
    agrees: bool
    excess: float
    bracket: tuple[float, float | None] | None = None

    def describe(self) -> str:
        where = ""
        if self.bracket is not None:
            hi = "inf" if self.bracket[1] is None else f"{self.bracket[1]:.4g}"
            where = f" in [{self.bracket[0]:.4g}, {hi}]"
        return (f"{self.name}: client {self.client:.4g} vs server {self.server:.4g}{where} "
                f"(allowed ±{self.allowed:.3g})")


@dataclass(frozen=True)
class Verdict:
    """The gate's answer for one measured window."""

    validity: str
    reasons: tuple[str, ...]
    checks: tuple[Check, ...]
    loop_lag_p99_ms: float | None
    send_late_p99_ms: float | None
    #: Client minus server TTFT mean (ms): delay before the server's histograms start.
    frontend_delay_ms: float | None = None

    @property
    def ok(self) -> bool:
        return self.validity == VALID

    def to_dict(self) -> dict[str, Any]:
        return {"validity": self.validity, "reasons": list(self.reasons),
                "checks": [asdict(c) for c in self.checks],
                "loop_lag_p99_ms": self.loop_lag_p99_ms,
                "send_late_p99_ms": self.send_late_p99_ms,
                "frontend_delay_ms": self.frontend_delay_ms}


def unchecked_details(reason: str) -> dict[str, Any]:
    """The verdict details of a trial that nothing independent can check (an in-process engine
    whose tokens the same process times): ``unchecked``, with why."""
    return {"validity": UNCHECKED, "validity_reasons": [reason], "validity_checks": [],
            "validity_gate": GATE_VERSION,
            "server_metrics": {"available": False, "reason": reason}}


def rejudge(details: Mapping[str, Any]) -> str | None:
    """The current gate's verdict on a stored window, from what its details kept (the checks,
    the client's loop lag, its send lateness or, for a version-1 verdict, its reasons); None when
    the details hold no verdict. Lets trials judged by an older gate be judged again without
    re-measuring them."""
    if "validity" not in details:
        return None
    checks = details.get("validity_checks") or []
    if not checks:
        return str(details["validity"])
    lag = details.get("client_loop_lag_p99_ms")
    late = details.get("client_send_late_p99_ms")
    reasons = " ".join(details.get("validity_reasons") or [])
    lagging = (lag is not None and lag > MAX_LOOP_LAG_P99_MS) or (
        late is not None and late > MAX_SEND_LATE_P99_MS) or (
        late is None and "requests sent late" in reasons)
    if lagging:
        return CLIENT_BOUND
    if all(c["agrees"] for c in checks):
        return VALID
    if all(c["agrees"] or (c["name"].endswith("_ms") and c["excess"] > 0) for c in checks):
        return FRONTEND_DELAY
    return SERVER_DISAGREES


def _client_view(records: Sequence[RequestRecord]) -> dict[str, list[float]]:
    """The client's per-request figures (ms) over the requests the server's histograms hold: TTFT
    for every request that got a first chunk (cut ones too), TPOT and E2E for finished ones."""
    ttft, tpot, e2e = [], [], []
    for r in records:
        if not r.chunk_times_s:
            continue
        first = (r.chunk_times_s[0] - r.scheduled_s) * 1e3
        ttft.append(first)
        if r.ok and r.end_s is not None:
            total = (r.end_s - r.scheduled_s) * 1e3
            e2e.append(total)
            if r.output_tokens > 1:
                tpot.append((total - first) / (r.output_tokens - 1))
    return {"ttft": ttft, "tpot": tpot, "e2e": e2e}


def _bracket_check(name: str, family: str, client: float, server: Mapping[str, Any], q: int,
                   tolerance: Tolerance) -> Check | None:
    estimate, bracket = server.get(f"p{q}_ms"), server.get(f"p{q}_bracket_ms")
    if estimate is None or bracket is None:
        return None
    lower, upper = float(bracket[0]), (None if bracket[1] is None else float(bracket[1]))
    allowed = tolerance.allowed_ms(family, float(estimate))
    if client < lower:
        excess = client - lower
    elif upper is not None and client > upper:
        excess = client - upper
    else:
        excess = 0.0
    agrees = abs(excess) <= allowed
    return Check(name, client, float(estimate), allowed, agrees, excess, (lower, upper))


def _mean_check(name: str, family: str, client: float, server_mean: float,
                tolerance: Tolerance) -> Check:
    allowed = tolerance.allowed_ms(family, server_mean)
    diff = client - server_mean
    return Check(name, client, server_mean, allowed, abs(diff) <= allowed, diff)


def _count_check(name: str, client: float, server: float, tolerance: Tolerance) -> Check:
    allowed = max(tolerance.count_relative * max(client, server), 2.0)
    diff = client - server
    return Check(name, client, server, allowed, abs(diff) <= allowed, diff)


def _lower_bound_check(name: str, family: str, client: float, server_floor: float,
                       tolerance: Tolerance) -> Check:
    """The client's value must not lie below what the server knows is a floor for it (a client
    reading more is expected: the floor leaves out time the server cannot see)."""
    allowed = tolerance.allowed_ms(family, server_floor)
    diff = client - server_floor
    return Check(name, client, server_floor, allowed, diff >= -allowed, min(0.0, diff))


def _decode_span_s(record: RequestRecord) -> float:
    """From the client's first output chunk to its last: what a server times from a request's
    first token to its last."""
    return record.chunk_times_s[-1] - record.chunk_times_s[0]


def _streamed_timing_checks(records: Sequence[RequestRecord], tolerance: Tolerance
                            ) -> list[Check]:
    """Checks against the timings the server streamed back with each request
    (:attr:`RequestRecord.server_timings`): per-request TPOT (mean and p95, exact on both sides),
    and the TTFT the client read against the server's prompt time, a floor for it (the server
    starts its clock when it takes the request up, after any wait for a free slot)."""
    timed = [r for r in records if r.ok and r.server_timings is not None]
    if not timed:
        return []
    checks: list[Check] = []
    client_tpot, server_tpot = [], []
    for r in timed:
        assert r.server_timings is not None
        steps = r.server_timings["decode_tokens"] - 1
        if r.output_tokens > 1 and steps > 0:
            client_tpot.append(_decode_span_s(r) * 1e3 / (r.output_tokens - 1))
            server_tpot.append(r.server_timings["decode_ms"] / steps)
    if client_tpot:
        for name, stat in (("streamed_tpot_mean_ms", np.mean),
                           ("streamed_tpot_p95_ms", lambda v: np.percentile(v, 95))):
            checks.append(_mean_check(name, "tpot", float(stat(client_tpot)),
                                      float(stat(server_tpot)), tolerance))
    client_ttft = [(r.chunk_times_s[0] - r.scheduled_s) * 1e3 for r in timed]
    server_prompt = [r.server_timings["prompt_ms"] for r in timed if r.server_timings]
    checks.append(_lower_bound_check("ttft_mean_over_streamed_prompt_ms", "ttft",
                                     float(np.mean(client_ttft)), float(np.mean(server_prompt)),
                                     tolerance))
    return checks


def _decode_total_check(records: Sequence[RequestRecord], server_decode_s: float,
                        tolerance: Tolerance) -> Check | None:
    """The client's first-to-last-chunk spans, summed over finished requests, against the
    server's counter of the same spans (e.g. llama.cpp's ``tokens_predicted_seconds_total``)."""
    done = [r for r in records if r.ok]
    if not done:
        return None
    steps = sum(max(r.output_tokens - 1, 0) for r in done)
    client_ms = sum(_decode_span_s(r) for r in done) * 1e3
    server_ms = server_decode_s * 1e3
    allowed = max(tolerance.relative * abs(server_ms), tolerance.tpot_floor_ms * max(steps, 1))
    diff = client_ms - server_ms
    return Check("decode_total_ms", client_ms, server_ms, allowed, abs(diff) <= allowed, diff)


def _p99(values: Sequence[float]) -> float | None:
    return float(np.percentile(np.asarray(values), 99)) if len(values) else None


def judge(records: Sequence[RequestRecord], server: Mapping[str, Any] | None, *,
          loop_lag_s: Sequence[float] = (), capped: bool = False,
          tolerance: Tolerance | None = None, stopped_early: bool = False) -> Verdict:
    """Compare the client's ``records`` of one window with the server's summary of the same
    window (``summarize_window``; None when the server exposes none) and judge the window.

    ``capped`` says a concurrency cap held requests back on purpose, so send lateness is not held
    against the client. E2E is compared only when no request was cut off at the drain limit (the
    server records aborted requests' E2E too; the client has only lower bounds for them).
    ``stopped_early`` says the client stopped the window once its SLO miss was settled
    (objectives/llm/early_stop.py): every request then in flight was cut at once, and the
    server went on generating for them until it saw the disconnects, so the streamed-token
    count is not compared (on the H100, 2026-12-07, the server counted 6-30 % more tokens than
    the client read in each settled window, which the gate then called ``server_disagrees``).
    """
    tol = tolerance or Tolerance()
    lag = _p99([x * 1e3 for x in loop_lag_s])
    late = None if capped else _p99([(r.sent_s - r.scheduled_s) * 1e3 for r in records
                                     if r.sent_s is not None])
    reasons: list[str] = []
    lagging = False
    if lag is not None and lag > MAX_LOOP_LAG_P99_MS:
        lagging = True
        reasons.append(f"client event-loop lag p99 {lag:.1f} ms > {MAX_LOOP_LAG_P99_MS:g} ms")
    if late is not None and late > MAX_SEND_LATE_P99_MS:
        lagging = True
        reasons.append(f"requests sent late: p99 {late:.1f} ms > {MAX_SEND_LATE_P99_MS:g} ms")
    cut = any(r.cut_s is not None for r in records)
    streamed = _streamed_timing_checks(records, tol)
    decode_s = None if not server or cut else server.get("decode_seconds_delta")
    if not streamed and decode_s is None and (
            not server or not any(f in server for f in ("ttft", "tpot", "e2e"))):
        why = "the server exposes no usable metrics"
        if server and server.get("reason"):
            why += f" ({server['reason']})"
        return Verdict(CLIENT_BOUND if lagging else UNCHECKED, (*reasons, why), (), lag, late)
    server = server or {}
    view = _client_view(records)
    checks: list[Check] = list(streamed)
    if decode_s is not None and (check := _decode_total_check(records, float(decode_s), tol)):
        checks.append(check)
    for family in ("ttft", "tpot", "e2e"):
        summary = server.get(family)
        values = view[family]
        if not summary or not values or (family == "e2e" and cut):
            continue
        if summary.get("mean_ms") is not None:
            checks.append(_mean_check(f"{family}_mean_ms", family, float(np.mean(values)),
                                      float(summary["mean_ms"]), tol))
        for q in ((50, 95) if family == "ttft" else (95,)):
            check = _bracket_check(f"{family}_p{q}_ms", family,
                                   float(np.percentile(np.asarray(values), q)), summary, q, tol)
            if check is not None:
                checks.append(check)
    ttft_summary = server.get("ttft")
    if ttft_summary and ttft_summary.get("count") is not None:
        checks.append(_count_check("requests_with_first_token", len(view["ttft"]),
                                   float(ttft_summary["count"]), tol))
    if server.get("generation_tokens_delta") is not None and not stopped_early:
        client_tokens = sum(r.output_tokens for r in records if r.ok) + sum(
            len(r.chunk_times_s) for r in records if r.cut_s is not None)
        checks.append(_count_check("output_tokens", float(client_tokens),
                                   float(server["generation_tokens_delta"]), tol))
    failed = [c for c in checks if not c.agrees]
    reasons += [c.describe() for c in failed]
    ttft_mean = next((c for c in checks if c.name == "ttft_mean_ms"), None)
    delay = None if ttft_mean is None else ttft_mean.client - ttft_mean.server
    if lagging:
        validity = CLIENT_BOUND
    elif not failed:
        validity = VALID
    elif all(c.agrees or (c.name.endswith("_ms") and c.excess > 0) for c in checks):
        validity = FRONTEND_DELAY  # latency the healthy client saw on top of the server's
    else:
        validity = SERVER_DISAGREES
    return Verdict(validity, tuple(reasons), tuple(checks), lag, late, delay)


"""Stopping a measurement window once its SLO miss is settled: which bounds a window can settle,
the exact binomial test that settles them, and the switch that turns every trial shortcut off.

A bound ``<latency>_p<Q>_ms <= T`` on a per-request latency (TTFT, TPOT, E2E) is missed when more
than ``1 - Q`` of the window's requests exceed ``T``. While the window runs, the client counts the
requests *known* to exceed ``T``: a TTFT is known once the first token came, or once a request has
waited longer than ``T`` since its scheduled arrival without one; a TPOT or an E2E once the request
completed. Over the ``n`` requests scheduled so far (those not known counted as meeting ``T``), a
one-sided Clopper-Pearson lower bound at :data:`CONFIDENCE` on the exceedance fraction above
``1 - Q``, with at least :data:`MIN_REQUESTS` scheduled, settles the miss: the window's Q-quantile
is above ``T`` beyond reasonable doubt, and the rest of the window would only confirm it (under a
fixed arrival rate a queue that formed does not shrink by itself). The client then stops sending,
cuts what is in flight after :data:`GRACE_S` and the window ends.

Only misses are settled. A window that meets its bounds early can still miss later (the queue
grows past the server's knee as the window goes on), so meeting is only ever known at the end.
ITL percentiles are not settled: their gaps are pooled over requests, so the number of samples the
window will hold is not known while it runs. ``ADVISOR_TRIAL_SHORTCUTS=0`` measures whole windows
(and turns off the other shortcuts of a trial's series, objectives/llm/serving_target.py).
"""

from __future__ import annotations

import bisect
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from objectives.llm.metrics import latency_percentile
from objectives.llm.requests import RequestRecord, RequestSpec
from objectives.slo import SLO

__all__ = ["CONFIDENCE", "GRACE_S", "MIN_REQUESTS", "SHORTCUTS_ENV", "ExceedanceTally",
           "LocalJudge", "MissBound",
           "MissWatch", "Settled", "ShardReport", "binomial_sf", "clopper_pearson_lower",
           "exceedances", "miss_bounds", "shortcuts_enabled"]

#: Environment variable: ``0`` (or ``false``, ``no``, ``off``) turns every trial shortcut off
#: (windows settled early, higher rates skipped after a miss, client processes carried forward,
#: warm-up once per server start), e.g. to time a trial with and without them on one machine.
SHORTCUTS_ENV = "ADVISOR_TRIAL_SHORTCUTS"
#: The one-sided confidence of the lower bound that settles a miss. The client looks many times a
#: window, and every look is another chance to settle a window that would have met; simulated
#: looks after every arrival (20 to 400 requests, 4,000 windows each) settled a window whose
#: true exceedance is exactly 1 - Q (its quantile on the bound) as a miss 5 % of the time at
#: 0.99 and 0.65 % at 0.999, and one at 4 % (p96 on the bound: it meets) 1 % and 0.18 %.
CONFIDENCE = 0.999
#: The fewest scheduled requests a miss is settled over.
MIN_REQUESTS = 20
#: Seconds the requests in flight may still finish after a miss is settled; then they are cut.
GRACE_S = 1.0
#: How often the client checks whether a miss is settled (seconds).
POLL_S = 0.05


def shortcuts_enabled(env: Mapping[str, str] | None = None) -> bool:
    """Whether trial shortcuts are on: unless :data:`SHORTCUTS_ENV` says ``0``/false/no/off."""
    value = (os.environ if env is None else env).get(SHORTCUTS_ENV, "1")
    return value.strip().lower() not in ("0", "false", "no", "off")


@dataclass(frozen=True, slots=True)
class MissBound:
    """One SLO bound a window can settle: ``metric`` (``ttft_p95_ms``) bounds the ``quantile``
    of the per-request ``latency`` (``ttft_ms``, ``tpot_ms`` or ``e2e_ms``) by ``threshold_s``."""

    metric: str
    latency: str
    quantile: float
    threshold_s: float


def miss_bounds(slo: SLO | None) -> tuple[MissBound, ...]:
    """The bounds of ``slo`` a window can settle as missed: upper bounds on a percentile of a
    per-request latency (:func:`objectives.llm.metrics.latency_percentile`); none without an
    SLO."""
    out: list[MissBound] = []
    for bound in () if slo is None else slo.bounds:
        known = latency_percentile(bound.metric)
        if bound.op == "<=" and known is not None and 0 < known[1] < 1:
            out.append(MissBound(bound.metric, known[0], known[1], bound.threshold / 1e3))
    return tuple(out)


def binomial_sf(k: int, n: int, p: float) -> float:
    """``P(X >= k)`` for ``X ~ Binomial(n, p)``, summed from the tail's largest term outwards
    (no term that matters underflows)."""
    if k <= 0 or p >= 1:
        return 1.0
    if k > n or p <= 0:
        return 0.0

    def log_pmf(i: int) -> float:
        return (math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
                + i * math.log(p) + (n - i) * math.log1p(-p))

    odds = p / (1 - p)
    if k > n * p:  # the upper tail's terms shrink from k upwards
        term = math.exp(log_pmf(k))
        total, i = term, k
        while i < n and term > total * 1e-17:
            term *= (n - i) / (i + 1) * odds
            total += term
            i += 1
        return min(1.0, total)
    term = math.exp(log_pmf(k - 1))  # the lower tail's terms shrink from k - 1 downwards
    total, i = term, k - 1
    while i > 0 and term > total * 1e-17:
        term *= i / (n - i + 1) / odds
        total += term
        i -= 1
    return max(0.0, 1.0 - total)


def clopper_pearson_lower(k: int, n: int, confidence: float = CONFIDENCE) -> float:
    """The one-sided Clopper-Pearson (exact binomial) lower confidence bound on a proportion with
    ``k`` successes in ``n`` trials: the ``p`` at which ``P(X >= k) = 1 - confidence`` (the
    ``1 - confidence`` quantile of Beta(k, n - k + 1)); 0 for ``k = 0``."""
    if not 0 <= k <= n:
        raise ValueError(f"`0 <= k <= n` must hold, but got ({k=}, {n=})")
    if k == 0:
        return 0.0
    alpha = 1 - confidence
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        if binomial_sf(k, n, mid) < alpha:
            low = mid
        else:
            high = mid
    return low


def _exceeds(record: RequestRecord, bound: MissBound, now_s: float) -> bool:
    threshold = bound.threshold_s
    if bound.latency == "ttft_ms":
        if record.chunk_times_s:
            return record.chunk_times_s[0] - record.scheduled_s > threshold
        # Still waiting for its first token (sent or held back): its TTFT is at least this.
        return (record.error is None and record.end_s is None
                and now_s - record.scheduled_s > threshold)
    if not record.ok or record.end_s is None:
        return False
    e2e = record.end_s - record.scheduled_s
    if bound.latency == "e2e_ms":
        return e2e > threshold
    n = record.output_tokens
    ttft = record.chunk_times_s[0] - record.scheduled_s
    return n > 1 and (e2e - ttft) / (n - 1) > threshold


def exceedances(records: Sequence[RequestRecord], bounds: Sequence[MissBound],
                now_s: float) -> list[int]:
    """For each of ``bounds``, how many of ``records`` are known at ``now_s`` (seconds from the
    window's start) to exceed its threshold."""
    return [sum(1 for r in records if _exceeds(r, bound, now_s)) for bound in bounds]


class ExceedanceTally:
    """:func:`exceedances` of one growing list of records, polled many times a second inside the
    client's event loop: a finished record's verdict is final, so each poll looks only at the
    records still open (the loop must not stall for long: its timestamps are the measurement)."""

    def __init__(self, bounds: Sequence[MissBound]) -> None:
        self.bounds = tuple(bounds)
        self._final = [0] * len(self.bounds)
        self._open: list[int] | None = None

    def __call__(self, records: Sequence[RequestRecord], now_s: float) -> list[int]:
        if self._open is None:
            self._open = list(range(len(records)))
        counts = list(self._final)
        still_open: list[int] = []
        for pos in self._open:
            record = records[pos]
            finished = (record.end_s is not None or record.error is not None
                        or record.cut_s is not None)
            for j, bound in enumerate(self.bounds):
                if _exceeds(record, bound, now_s):
                    counts[j] += 1
                    if finished:
                        self._final[j] += 1
            if not finished:
                still_open.append(pos)
        self._open = still_open
        return counts


@dataclass(frozen=True, slots=True)
class Settled:
    """A window stopped because a miss was settled: the bound's ``metric``, when (``at_s`` from
    the window's start), over how many scheduled requests, how many of them were known to
    exceed, the lower bound on their share, and how many requests the client sent in all."""

    verdict: str
    metric: str
    at_s: float
    scheduled: int
    exceeding: int
    lower_bound: float
    sent: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class MissWatch:
    """Judges a window's counts of known exceedances against its bounds: built from the window's
    whole schedule, so it knows how many requests each bound counts over at any moment."""

    def __init__(self, bounds: Sequence[MissBound], requests: Sequence[RequestSpec], *,
                 confidence: float = CONFIDENCE, min_requests: int = MIN_REQUESTS) -> None:
        self.bounds = tuple(bounds)
        self.confidence = confidence
        self.min_requests = min_requests
        self._arrivals = sorted(r.arrival_s for r in requests)
        # A one-token request has no TPOT: TPOT bounds count over the others only.
        self._multi_token = sorted(r.arrival_s for r in requests if r.output_len > 1)

    def scheduled(self, bound: MissBound, now_s: float) -> int:
        """How many of the requests ``bound`` counts over had arrived by ``now_s``."""
        arrivals = self._multi_token if bound.latency == "tpot_ms" else self._arrivals
        return bisect.bisect_right(arrivals, now_s)

    def judge(self, exceeding: Sequence[int], now_s: float) -> Settled | None:
        """The first bound whose miss ``exceeding`` (known exceedances per bound) settles at
        ``now_s``, else None."""
        alpha = 1 - self.confidence
        for bound, k in zip(self.bounds, exceeding, strict=True):
            n = self.scheduled(bound, now_s)
            k = min(k, n)
            if n < self.min_requests or k == 0:
                continue
            # The lower bound exceeds 1 - Q exactly when P(X >= k | p = 1 - Q) < alpha.
            if binomial_sf(k, n, 1 - bound.quantile) < alpha:
                return Settled("miss", bound.metric, now_s, n, k,
                               clopper_pearson_lower(k, n, self.confidence))
        return None


class LocalJudge:
    """The client's stop check when one process times the whole window: counts and judges."""

    def __init__(self, watch: MissWatch) -> None:
        self.watch = watch
        self.settled: Settled | None = None
        self._tally = ExceedanceTally(watch.bounds)

    def __call__(self, records: Sequence[RequestRecord], now_s: float) -> bool:
        if self.settled is None:
            self.settled = self.watch.judge(self._tally(records, now_s), now_s)
        return self.settled is not None


@dataclass
class ShardReport:
    """The client's stop check in one of several client processes: it writes its share's counts
    into its ``slot`` of the shared ``counts`` (one integer per bound) for the parent, which
    judges the sum and sets ``stop`` once a miss is settled."""

    bounds: tuple[MissBound, ...]
    counts: Any  # a multiprocessing RawArray of len(bounds) * processes integers
    slot: int
    stop: Any  # a multiprocessing Event
    _tally: ExceedanceTally | None = None

    def __call__(self, records: Sequence[RequestRecord], now_s: float) -> bool:
        if self._tally is None:
            self._tally = ExceedanceTally(self.bounds)
        base = self.slot * len(self.bounds)
        for j, k in enumerate(self._tally(records, now_s)):
            self.counts[base + j] = k
        return bool(self.stop.is_set())

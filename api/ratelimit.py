"""An optional per-client rate limit: a token bucket per client address.

Open endpoints cost CPU on a cache miss (a recommendation ~260 ms on 2 cores), so one client
could keep the service busy. ``ADVISOR_API_RATE_LIMIT_RPS`` (off by default) refills each client's
bucket at that rate up to ``ADVISOR_API_RATE_LIMIT_BURST`` requests; a request finding it empty is
answered 429 with ``Retry-After``. Probes (``/healthz``, ``/readyz``) are never limited. The table
of clients is bounded (least recently seen dropped first), so varied addresses cannot grow it.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

__all__ = ["TokenBuckets"]

_MAX_CLIENTS = 10_000


class TokenBuckets:
    """``rate`` tokens per second per client, at most ``burst`` saved up."""

    def __init__(self, rate: float, burst: int, *, clock: Callable[[], float] | None = None
                 ) -> None:
        if not rate > 0 or burst < 1:
            raise ValueError(f"a rate limit needs rate > 0 and burst >= 1, got {rate}, {burst}")
        self.rate, self.burst = rate, float(burst)
        self._clock = clock or time.monotonic
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, client: str) -> float:
        """Spend one token of ``client``: 0 when allowed, else the seconds until one refills."""
        now = self._clock()
        with self._lock:
            tokens, seen = self._buckets.pop(client, (self.burst, now))
            tokens = min(self.burst, tokens + (now - seen) * self.rate)
            wait = 0.0 if tokens >= 1 else (1 - tokens) / self.rate
            self._buckets[client] = (tokens - 1 if wait == 0 else tokens, now)
            while len(self._buckets) > _MAX_CLIENTS:
                self._buckets.popitem(last=False)
        return wait

    @staticmethod
    def retry_after(wait_s: float) -> str:
        return str(max(1, math.ceil(wait_s)))

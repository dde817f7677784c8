"""Pure ASGI middleware (no per-request task or body copy, so it adds microseconds): the request
body size limit, and request counts and latencies for ``/metrics``."""

from __future__ import annotations

import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import ApiError, error_response
from api.metrics import ApiMetrics
from api.ratelimit import TokenBuckets

__all__ = ["LimitsAndMetrics"]


_PROBES = frozenset({"/healthz", "/readyz"})


class LimitsAndMetrics:
    """Refuses bodies over ``max_body_bytes`` with 413 (by Content-Length up front, by counting
    otherwise), a client over its ``rate_limit`` (api/ratelimit.py, when given) with 429, and
    records every HTTP request in ``metrics``."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int, metrics: ApiMetrics,
                 rate_limit: TokenBuckets | None = None) -> None:
        self.app, self.max_body_bytes, self.metrics = app, max_body_bytes, metrics
        self.rate_limit = rate_limit

    def _too_large(self) -> ApiError:
        return ApiError(413, "request_too_large",
                        f"request body over the {self.max_body_bytes} byte limit")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = {"code": 500}

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            if self.rate_limit is not None and scope["path"] not in _PROBES:
                client = (scope.get("client") or ("?", 0))[0]
                wait = self.rate_limit.take(str(client))
                if wait > 0:
                    retry = TokenBuckets.retry_after(wait)
                    await error_response(
                        429, "too_many_requests", f"rate limit: {self.rate_limit.rate:g} "
                        f"requests/s per client; retry in {retry} s",
                        headers={"Retry-After": retry})(scope, receive, send_wrapper)
                    return
            length = _content_length(scope)
            if length is not None and length > self.max_body_bytes:
                exc = self._too_large()
                await error_response(exc.status, exc.type, exc.message)(scope, receive,
                                                                         send_wrapper)
                return
            received = 0

            async def limited_receive() -> Message:
                nonlocal received
                message = await receive()
                if message["type"] == "http.request":
                    received += len(message.get("body", b""))
                    if received > self.max_body_bytes:
                        raise self._too_large()
                return message

            await self.app(scope, limited_receive, send_wrapper)
        finally:
            route = scope.get("route")
            path: Any = getattr(route, "path", None) or "<unmatched>"
            self.metrics.observe(scope["method"], path, status["code"],
                                 time.perf_counter() - start)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None

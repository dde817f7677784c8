"""The one place where errors become HTTP answers, all with the body
``{"error": {"type", "message", "detail"}}``.

:class:`~advisor.errors.AdvisorError` subclasses map to status codes here; request validation
errors become 422 with the field errors in ``detail``; anything unexpected becomes a 500 whose body
names no internals (the traceback goes to the log).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from advisor import errors as e

__all__ = ["ApiError", "error_response", "install_error_handlers", "record_route_methods",
           "status_for"]

log = logging.getLogger(__name__)

# Most specific first: the first class an error is an instance of decides.
_STATUS: tuple[tuple[type[e.AdvisorError], int], ...] = (
    (e.NotFoundError, 404),
    (e.JobError, 409),
    (e.StoreConflictError, 409),
    (e.StoreError, 503),
    (e.NotReadyError, 503),
    (e.EngineUnavailableError, 409),
    (e.UnknownTargetError, 422),
    (e.SLOParseError, 422),
    (e.SearchSpaceError, 422),
    (e.ConfigRejectedError, 422),
    (e.WorkloadError, 422),
    (e.StudyError, 409),
    (e.AdvisorError, 400),
)

_HTTP_TYPES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
               405: "method_not_allowed", 406: "not_acceptable", 409: "conflict",
               413: "request_too_large", 415: "unsupported_media_type",
               422: "validation_error", 429: "too_many_requests", 500: "internal_error",
               501: "not_implemented", 503: "unavailable"}


class ApiError(StarletteHTTPException):
    """An HTTP-level refusal raised by the API itself (auth, limits). An HTTPException, so
    FastAPI's body parsing passes it through instead of turning it into a 400."""

    def __init__(self, status: int, type_: str, message: str, detail: Any = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(status, message, headers)
        self.status, self.type, self.message, self.detail = status, type_, message, detail
        self.headers = headers


def record_route_methods(app: FastAPI, routes: Iterable[Any]) -> None:
    """Remember which methods each path of ``routes`` answers, for the ``Allow`` header of a 405.
    Starlette's 405 names the methods of the first route matching the path only: ``GET
    /v1/studies`` and ``POST /v1/studies`` are two routes, so ``OPTIONS /v1/studies`` said
    ``Allow: GET``."""
    app.state.route_methods = [(route.path_regex, frozenset(route.methods)) for route in routes
                               if getattr(route, "methods", None) and
                               getattr(route, "path_regex", None) is not None]


def _allowed_methods(request: Request, fallback: str) -> str:
    path = request.scope.get("path", "")
    methods = {m for regex, ms in getattr(request.app.state, "route_methods", ())
               if regex.match(path) for m in ms}
    return ", ".join(sorted(methods)) if methods else fallback


def status_for(exc: e.AdvisorError) -> int:
    return next(code for cls, code in _STATUS if isinstance(exc, cls))


def _snake(name: str) -> str:
    """``SLOParseError`` -> ``slo_parse_error`` (runs of capitals stay one word)."""
    words = re.findall(r"[A-Z]+(?=[A-Z][a-z]|$)|[A-Z][a-z0-9]*", name.removesuffix("Error"))
    return "_".join(w.lower() for w in words) + "_error"


def error_response(status: int, type_: str, message: str, detail: Any = None,
                   headers: Mapping[str, str] | None = None) -> JSONResponse:
    body = {"error": {"type": type_, "message": message, "detail": jsonable_encoder(detail)}}
    return JSONResponse(body, status_code=status, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.type, exc.message, exc.detail, exc.headers)

    @app.exception_handler(e.AdvisorError)
    async def _advisor_error(request: Request, exc: e.AdvisorError) -> JSONResponse:
        retry = {"Retry-After": "5"} if isinstance(exc, e.NotReadyError) else None
        return error_response(status_for(exc), _snake(type(exc).__name__), str(exc),
                              headers=retry)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        detail = [{"loc": list(err.get("loc", ())), "msg": err.get("msg"),
                   "type": err.get("type")} for err in exc.errors()]
        first = detail[0] if detail else {"loc": [], "msg": "invalid request"}
        where = ".".join(str(p) for p in first["loc"])
        return error_response(422, "validation_error", f"invalid request: {where}: "
                                                       f"{first['msg']}", detail)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        type_ = _HTTP_TYPES.get(exc.status_code, "http_error")
        headers = exc.headers
        if exc.status_code == 405:
            allow = _allowed_methods(request, (headers or {}).get("Allow", ""))
            headers = {**(headers or {}), "Allow": allow} if allow else headers
        return error_response(exc.status_code, type_, str(exc.detail), headers=headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, "internal_error", "internal error; the server log has the "
                                                     "details")

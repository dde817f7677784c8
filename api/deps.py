"""Typed dependencies of the routes, and API-key authentication.

The dependencies are ``async`` because they do no I/O: FastAPI would run plain functions in the
thread pool, a hop per dependency per request.

Mutating endpoints need a key (``Authorization: Bearer <key>`` or ``X-API-Key: <key>``), compared
in constant time against every configured key. With no key configured they are refused with 403,
unless development loopback mode is on and the client is this machine. Reads are open unless
``ADVISOR_API_READ_REQUIRES_KEY`` is set.
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from advisor.settings import Settings
from api.errors import ApiError
from api.knowledge import Knowledge
from knowledge import TrialStore
from knowledge.jobs import JobStore

__all__ = ["JobsDep", "KnowledgeDep", "ReadAccess", "SettingsDep", "StoreDep", "WriteAccess"]

_LOOPBACK = {"127.0.0.1", "::1"}
_bearer = HTTPBearer(auto_error=False, description="`Authorization: Bearer <API key>`")
_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="the API key")


async def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_store(request: Request) -> TrialStore:
    store: TrialStore = request.app.state.store
    return store


async def get_jobs(request: Request) -> JobStore:
    jobs: JobStore = request.app.state.jobs
    return jobs


async def get_knowledge(request: Request) -> Knowledge:
    knowledge: Knowledge = request.app.state.knowledge
    return knowledge


SettingsDep = Annotated[Settings, Depends(get_settings)]
StoreDep = Annotated[TrialStore, Depends(get_store)]
JobsDep = Annotated[JobStore, Depends(get_jobs)]
KnowledgeDep = Annotated[Knowledge, Depends(get_knowledge)]


def _key_matches(given: str, keys: list[bytes]) -> bool:
    candidate = given.encode()
    matched = False
    for key in keys:  # no early exit: the time taken does not depend on which key matched
        matched |= hmac.compare_digest(candidate, key)
    return matched


def _check_key(request: Request, bearer: HTTPAuthorizationCredentials | None,
               header_key: str | None, *, what: str) -> None:
    keys: list[bytes] = request.app.state.api_keys
    given = header_key or (bearer.credentials if bearer is not None else None)
    if not keys:
        client = request.client.host if request.client else ""
        if request.app.state.settings.api_dev_loopback and client in _LOOPBACK:
            return
        raise ApiError(403, "forbidden",
                       f"{what} are disabled because no API key is configured on the server: "
                       "set ADVISOR_API_KEY (or ADVISOR_API_KEY_FILE) and restart `advisor "
                       "serve`, then send `Authorization: Bearer <key>` or `X-API-Key: <key>`. "
                       "For local development only: `advisor serve --dev-loopback` accepts "
                       "clients on 127.0.0.1/::1 without a key")
    if given is None:
        raise ApiError(401, "unauthorized", f"{what} need an API key: send `Authorization: "
                                            "Bearer <key>` or `X-API-Key: <key>`",
                       headers={"WWW-Authenticate": "Bearer"})
    if not _key_matches(given, keys):
        raise ApiError(401, "unauthorized", "the API key is not valid",
                       headers={"WWW-Authenticate": "Bearer"})


async def require_write(request: Request,
                  bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
                  header_key: Annotated[str | None, Security(_header)]) -> None:
    """Mutating endpoints: a valid API key, always."""
    _check_key(request, bearer, header_key, what="mutating endpoints")


async def require_read(request: Request,
                 bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
                 header_key: Annotated[str | None, Security(_header)]) -> None:
    """Read endpoints: open unless the server requires the key for reads too."""
    if request.app.state.settings.api_read_requires_key:
        _check_key(request, bearer, header_key, what="read endpoints on this server")


WriteAccess = Depends(require_write)
ReadAccess = Depends(require_read)

"""FastAPI application factory. Settings are passed in, never read at import time."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.routing import APIRoute
from fastapi_offline import FastAPIOffline

from advisor import __version__
from advisor.errors import AdvisorError
from advisor.settings import Settings
from advisor.stores import open_store
from api.deps import require_read, require_write
from api.errors import install_error_handlers, record_route_methods
from api.knowledge import Knowledge
from api.metrics import ApiMetrics
from api.middleware import LimitsAndMetrics
from api.ratelimit import TokenBuckets
from api.routes import (
    COMMON_ERRORS,
    cheatsheet,
    health,
    jobs,
    recommendations,
    studies,
    targets,
    trials,
)
from knowledge.jobs import JobStore

__all__ = ["DOCS_ASSETS_URL", "create_app"]

#: Where the Swagger UI and ReDoc scripts, stylesheet and favicon are served.
DOCS_ASSETS_URL = "/docs-assets"

_DESCRIPTION = """\
SLO-driven tuning advisor: recommendations and cheat-sheet values from measured trials, and
tuning studies run in the background.

**Auth.** Mutating endpoints (`POST /v1/studies`, `POST /v1/jobs/{id}/cancel`) need an API key,
sent as `Authorization: Bearer <key>` or `X-API-Key: <key>`. With no key configured on the
server they answer 403. Reads are open unless the server sets `ADVISOR_API_READ_REQUIRES_KEY`.

**Errors.** Every 4xx/5xx answer has the body `{"error": {"type", "message", "detail"}}`.
"""


def create_app(settings: Settings | None = None, *, import_shipped: bool = False) -> FastAPI:
    """Build the app on ``settings`` (the environment's when None). ``import_shipped``: open the
    store as the command line does, importing the shipped knowledge (``advisor serve``); off, an
    app serves exactly what its store holds (tests, embedding)."""
    settings = settings or Settings()
    try:
        keys = settings.api_keys()
    except OSError as exc:
        raise AdvisorError(f"cannot read the API key file {settings.api_key_file}: "
                           f"{exc.strerror}") from None
    # /docs (Swagger UI) and /redoc from the assets fastapi-offline ships, served by this app:
    # FastAPI's own pages load them from a CDN and stay blank on an offline host.
    app: FastAPI = FastAPIOffline(title="slo-advisor", version=__version__,
                                  description=_DESCRIPTION, responses=COMMON_ERRORS,
                                  static_url=DOCS_ASSETS_URL)
    store = open_store(settings, import_shipped=import_shipped)
    app.state.settings = settings
    app.state.store = store
    app.state.jobs = JobStore(store)
    app.state.api_keys = [k.encode() for k in keys]
    app.state.knowledge = Knowledge(store, cache_dir=settings.cache_dir,
                                    shared_model_dir=settings.shared_model_dir,
                                    refresh_interval_s=settings.api_refresh_interval_s)
    app.state.metrics = ApiMetrics(store)
    install_error_handlers(app)
    routers = (health, recommendations, cheatsheet, studies, jobs, trials, targets)
    for module in routers:
        app.include_router(module.router)
    record_route_methods(app, [*app.routes, *(r for m in routers for r in m.router.routes)])
    if settings.api_cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=settings.api_cors_origins,
                           allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "X-API-Key", "Content-Type"])
    # Outermost: the size limit applies before anything reads the body, and metrics see every
    # answer, refusals included.
    limit = (TokenBuckets(settings.api_rate_limit_rps, settings.api_rate_limit_burst)
             if settings.api_rate_limit_rps else None)
    app.add_middleware(LimitsAndMetrics, max_body_bytes=settings.api_max_body_bytes,
                       metrics=app.state.metrics, rate_limit=limit)
    if not settings.api_read_requires_key:
        _mark_reads_open(app, [r for m in routers for r in m.router.routes])
    return app


def _mark_reads_open(app: FastAPI, routes: list[Any]) -> None:
    """In the OpenAPI schema, read endpoints carry no ``security``: FastAPI marks every operation
    with a security dependency as secured, so Swagger UI drew a padlock on reads that need no key
    (closed, even: an optional ``[{}, ...]`` requirement counts as met) and clients generated
    from the schema would demand one. The padlock stays on the routes that need the key."""
    original = app.openapi

    def needs(dependant: Any, check: Any) -> bool:
        return any(d.call is check or needs(d, check) for d in dependant.dependencies)

    def reads(dependant: Any) -> bool:
        return needs(dependant, require_read) and not needs(dependant, require_write)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = original()
        for route in routes:
            if not isinstance(route, APIRoute) or not reads(route.dependant):
                continue
            for method in route.methods or ():
                operation = schema.get("paths", {}).get(route.path_format, {}).get(method.lower())
                if operation is not None:
                    operation.pop("security", None)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]

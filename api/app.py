"""FastAPI application factory. Settings are passed in, never read at import time."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request, Response, status
from sqlalchemy import text

from advisor import __version__
from advisor.errors import StoreError
from advisor.settings import Settings
from knowledge import TrialStore

__all__ = ["create_app"]


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the app on ``settings`` (the environment's when None)."""
    settings = settings or Settings()
    app = FastAPI(title="slo-advisor", version=__version__)
    store = TrialStore(settings.db_url)
    app.state.store = store

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        """Liveness: the process answers."""
        return {"status": "ok", "version": __version__}

    @app.get("/readyz")
    def readyz(request: Request, response: Response) -> dict[str, Any]:
        """Readiness: the trial store answers a query."""
        try:
            with request.app.state.store.session() as s:
                s.exec(text("SELECT 1"))
        except StoreError as exc:
            response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
            return {"status": "unavailable", "reason": str(exc)}
        return {"status": "ready"}

    return app

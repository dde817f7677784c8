"""The app factory builds on injected settings and reports health and readiness."""

from __future__ import annotations

import pytest

from advisor.settings import Settings

fastapi_testclient = pytest.importorskip("fastapi.testclient")


def test_health_and_ready(settings: Settings) -> None:
    from api import create_app

    client = fastapi_testclient.TestClient(create_app(settings))
    assert client.get("/healthz").json()["status"] == "ok"
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json() == {"status": "ready"}


def test_not_ready_when_the_store_is_gone(settings: Settings) -> None:
    from sqlalchemy import create_engine

    from api import create_app

    app = create_app(settings)
    app.state.store.engine = create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none")
    client = fastapi_testclient.TestClient(app)
    assert client.get("/healthz").status_code == 200  # alive...
    ready = client.get("/readyz")  # ...but not ready
    assert ready.status_code == 503 and ready.json()["status"] == "unavailable"

"""API fixtures: the app on a temporary store (SQLite, and PostgreSQL where the store-backed cases
are parametrised), with and without an API key."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from advisor.settings import Settings

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

KEY = "test-key-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {KEY}"}


def make_settings(db_url: str, tmp_path: Path, **kw: object) -> Settings:
    fields: dict[str, object] = dict(db_url=db_url, cache_dir=tmp_path / "cache",
                                     trial_timeout_s=10, heartbeat_interval_s=0.5,
                                     worker_poll_interval_s=0.2, api_refresh_interval_s=0)
    fields.update(kw)
    return Settings(**fields)  # type: ignore[arg-type]


@pytest.fixture
def keyed_settings(tmp_path: Path) -> Settings:
    return make_settings(f"sqlite:///{tmp_path / 'api.db'}", tmp_path, api_key=SecretStr(KEY))


@pytest.fixture
def client(keyed_settings: Settings) -> Iterator[TestClient]:
    from api import create_app

    with TestClient(create_app(keyed_settings)) as c:
        yield c

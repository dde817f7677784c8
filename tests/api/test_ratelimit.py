"""The optional per-client rate limit: a burst passes, the next request is a 429 with
Retry-After, tokens refill at the rate, clients are counted apart and probes are never limited."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from api import create_app
from api.ratelimit import TokenBuckets
from tests.api.conftest import make_settings


def test_a_bucket_allows_its_burst_then_refills_at_its_rate() -> None:
    now = [0.0]
    buckets = TokenBuckets(2.0, 3, clock=lambda: now[0])
    assert [buckets.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.take("a") == 0.5  # one token comes back after 1/2 s
    assert buckets.take("b") == 0.0  # another client has its own bucket
    now[0] += 0.5
    assert buckets.take("a") == 0.0
    assert buckets.take("a") > 0


def test_the_service_answers_429_over_the_limit_and_never_limits_probes(tmp_path: Path) -> None:
    settings = make_settings(f"sqlite:///{tmp_path / 'r.db'}", tmp_path,
                             api_rate_limit_rps=0.01, api_rate_limit_burst=2)
    with TestClient(create_app(settings)) as client:
        codes = [client.get("/v1/targets").status_code for _ in range(3)]
        assert codes == [200, 200, 429]
        refused = client.get("/v1/studies")
        assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
        assert refused.json()["error"]["type"] == "too_many_requests"
        assert all(client.get("/healthz").status_code == 200 for _ in range(5))


def test_without_the_setting_nothing_is_limited(tmp_path: Path) -> None:
    settings = make_settings(f"sqlite:///{tmp_path / 'r.db'}", tmp_path)
    with TestClient(create_app(settings)) as client:
        assert all(client.get("/v1/targets").status_code == 200 for _ in range(30))

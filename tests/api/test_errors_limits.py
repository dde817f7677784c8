"""One error body for every 4xx/5xx, the request size limit, paging bounds, CORS off by default,
and the Prometheus metrics."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from api import create_app
from tests.api.conftest import AUTH, KEY, make_settings


def _error(resp: object, status: int) -> dict:
    assert resp.status_code == status, resp.text  # type: ignore[attr-defined]
    body = resp.json()  # type: ignore[attr-defined]
    assert list(body) == ["error"] and set(body["error"]) == {"type", "message", "detail"}
    return body["error"]


def test_validation_errors_name_the_field(client: TestClient) -> None:
    err = _error(client.post("/v1/recommendations", json={"slo": "qps>=1"}), 422)
    assert err["type"] == "validation_error" and "target" in err["message"]
    assert err["detail"][0]["loc"] == ["body", "target"]
    err = _error(client.post("/v1/studies", json={"target": "scripted", "trials": 0},
                             headers=AUTH), 422)
    assert "trials" in err["message"]
    err = _error(client.post("/v1/studies", content=b"{not json", headers={
        **AUTH, "Content-Type": "application/json"}), 422)
    assert err["type"] == "validation_error"
    _error(client.get("/v1/trials?limit=0"), 422)
    _error(client.get("/v1/trials?limit=501"), 422)
    _error(client.get("/v1/studies?offset=-1"), 422)


def test_advisor_errors_map_to_status_codes(client: TestClient) -> None:
    err = _error(client.post("/v1/recommendations", json={"target": "nope", "slo": "qps>=1"}),
                 422)
    assert err["type"] == "unknown_target_error" and "registered targets" in err["message"]
    err = _error(client.post("/v1/recommendations", json={"target": "scripted",
                                                          "slo": "qps>>1"}), 422)
    assert err["type"] == "slo_parse_error"
    _error(client.get("/v1/studies/999"), 404)
    err = _error(client.get(f"/v1/jobs/{'a' * 32}"), 404)
    assert err["type"] == "not_found_error"
    err = _error(client.get("/v1/nothing-here"), 404)
    assert err["type"] == "not_found"
    _error(client.delete("/v1/studies"), 405)


def test_405_allows_every_method_of_the_path(client: TestClient) -> None:
    """``GET`` and ``POST /v1/studies`` are two routes; the 405 named the first one's methods only
    (``Allow: GET``, schemathesis's allow_header_conformance over real HTTP)."""
    for method in ("OPTIONS", "DELETE", "PUT"):
        response = client.request(method, "/v1/studies")
        assert _error(response, 405)["type"] == "method_not_allowed"
        assert response.headers["Allow"] == "GET, POST"
    response = client.request("OPTIONS", "/v1/recommendations")
    assert response.status_code == 405 and response.headers["Allow"] == "POST"


def test_request_body_limit(tmp_path: Path) -> None:
    settings = make_settings(f"sqlite:///{tmp_path / 'a.db'}", tmp_path, api_key=SecretStr(KEY),
                             api_max_body_bytes=1024)
    c = TestClient(create_app(settings))
    big = {"target": "scripted", "slo": "qps>=1", "workload": {"x": "y" * 2000}}
    err = _error(c.post("/v1/recommendations", json=big), 413)
    assert err["type"] == "request_too_large" and "1024" in err["message"]

    def chunks() -> object:  # no Content-Length: the limit is enforced while reading
        yield b'{"target": "scripted", "slo": "qps>=1", "model": "'
        yield b"y" * 2000
        yield b'"}'

    err = _error(c.post("/v1/recommendations", content=chunks(),  # type: ignore[arg-type]
                        headers={"Content-Type": "application/json"}), 413)
    assert err["type"] == "request_too_large"
    assert c.post("/v1/recommendations", json={"target": "scripted", "slo": "qps>=1"}
                  ).status_code == 200


def test_cors_is_off_unless_origins_are_configured(tmp_path: Path) -> None:
    pre = {"Origin": "https://dash.example", "Access-Control-Request-Method": "GET"}
    off = TestClient(create_app(make_settings(f"sqlite:///{tmp_path / 'a.db'}", tmp_path)))
    assert "access-control-allow-origin" not in off.get("/v1/studies", headers=pre).headers
    assert "access-control-allow-origin" not in off.options("/v1/studies", headers=pre).headers
    on = TestClient(create_app(make_settings(f"sqlite:///{tmp_path / 'b.db'}", tmp_path,
                                             api_cors_origins=["https://dash.example"])))
    resp = on.options("/v1/studies", headers=pre)
    assert resp.headers["access-control-allow-origin"] == "https://dash.example"
    other = on.options("/v1/studies", headers={**pre, "Origin": "https://evil.example"})
    assert "access-control-allow-origin" not in other.headers


def test_metrics_count_requests_by_route_and_report_jobs_and_trials(client: TestClient) -> None:
    client.get("/v1/studies")
    client.get("/v1/studies/7")
    client.post("/v1/studies", json={"target": "scripted", "trials": 2}, headers=AUTH)
    text = client.get("/metrics").text
    assert 'advisor_http_requests_total{method="GET",route="/v1/studies",status="200"} 1.0' in text
    assert ('advisor_http_requests_total{method="GET",route="/v1/studies/{study_id}",'
            'status="404"} 1.0') in text
    assert 'advisor_http_request_duration_seconds_bucket{le="0.005",method="GET"' in text
    assert 'advisor_jobs{status="queued"} 1.0' in text
    assert 'advisor_jobs{status="running"} 0.0' in text
    assert "# TYPE advisor_trials gauge" in text


@pytest.mark.parametrize("path", ["/openapi.json", "/docs"])
def test_openapi_is_served_with_examples(client: TestClient, path: str) -> None:
    resp = client.get(path)
    assert resp.status_code == 200
    if path == "/openapi.json":
        spec = resp.json()
        create = spec["components"]["schemas"]["StudyCreate"]
        assert create["examples"][0]["target"] == "faiss"
        assert {"HTTPBearer", "APIKeyHeader"} <= set(spec["components"]["securitySchemes"])


@pytest.mark.parametrize("field", ["hardware", "model"])
def test_a_label_with_a_newline_is_a_422_not_a_second_command(client: TestClient,
                                                               field: str) -> None:
    resp = client.post("/v1/recommendations", json={
        "target": "faiss", "slo": "p95_latency_ms<=1", field: "x\ntouch pwned"})
    err = _error(resp, 422)
    assert err["detail"][0]["loc"] == ["body", field]


@pytest.mark.parametrize(("body", "text"), [
    ({"target": "faiss", "slo": "p95_latency_ms<=1", "workload": {"n_vectors": int("9" * 400)}},
     "400-digit"),
    ({"target": "faiss", "slo": "p95_latency_ms<=1", "workload": {"dim": float("1e300")}},
     "2**53"),
    ({"target": "faiss", "slo": ","}, "has no bound"),
    ({"target": "faiss", "slo": "recall_at_10<=1"}, "always holds"),
])
def test_absurd_recommendation_questions_are_4xx(client: TestClient, body: dict,
                                                 text: str) -> None:
    resp = client.post("/v1/recommendations", json=body)
    assert 400 <= resp.status_code < 500, resp.text
    assert text in resp.text

"""Mutating endpoints need a key: refused (403) with no key configured, 401 without or with a
wrong key, accepted with the key in either header; loopback dev mode and keyed reads."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from advisor.errors import AdvisorError
from advisor.settings import Settings
from api import create_app
from tests.api.conftest import AUTH, KEY, make_settings

STUDY = {"target": "scripted", "trials": 2, "seed": 0}


def _assert_error(resp: object, status: int, type_: str) -> dict:
    assert resp.status_code == status, resp.text  # type: ignore[attr-defined]
    body = resp.json()  # type: ignore[attr-defined]
    assert set(body) == {"error"} and set(body["error"]) == {"type", "message", "detail"}
    assert body["error"]["type"] == type_
    return body["error"]


def test_no_key_configured_refuses_mutations_and_says_how_to_configure(tmp_path: Path) -> None:
    c = TestClient(create_app(make_settings(f"sqlite:///{tmp_path / 'a.db'}", tmp_path)))
    for headers in ({}, AUTH, {"X-API-Key": KEY}):
        err = _assert_error(c.post("/v1/studies", json=STUDY, headers=headers), 403, "forbidden")
        assert "ADVISOR_API_KEY" in err["message"]
    _assert_error(c.post(f"/v1/jobs/{'0' * 32}/cancel"), 403, "forbidden")
    assert c.get("/v1/studies").status_code == 200  # reads stay open
    assert c.get("/v1/jobs").json()["total"] == 0  # nothing was queued


def test_missing_or_wrong_key_is_401_and_queues_nothing(client: TestClient) -> None:
    err = _assert_error(client.post("/v1/studies", json=STUDY), 401, "unauthorized")
    assert "Authorization: Bearer" in err["message"]
    for headers in ({"Authorization": "Bearer nope"}, {"X-API-Key": KEY + "x"},
                    {"Authorization": f"Basic {KEY}"}):
        resp = client.post("/v1/studies", json=STUDY, headers=headers)
        _assert_error(resp, 401, "unauthorized")
        assert resp.headers["www-authenticate"] == "Bearer"
    assert client.get("/v1/jobs").json()["total"] == 0


@pytest.mark.parametrize("headers", [AUTH, {"X-API-Key": KEY}])
def test_valid_key_in_either_header_starts_a_job(client: TestClient,
                                                 headers: dict[str, str]) -> None:
    resp = client.post("/v1/studies", json=STUDY, headers=headers)
    assert resp.status_code == 202, resp.text
    job = resp.json()
    assert job["status"] == "queued" and len(job["id"]) == 32
    assert client.get(f"/v1/jobs/{job['id']}").json()["status"] == "queued"


def test_key_rotation_and_key_file(tmp_path: Path) -> None:
    key_file = tmp_path / "keys"
    key_file.write_text("# API keys\nfile-key-1\n\nfile-key-2\n")
    settings = make_settings(f"sqlite:///{tmp_path / 'a.db'}", tmp_path,
                             api_key=SecretStr("env-key-a, env-key-b"), api_key_file=key_file)
    c = TestClient(create_app(settings))
    for i, key in enumerate(["env-key-a", "env-key-b", "file-key-1", "file-key-2"]):
        resp = c.post("/v1/studies", json={**STUDY, "name": f"s{i}"}, headers={"X-API-Key": key})
        assert resp.status_code == 202, resp.text
    assert c.post("/v1/studies", json=STUDY, headers={"X-API-Key": "# API keys"}
                  ).status_code == 401
    missing = make_settings(f"sqlite:///{tmp_path / 'b.db'}", tmp_path,
                            api_key_file=tmp_path / "absent")
    with pytest.raises(AdvisorError, match="cannot read the API key file"):
        create_app(missing)


def test_dev_loopback_relaxes_only_for_loopback_clients(tmp_path: Path) -> None:
    settings = make_settings(f"sqlite:///{tmp_path / 'a.db'}", tmp_path, api_dev_loopback=True)
    app = create_app(settings)
    local = TestClient(app, client=("127.0.0.1", 40000))
    assert local.post("/v1/studies", json=STUDY).status_code == 202
    remote = TestClient(app, client=("10.1.2.3", 40000))
    _assert_error(remote.post("/v1/studies", json={**STUDY, "name": "x"}), 403, "forbidden")


def test_dev_loopback_is_refused_on_a_public_bind(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from advisor.cli import app

    result = CliRunner().invoke(app, ["--db-url", f"sqlite:///{tmp_path / 'a.db'}", "serve",
                                      "--host", "0.0.0.0", "--dev-loopback"])
    assert isinstance(result.exception, AdvisorError)
    assert "only allowed when bound to 127.0.0.1" in str(result.exception)


def test_reads_can_require_the_key(tmp_path: Path) -> None:
    settings: Settings = make_settings(f"sqlite:///{tmp_path / 'a.db'}", tmp_path,
                                       api_key=SecretStr(KEY), api_read_requires_key=True)
    c = TestClient(create_app(settings))
    for path in ("/v1/studies", "/v1/trials", "/v1/jobs", "/v1/targets", "/metrics"):
        _assert_error(c.get(path), 401, "unauthorized")
        assert c.get(path, headers=AUTH).status_code == 200
    _assert_error(c.post("/v1/recommendations", json={"target": "scripted",
                                                      "slo": "qps>=1"}), 401, "unauthorized")
    assert c.get("/healthz").status_code == 200  # probes stay open
    assert c.get("/readyz").status_code == 200


def test_the_openapi_schema_marks_open_reads_as_open_and_writes_as_keyed(
        keyed_settings: object) -> None:
    from api import create_app

    schema = create_app(keyed_settings).openapi()  # type: ignore[arg-type]
    ops = {(m.upper(), path): op for path, methods in schema["paths"].items()
           for m, op in methods.items()}
    # Swagger UI draws a padlock exactly where an operation lists ``security``: reads need no
    # key, so none; writes need one, so a requirement with no empty (optional) alternative.
    assert "security" not in ops[("GET", "/v1/trials")]
    assert "security" not in ops[("POST", "/v1/recommendations")]
    for write in (("POST", "/v1/studies"), ("POST", "/v1/jobs/{job_id}/cancel")):
        assert ops[write]["security"] and {} not in ops[write]["security"]
    keyed_reads = create_app(keyed_settings.model_copy(  # type: ignore[attr-defined]
        update={"api_read_requires_key": True})).openapi()
    assert keyed_reads["paths"]["/v1/trials"]["get"]["security"]

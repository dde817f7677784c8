"""Recommendations and cheat-sheet answers over HTTP, on SQLite and PostgreSQL: answers come from
the models fitted on the store's trials, are consistent with the cheat-sheet, follow the store
when it gains trials, and say so plainly when the store does not cover a question."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from advisor import cheatsheet
from advisor.driver import StudyDriver, StudySpec
from advisor.objective import Objective
from advisor.settings import Settings
from api import create_app
from api.errors import ApiError
from knowledge import TrialStore
from objectives import parse_slo
from tests.api.conftest import KEY, make_settings
from tests.scripted_target import ScriptedTarget

SLO = "p95_latency_ms<=1,recall_at_10>=0.8"


def _study(settings: Settings, name: str, n: int, seed: int) -> None:
    store = TrialStore(settings.db_url)
    StudyDriver(store, settings).run(StudySpec(
        name=name, target="scripted", slo=parse_slo(SLO), objective=Objective.parse("maximize:qps"),
        workload=ScriptedTarget().default_workload(), n_trials=n, seed=seed, sampler="random",
        fixed={"x": 0.6}))
    store.close()


@pytest.fixture
def settings(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    # The scripted target has no cheat-sheet tiers of its own: give it one.
    monkeypatch.setitem(cheatsheet.TIERS, "scripted", (cheatsheet.Tier(
        "standard", SLO, "maximize:qps", "scripted test tier"),))
    settings = make_settings(db_url, tmp_path, api_key=SecretStr(KEY))
    _study(settings, "k1", n=8, seed=0)
    return settings


@pytest.fixture
def api(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as c:
        yield c


def _recommend(api: TestClient, **body: Any) -> dict[str, Any]:
    resp = api.post("/v1/recommendations", json={"target": "scripted", "slo": SLO, **body})
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_recommendation_is_model_based_with_intervals_and_evidence(api: TestClient) -> None:
    answer = _recommend(api)
    assert answer["basis"] == "model" and answer["question"]["target"] == "scripted"
    assert answer["status"] in ("recommended", "keep_defaults", "no_feasible_config")
    trial_ids = {t["id"] for t in api.get("/v1/trials", params={"limit": 500}).json()["items"]}
    assert answer["evidence"] and {e["trial_id"] for e in answer["evidence"]} <= trial_ids
    if answer["status"] in ("recommended", "keep_defaults"):
        ScriptedTarget().space().validate_config(answer["config"])  # inside the space
        assert answer["config"]["x"] == 0.6
        assert answer["figures"]
        for metric, f in answer["figures"].items():
            assert f["low"] <= f["value"] <= f["high"], metric
            assert f["basis"] in ("measured", "predicted"), metric
        assert answer["verdict"]["meets_slo"] is True
        assert answer["launch_command"].startswith("scripted ")
        assert answer["confidence"]["level"] in ("high", "medium", "low")
    else:
        assert answer["config"] is None and answer["next"]["tune_command"]
    assert _recommend(api) == answer  # a repeated question: the same (cached) answer


def test_uncovered_questions_name_the_study_that_would_cover_them(api: TestClient) -> None:
    answer = _recommend(api, hardware="h200")
    assert answer["status"] == "not_covered" and answer["config"] is None
    assert answer["next"]["tune_command"].startswith("advisor tune --target scripted")
    assert "h200" in answer["summary"] and "h200" in answer["confidence"]["reason"]


def test_answers_follow_the_store(api: TestClient, settings: Settings) -> None:
    before = _recommend(api)["context"]["trials"]
    _study(settings, "k2", n=4, seed=1)
    # The old models keep answering while new ones are fitted in the background.
    deadline = time.monotonic() + 120
    while (after := _recommend(api)["context"]["trials"]) == before:
        assert time.monotonic() < deadline, "the models never caught up with the store"
        time.sleep(0.2)
    assert after == before + 4


def test_accept_negotiation_picks_the_best_supported_format() -> None:
    from api.routes.cheatsheet import negotiate

    assert negotiate(None) == negotiate("") == negotiate("*/*") == "json"
    assert negotiate("text/*") == "markdown"  # text/markdown before text/html on a tie
    assert negotiate("text/html;q=0.5, text/markdown;q=0.9") == "markdown"
    assert negotiate("application/json;q=0, */*;q=0.1") == "markdown"
    assert negotiate("text/html, */*;q=0.8") == "html"
    assert negotiate("TEXT/HTML") == "html"
    assert negotiate("text/html;q=bogus, application/json;q=0.2") == "json"
    with pytest.raises(ApiError) as refused:
        negotiate("image/png, application/xml")
    assert refused.value.status == 406


def test_cheatsheet_formats_and_value_lookup(api: TestClient) -> None:
    sheet = api.get("/v1/cheatsheet", params={"target": "scripted"})
    assert sheet.status_code == 200 and sheet.headers["content-type"].startswith(
        "application/json")
    rows = sheet.json()["rows"]
    assert rows and all(r["target"] == "scripted" for r in rows)
    md = api.get("/v1/cheatsheet", params={"target": "scripted", "format": "markdown"})
    assert md.headers["content-type"].startswith("text/markdown") and "|" in md.text
    html = api.get("/v1/cheatsheet", params={"target": "scripted", "format": "html"})
    assert html.headers["content-type"].startswith("text/html") and "<table" in html.text
    # Without ?format= the Accept header decides; ?format= wins over it.
    browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
    by_accept = api.get("/v1/cheatsheet", params={"target": "scripted"},
                        headers={"Accept": browser})
    assert by_accept.headers["content-type"].startswith("text/html")
    assert by_accept.headers["vary"] == "Accept"
    md = api.get("/v1/cheatsheet", params={"target": "scripted"},
                 headers={"Accept": "text/markdown"})
    assert md.headers["content-type"].startswith("text/markdown")
    forced = api.get("/v1/cheatsheet", params={"target": "scripted", "format": "json"},
                     headers={"Accept": "text/html"})
    assert forced.headers["content-type"].startswith("application/json")
    refused = api.get("/v1/cheatsheet", params={"target": "scripted"},
                      headers={"Accept": "image/png"})
    assert refused.status_code == 406 and refused.json()["error"]["type"] == "not_acceptable"
    classes = sorted({r["workload_class"] for r in api.get(
        "/v1/cheatsheet", params={"target": "scripted", "format": "json"}).json()["rows"]
        if r["tier"] == "standard"})
    ambiguous = api.get("/v1/cheatsheet/value", params={"target": "scripted", "knob": "y"})
    if len(classes) > 1:  # several workloads match: it lists them instead of picking one
        assert ambiguous.status_code == 422, ambiguous.text
        assert all(c in ambiguous.json()["error"]["message"] for c in classes)
    resp = api.get("/v1/cheatsheet/value", params={"target": "scripted", "knob": "y",
                                                    "workload_class": classes[0]})
    if resp.status_code == 404:  # the tier's SLO is met by no config: said, not guessed
        assert "no config meets" in resp.json()["error"]["message"]
        return
    value = resp.json()
    assert value["knob"] == "y" and value["value"] == value["row"]["config"]["y"]
    answer = _recommend(api, slo=value["row"]["slo"], objective=value["row"]["objective"],
                        hardware=value["row"]["hardware_key"])
    assert answer["config"] == value["row"]["config"]  # the sheet agrees with the recommender
    missing = api.get("/v1/cheatsheet/value", params={"target": "scripted", "knob": "nope"})
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"
    other = api.get("/v1/cheatsheet/value", params={"target": "scripted", "knob": "y",
                                                     "hardware": "h200"})
    assert other.status_code == 404 and "rows exist for" in other.json()["error"]["message"]

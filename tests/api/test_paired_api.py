"""Over HTTP, on SQLite and PostgreSQL: a study requested with `paired_repeats` ends with its best
and the engine default re-measured and the comparison in the study resource; recommendations say
"keep the defaults" when the default is within noise; trials show their validity, and invalid
ones are listed apart from complete ones."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from advisor.settings import Settings
from advisor.worker import Worker
from api import create_app
from knowledge import TrialStore
from knowledge.models import JobStatus
from tests.advisor.defaults_store import DEFAULT, HARDWARE, LOOSE, WITHIN, populate
from tests.api.conftest import AUTH, KEY, make_settings


@pytest.fixture
def settings(db_url: str, tmp_path: Path) -> Settings:  # overrides the root fixture: both stores
    return make_settings(db_url, tmp_path, api_key=SecretStr(KEY))


@pytest.fixture
def api(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as c:
        yield c


def test_a_requested_study_ends_with_its_paired_comparison(api: TestClient,
                                                           settings: Settings) -> None:
    resp = api.post("/v1/studies", json={"target": "scripted", "seed": 0, "name": "rest-paired",
                                         "trials": 4, "paired_repeats": 3}, headers=AUTH)
    assert resp.status_code == 202, resp.text
    job = resp.json()
    assert job["request"]["paired_repeats"] == 3
    ran = Worker(settings).run_once()
    assert ran is not None and ran.status == JobStatus.SUCCEEDED, ran and ran.error
    study_id = api.get(f"/v1/jobs/{job['id']}").json()["study_id"]
    study = api.get(f"/v1/studies/{study_id}").json()
    assert study["trials"] == study["trials_requested"]
    paired = study["paired_comparison"]
    # Seed 0 finds a feasible config other than the default among its first trials.
    assert paired is not None and paired["status"] == "compared", paired
    assert study["trials"] == 4 + 6 and paired["y_config"] == DEFAULT
    assert {m["verdict"] for m in paired["metrics"]} <= {"better", "worse", "within_noise"}
    for m in paired["metrics"]:
        assert m["interval"][0] <= m["difference"] <= m["interval"][1]
    trials = api.get("/v1/trials", params={"study": "rest-paired", "limit": 50}).json()
    assert [t["id"] for t in trials["items"][4:]] == [
        i for pair in zip(paired["x_trials"], paired["y_trials"], strict=True) for i in pair]


@pytest.mark.parametrize("repeats", [1, 2, 51, -1])
def test_unusable_paired_repeats_are_refused(api: TestClient, repeats: int) -> None:
    resp = api.post("/v1/studies", json={"target": "scripted", "paired_repeats": repeats},
                    headers=AUTH)
    assert resp.status_code == 422, resp.text
    assert "paired_repeats" in resp.text
    assert api.get("/v1/jobs").json()["total"] == 0


def test_recommendations_keep_the_defaults_and_invalid_trials_stand_apart(
        api: TestClient, settings: Settings) -> None:
    store = TrialStore(settings.db_url)
    study = populate(store, with_invalid=True)
    body = {"target": "scripted", "hardware": HARDWARE, "workload": {"n_vectors": 2000}}
    resp = api.post("/v1/recommendations", json={**body, "slo": WITHIN})
    assert resp.status_code == 200, resp.text
    answer = resp.json()
    assert answer["status"] == "keep_defaults" and answer["answer"] == "keep_defaults"
    assert answer["config"] == DEFAULT and answer["default"]["config"] == DEFAULT
    assert answer["default"]["verdict"]["meets_slo"] is True
    assert answer["comparison"]["reason"]
    clear = api.post("/v1/recommendations", json={**body, "slo": LOOSE}).json()
    assert clear["status"] == "recommended" and clear["answer"] == "config"
    assert clear["config"] != DEFAULT and clear["default"]["config"] == DEFAULT
    assert clear["verdict"]["meets_slo"] is True and clear["comparison"]["reason"]
    complete = api.get("/v1/trials", params={"status": "complete", "limit": 100}).json()
    assert complete["total"] == 11 and all(t["status"] == "complete" for t in complete["items"])
    invalid = api.get("/v1/trials", params={"status": "invalid"}).json()
    assert invalid["total"] == 1
    assert invalid["items"][0]["validity"] == "client_bound"
    assert invalid["items"][0]["feasible"] is False
    public = api.get(f"/v1/studies/{study.id}").json()
    assert (public["trials"], public["trials_complete"], public["trials_invalid"]) == (12, 11, 1)
    assert public["paired_comparison"] is None
    sheet = api.get("/v1/cheatsheet", params={"target": "scripted"},
                    headers={"Accept": "application/json"}).json()
    standard = next(r for r in sheet["rows"] if r["tier"] == "standard")
    assert standard["answer"] == "keep_defaults" and standard["config"] == DEFAULT
    store.close()

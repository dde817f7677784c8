"""A resume over the REST API continues the study it names as it was asked for: a resume that
gives other settings (an SLO, objective or workload the stored study was not started with) is
refused with one clear message, as `advisor tune --resume` refuses it, instead of resuming and
silently ignoring them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from advisor.settings import Settings
from advisor.worker import Worker
from api import create_app
from knowledge.models import JobStatus
from tests.api.conftest import AUTH, KEY, make_settings

FIXED_X = {"x": 0.5}  # away from the scripted target's crash/hang/reject regions
SLO = "p95_latency_ms<=5"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(f"sqlite:///{tmp_path / 'api.db'}", tmp_path, api_key=SecretStr(KEY))


@pytest.fixture
def api(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as c:
        yield c


def _post(api: TestClient, **body: Any) -> Any:
    return api.post("/v1/studies", headers=AUTH, json={
        "target": "scripted", "name": "kept", "seed": 0, "fixed": FIXED_X, **body})


def test_a_resume_with_other_settings_is_refused_and_one_with_the_same_runs(
        api: TestClient, settings: Settings) -> None:
    assert _post(api, trials=2, slo=SLO).status_code == 202
    assert Worker(settings).run_once().status == JobStatus.SUCCEEDED  # type: ignore[union-attr]

    other = _post(api, trials=3, slo="p95_latency_ms<=9", resume=True)
    assert other.status_code == 409, other.text
    error = other.json()["error"]
    assert error["type"] == "study_error"
    assert error["message"] == (
        "`resume` of study 'kept' with different settings: SLO 'p95_latency_ms<=5' != "
        "'p95_latency_ms<=9'. Resume with the original options, or start a new study with "
        "another `name`")
    assert api.get("/v1/jobs").json()["total"] == 1  # nothing queued

    workload = _post(api, trials=3, slo=SLO, resume=True,
                     workload={"params": {"delay_s": 0.01}})
    assert workload.status_code == 409 and "the workload differs" in workload.text

    same = _post(api, trials=3, slo=SLO, resume=True)
    assert same.status_code == 202, same.text
    assert Worker(settings).run_once().status == JobStatus.SUCCEEDED  # type: ignore[union-attr]
    progress = api.get(f"/v1/jobs/{same.json()['id']}").json()["progress"]
    assert progress["trials_finished"] == 3


def test_a_resume_naming_no_settings_continues_the_stored_study(
        api: TestClient, settings: Settings) -> None:
    assert _post(api, trials=2, slo=SLO).status_code == 202
    Worker(settings).run_once()
    resumed = _post(api, trials=3, resume=True)  # no SLO given: the stored study's is kept
    assert resumed.status_code == 202, resumed.text
    assert resumed.json()["request"]["resume"] is True


def test_a_resume_without_trials_keeps_the_study_s_budget(
        api: TestClient, settings: Settings) -> None:
    assert _post(api, trials=2, slo=SLO, paired_repeats=0).status_code == 202
    Worker(settings).run_once()
    resumed = _post(api, resume=True)  # no `trials`: the study's 2, not the schema's default
    assert resumed.status_code == 202, resumed.text
    assert resumed.json()["request"]["trials"] == 2
    assert Worker(settings).run_once().status == JobStatus.SUCCEEDED  # type: ignore[union-attr]
    progress = api.get(f"/v1/jobs/{resumed.json()['id']}").json()["progress"]
    assert progress["trials_finished"] == 2 and progress["trials_total"] == 2

    sampler = _post(api, resume=True, sampler="random")
    assert sampler.status_code == 409 and "`sampler` 'tpe' != 'random'" in sampler.text
    longer = _post(api, resume=True, trials=3)
    assert longer.status_code == 202 and longer.json()["request"]["trials"] == 3
    Worker(settings).run_once()
    assert api.get(f"/v1/jobs/{longer.json()['id']}").json()["progress"][
        "trials_finished"] == 3

"""`POST /v1/studies` warm-starts a new study as `advisor tune` does (`warm_start`, default true):
the best config an earlier study measured under the same SLO, workload and hardware runs right
after the engine default, with its source; `"warm_start": false` queues nothing; a value that is
not a boolean is a 422."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from advisor.driver import StudyDriver, StudySpec
from advisor.objective import Objective
from advisor.settings import Settings
from advisor.worker import Worker
from knowledge import TrialFilter, TrialRecord, TrialStore
from knowledge.models import JobStatus
from objectives import parse_slo
from tests.api.conftest import AUTH
from tests.scripted_target import ScriptedTarget

GOOD = {"x": 0.6, "y": 16, "mode": "a"}  # better than the default, inside the default SLO


def _run(api: TestClient, settings: Settings, **body: Any) -> list[TrialRecord]:
    """Start a study job, run it in the worker; its trials, oldest first (from the store: the
    trials resource does not show their details)."""
    resp = api.post("/v1/studies", json={"target": "scripted", "seed": 0, "trials": 2, **body},
                    headers=AUTH)
    assert resp.status_code == 202, resp.text
    assert resp.json()["request"]["warm_start"] is body.get("warm_start", True)
    ran = Worker(settings).run_once()
    assert ran is not None and ran.status == JobStatus.SUCCEEDED, ran and ran.error
    store = TrialStore(settings.db_url)
    trials = store.list_trials(TrialFilter(study=body["name"]))
    store.close()
    return sorted(trials, key=lambda t: t.number)


def test_study_jobs_warm_start_unless_told_not_to(client: TestClient, keyed_settings: Settings
                                                  ) -> None:
    # The API's keyed client and its settings (tests/api/conftest.py).
    api, settings = client, keyed_settings
    bad = api.post("/v1/studies", json={"target": "scripted", "warm_start": "maybe"},
                   headers=AUTH)
    assert bad.status_code == 422 and "warm_start" in bad.text
    store = TrialStore(settings.db_url)
    target = ScriptedTarget()
    StudyDriver(store, settings).run(StudySpec(
        name="first", target="scripted", slo=parse_slo(target.default_slo),
        objective=Objective.parse(target.default_objective), workload=target.default_workload(),
        n_trials=2, enqueued=(GOOD,)))
    store.close()
    on = _run(api, settings, name="on")
    assert [t.details.get("role") for t in on] == ["engine-default", "warm-start"]
    assert on[1].config == GOOD and on[1].details["source"] == "best-known"
    off = _run(api, settings, name="off", warm_start=False)
    assert [t.details.get("role") for t in off] == ["engine-default", None]

"""`POST /v1/recommendations` answers `undecided` where the predictions neither show a config
meeting the SLO nor every one missing it (issue 44, item 2: the 1B on the H100 at 50 req/s, from
the 8B's calibration carried to it), with the measurement that decides it, the same bytes as
`advisor recommend --json`, valid against the published schema."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from fastapi.testclient import TestClient

from knowledge import TrialStore
from knowledge.transfer import import_file, shipped_file
from tests.api.conftest import make_settings

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "docs" / "answer.schema.json").read_text())
FILES = ("h100-vllm-heldout-2026-12-06.jsonl", "h100-vllm-profile-2026-12-06.jsonl",
         "h200-vllm-profiles-2026-12-01.jsonl")
BODY = {"target": "vllm", "slo": "ttft_p95_ms<=300,tpot_p95_ms<=40", "hardware": "h100",
        "model": "llama-3.2-1b", "workload": {"rate_rps": 50}}


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("undecided")
    db = f"sqlite:///{tmp / 'h100.db'}"
    store = TrialStore(db)
    for name in FILES:
        import_file(store, shipped_file(name))
    env = {**os.environ, "ADVISOR_DB_URL": db, "ADVISOR_CACHE_DIR": str(tmp / "cache"),
           "ADVISOR_IMPORT_SHIPPED": "0", "PYTHONPATH": str(ROOT)}
    from api import create_app

    with TestClient(create_app(make_settings(db, tmp, import_shipped=False))) as client:
        yield {"env": env, "client": client}


def test_rest_answers_undecided_with_the_measurement(setup: dict[str, Any]) -> None:
    rest = setup["client"].post("/v1/recommendations", json=BODY)
    assert rest.status_code == 200, rest.text
    document = rest.json()
    jsonschema.validate(document, SCHEMA)
    assert document["status"] == "undecided" and document["basis"] == "calibration"
    assert document["config"] is None and document["answer"] == "none"
    assert document["next"]["tune_command"] == ("advisor crosscheck --target vllm --model "
                                                "llama-3.2-1b --rate 50 --repeats 3 "
                                                "--store-as verify-llama-3.2-1b")
    assert document["closest"]["config"] == document["default"]["config"]
    # the published schema and the OpenAPI document list the new status
    assert "undecided" in SCHEMA["properties"]["status"]["enum"]
    openapi = setup["client"].get("/openapi.json").json()
    public = openapi["components"]["schemas"]["Answer"]
    assert "undecided" in public["properties"]["status"]["enum"]
    args = [sys.executable, "-m", "advisor", "recommend", "--target", "vllm", "--slo",
            str(BODY["slo"]), "--hardware", "h100", "--model", "llama-3.2-1b", "--rate-rps", "50",
            "--json"]
    cli = subprocess.run(args, cwd=ROOT, env=setup["env"], capture_output=True, timeout=600,
                         check=False)
    assert cli.returncode == 1, cli.stderr.decode()
    assert cli.stdout == rest.content

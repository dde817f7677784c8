"""One answer document through every door: `advisor recommend --json` prints exactly the bytes
`POST /v1/recommendations` returns, for every outcome, and both validate against the published
JSON Schema (docs/answer.schema.json, which must match the code). The CLI's and REST's
recommendation modules hold no answer logic: they import the planner, never its rule."""

from __future__ import annotations

import ast
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

from advisor.answers import answer_json_schema
from knowledge import TrialStore
from tests.api.conftest import make_settings
from tests.knowledge.synthetic_trials import HARDWARE, populate

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "docs" / "answer.schema.json"
EXTRA = "scripted=tests.scripted_target:ScriptedTarget"


def test_the_published_schema_is_the_codes() -> None:
    published = json.loads(SCHEMA.read_text())
    assert published == json.loads(json.dumps(answer_json_schema(), sort_keys=True)), (
        "docs/answer.schema.json is stale: regenerate it with python -c 'import json; from "
        "advisor.answers import answer_json_schema; print(json.dumps(answer_json_schema(), "
        "indent=2, sort_keys=True))' > docs/answer.schema.json")


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("answers")
    db = f"sqlite:///{tmp / 'a.db'}"
    populate(TrialStore(db), n_configs=24, sizes=(1000, 2000), repeats=2)
    env = {**os.environ, "ADVISOR_DB_URL": db, "ADVISOR_CACHE_DIR": str(tmp / "cache"),
           "ADVISOR_IMPORT_SHIPPED": "0", "ADVISOR_EXTRA_TARGETS": EXTRA,
           "PYTHONPATH": str(ROOT)}
    old = {k: os.environ.get(k) for k in ("ADVISOR_EXTRA_TARGETS",)}
    os.environ["ADVISOR_EXTRA_TARGETS"] = EXTRA
    from api import create_app

    settings = make_settings(db, tmp, import_shipped=False)
    with TestClient(create_app(settings)) as client:
        yield {"env": env, "client": client}
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


QUESTIONS: dict[str, tuple[dict[str, Any], list[str]]] = {
    "model answer": ({"target": "scripted", "slo": "p95_latency_ms<=1", "hardware": HARDWARE,
                      "workload": {"n_vectors": 2000}},
                     ["--n-vectors", "2000"]),
    "no feasible config": ({"target": "scripted", "slo": "p95_latency_ms<=0.001",
                            "hardware": HARDWARE, "workload": {"n_vectors": 2000}},
                           ["--n-vectors", "2000"]),
    "not covered": ({"target": "scripted", "slo": "p95_latency_ms<=1",
                     "hardware": "no-such-box"}, []),
    "measured only": ({"target": "scripted", "slo": "p95_latency_ms<=1", "hardware": HARDWARE,
                       "workload": {"n_vectors": 2000}, "measured": True},
                      ["--n-vectors", "2000", "--measured"]),
}


def _cli(env: dict[str, str], body: dict[str, Any], extra: list[str]) -> bytes:
    args = [sys.executable, "-m", "advisor", "recommend", "--target", body["target"],
            "--slo", body["slo"], "--hardware", body["hardware"], "--json", *extra]
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, timeout=600)
    assert done.returncode in (0, 1), done.stderr.decode()
    return done.stdout


@pytest.mark.parametrize("case", list(QUESTIONS))
def test_cli_json_and_rest_are_the_same_bytes(setup: dict[str, Any], case: str) -> None:
    body, extra = QUESTIONS[case]
    rest = setup["client"].post("/v1/recommendations", json=body)
    assert rest.status_code == 200, rest.text
    cli = _cli(setup["env"], body, extra)
    assert cli == rest.content
    document = json.loads(cli)
    jsonschema.validate(document, json.loads(SCHEMA.read_text()))
    assert set(document) == set(answer_json_schema()["properties"])


def test_the_outcomes_are_the_ones_asked(setup: dict[str, Any]) -> None:
    statuses = {case: setup["client"].post("/v1/recommendations", json=body).json()
                for case, (body, _) in QUESTIONS.items()}
    assert statuses["model answer"]["status"] in ("recommended", "keep_defaults")
    assert statuses["no feasible config"]["status"] == "no_feasible_config"
    assert statuses["not covered"]["status"] == "not_covered"
    assert statuses["measured only"]["basis"] == "measured"
    for document in statuses.values():
        assert document["verdict"] is None or "rule" in document["verdict"]


@pytest.mark.parametrize("body", [
    {"target": "scripted", "slo": "p95_latency_ms<=1", "workload": {"bogus": 1}},
    {"target": "scripted", "slo": "p95_latency_ms<=1", "workload": {"n_vectors": "ten"}},
    {"target": "scripted", "slo": "p95_latency_ms<=1", "workload": {"n_vectors": 0}},
    {"target": "scripted", "slo": "p95_latency_ms<=1", "measured": "yes"},
])
def test_bad_questions_are_a_4xx_naming_the_field(setup: dict[str, Any],
                                                   body: dict[str, Any]) -> None:
    answer = setup["client"].post("/v1/recommendations", json=body)
    assert answer.status_code == 422, answer.text
    named = next(iter(body["workload"])) if "workload" in body else "measured"
    assert named in answer.text


# -- the doors hold no answer logic ------------------------------------------------------------

DOORS = [ROOT / "advisor" / "cli" / "recommend.py", *sorted((ROOT / "api" / "routes").glob("*.py")),
         ROOT / "api" / "knowledge.py"]
#: What a door may import of the answer package: the request, the planner and the document.
ALLOWED = {"advisor.answers", "advisor.answers.document", "advisor.answers.request",
           "advisor.answers.planner"}


@pytest.mark.parametrize("door", DOORS, ids=lambda p: str(p.relative_to(ROOT)))
def test_doors_translate_and_render_only(door: Path) -> None:
    tree = ast.parse(door.read_text())
    imported = {node.module for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module}
    answer_modules = {m for m in imported if m.startswith("advisor.answers")}
    assert answer_modules <= ALLOWED, answer_modules - ALLOWED
    # No door re-decides: none compares against an SLO or reads a verdict's margins.
    names = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert not names & {"is_met", "margins", "conservative_margins", "holds"}, door


# -- the extrapolation outcome, on the shipped knowledge ---------------------------------------

QWEN_FIELDS = ("model_type=qwen2,hidden_size=3584,intermediate_size=18944,num_hidden_layers=28,"
               "num_attention_heads=28,num_key_value_heads=4,vocab_size=152064,"
               "max_position_embeddings=131072,tie_word_embeddings=false,torch_dtype=bfloat16")


def test_an_unmeasured_shape_is_the_same_bytes_through_both_doors(tmp_path: Path) -> None:
    """A shape never measured on the H200 (Qwen2.5-7B's fields) is answered by extrapolation;
    the CLI given the fields inline and REST given the same fields as `hf_config` return the
    same document."""
    from api import create_app
    from objectives.llm.shapes import load_model_config

    db = f"sqlite:///{tmp_path / 'shipped.db'}"
    env = {**os.environ, "ADVISOR_DB_URL": db, "ADVISOR_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": str(ROOT)}
    args = [sys.executable, "-m", "advisor", "recommend", "--target", "vllm",
            "--slo", "ttft_p95_ms<=300,tpot_p95_ms<=40", "--hardware", "h200",
            "--model-config", QWEN_FIELDS, "--rate-rps", "30", "--json"]
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, timeout=600)
    assert done.returncode in (0, 1), done.stderr.decode()
    body = {"target": "vllm", "slo": "ttft_p95_ms<=300,tpot_p95_ms<=40", "hardware": "h200",
            "hf_config": load_model_config(QWEN_FIELDS), "workload": {"rate_rps": 30}}
    with TestClient(create_app(make_settings(db, tmp_path))) as client:
        rest = client.post("/v1/recommendations", json=body)
    assert rest.status_code == 200, rest.text
    assert done.stdout == rest.content
    document = json.loads(rest.content)
    assert document["basis"] == "extrapolation"
    jsonschema.validate(document, json.loads(SCHEMA.read_text()))


#: A GPU known from its calibration profile (issue 44): the H100's shipped trials and profile.
CALIBRATED: dict[str, tuple[dict[str, Any], list[str]]] = {
    "calibration, no feasible config": (
        {"target": "vllm", "slo": "ttft_p95_ms<=300,tpot_p95_ms<=40", "hardware": "h100",
         "model": "llama-3-8b", "workload": {"rate_rps": 60}, "total_rate_rps": 500},
        ["--model", "llama-3-8b", "--rate-rps", "60", "--total-rate-rps", "500"]),
    "calibration, keep defaults": (
        {"target": "vllm", "slo": "ttft_p95_ms<=300,tpot_p95_ms<=40", "hardware": "h100",
         "model": "llama-3-8b", "workload": {"rate_rps": 30}},
        ["--model", "llama-3-8b", "--rate-rps", "30"]),
}


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    from api import create_app
    from knowledge.transfer import import_file, shipped_file

    tmp = tmp_path_factory.mktemp("calibrated")
    db = f"sqlite:///{tmp / 'h100.db'}"
    store = TrialStore(db)
    for name in ("h100-vllm-heldout-2026-12-06.jsonl", "h100-vllm-profile-2026-12-06.jsonl"):
        import_file(store, shipped_file(name))
    env = {**os.environ, "ADVISOR_DB_URL": db, "ADVISOR_CACHE_DIR": str(tmp / "cache"),
           "ADVISOR_IMPORT_SHIPPED": "0", "PYTHONPATH": str(ROOT)}
    with TestClient(create_app(make_settings(db, tmp, import_shipped=False))) as client:
        yield {"env": env, "client": client}


@pytest.mark.parametrize("case", list(CALIBRATED))
def test_a_calibrated_gpu_is_the_same_bytes_through_both_doors(calibrated: dict[str, Any],
                                                               case: str) -> None:
    body, extra = CALIBRATED[case]
    rest = calibrated["client"].post("/v1/recommendations", json=body)
    assert rest.status_code == 200, rest.text
    cli = _cli(calibrated["env"], body, extra)
    assert cli == rest.content
    document = json.loads(cli)
    jsonschema.validate(document, json.loads(SCHEMA.read_text()))
    assert document["basis"] == "calibration"
    assert document["capacity"]["default"] is not None
    if "total_rate_rps" in body:
        assert document["capacity"]["default_replicas"]["total_rate_rps"] == 500


def test_a_bad_total_rate_is_a_422(calibrated: dict[str, Any]) -> None:
    body = {**CALIBRATED["calibration, keep defaults"][0], "total_rate_rps": -5}
    answer = calibrated["client"].post("/v1/recommendations", json=body)
    assert answer.status_code == 422 and "total_rate_rps" in answer.text

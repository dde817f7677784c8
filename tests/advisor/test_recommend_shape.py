"""``recommend --model-config`` for a shape never measured on the H200 (advisor/answers/shapes.py):
Qwen2.5-7B is answered from the three shipped shapes, labelled a prediction for an unmeasured
shape with intervals widened by the held-out-shape error; Llama-3.1-70B is refused because its
weights do not fit one H200; a rate above the predicted capacity is refused with that capacity."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from knowledge import TrialStore
from knowledge.transfer import import_file, shipped_file
from objectives.llm.shapes import display_name

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "docs" / "examples" / "model-configs"
SLO = "ttft_p95_ms<=300,tpot_p95_ms<=40"
SHAPES = {"llama-3-8b", "llama-3.2-1b", "llama-h3072-i8192-l28-a24-kv8-v128256-ctx131072-tied"}


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A store holding only the shipped H200 vLLM files of the three shapes (fast to fit)."""
    tmp = tmp_path_factory.mktemp("shape")
    url = f"sqlite:///{tmp / 's.db'}"
    store = TrialStore(url)
    for name in ("h200-vllm-crosscheck-2026-12-01.jsonl", "h200-vllm-3b-2026-12-03.jsonl"):
        import_file(store, shipped_file(name))
    return {**os.environ, "ADVISOR_DB_URL": url, "ADVISOR_CACHE_DIR": str(tmp / "cache"),
            "ADVISOR_IMPORT_SHIPPED": "0", "COLUMNS": "200"}


def recommend(model: str, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "advisor", "recommend", "--target", "vllm", "--hardware", "h200",
         "--model-config", str(CONFIGS / model / "config.json"), "--slo", SLO, *extra],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def qwen_at_30(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``recommend --model-config qwen2.5-7b --rate-rps 30 --json``, run once per module."""
    return recommend("qwen2.5-7b", env, "--rate-rps", "30", "--json")


def test_qwen_7b_is_answered_as_a_labelled_prediction(
        env: dict[str, str], qwen_at_30: subprocess.CompletedProcess[str]) -> None:
    run = qwen_at_30
    assert run.returncode == 0, run.stdout + run.stderr
    answer = json.loads(run.stdout)
    assert answer["basis"] == "extrapolation" and answer["status"] == "keep_defaults"
    assert answer["answer"] == "keep_defaults"  # the only config measured on three shapes
    details = answer["details"]
    assert details["shape_position"] == "interpolation"  # 7.6B lies between 1.2B and 8.0B
    assert set(details["measured_shapes"]) == SHAPES
    assert "not measurements" in details["predicted_note"]
    assert answer["next"]["tune_command"].startswith("advisor tune --target vllm --model-config")
    for metric in ("ttft_p95_ms", "tpot_p95_ms"):
        f = answer["figures"][metric]
        assert f["basis"] == "predicted" and f["low"] < f["value"] < f["high"]
    # Judged at the conservative end of every interval (a prediction, no window decides).
    verdict = answer["verdict"]
    assert verdict["basis"] == "predicted" and verdict["meets_slo"] is True
    assert verdict["margins"] and all(m <= 0 for m in verdict["margins"].values())
    assert answer["confidence"]["level"] == "low"
    # Widened by the held-out-shape error: never narrower than the worst held-out
    # interpolation's light-load log error of that metric.
    inside = [h for h in details["held_out_shapes"] if h["position"] == "interpolation"]
    assert inside
    ttft = answer["figures"]["ttft_p95_ms"]
    assert ttft["high"] / ttft["value"] >= 1.3
    text = recommend("qwen2.5-7b", env, "--rate-rps", "30")
    assert text.returncode == 0
    assert "unmeasured shape" in text.stdout and "predicted" in text.stdout
    assert "advisor tune --target vllm --model-config" in text.stdout


def test_llama_70b_on_one_h200_is_refused_with_the_reason(env: dict[str, str]) -> None:
    run = recommend("llama-3.1-70b", env, "--rate-rps", "30", "--json")
    assert run.returncode == 1, run.stdout + run.stderr
    answer = json.loads(run.stdout)
    assert answer["status"] == "not_covered" and answer["basis"] == "extrapolation"
    reason = answer["confidence"]["reason"]
    assert "does not fit 1x-nvidia-h200" in reason and reason in answer["summary"]
    assert "141.1 GB" in reason and "70.55B parameters" in reason
    assert answer["figures"] == {} and answer["config"] is None and answer["verdict"] is None


def test_a_rate_above_the_predicted_capacity_is_refused(env: dict[str, str]) -> None:
    run = recommend("mistral-7b-v0.3", env, "--rate-rps", "400", "--json")
    assert run.returncode == 1
    answer = json.loads(run.stdout)
    assert answer["status"] == "not_covered" and answer["config"] is None
    reason = answer["confidence"]["reason"]
    assert "above" in reason and "predicted capacity" in reason
    # The capacity it names is the one the answer carries, and 400 req/s is above its interval.
    capacity = answer["details"]["capacity_rps"]
    assert capacity["high"] < 400 and f"{capacity['value']:.0f} req/s" in reason


def test_without_a_rate_the_precise_gap_answer_stands(env: dict[str, str]) -> None:
    run = recommend("qwen2.5-7b", env, "--json")
    assert run.returncode == 1
    answer = json.loads(run.stdout)
    assert answer["basis"] == "none" and answer["status"] == "not_covered"
    assert set(answer["details"]["measured_models"]) == {display_name(s) for s in SHAPES}
    assert "ask at a rate (--rate-rps)" in answer["confidence"]["reason"]


def test_the_rest_api_answers_for_a_config_json_s_fields(
        env: dict[str, str], tmp_path: Path, qwen_at_30: subprocess.CompletedProcess[str]
        ) -> None:
    """``POST /v1/recommendations`` with ``hf_config`` (the config.json object itself) answers
    as ``recommend --model-config`` does: the same labelled prediction (without waiting for the
    surrogates to be fitted), a tune command naming the shape by its fields, and a one-line 422
    for a broken config; a measured shape's fields go to the fitted models."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from advisor.answers import RecommendationRequest, resolve
    from advisor.answers.shapes import answer_unmeasured_shape
    from advisor.settings import Settings
    from api import create_app

    fields = json.loads((CONFIGS / "qwen2.5-7b" / "config.json").read_text())
    settings = Settings(db_url=env["ADVISOR_DB_URL"], cache_dir=tmp_path / "cache",
                        import_shipped=False, api_refresh_interval_s=0)
    body = {"target": "vllm", "slo": SLO, "hardware": "h200", "hf_config": fields,
            "workload": {"class": "chat", "rate_rps": 30}}
    with TestClient(create_app(settings)) as api:
        resp = api.post("/v1/recommendations", json=body)
        assert resp.status_code == 200, resp.text
        answer = resp.json()
        cli = json.loads(qwen_at_30.stdout)
        assert answer["basis"] == "extrapolation" and answer["status"] == "keep_defaults"
        assert answer["answer"] == "keep_defaults" and answer["config"] == cli["config"]
        assert answer["figures"] == cli["figures"] and answer["verdict"] == cli["verdict"]
        assert answer["details"]["shape_position"] == "interpolation"
        tune = answer["next"]["tune_command"]
        assert tune.startswith("advisor tune --target vllm --model-config ")
        assert "model_type=qwen2" in tune and "hidden_size=3584" in tune
        # The shape's own name as `model` is the same question; another shape's is refused.
        same = api.post("/v1/recommendations",
                        json={**body, "model": cli["question"]["model"]})
        assert same.status_code == 200 and same.json()["figures"] == answer["figures"]
        other = api.post("/v1/recommendations", json={**body, "model": "llama-3-8b"})
        assert other.status_code == 422 and "different shapes" in other.json()["error"]["message"]
        broken = api.post("/v1/recommendations",
                          json={**body, "hf_config": {**fields, "num_key_value_heads": 5}})
        assert broken.status_code == 422, broken.text
        assert "must divide" in broken.json()["error"]["message"]
        for wrong, why in (({"target": "faiss", "slo": "recall_at_10>=0.9"}, "takes none"),
                           ({"objective": "maximize:qps"}, "objective metric")):
            refused = api.post("/v1/recommendations", json={**body, **wrong})
            assert refused.status_code == 422, refused.text
            assert why in refused.json()["error"]["message"]
        # Without a rate: the precise gap answer, as the CLI gives it.
        gap = api.post("/v1/recommendations", json={**body, "workload": {}})
        assert gap.status_code == 200, gap.text
        assert gap.json()["status"] == "not_covered" and gap.json()["question"]["slo"] == SLO
        assert "ask at a rate" in gap.json()["confidence"]["reason"]
    # A measured shape given by its fields is the fitted models' question (no shape answer).
    three_b = resolve(RecommendationRequest(**{**body, "hf_config": json.loads(
        (CONFIGS / "llama-3.2-3b" / "config.json").read_text())}))
    assert three_b.shape is not None and three_b.shape.name in SHAPES
    store = TrialStore(env["ADVISOR_DB_URL"])
    assert answer_unmeasured_shape(
        store, target="vllm", hardware="h200", shape=three_b.shape,
        model_config=three_b.shape_fields or three_b.shape.name, slo=SLO, objective=None,
        workload=three_b.workload) is None
    store.close()

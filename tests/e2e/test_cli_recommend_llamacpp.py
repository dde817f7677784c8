"""The shipped 2-core llama.cpp study answers the questions docs/engines.md asks of it: the
measured best for the default SLO meets it with a quantized file, a quality floor on bits per
weight moves the answer to a 6-bit-or-more file, and the model-based answer is labelled a
prediction. Each answer comes with llama-server's launch command."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SLO = "ttft_p95_ms<=1500,tpot_p95_ms<=100"
ASK = ["recommend", "--target", "llamacpp", "--hardware", "cpu", "--model", "llama-3.2-1b",
       "--rate-rps", "0.5", "--json"]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("llamacpp-answers")
    return {**os.environ, "ADVISOR_DB_URL": f"sqlite:///{tmp / 'a.db'}",
            "ADVISOR_CACHE_DIR": str(tmp / "cache"), "COLUMNS": "100"}


def _answer(*args: str, env: dict[str, str]) -> dict:
    done = subprocess.run([sys.executable, "-m", "advisor", *ASK, *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def _launch(answer: dict) -> list[str]:
    argv = shlex.split(answer["launch_command"])
    assert argv[0] == "llama-server"
    return argv


def test_the_measured_best_meets_the_slo_and_is_not_the_default(env: dict[str, str]) -> None:
    answer = _answer("--slo", SLO, "--measured", env=env)
    rec = answer["recommended"]
    assert rec["hardware_key"].startswith("cpu-") and rec["model"] == "llama-3.2-1b"
    metrics = rec["metrics"]
    assert metrics["ttft_p95_ms"] <= 1500 and metrics["tpot_p95_ms"] <= 100
    assert rec["config"]["quant"] != "F16"  # llama.cpp's default file type missed this SLO
    argv = _launch(answer)
    assert f"models/llama-3.2-1b-{rec['config']['quant']}.gguf" in argv


def test_a_quality_floor_keeps_low_bit_files_out(env: dict[str, str]) -> None:
    answer = _answer("--slo", f"{SLO},bits_per_weight>=6", "--measured", env=env)
    rec = answer["recommended"]
    assert rec["metrics"]["bits_per_weight"] >= 6
    assert rec["config"]["quant"] in {"F16", "BF16", "Q8_0", "Q6_K"}


def test_the_model_based_answer_is_a_labelled_prediction(env: dict[str, str]) -> None:
    answer = _answer("--slo", SLO, env=env)
    assert answer["status"] == "recommended" and answer["basis"] == "model", answer
    assert "not measurements" in answer["predicted_note"]
    for bound in ("ttft_p95_ms", "tpot_p95_ms"):
        predicted = answer["predicted"][bound]
        assert predicted["basis"] == "predicted"
        assert predicted["low"] <= predicted["value"] <= predicted["high"]
    assert answer["confidence"] in {"low", "medium", "high"}
    assert answer["hardware_key"].startswith("cpu-")
    _launch(answer)

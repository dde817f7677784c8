"""``--model-config`` on tune, crosscheck and recommend (advisor/model_config.py): a bad config is
one line and exit 2 before anything starts, ``--model`` must name the same shape, and recommend
answers an unmeasured shape precisely (the measured shapes, the tune command) instead of
guessing; a measured shape goes on to the usual answer with the shape's features in the query."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.errors import InputError, WorkloadError
from advisor.model_config import model_option, shape_option, unmeasured_shape
from knowledge import TrialStore
from objectives.llm.models import model_config

ROOT = Path(__file__).resolve().parents[2]
QWEN = str(ROOT / "docs" / "examples" / "model-configs" / "qwen2.5-7b" / "config.json")
QWEN_NAME = "qwen2-h3584-i18944-l28-a28-kv4-v152064-ctx131072"
SLO = "ttft_p95_ms<=300,tpot_p95_ms<=40"


def advisor(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "advisor", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "ADVISOR_DB_URL": f"sqlite:///{tmp_path / 's.db'}",
            "ADVISOR_CACHE_DIR": str(tmp_path / "cache"), "ADVISOR_IMPORT_SHIPPED": "0",
            "COLUMNS": "200"}


def test_the_config_names_the_workload_model_and_must_agree_with_model(tmp_path: Path) -> None:
    assert model_option(None, QWEN) == QWEN_NAME
    assert model_option(QWEN_NAME, QWEN) == QWEN_NAME
    assert model_option("llama-3-8b", None) == "llama-3-8b"
    one_b = tmp_path / "1b.json"
    one_b.write_text(json.dumps({**model_config("llama-3.2-1b"), "bos_token_id": 128000}))
    assert model_option("llama-3.2-1b", str(one_b)) == "llama-3.2-1b"
    with pytest.raises(InputError, match=f"name different shapes \\(the config is {QWEN_NAME}"):
        shape_option("llama-3-8b", QWEN)
    with pytest.raises(WorkloadError, match="no such file"):
        shape_option(None, str(tmp_path / "none.json"))


def test_an_unmeasured_shape_names_the_measured_ones(tmp_path: Path) -> None:
    store = TrialStore(f"sqlite:///{tmp_path / 'empty.db'}")
    shape = shape_option(None, QWEN)
    assert shape is not None
    gap = unmeasured_shape(store, target="vllm", hardware="h200", shape=shape,
                           model_config=QWEN, slo=SLO)
    assert gap is not None
    assert gap.reason.startswith(f"no measurements of shape {QWEN_NAME} with vllm on hardware "
                                 "h200; measured shapes: none; run: advisor tune --target vllm "
                                 f"--model-config {QWEN} --slo")
    assert gap.to_dict()["model_shape"]["parameters"] == 7_615_616_512


@pytest.mark.parametrize(("command", "value", "message"), [
    ("tune", "/nonexistent/config.json", "no such file"),
    ("recommend", "{bad", "not KEY=VALUE fields"),
    ("crosscheck", "architectures=MixtralForCausalLM", "MixtralForCausalLM is a mixture of "
                                                        "experts"),
    ("tune", "model_type=llama,hidden_size=100,intermediate_size=8,num_hidden_layers=2,"
             "num_attention_heads=3,vocab_size=64", "num_attention_heads 3 must divide"),
])
def test_a_bad_config_is_one_line_and_exit_2(env: dict[str, str], command: str, value: str,
                                             message: str) -> None:
    extra = {"tune": ["--target", "vllm", "--trials", "1"],
             "recommend": ["--target", "vllm", "--slo", SLO],
             "crosscheck": ["--target", "vllm", "--rate", "1"]}[command]
    run = advisor(command, *extra, "--model-config", value, env=env)
    assert run.returncode == 2, run.stderr
    assert message in run.stderr and "Traceback" not in run.stderr
    assert len([line for line in run.stderr.splitlines() if line.strip()]) == 1


def test_bad_json_in_a_file_is_one_line(env: dict[str, str], tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "llama",')
    run = advisor("tune", "--target", "vllm", "--model-config", str(bad), env=env)
    assert run.returncode == 2 and "is not valid JSON" in run.stderr
    run = advisor("tune", "--target", "vllm", "--model", "llama-3-8b", "--model-config", QWEN,
                  env=env)
    assert run.returncode == 2 and "name different shapes" in run.stderr


def test_a_target_without_a_model_refuses_the_option_in_one_line(env: dict[str, str]) -> None:
    """A vector index serves no model: `tune` says so before it reads and names the shape."""
    for command, extra in (("tune", ["--trials", "1"]),
                           ("recommend", ["--slo", "recall_at_10>=0.9"])):
        run = advisor(command, "--target", "faiss", *extra, "--model-config", QWEN, env=env)
        assert run.returncode == 2, run.stderr
        lines = [line for line in run.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "faiss takes none" in lines[0], run.stderr


def test_recommend_says_precisely_why_an_unmeasured_shape_has_no_answer(
        env: dict[str, str]) -> None:
    run = advisor("recommend", "--target", "vllm", "--slo", SLO, "--hardware", "h200",
                  "--model-config", QWEN, "--json", env={**env, "ADVISOR_IMPORT_SHIPPED": "1"})
    assert run.returncode == 1, run.stderr
    answer = json.loads(run.stdout)
    assert answer["status"] == "not_covered" and answer["config"] is None
    assert answer["question"]["model"] == QWEN_NAME
    details = answer["details"]
    assert details["model_shape"]["kv_bytes_per_token"] == 57344
    # The shipped H200 knowledge measured the 8B and the 1B: both named, with their features.
    assert {"llama-3-8b", "llama-3.2-1b"} <= set(details["measured_models"])
    assert details["measured_models"]["llama-3-8b"]["parameters"] == 8_030_261_248
    assert "no measurements of shape" in answer["confidence"]["reason"]
    # The tune command names the shape by its fields (runnable anywhere, the same through REST),
    # and those fields read back as the very shape asked.
    tune = shlex.split(answer["next"]["tune_command"], comments=True)
    assert tune[:4] == ["advisor", "tune", "--target", "vllm"] and "--slo" in tune
    assert model_option(None, tune[tune.index("--model-config") + 1]) == QWEN_NAME
    text = advisor("recommend", "--target", "vllm", "--slo", SLO, "--hardware", "h200",
                   "--model-config", QWEN, env={**env, "ADVISOR_IMPORT_SHIPPED": "1"})
    assert text.returncode == 1
    assert "no measurements of shape" in text.stdout and "measured shapes: " in text.stdout

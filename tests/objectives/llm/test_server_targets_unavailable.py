"""Serving targets where the engine is missing or misbehaves: `advisor tune` exits 2 with one line
naming what to install, and an engine that fails to start, rejects its flags or never becomes
ready is a failed trial carrying the engine's own words."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from advisor.isolation import run_isolated
from objectives.llm.workload import load_preset
from objectives.targets.vllm_target import COMMAND_ENV
from objectives.workload import Workload

ROOT = Path(__file__).resolve().parents[3]


def tune(target: str, tmp_path: Path, *extra: str, env: dict[str, str] | None = None
         ) -> subprocess.CompletedProcess[str]:
    child_env = {k: v for k, v in os.environ.items()
                 if not k.startswith(("ADVISOR_VLLM", "ADVISOR_TRTLLM", "ADVISOR_OPENAI"))}
    child_env.update({"ADVISOR_DB_URL": f"sqlite:///{tmp_path / 'advisor.db'}",
                      "ADVISOR_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "300",
                      **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", "advisor", "tune", "--target", target, "--trials", "1", *extra],
        capture_output=True, text=True, timeout=120, env=child_env, cwd=ROOT)


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line, got: {stderr!r}"
    return lines[0]


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None,
                    reason="vLLM is installed here, so the vllm target is available")
def test_tune_vllm_without_vllm_names_what_to_install(tmp_path: Path) -> None:
    result = tune("vllm", tmp_path)
    assert result.returncode == 2, result.stderr
    line = one_line(result.stderr)
    assert "pip install vllm" in line
    assert "Traceback" not in result.stderr


@pytest.mark.skipif(importlib.util.find_spec("tensorrt_llm") is not None,
                    reason="TensorRT-LLM is installed here")
def test_tune_tensorrt_llm_without_it_names_what_to_install(tmp_path: Path) -> None:
    result = tune("tensorrt-llm", tmp_path)
    assert result.returncode == 2, result.stderr
    assert "pip install tensorrt-llm" in one_line(result.stderr)


def error_line(stderr: str) -> str:
    """The error line (the workload may carry the endpoint, so the openai target can only tell
    it is missing once it prepares the workload, after one progress line)."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("error:"), stderr
    assert sum(line.startswith("error:") for line in lines) == 1, stderr
    return lines[-1]


def test_tune_openai_without_an_endpoint_says_how_to_configure_one(tmp_path: Path) -> None:
    result = tune("openai", tmp_path)
    assert result.returncode == 2, result.stderr
    assert "ADVISOR_OPENAI_BASE_URL" in error_line(result.stderr)
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("url", ["ftp://example.com/v1", "file:///etc/passwd", "localhost:8000"])
def test_tune_openai_refuses_non_http_urls(tmp_path: Path, url: str) -> None:
    result = tune("openai", tmp_path, env={"ADVISOR_OPENAI_BASE_URL": url,
                                           "ADVISOR_OPENAI_MODEL": "m"})
    assert result.returncode == 2, result.stderr
    assert "must be an http:// or https:// URL" in one_line(result.stderr)


# -- engines that fail: failed trials with the engine's reason -------------------------------------

def small_workload(**target_params: Any) -> Workload:
    return load_preset(
        "chat", model="tiny-llama", n_requests=4, warmup_requests=1,
        prompt_len={"dist": "fixed", "value": 16}, output_len={"dist": "fixed", "value": 4},
    ).with_params(**target_params)


def fake_engine(tmp_path: Path, body: str) -> dict[str, str]:
    """ADVISOR_VLLM_COMMAND pointing at a python script with ``body``."""
    script = tmp_path / "fake_vllm.py"
    script.write_text(textwrap.dedent(body))
    return {COMMAND_ENV: json.dumps([sys.executable, str(script)])}


def test_engine_that_fails_to_start_is_a_failed_trial_with_its_log(tmp_path: Path) -> None:
    env = fake_engine(tmp_path, """
        import sys
        print("INFO starting vLLM API server", flush=True)
        print("RuntimeError: CUDA error: no kernel image is available for execution on the "
              "device", file=sys.stderr)
        sys.exit(1)
    """)
    outcome = run_isolated("vllm", {}, small_workload(), tmp_path / "cache", timeout_s=120,
                           env=env)
    assert outcome.status == "failed"
    assert outcome.error_type == "engine_start"
    reason = outcome.reason or ""
    assert "vllm serve exited with exit code 1 before it became ready" in reason
    assert "no kernel image is available" in reason


def test_flags_the_engine_refuses_are_a_rejected_config(tmp_path: Path) -> None:
    env = fake_engine(tmp_path, """
        import sys
        print("usage: vllm serve [model_tag] [options]", file=sys.stderr)
        print("vllm serve: error: argument --kv-cache-dtype: invalid choice: 'fp8'",
              file=sys.stderr)
        sys.exit(2)
    """)
    outcome = run_isolated("vllm", {"kv_cache_dtype": "fp8"}, small_workload(),
                           tmp_path / "cache", timeout_s=120, env=env)
    assert outcome.error_type == "rejected"
    assert "argument --kv-cache-dtype: invalid choice: 'fp8'" in (outcome.reason or "")


def test_infeasible_config_is_rejected_before_any_engine_starts(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    env = fake_engine(tmp_path, f"open({str(marker)!r}, 'w').close()")
    outcome = run_isolated("vllm", {"max_num_seqs": 1024, "max_num_batched_tokens": 512},
                           small_workload(), tmp_path / "cache", timeout_s=120, env=env)
    assert outcome.error_type == "rejected"
    assert "must be greater than or equal to max_num_seqs" in (outcome.reason or "")
    assert not marker.exists()


def test_engine_that_never_becomes_ready_fails_at_the_startup_timeout(tmp_path: Path) -> None:
    env = fake_engine(tmp_path, """
        import time
        while True:
            print("Capturing CUDA graphs", flush=True)
            time.sleep(0.2)
    """)
    start = time.monotonic()
    outcome = run_isolated("vllm", {}, small_workload(startup_timeout_s=2), tmp_path / "cache",
                           timeout_s=120, env=env)
    assert outcome.error_type == "engine_start"
    assert "within 2 s" in (outcome.reason or "")
    assert "Capturing CUDA graphs" in (outcome.reason or "")
    assert time.monotonic() - start < 60

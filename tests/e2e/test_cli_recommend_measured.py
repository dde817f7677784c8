"""The measured answer on the shipped H200 knowledge, as a user asks it: a llama-3-8b question is
answered by a llama-3-8b trial (the shipped 1B trials are faster and used to win), an unknown model
says so, and a rate nobody measured names the workload it borrows."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.advisor.test_tune_suggestions import check_tune_command

ROOT = Path(__file__).resolve().parents[2]
ASK = ["recommend", "--target", "vllm", "--hardware", "h200", "--rate-rps", "60",
       "--slo", "ttft_p95_ms<=300,tpot_p95_ms<=40", "--measured"]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("measured")
    return {**os.environ, "ADVISOR_DB_URL": f"sqlite:///{tmp / 'a.db'}",
            "ADVISOR_CACHE_DIR": str(tmp / "cache"), "COLUMNS": "100"}


def _advisor(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "advisor", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def test_the_asked_model_answers(env: dict[str, str]) -> None:
    done = _advisor(*ASK, "--model", "llama-3-8b", "--json", env=env)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    rec = answer["recommended"]
    assert rec["model"] == "llama-3-8b" and answer["model"] == "llama-3-8b"
    assert rec["workload"]["params"]["arrival"]["rate_rps"] == 60
    assert answer["borrowed_workload"] is None
    assert "Meta-Llama-3-8B" in answer["launch_command"]
    text = _advisor(*ASK, "--model", "llama-3-8b", env=env)
    assert "with model llama-3-8b" in text.stdout
    # The launch command is one line, whatever the terminal width: it is pasted into a shell.
    launch = text.stdout.split("Launch:\n", 1)[1].strip()
    assert "\n" not in launch and shlex.split(launch)[:2] == ["vllm", "serve"]


def test_an_unknown_model_is_not_answered_by_another(env: dict[str, str]) -> None:
    done = _advisor(*ASK, "--model", "qwen2.5-7b", env=env)
    assert done.returncode == 1, done.stderr
    assert "served model 'qwen2.5-7b'" in done.stdout
    assert "llama-3-8b, llama-3.2-1b" in done.stdout and "run:" not in done.stdout


def test_an_unmeasured_rate_names_the_workload_it_borrows(env: dict[str, str]) -> None:
    # 140 req/s: the 8B shape was measured up to 120 (more than 10 % away)
    done = _advisor(*[a if a != "60" else "140" for a in ASK], "--model", "llama-3-8b",
                    "--json", env=env)
    answer = json.loads(done.stdout)
    borrowed = answer["borrowed_workload"]
    assert borrowed is not None and borrowed["features"]["rate_rps"] != 140
    assert borrowed["factor"] > 1.1  # farther than 10 %: borrowed, not "measured"
    trial = answer["recommended"] or answer["closest"]  # from the borrowed workload either way
    assert trial["model"] == "llama-3-8b"
    assert trial["workload"]["params"]["arrival"]["rate_rps"] == borrowed["features"]["rate_rps"]
    text = _advisor(*[a if a != "60" else "140" for a in ASK], "--model", "llama-3-8b", env=env)
    assert "No trial was measured at rate_rps=140" in text.stdout
    assert "borrows the nearest measured workload" in text.stdout


def test_a_slo_nobody_met_suggests_a_tune_command_tune_accepts(env: dict[str, str]) -> None:
    done = _advisor(*[a if not a.startswith("ttft") else "ttft_p95_ms<=1,tpot_p95_ms<=1"
                      for a in ASK], "--model", "llama-3-8b", "--json", env=env)
    assert done.returncode == 1, done.stderr
    answer = json.loads(done.stdout)
    assert answer["recommended"] is None and answer["closest"]["model"] == "llama-3-8b"
    check_tune_command(answer["tune_command"])

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


def _trial(trial_id: int, env: dict[str, str]) -> dict:
    """One stored vLLM trial, as `advisor trials --json` lists it."""
    done = _advisor("trials", "--target", "vllm", "--json", "--limit", "100000", env=env)
    assert done.returncode == 0, done.stderr
    return next(t for t in json.loads(done.stdout) if t["id"] == trial_id)


def test_the_asked_model_answers(env: dict[str, str]) -> None:
    done = _advisor(*ASK, "--model", "llama-3-8b", "--json", env=env)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["status"] in ("recommended", "keep_defaults") and answer["basis"] == "measured"
    assert answer["question"]["model"] == answer["context"]["model"] == "llama-3-8b"
    verdict = answer["verdict"]
    assert verdict["meets_slo"] is True and verdict["basis"] == "measured"
    # The windows that decide are the asked model's, at the asked rate (not the faster 1B's).
    for trial_id in verdict["trial_ids"]:
        trial = _trial(trial_id, env)
        assert trial["config"] == answer["config"]
        assert trial["workload_spec"]["params"]["model"] == "llama-3-8b"
        assert trial["workload_spec"]["params"]["arrival"]["rate_rps"] == 60
    assert answer["borrowed_workload"] is None
    assert "Meta-Llama-3-8B" in answer["launch_command"]
    text = _advisor(*ASK, "--model", "llama-3-8b", env=env)
    lines = text.stdout.splitlines()
    assert any(line.startswith("summary=") and "llama-3-8b" in line for line in lines)
    # The launch command is one line, whatever the terminal width: it is pasted into a shell.
    launch = [line.removeprefix("launch=") for line in lines if line.startswith("launch=")]
    assert len(launch) == 1 and shlex.split(launch[0])[:2] == ["vllm", "serve"]
    assert launch[0] == answer["launch_command"]


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
    # From the borrowed workload either way: the answer's own windows, or the closest miss.
    trial_id = (answer["verdict"]["trial_ids"][0] if answer["verdict"]
                else answer["closest"]["trial_id"])
    trial = _trial(trial_id, env)
    assert trial["workload_spec"]["params"]["model"] == "llama-3-8b"
    assert trial["workload_spec"]["params"]["arrival"]["rate_rps"] == borrowed["features"][
        "rate_rps"]
    text = _advisor(*[a if a != "60" else "140" for a in ASK], "--model", "llama-3-8b", env=env)
    lines = text.stdout.splitlines()
    assert any(line.startswith("asked=") and "rate_rps 140" in line for line in lines)
    assert any(line.startswith("note=no trial was measured at the asked workload; the nearest "
                               f"measured one, {borrowed['name']}") for line in lines), text.stdout


def test_a_slo_nobody_met_suggests_a_tune_command_tune_accepts(env: dict[str, str]) -> None:
    done = _advisor(*[a if not a.startswith("ttft") else "ttft_p95_ms<=1,tpot_p95_ms<=1"
                      for a in ASK], "--model", "llama-3-8b", "--json", env=env)
    assert done.returncode == 1, done.stderr
    answer = json.loads(done.stdout)
    assert answer["status"] == "no_feasible_config" and answer["config"] is None
    assert answer["launch_command"] is None
    closest = answer["closest"]
    assert any(m > 0 for m in closest["slo_margins"].values())  # it misses, by this much
    assert _trial(closest["trial_id"], env)["workload_spec"]["params"]["model"] == "llama-3-8b"
    check_tune_command(answer["next"]["tune_command"])

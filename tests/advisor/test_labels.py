"""Names, hardware and model labels are one line of printable text at every front door: a
newline in one would start a second shell command where the answer prints it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.answers.model_based import _tune_command
from advisor.errors import InputError
from advisor.inputs import check_label
from advisor.objective import Objective
from objectives import parse_slo
from tests.advisor.test_driver import _spec

EVIL = ["x\ntouch pwned", "x\rtouch", "a\x00b", "tab\there", "x\x1b[2J", "x\u2028y", "x\x85y"]


@pytest.mark.parametrize("value", EVIL)
def test_control_characters_are_refused_with_their_position(value: str) -> None:
    with pytest.raises(InputError, match="one line of printable text") as refused:
        check_label(value, "the hardware")
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("value", ["h200", "NVIDIA H200 141GB", "llama-3.2-1b", "sweep@run/cell",
                                   "/models/my model", "ünïcode"])
def test_printable_labels_pass(value: str) -> None:
    assert check_label(value, "x") == value


def test_a_suggested_command_never_carries_a_second_line() -> None:
    slo, objective = parse_slo("qps>=1"), Objective.parse("maximize:qps")
    assert _tune_command("faiss", slo, objective, hardware="h200").endswith("# run on h200")
    with pytest.raises(InputError):
        _tune_command("faiss", slo, objective, hardware="x\ntouch pwned")


def test_a_study_name_with_a_newline_is_refused() -> None:
    with pytest.raises(InputError):
        _spec(name="a\nb")


@pytest.mark.parametrize("args", [
    ["recommend", "--target", "faiss", "--slo", "qps>=1", "--hardware", "x\ntouch pwned"],
    ["recommend", "--target", "vllm", "--slo", "ttft_p95_ms<=300", "--model", "m\nrm -rf x"],
    ["tune", "--target", "scripted", "--name", "a\nb", "--trials", "1"],
    ["trials", "--hardware", "\x1b[2J"],
])
def test_the_cli_refuses_them_in_one_line(args: list[str], tmp_path: Path) -> None:
    env = {**os.environ, "ADVISOR_DB_URL": f"sqlite:///{tmp_path / 'l.db'}",
           "ADVISOR_CACHE_DIR": str(tmp_path / "cache"), "ADVISOR_IMPORT_SHIPPED": "false"}
    done = subprocess.run([sys.executable, "-m", "advisor", *args], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "one line of printable text" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr

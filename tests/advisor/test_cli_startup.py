"""Importing the command line and building its command tree loads no heavy engine: each command
imports its own inside its function (advisor/cli/__init__.py), so `--help` and the light
commands, which the test suite starts hundreds of times, pay only for the store."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Modules (with their submodules) that only the commands needing them may import.
HEAVY = ("advisor.answers", "advisor.cheatsheet", "advisor.crosscheck", "advisor.driver",
         "advisor.evaluation", "advisor.failure_gate", "advisor.study_request",
         "advisor.warm_start", "knowledge.cache", "knowledge.failures", "knowledge.surrogates",
         "optuna", "httpx", "sklearn", "scipy", "faiss", "torch", "transformers")

_PROBE = ("import sys, advisor.cli\n"
          "from advisor.cli.root import app\n"
          "print('\\n'.join(sorted(sys.modules)))\n")


def _heavy(modules: list[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


def test_building_the_command_tree_imports_no_heavy_engine() -> None:
    result = subprocess.run([sys.executable, "-c", _PROBE], cwd=ROOT, capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    loaded = result.stdout.split()
    assert "advisor.cli.root" in loaded  # the probe did build the tree
    assert not _heavy(loaded), f"imported when the CLI starts: {_heavy(loaded)}"


def test_the_heavy_filter_matches_whole_module_names() -> None:
    assert _heavy(["optuna.samplers", "optunax", "advisor.answers", "advisor.answer_view"]) == [
        "advisor.answers", "optuna.samplers"]

"""Importing the command line and building its command tree loads no heavy engine: each command
imports its own inside its function (advisor/cli/__init__.py), so `--help` and the light
commands, which the test suite starts hundreds of times, pay only for what they use.

Each check runs a fresh interpreter and reads its ``sys.modules``: a module that comes back onto
a path it was taken off fails here by name, however fast the machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Modules (with their submodules) that only the commands needing them may import.
HEAVY = ("advisor.answers", "advisor.cheatsheet", "advisor.crosscheck", "advisor.driver",
         "advisor.evaluation", "advisor.failure_gate", "advisor.study_request",
         "advisor.warm_start", "knowledge.cache", "knowledge.failures", "knowledge.surrogates",
         "optuna", "httpx", "sklearn", "scipy", "faiss", "torch", "transformers")

#: What only a command that opens the store or reads the settings may import: `--help` and the
#: option choices typer reads at import (``trials --status``: knowledge/statuses.py) must not.
STORE = ("sqlalchemy", "sqlmodel", "knowledge.models", "knowledge.store", "advisor.settings",
         "pydantic_settings", "pydantic", "numpy")

#: What opening the store must not import: the load simulator (numpy) is for the commands that
#: simulate (knowledge/profiles.py imports it where a profile becomes a model).
SIMULATION = ("numpy", "scipy", "sklearn", "optuna", "knowledge.batch_sim")

_TREE = ("import advisor.cli\n"
         "from advisor.cli.root import app\n")
_HELP = ("from advisor.cli import main\n"
         "try:\n"
         "    main(['--help'])\n"
         "except SystemExit as exc:\n"
         "    assert exc.code in (0, None), exc.code\n")
_STORE = "import advisor.stores, knowledge.transfer, knowledge.profiles\n"


def _loaded(probe: str) -> list[str]:
    """The modules a fresh interpreter holds after running ``probe``."""
    code = probe + "import sys\nprint('\\n'.join(sorted(sys.modules)), file=sys.__stderr__)\n"
    env = {**os.environ, "COLUMNS": "100"}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=120, check=False, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stderr.split()


def _among(modules: list[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in names))


def _heavy(modules: list[str]) -> list[str]:
    return _among(modules, HEAVY)


def test_building_the_command_tree_imports_no_heavy_engine() -> None:
    loaded = _loaded(_TREE)
    assert "advisor.cli.root" in loaded  # the probe did build the tree
    assert not _heavy(loaded), f"imported when the CLI starts: {_heavy(loaded)}"


@pytest.mark.parametrize("probe", [_TREE, _HELP], ids=["tree", "help"])
def test_the_command_tree_and_its_help_load_no_store_nor_settings(probe: str) -> None:
    loaded = _loaded(probe)
    assert "knowledge.statuses" in loaded  # `trials --status` did read its choices
    assert not _among(loaded, STORE), f"imported for `advisor --help`: {_among(loaded, STORE)}"


def test_opening_the_store_loads_no_simulator_nor_models() -> None:
    loaded = _loaded(_STORE)
    assert "knowledge.store" in loaded and "knowledge.profiles" in loaded
    assert not _among(loaded, SIMULATION), (
        f"imported to open the store: {_among(loaded, SIMULATION)}")


def test_the_heavy_filter_matches_whole_module_names() -> None:
    assert _heavy(["optuna.samplers", "optunax", "advisor.answers", "advisor.answer_view"]) == [
        "advisor.answers", "optuna.samplers"]

"""Importing the command line and building its command tree loads no heavy engine: each command
imports its own inside its function (advisor/cli/__init__.py), so `--help` and the light
commands, which the test suite starts hundreds of times, pay only for what they use; a `tune`
refused for its input loads neither the study engine nor the store.

Each check runs a fresh interpreter and reads its ``sys.modules``: a module that comes back onto
a path it was taken off fails here by name, however fast the machine."""

from __future__ import annotations

import math
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

#: What a `tune` refused for its input must not import: the study engine, the store and the
#: warm start's planner load only for a request that will run (advisor/cli/tune.py).
REFUSED_TUNE = ("optuna", "sqlalchemy", "sqlmodel", "advisor.answers", "advisor.driver",
                "advisor.warm_start", "scipy")
_BAD_TUNE = ("from advisor.cli import main\n"
             "try:\n"
             "    main(['tune', '--target', 'faiss', '--workload', 'stdlib-docs-2k', {args}])\n"
             "except SystemExit as exc:\n"
             "    assert exc.code == 2, exc.code\n"
             "else:\n"
             "    raise AssertionError('the bad input was accepted')\n")
#: The closing repeats' interval, computed from three repeats of the best config (1, 2 and 3).
_INTERVAL = ("from types import SimpleNamespace as NS\n"
             "from advisor.cli.tune import _best_repeats\n"
             "from advisor.pairing import SWEEP_REPEAT_ROLE\n"
             "best = NS(config_hash='c', metrics={'qps': 1.0}, number=1)\n"
             "same = [NS(status='complete', details={'role': SWEEP_REPEAT_ROLE},\n"
             "           config_hash='c', metrics={'qps': float(v)}, number=n)\n"
             "        for n, v in enumerate([1, 2, 3], 2)]\n"
             "shown = _best_repeats(NS(best=best, trials=same))\n"
             "print('interval=%r,%r' % tuple(shown['metrics']['qps']['interval']),\n"
             "      file=sys.__stderr__)\n")


def _loaded(probe: str, env: dict[str, str] | None = None) -> list[str]:
    """The modules a fresh interpreter holds after running ``probe`` (what it prints to the
    real stderr first)."""
    code = ("import sys\n" + probe
            + "print('\\n'.join(sorted(sys.modules)), file=sys.__stderr__)\n")
    env = {**os.environ, "COLUMNS": "100", **(env or {})}
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


@pytest.mark.parametrize(("args", "reached"), [
    ("'--slo', ','", "advisor.study_request"),  # refused by the planner: no bound
    ("'--trials', '0'", "advisor.cli.tune"),  # refused by the option itself
], ids=["planner", "option"])
def test_a_refused_tune_loads_no_engine_store_nor_planner(args: str, reached: str,
                                                          tmp_path: Path) -> None:
    env = {"ADVISOR_DB_URL": f"sqlite:///{tmp_path / 'a.db'}",
           "ADVISOR_CACHE_DIR": str(tmp_path / "cache"), "ADVISOR_IMPORT_SHIPPED": "false"}
    loaded = _loaded(_BAD_TUNE.format(args=args), env)
    assert reached in loaded  # the probe got as far as the check refusing it
    assert not _among(loaded, REFUSED_TUNE), (
        f"imported by a refused `advisor tune`: {_among(loaded, REFUSED_TUNE)}")
    assert not (tmp_path / "a.db").exists()  # nor was the store opened


def test_the_closing_interval_needs_no_scipy_stats() -> None:
    loaded = _loaded(_INTERVAL)
    (shown,) = [m.removeprefix("interval=") for m in loaded if m.startswith("interval=")]
    lo, hi = (float(v) for v in shown.split(","))
    # Student's t at 97.5% with 2 degrees of freedom, times stdev 1 over sqrt(3), about mean 2.
    half = 4.302652729749462 / math.sqrt(3)
    assert (lo, hi) == (2 - half, 2 + half)
    assert "scipy.special" in loaded  # the quantile was computed, by scipy
    assert not _among(loaded, ("scipy.stats",)), "scipy.stats imported for the t quantile"

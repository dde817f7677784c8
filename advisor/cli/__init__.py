"""The ``advisor`` command line: targets, tune, studies, trials, recommend, knowledge, serve,
dashboard, worker, cheatsheet, sweep, crosscheck.

Errors the advisor raises on purpose are printed as one line (exit code 2); ``--debug`` shows the
traceback. Human output goes through rich; ``--json`` gives machine-readable output.

Layout: :mod:`~advisor.cli.context` (what every command shares: consoles, settings, the store,
option texts and parsing), one module per command group, :mod:`~advisor.cli.render` (tables and
numbers), :mod:`~advisor.cli.root` (the command tree) and :mod:`~advisor.cli.entry` (``main``:
errors to exit codes). Command modules import only ``context`` and ``render`` of this package.

Heavy engines (the answer planner, the study driver and optuna, the surrogate and failure models,
httpx) are imported inside the command functions that use them, so each command pays for its own
engine only and ``--help`` or ``advisor targets`` starts fast (the test suite starts the CLI some
290 times); what typer reads at import, an option's choices and defaults, comes from light
modules (advisor/front_door.py, advisor/samplers.py, knowledge/model_choices.py).
"""

from __future__ import annotations

from advisor.cli.entry import main
from advisor.cli.root import app

__all__ = ["app", "main"]

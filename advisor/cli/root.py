"""The ``advisor`` command tree: the root command with its global options, and every command and
command group registered on it, in the order ``--help`` lists them.
"""

from __future__ import annotations

import logging
from typing import Annotated

import typer
import typer.core

from advisor import __version__
from advisor.cli import (
    calibrate,
    cheatsheet,
    crosscheck,
    knowledge,
    recommend,
    records,
    serve,
    store,
    sweep,
    targets,
    tune,
)
from advisor.cli.context import State, out

__all__ = ["app"]

def _flag_type_hidden() -> None:
    """Typer 0.29's help gives every on/off flag a ``<bool>`` type column (``--json <bool>``),
    which reads as if the flag took a value; a flag takes none, so it shows no type. Options
    with a value keep theirs (``<int>``, ``tpe|gp|random``)."""
    show = typer.core.TyperOption.display_type_rich
    if getattr(show, "_flags_hidden", False):
        return

    def display_type_rich(self: typer.core.TyperOption, ctx: typer.Context) -> str | None:
        if self.is_flag and not self.count and self.metavar is None:
            return None
        return show(self, ctx)

    display_type_rich._flags_hidden = True  # type: ignore[attr-defined]
    typer.core.TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign,assignment]


_flag_type_hidden()

app = typer.Typer(
    name="advisor",
    help="SLO-driven tuning advisor for LLM, retrieval and vector-search serving.\n\n"
         "Tune real engines against a latency SLO, store every trial, and get back the config "
         "that meets the SLO with the most headroom.",
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    """``--version``: eager, so it answers before click asks for a command."""
    if value:
        out.print(f"slo-advisor {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _global(
    db_url: Annotated[str | None, typer.Option(
        "--db-url", help="SQLAlchemy URL of the trial store (default: $ADVISOR_DB_URL, else a "
                         "SQLite file in your user data dir).")] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks and debug logs.")] = False,
    version: Annotated[bool, typer.Option(
        "--version", is_eager=True, callback=_print_version,
        help="Print the version and exit.")] = False,
) -> None:
    State.debug, State.db_url = debug, db_url
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")


app.command("targets")(targets.targets_cmd)
app.command("tune")(tune.tune_cmd)
app.command("studies")(records.studies_cmd)
app.command("trials")(records.trials_cmd)
app.command("recommend")(recommend.recommend_cmd)
app.add_typer(knowledge.knowledge_app, name="knowledge")
app.command("serve")(serve.serve_cmd)
app.command("dashboard")(serve.dashboard_cmd)
app.command("worker")(serve.worker_cmd)
app.command("cheatsheet")(cheatsheet.cheatsheet_cmd)
app.add_typer(sweep.sweep_app, name="sweep")
app.command("crosscheck")(crosscheck.crosscheck_cmd)
app.add_typer(store.store_app, name="store")
app.command("calibrate")(calibrate.calibrate_cmd)

"""`advisor store check`: SQLite's full integrity check of the trial store and the agreement of
Optuna's tables with the advisor's, on demand (docs/store.md)."""

from __future__ import annotations

import typer
from rich.markup import escape

from advisor.cli.context import cli_settings, err, out

__all__ = ["store_app"]

store_app = typer.Typer(help="Check the trial store (see docs/store.md for backups).",
                        no_args_is_help=True)


@store_app.command("check")
def check_cmd() -> None:
    """Run SQLite's full integrity check on the store file, then check that Optuna and the
    store agree on every trial's state. Exit 0 when both pass, 1 when either found a problem
    (each printed), 2 when the store cannot be read at all.

    Reads only: the shipped knowledge is not imported, nothing is repaired. A disagreement
    left by a killed driver is reconciled by `advisor tune ... --resume` of that study.
    """
    from advisor.store_check import check_consistency, check_integrity
    from advisor.stores import open_store
    from knowledge.store import redact_url

    settings = cli_settings()
    where = redact_url(settings.db_url)
    problems = 0
    integrity = check_integrity(settings.db_url)
    if integrity is None:
        out.print(f"integrity: not checked ({escape(where)} is not SQLite; PostgreSQL checks "
                  "its own pages)", highlight=False, soft_wrap=True)
    elif integrity:
        problems += len(integrity)
        err.print(f"integrity: SQLite's integrity_check found {len(integrity)} problem(s) in "
                  f"{escape(where)}:", highlight=False)
        for line in integrity:
            err.print(f"  {escape(line)}", highlight=False, soft_wrap=True)
        err.print("restore the store from a backup (docs/store.md); the consistency check "
                  "was skipped", highlight=False)
        raise typer.Exit(1)
    else:
        out.print("integrity: ok (SQLite's integrity_check)", highlight=False)
    store = open_store(settings, import_shipped=False)
    try:
        disagreements = check_consistency(store)
        targets = {s.name: s.target for s in store.list_studies()}
    finally:
        store.close()
    if not disagreements:
        out.print("consistency: ok (Optuna and the store agree on every trial)",
                  highlight=False)
    for study, lines in disagreements.items():
        problems += len(lines)
        resume = f"advisor tune --target {targets.get(study, 'TARGET')} --name {study} --resume"
        err.print(f"consistency: study {escape(study)}: {len(lines)} trial(s) differ between "
                  f"Optuna and the store; `{escape(resume)}` reconciles them",
                  highlight=False, soft_wrap=True)
        for line in lines:
            err.print(f"  {escape(line)}", highlight=False, soft_wrap=True)
    if problems:
        raise typer.Exit(1)

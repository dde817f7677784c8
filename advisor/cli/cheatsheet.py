"""`advisor cheatsheet`: the tuning cheat-sheet as Markdown, HTML or JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from advisor.cli.context import choice, cli_settings, cli_store, err, knowledge_models, one_line
from advisor.cli.progress import steps

__all__ = ["cheatsheet_cmd"]


def cheatsheet_cmd(
    fmt: Annotated[str, typer.Option("--format", help="Output format.",
                                     **choice(("md", "html", "json")))] = "md",
    output: Annotated[Path | None, typer.Option("--output", "-o",
                                                help="File to write (default: stdout).")] = None,
    target: Annotated[str | None, typer.Option(help="Only this target.")] = None,
    hardware: Annotated[str | None, typer.Option(callback=one_line,
        help="Only hardware keys containing this text (e.g. h200, cpu).")] = None,
    model: Annotated[str | None, typer.Option(callback=one_line,
                                              help="Only this model shape.")] = None,
    workload_class: Annotated[str | None, typer.Option(
        help="Only workload classes containing this text (e.g. chat, 'N=8000').")] = None,
    tier: Annotated[str | None, typer.Option(
        help="Only this tier.", **choice(("interactive", "standard", "throughput")))] = None,
) -> None:
    """The tuning cheat-sheet: recommended knob values per target x hardware x model x workload
    class x SLO tier, with predicted metrics, knob importance and fitted rules of thumb."""
    from advisor.cheatsheet import build_cheatsheet

    settings = cli_settings()
    store = cli_store(settings)
    with steps(err, 3, quiet=fmt == "json") as step:
        step("loading the surrogate models (fitting them when none are saved)")
        models = knowledge_models(settings, store, target)
        step(f"building the cheat-sheet from {len(models.contexts)} fitted contexts")
        sheet = build_cheatsheet(store, target=target, hardware=hardware, model=model,
                                 workload_class=workload_class, tier=tier, models=models)
        step(f"rendering {len(sheet.sections)} sections as {fmt}"
             f"{' with figures' if fmt == 'html' else ''}")
        text = (sheet.to_markdown() if fmt == "md" else sheet.to_html() if fmt == "html"
                else json.dumps(sheet.to_dict(), indent=1, sort_keys=False))
    if output is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    else:
        output.write_text(text)
        err.print(f"wrote {output} ({len(sheet.rows)} rows, {len(sheet.sections)} contexts)")


"""Helpers of the ``advisor`` command line: choice options, usage-error messages, table output.

Kept apart from advisor/cli.py so the commands stay readable. Typer (pinned in pyproject.toml)
ships its own copy of click; its exceptions all derive from ``typer.TyperException``, which is
how usage errors are recognised here without importing click.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from advisor.errors import InputError
from advisor.inputs import check_label

__all__ = ["TableFormat", "choice", "emit_table", "is_help_request", "one_line", "positive",
           "table_format", "usage_message"]

TableFormat = str  # "table", "wide" or "csv"
#: Width kept for a column whose longest word does not fit (rich folds its words).
_FOLDED_WIDTH = 8
#: Where a word too long for its column may be broken: after these (study names, SLOs, knobs).
_BREAK_AFTER = re.compile(r"(?<=[-/@,_=])")


def _one_of(choices: Sequence[str]) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        values = value if isinstance(value, list | tuple) else [value]
        for v in values:
            if v is not None and v not in choices:
                raise typer.BadParameter(f"{v!r} is not one of {', '.join(choices)}")
        return value

    return check


def choice(choices: Sequence[str]) -> dict[str, Any]:
    """``typer.Option`` keyword arguments for a string option limited to ``choices``: ``--help``
    lists them (instead of ``<str>``) and any other value is a usage error naming them.

    The choices come from the registries (samplers, surrogate families, statuses), so adding one
    there adds it here; the value stays a plain ``str`` for the command.
    """
    return {"metavar": "|".join(choices), "callback": _one_of(list(choices))}


def one_line(value: str | None) -> str | None:
    """Option callback: a name, hardware or model label must be one line of printable text
    (advisor/inputs.py: it is printed into commands a user may paste into a shell)."""
    if value is not None:
        try:
            check_label(value, "the value")
        except InputError as exc:
            raise typer.BadParameter(str(exc)) from None
    return value


def positive(value: float | None) -> float | None:
    """Option callback: a number of seconds must be > 0 (a usage error otherwise)."""
    if value is not None and not value > 0:
        raise typer.BadParameter(f"must be > 0, got {value:g}")
    return value


def _command_path(exc: typer.TyperException) -> str:
    ctx = getattr(exc, "ctx", None)
    return str(ctx.command_path) if ctx is not None else "advisor"


def usage_message(exc: typer.TyperException) -> str:
    """One line for a usage error: the command, what is wrong, and the valid choices.

    Click's own rendering prints the usage line, a help hint and the message on three lines;
    here the message is kept, the valid commands or options are named when the problem is an
    unknown one, and the help hint is folded into the same line.
    """
    message = " ".join(exc.format_message().split()).rstrip(".")
    path = _command_path(exc)
    ctx = getattr(exc, "ctx", None)
    extra = ""
    name = type(exc).__name__
    if ctx is not None and name == "UsageError" and message.startswith(
            ("No such command", "Missing command")):
        extra = f"; commands: {', '.join(ctx.command.list_commands(ctx))}"
    elif ctx is not None and name == "NoSuchOption" and not getattr(exc, "possibilities", None):
        options = [o for p in ctx.command.get_params(ctx) if not getattr(p, "hidden", False)
                   for o in getattr(p, "opts", []) if o.startswith("--")]
        extra = f"; options: {', '.join(options)}"
    return f"{path}: {message}{extra} (see '{path} --help')"


def is_help_request(exc: typer.TyperException) -> bool:
    """True for click's "no arguments, show the help" signal (``advisor``, ``advisor sweep``)."""
    return type(exc).__name__ == "NoArgsIsHelpError"


def table_format(wide: bool, as_csv: bool) -> TableFormat:
    """The output format chosen by ``--wide`` / ``--csv`` (``--csv`` wins)."""
    return "csv" if as_csv else "wide" if wide else "table"


def emit_table(console: Console, table: Table, rows: Sequence[Sequence[str]], fmt: TableFormat
               ) -> None:
    """Print ``table`` (whose rows are ``rows``) as a terminal table, a table on one line per row
    (``wide``: no wrapping, for wide terminals or ``less -S``), or CSV with the column headers.

    ``rows`` is passed alongside because a rich table keeps rendered cells, not the plain text
    CSV needs.
    """
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow([str(c.header) for c in table.columns])
        writer.writerows(rows)
        console.file.write(buffer.getvalue())
        return
    if fmt == "wide":
        for row in rows:
            table.add_row(*row)
        for column in table.columns:
            column.no_wrap, column.overflow = True, "ignore"
        # A console as wide as the widest row; the table is not expanded, so no padding.
        wide = Console(file=console.file, width=_natural_width(console, table),
                       force_terminal=console.is_terminal, no_color=console.no_color,
                       legacy_windows=False)
        wide.print(table, crop=False)
        return
    folded = _fit_columns(table, rows, console.width)
    for row in rows:
        table.add_row(*(_break_long_words(cell, table.columns[i].width)
                        for i, cell in enumerate(row)))
    console.print(table)
    if folded and console.is_terminal:
        console.print("[dim](too narrow for whole words: --wide or --csv shows every row on "
                      "one line)[/dim]")


def _fit_columns(table: Table, rows: Sequence[Sequence[str]], width: int) -> bool:
    """Fix column widths so that no word is folded in the middle while ``width`` allows it.

    Rich shrinks the widest columns first, which folds ``enable_chunked_prefill=True`` in two
    while narrow columns keep spare room. Here each column first gets its longest word,
    narrowest columns first; the room left goes to the columns whose cells are longer still.
    Returns True when some column is narrower than its longest word (rich folds it).
    """
    def cells(i: int) -> list[str]:
        return [str(c.header) for c in table.columns[i:i + 1]] + [
            str(row[i]) for row in rows if i < len(row)]

    natural = [max(len(line) for c in cells(i) for line in c.splitlines() or [""])
               for i in range(len(table.columns))]
    need = [max(len(w) for c in cells(i) for w in c.split() or [""])
            for i in range(len(table.columns))]
    budget = width - (3 * len(table.columns) + 1)  # padding and borders
    if sum(natural) <= budget:
        return False
    widths = [0] * len(need)
    folded = False
    order = sorted(range(len(need)), key=lambda i: need[i])
    for n, i in enumerate(order):
        reserve = sum(min(need[j], _FOLDED_WIDTH) for j in order[n + 1:])
        widths[i] = need[i] if need[i] <= budget - reserve else max(
            min(need[i], _FOLDED_WIDTH), budget - reserve)
        folded = folded or widths[i] < need[i]
        budget -= widths[i]
    if budget < 0:  # too narrow even for folded columns: rich's own shrinking decides
        return True
    # Spread what is left over the columns that wrap, in proportion to what they lack.
    lacking = {i: natural[i] - widths[i] for i in range(len(need)) if natural[i] > widths[i]}
    total = sum(lacking.values())
    for i, lack in lacking.items():
        if budget > 0 and total:
            widths[i] += min(lack, budget * lack // total)
    for column, w in zip(table.columns, widths, strict=True):
        column.width = max(w, 1)
    return folded


def _break_long_words(cell: str, width: int | None) -> str:
    """``cell`` with each word longer than ``width`` split over lines after a ``-``, ``/``,
    ``@``, ``,``, ``_`` or ``=`` (``h200-vllm-8b-`` / ``chat-60rps``,
    ``gpu_memory_utilization=`` / ``0.7385``), so a word that must wrap wraps where it can be
    read; a piece still too long is left to rich, which folds it."""
    if width is None or len(cell) <= width:
        return cell
    lines = []
    for line in cell.split("\n"):
        words = []
        for word in line.split(" "):
            if len(word) <= width:
                words.append(word)
                continue
            pieces, current = [], ""
            for piece in _BREAK_AFTER.split(word):
                if current and len(current) + len(piece) > width:
                    pieces.append(current)
                    current = ""
                current += piece
            words.append("\n".join([*pieces, current]))
        lines.append(" ".join(words))
    return "\n".join(lines)


def _natural_width(console: Console, table: Table) -> int:
    """The width ``table`` needs to show every cell on one line."""
    measured = table.__rich_measure__(console, console.options.update(max_width=10**6))
    return int(measured.maximum)


def print_json(console: Console, data: Any) -> None:
    """``data`` as indented JSON on ``console``'s stream, as it is: no markup, no wrapping, no
    highlighting. (Rich's ``print_json`` runs its highlighter over the whole text: 17 s for the
    9 MB that ``advisor trials --json`` prints for the shipped H200 trials, against 0.2 s.)"""
    console.file.write(json.dumps(data, indent=2, default=str, ensure_ascii=False) + "\n")
    console.file.flush()

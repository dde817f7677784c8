"""Rendering for the ``advisor`` command line: numbers and configs as people read them, tables on
a terminal, on one line per row (``--wide``) or as CSV, JSON output, and the engine-default
comparisons (a study's paired comparison, advisor/paired.py; a recommendation's verdict against
the default, advisor/answers/versus_default.py).
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:
    from advisor.answers.versus_default import DefaultComparison

__all__ = ["TableFormat", "baseline_text", "compact_config", "emit_table", "features_text",
           "fmt_value", "miss_text", "paired_table", "print_json", "table_format"]

TableFormat = str  # "table", "wide" or "csv"
#: Width kept for a column whose longest word does not fit (rich folds its words).
_FOLDED_WIDTH = 8
#: Where a word too long for its column may be broken: after these (study names, SLOs, knobs).
_BREAK_AFTER = re.compile(r"(?<=[-/@,_=])")


def fmt_value(value: Any) -> str:
    """A number as people read it: thousands grouped, else four significant digits."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    return str(value)


def compact_config(config: dict[str, Any]) -> str:
    """``knob=value knob=value``: a config on one line."""
    return " ".join(f"{k}={fmt_value(v)}" for k, v in config.items())


def miss_text(margin: float) -> str:
    """A relative SLO miss for people: a percentage, or "over 100x" once the bound is so far off
    (a doubled interval on a log scale) that the digits would mean nothing."""
    return f"{margin:.1%}" if margin < 100 else "over 100x"


def features_text(features: dict[str, float]) -> str:
    """``rate_rps=60 prompt_len=256``: workload features as a user types them."""
    return " ".join(f"{k}={v:g}" for k, v in features.items())


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

    Rich shrinks the widest columns first, which folds ``enable_long_knob_name=True`` in two
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
    ``@``, ``,``, ``_`` or ``=`` (``h200-engine-8b-`` / ``chat-60rps``,
    ``memory_share_of_gpu=`` / ``0.7385``), so a word that must wrap wraps where it can be
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


_VERDICT = {"better": "[green]better[/green]", "worse": "[red]worse[/red]",
            "within_noise": "[yellow]within noise[/yellow]"}


def paired_table(data: Mapping[str, Any] | None) -> Table | str | None:
    """A study's stored paired comparison as a table (``compared``), or one line saying why
    there is none (``refused`` / ``skipped``); ``None`` when the study holds none."""
    if not data:
        return None
    x, y = data.get("x", "best"), data.get("y", "default")
    if data.get("status") != "compared":
        return (f"paired comparison of the {x} config with the engine {y}: "
                f"{data.get('status')} ({escape(str(data.get('reason', '')))})")
    level = float(data.get("level", 0.95))
    table = Table(title=f"{x} vs engine {y}: re-measured interleaved in this run "
                        f"({len(data.get('x_trials', []))}+{len(data.get('y_trials', []))} "
                        f"repeats; {level:.0%} bootstrap interval of the difference)")
    for c in ("metric", f"{x} (mean)", f"{y} (mean)", "difference", "interval",
              f"{x} is"):
        table.add_column(c)
    for m in data.get("metrics", []):
        rel = m.get("relative_difference")
        lo, hi = m["interval"]
        table.add_row(m["metric"], fmt_value(m["mean_x"]), fmt_value(m["mean_y"]),
                      f"{m['difference']:+.4g}" + (f" ({rel:+.1%})" if rel is not None else ""),
                      f"[{lo:+.4g}, {hi:+.4g}]", _VERDICT.get(m["verdict"], m["verdict"]))
    return table


def baseline_text(baseline: DefaultComparison | None) -> str | None:
    """One line: how the answer compares with the engine default, and why."""
    if baseline is None:
        return None
    where = {"paired": "paired re-measurement", "default_repeats": "repeated default trials",
             "margin": "no noise measured", "is_default": "the best is the default",
             "default_misses_slo": "default misses the SLO",
             "no_default": "default not measured here"}.get(baseline.basis, baseline.basis)
    if baseline.answer != "keep_defaults":
        return f"Against the engine default ({where}): {escape(baseline.reason)}"
    text = f"Why ({where}): {escape(baseline.reason)}"
    if baseline.basis != "is_default" and baseline.candidate_config:
        config = " ".join(f"{k}={fmt_value(v)}" for k, v in baseline.candidate_config.items())
        text += f". Best other config, not recommended: {escape(config)}"
    return text


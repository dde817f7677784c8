"""Progress of long work on a terminal: a spinner, the step under way and the time it has taken.

`advisor knowledge fit` and `advisor cheatsheet` take from seconds to minutes on 2 cores; a
silent terminal for that long reads as a hang. The display goes to stderr, only when stderr is a
terminal and the command was not asked for JSON, and is cleared when the work ends: piped and
``--json`` output stay exactly what they were.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

__all__ = ["counted", "steps"]

Step = Callable[[str], None]
#: ``tick(done, total, item)``: ``done`` of ``total`` items finished, ``item`` the one begun.
Tick = Callable[[int, int, str], None]


@contextlib.contextmanager
def steps(console: Console, total: int, *, quiet: bool = False) -> Iterator[Step]:
    """Yield ``step(description)``: call it as each of ``total`` steps begins; the display
    shows ``[n/total] description`` with a spinner and the elapsed time. With ``quiet`` (a
    ``--json`` run) or a console that is not a terminal, ``step`` does nothing."""
    if quiet or not console.is_terminal:
        yield lambda description: None
        return
    progress = Progress(SpinnerColumn(), TextColumn("[progress.description]{task.description}"),
                        TimeElapsedColumn(), console=console, transient=True)
    task = progress.add_task("starting", total=total)
    done = -1

    def step(description: str) -> None:
        nonlocal done
        done += 1
        progress.update(task, completed=done, description=f"[{done + 1}/{total}] {description}")
        progress.refresh()  # shown as the step begins, not at the next tick

    with progress:
        yield step


@contextlib.contextmanager
def counted(console: Console, what: str, *, quiet: bool = False) -> Iterator[Tick]:
    """Yield ``tick(done, total, item)`` for work over a count known only once it starts (the
    imported studies the dashboard builds): a bar of ``done``/``total`` with ``what`` and the
    item under way. Shown on a terminal only, as :func:`steps`."""
    if quiet or not console.is_terminal:
        yield lambda done, total, item: None
        return
    progress = Progress(SpinnerColumn(), TextColumn("[progress.description]{task.description}"),
                        BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                        transient=True)
    task = progress.add_task(what, total=None)

    def tick(done: int, total: int, item: str) -> None:
        progress.update(task, completed=done, total=total, description=f"{what}: {item}")
        progress.refresh()

    with progress:
        yield tick

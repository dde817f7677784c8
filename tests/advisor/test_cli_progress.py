"""Long commands show their progress on a terminal (a step counter, what is under way, the time
taken) and nothing when their output is for a program: ``--json``, or stderr not a terminal."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from advisor.cli import main
from advisor.cli.progress import counted, steps


def _console(terminal: bool) -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, force_terminal=terminal, width=160), buffer


def test_steps_show_on_a_terminal_only() -> None:
    console, shown = _console(terminal=True)
    with steps(console, 2) as step:
        step("fitting")
        step("saving")
    assert "[1/2] fitting" in shown.getvalue() and "[2/2] saving" in shown.getvalue()
    for terminal, quiet in ((False, False), (True, True)):
        console, shown = _console(terminal)
        with steps(console, 1, quiet=quiet) as step:
            step("fitting")
        assert shown.getvalue() == ""


def test_a_count_shows_done_of_total_and_the_item_on_a_terminal_only() -> None:
    console, shown = _console(terminal=True)
    with counted(console, "building") as tick:
        tick(0, 3, "study-a")
        tick(2, 3, "study-c")
    assert "building: study-c" in shown.getvalue() and "2/3" in shown.getvalue()
    console, shown = _console(terminal=False)
    with counted(console, "building") as tick:
        tick(0, 3, "study-a")
    assert shown.getvalue() == ""


@pytest.fixture
def empty_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADVISOR_DB_URL", f"sqlite:///{tmp_path / 'advisor.db'}")
    monkeypatch.setenv("ADVISOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ADVISOR_IMPORT_SHIPPED", "false")


@pytest.mark.parametrize(("command", "machine", "shown"), [
    (["knowledge", "fit"], ["--json"], ["[1/2] fitting", "[2/2] saving 0 contexts"]),
    (["cheatsheet"], ["--format", "json"],
     ["[1/3] loading the surrogate models", "[3/3] rendering 0 sections as md"]),
])
def test_a_long_command_shows_its_steps_on_a_terminal_and_none_for_a_program(
        command: list[str], machine: list[str], shown: list[str], empty_store: None,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    module = __import__(f"advisor.cli.{command[0]}", fromlist=["err"])
    terminal, buffer = _console(terminal=True)
    monkeypatch.setattr(module, "err", terminal)
    main(command)  # a failure exits non-zero (SystemExit), failing the test
    for text in shown:
        assert text in buffer.getvalue(), buffer.getvalue()
    capsys.readouterr()
    terminal, buffer = _console(terminal=True)
    monkeypatch.setattr(module, "err", terminal)
    main([*command, *machine])
    assert "[1/" not in buffer.getvalue()
    assert "[1/" not in capsys.readouterr().out  # the JSON is all stdout holds

"""The console-script entry point of ``advisor``: runs the command line and turns errors into exit
codes, in this one place. Usage errors (typer's copy of click) are recognised by class name, so
click is never imported.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import typer
from rich.markup import escape

from advisor.cli.context import err
from advisor.cli.root import app
from advisor.errors import AdvisorError

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point: the one place where errors become exit codes.

    2: bad usage (typer's usage errors) or an error the advisor raises on purpose, each printed
    as one line on stderr (``--debug`` shows the traceback instead); 130: interrupted; other
    codes are the commands' own (``typer.Exit``).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    try:
        code = app(args=args, prog_name="advisor", standalone_mode=False)
    except AdvisorError as exc:
        if debug:
            raise
        _fail(str(exc))
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        err.print("aborted")
        sys.exit(130)
    except typer.TyperException as exc:  # typer's (vendored click) usage errors
        if debug:
            raise
        if is_help_request(exc):  # `advisor`, `advisor sweep`: no command given
            exc.show()  # type: ignore[attr-defined]
            sys.exit(2)
        _fail(usage_message(exc))

    if isinstance(code, int) and code:  # non-standalone click returns typer.Exit's code
        sys.exit(code)


def _fail(message: str) -> None:
    """Print ``error: message`` as one line on stderr (never wrapped) and exit 2."""
    err.print(f"[bold red]error:[/bold red] {escape(message)}", highlight=False, soft_wrap=True)
    sys.exit(2)


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


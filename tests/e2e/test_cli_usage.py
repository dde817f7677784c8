"""Bad usage answers with one line on stderr and exit code 2, for every command; `--debug` shows
the traceback; `--version` prints the version; `--help` lists the choices of choice options;
`--trial-timeout` (and its deprecated alias `--timeout`) limits each trial."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from advisor import __version__
from advisor.cli import app, main
from knowledge import TrialStatus, TrialStore

ROOT = Path(__file__).resolve().parents[2]


def _commands(group: typer.core.TyperGroup, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every runnable command path: ("tune",), ("knowledge", "fit"), ("sweep", "run"), ..."""
    ctx = group.make_context("advisor", list(prefix) or ["targets"], resilient_parsing=True)
    out: list[tuple[str, ...]] = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if isinstance(command, typer.core.TyperGroup):
            out += _commands(command, (*prefix, name))
        else:
            out.append((*prefix, name))
    return out


COMMANDS = _commands(typer.main.get_command(app))  # type: ignore[arg-type]


def test_every_command_is_covered() -> None:
    assert {("tune",), ("recommend",), ("trials",), ("serve",), ("dashboard",),
            ("knowledge", "fit"), ("sweep", "run")} <= set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_bad_option_is_one_line_and_exit_2(command: tuple[str, ...],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([*command, "--no-such-option"])
    assert exc.value.code == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert "Traceback" not in captured.err and "--no-such-option" in lines[0]
    assert lines[0].startswith(f"error: advisor {' '.join(command)}: ")
    assert "--help" in lines[0]  # and where to look for the valid options


def test_debug_shows_the_traceback() -> None:
    with pytest.raises(typer.TyperException):
        main(["--debug", "tune", "--no-such-option"])


def _advisor(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "ADVISOR_DB_URL": f"sqlite:///{tmp_path / 'a.db'}",
           "ADVISOR_CACHE_DIR": str(tmp_path / "cache"), "ADVISOR_IMPORT_SHIPPED": "false",
           "COLUMNS": "80"}
    return subprocess.run([sys.executable, "-m", "advisor", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(("args", "names"), [
    (["tune", "--bogus"], ["--bogus", "--trials"]),  # the valid options are listed
    (["recommend"], ["Missing option '--slo'"]),
    (["tune", "--trials", "0"], ["'--trials'", "greater than or equal to 1"]),
    (["tune", "--sampler", "annealing"], ["'annealing' is not one of tpe, gp, random"]),
    (["trials", "--status", "done"], [f"is not one of {', '.join(TrialStatus.ALL)}"]),
    (["tune", "--trial-timeout", "-1"], ["must be > 0"]),
    (["knowledge", "fit", "--family", "svm"], ["is not one of linear-forest"]),
    (["nosuchcommand"], ["No such command", "commands: targets, tune"]),
    (["tune", "--target", "nosuch"], ["unknown target 'nosuch'", "faiss"]),
    (["tune", "--target", "fais"], ["unknown target 'fais'; did you mean 'faiss'?"]),
    (["tune", "--target", "vllm", "--slo", "ttft_p95<=300"],
     ["unknown metric 'ttft_p95'; did you mean 'ttft_p95_ms'?"]),
    (["tune", "--target", "faiss", "--enqueue", "{nprob: 8}"],
     ["unknown knob 'nprob'; did you mean 'nprobe'?"]),
    (["tune", "--target", "vllm", "--model", "qwen2.5-7b"], ["unknown model 'qwen2.5-7b'"]),
])
def test_the_console_script_answers_bad_usage_in_one_line(args: list[str], names: list[str],
                                                          tmp_path: Path) -> None:
    done = _advisor(*args, tmp_path=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr  # never wrapped
    for name in names:
        assert name in lines[0], lines[0]


def test_version(tmp_path: Path) -> None:
    done = _advisor("--version", tmp_path=tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == f"slo-advisor {__version__}"


@pytest.mark.parametrize(("args", "shown"), [
    (["tune", "--help"], ["tpe|gp|random", "llama-3-8b", "--trial-timeout"]),
    (["trials", "--help"], ["|".join(TrialStatus.ALL), "--wide", "--csv"]),
    (["cheatsheet", "--help"], ["md|html|json", "interactive|standard|throughput"]),
    (["knowledge", "eval", "--help"], ["config|instance|workload"]),
    (["sweep", "run", "--help"], ["local|ray"]),
])
def test_help_lists_the_choices(args: list[str], shown: list[str],
                                capsys: pytest.CaptureFixture[str],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    # In this process: the help text is the point, not the process (test_version and the
    # bad-usage cases above keep the console script's own exit codes).
    monkeypatch.setenv("COLUMNS", "200")
    try:
        main(args)
    except SystemExit as exc:
        assert exc.code in (0, None)
    stdout = capsys.readouterr().out
    for text in shown:
        assert text in stdout, (text, stdout)
    if "tpe|gp|random" in shown:
        sampler = next(line for line in stdout.splitlines() if "--sampler" in line)
        assert "<str>" not in sampler
    assert "--timeout" not in stdout.replace("--trial-timeout", "")  # the alias is hidden


@pytest.mark.parametrize("command", [(), *COMMANDS], ids=lambda c: " ".join(c) or "advisor")
def test_help_shows_no_type_for_a_flag(command: tuple[str, ...],
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A flag takes no value: `--json <bool>` read as if it took one (Typer's default)."""
    try:
        main([*command, "--help"])
    except SystemExit as exc:
        assert exc.code in (0, None)
    shown = capsys.readouterr().out
    assert "--help" in shown and "<bool>" not in shown


@pytest.mark.parametrize("flag", ["--trial-timeout", "--timeout"])
def test_trial_timeout_limits_each_trial(flag: str, tmp_path: Path) -> None:
    done = _advisor("tune", "--target", "scripted", "--trials", "1", "--name", "slow", flag, "1",
                    "--workload-param", "delay_s=30", tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert ("deprecated" in done.stderr) == (flag == "--timeout")
    store = TrialStore(f"sqlite:///{tmp_path / 'a.db'}")
    study = store.get_study("slow")
    assert study is not None
    (trial,) = store.trials_of_study(study.id or 0)
    assert trial.status == TrialStatus.FAILED and trial.error_type == "timeout", trial.error
    store.close()

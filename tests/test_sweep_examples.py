"""The scheduler examples in docs/examples/sweeps are well-formed, and every `advisor ...` command
that docs/sweeps.md shows exists."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from advisor.cli import app
from advisor.sweeps.spec import load_sweep

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "docs" / "examples" / "sweeps"
WRAPPER = "nightly-sweep.sh"


# Kubernetes CronJob ------------------------------------------------------------------------------

def _cronjob() -> dict[str, Any]:
    data = yaml.safe_load((EXAMPLES / "cronjob.yaml").read_text())
    assert isinstance(data, dict)
    return data


def test_cronjob_never_overlaps_and_never_retries_a_verdict() -> None:
    job = _cronjob()
    assert job["apiVersion"] == "batch/v1"
    assert job["kind"] == "CronJob"
    spec = job["spec"]
    assert len(spec["schedule"].split()) == 5
    assert spec["concurrencyPolicy"] == "Forbid"
    # A non-zero exit is a regression or a failing cell to alert on, not a transient error.
    assert spec["jobTemplate"]["spec"]["backoffLimit"] == 0
    assert spec["jobTemplate"]["spec"]["template"]["spec"]["restartPolicy"] == "Never"


def test_cronjob_container_runs_the_sweep_from_the_configmap_with_the_db_from_a_secret() -> None:
    pod = _cronjob()["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    command = " ".join(container["command"])
    assert "advisor sweep run" in command
    assert "--json" in container["command"]
    sweep_file = next(a for a in container["command"] if a.endswith((".yaml", ".yml")))
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    config_maps = [name for name, v in volumes.items() if "configMap" in v]
    assert any(sweep_file.startswith(mounts[name] + "/") for name in config_maps), \
        f"{sweep_file} is not on a ConfigMap volume"
    env = {e["name"]: e for e in container["env"]}
    assert "secretKeyRef" in env["ADVISOR_DB_URL"]["valueFrom"]
    assert int(container["resources"]["limits"]["nvidia.com/gpu"]) >= 1


# systemd ---------------------------------------------------------------------------------------

@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_systemd_units_verify(tmp_path: Path) -> None:
    service = (EXAMPLES / "advisor-sweep.service").read_text()
    timer = (EXAMPLES / "advisor-sweep.timer").read_text()
    assert re.search(r"^Type=oneshot$", service, re.MULTILINE)
    assert re.search(r"^ExecStart=\S*advisor sweep run ", service, re.MULTILINE)
    # Exit 3/4/5 (regression, failing cell) must mark the unit failed, so OnFailure= fires.
    assert not re.search(r"^SuccessExitStatus=", service, re.MULTILINE)
    assert re.search(r"^OnCalendar=\*-\*-\* 02:30(:00)?$", timer, re.MULTILINE)
    assert re.search(r"^Persistent=true$", timer, re.MULTILINE)
    assert re.search(r"^RandomizedDelaySec=", timer, re.MULTILINE)
    # `systemd-analyze verify` fails when ExecStart's binary does not exist, and the example's
    # virtual environment does not exist on a test machine: verify a copy whose ExecStart runs
    # /bin/true with the same arguments. Everything else is verified as written.
    copy = re.sub(r"^ExecStart=\S+", "ExecStart=/bin/true", service, flags=re.MULTILINE)
    assert copy != service
    (tmp_path / "advisor-sweep.service").write_text(copy)
    (tmp_path / "advisor-sweep.timer").write_text(timer)
    proc = subprocess.run(
        ["systemd-analyze", "verify", "advisor-sweep.service", "advisor-sweep.timer"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    # Unknown keys and bad values are only warnings (exit 0): they name the unit file.
    assert "advisor-sweep." not in output, output


# cron ------------------------------------------------------------------------------------------

_CRON_FIELD = re.compile(r"^(\*|\d+(-\d+)?)(/\d+)?(,(\*|\d+(-\d+)?)(/\d+)?)*$")
_ENV_LINE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\s*=")


def test_crontab_runs_the_wrapper_nightly_under_a_lock() -> None:
    lines = [line for line in (EXAMPLES / "crontab").read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    jobs = [line for line in lines if not _ENV_LINE.match(line)]
    assert len(jobs) == 1, jobs
    fields = jobs[0].split(None, 5)
    assert len(fields) == 6, "five schedule fields and a command"
    assert all(_CRON_FIELD.match(f) for f in fields[:5]), fields[:5]
    assert fields[:5] == ["30", "2", "*", "*", "*"]
    command = fields[5]
    assert "flock -n" in command
    assert WRAPPER in command
    assert ">>" in command  # output appended to a log
    assert "%" not in command  # cron turns % into a newline


def test_wrapper_is_valid_bash_and_runs_the_sweep() -> None:
    wrapper = EXAMPLES / WRAPPER
    subprocess.run(["bash", "-n", str(wrapper)], check=True, timeout=30)
    text = wrapper.read_text()
    assert text.startswith("#!/usr/bin/env bash\n")
    assert re.search(r'"\$advisor" sweep run .*--json', text)
    assert re.search(r'^exit "\$code"$', text, re.MULTILINE)


def test_wrapper_exits_with_the_sweeps_code_and_keeps_the_summary(tmp_path: Path) -> None:
    fake = tmp_path / "advisor"
    fake.write_text('#!/bin/sh\necho \'{"exit_code": 3}\'\necho progress >&2\nexit 3\n')
    fake.chmod(0o755)
    hook_log = tmp_path / "hook.log"
    hook = tmp_path / "hook"
    hook.write_text(f'#!/bin/sh\necho "$1 $2" > {shlex.quote(str(hook_log))}\n')
    hook.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "ADVISOR": str(fake),
           "SWEEP_FILE": "nightly.yaml", "REPORT_ROOT": str(tmp_path / "reports"),
           "ALERT_HOOK": str(hook)}
    proc = subprocess.run(["bash", str(EXAMPLES / WRAPPER)], env=env, capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    latest = tmp_path / "reports" / "latest.json"
    assert yaml.safe_load(latest.read_text()) == {"exit_code": 3}
    code, summary = hook_log.read_text().split()
    assert code == "3" and Path(summary).resolve() == latest.resolve()


# the example sweep file ------------------------------------------------------------------------

def test_example_sweep_file_expands_to_its_cells() -> None:
    path = ROOT / "sweeps" / "nightly-cpu.yaml"
    raw = yaml.safe_load(path.read_text())
    spec = load_sweep(path)
    assert spec.name == raw["name"]
    expected = []
    for entry in raw["matrix"]:
        for model in entry.get("models") or ["-"]:
            for workload in entry.get("workloads") or []:
                for tier in entry["slo_tiers"]:
                    expected.append(f"{entry['target']}/{model}/{workload}/{tier}")
    assert [c.key for c in spec.cells] == expected
    for cell in spec.cells:
        assert cell.study_name("run") == f"run/{cell.key}"
        entry = next(e for e in raw["matrix"] if e["target"] == cell.target)
        assert cell.trials == entry.get("trials", raw.get("trials", 20))


# commands shown in docs/sweeps.md --------------------------------------------------------------

def _advisor_commands(markdown: str) -> list[list[str]]:
    """The words of each `advisor ...` command line in the fenced code blocks (continuation
    lines joined, comments and shell operators cut off)."""
    commands = []
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", markdown, re.MULTILINE | re.DOTALL):
        text = block.replace("\\\n", " ")
        for line in text.splitlines():
            line = line.split(" #", 1)[0]
            for part in re.split(r"&&|\|\||;|\|", line):
                words = part.split()
                while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
                    words = words[1:]  # VAR=value before the command
                if words and words[0] in ("advisor", ".venv/bin/advisor"):
                    commands.append(words[1:])
    return commands


def test_every_advisor_command_in_the_sweeps_doc_exists() -> None:
    # Typer ships its own copy of click, so groups are told apart by their `commands` mapping.
    root: Any = typer.main.get_command(app)
    commands = _advisor_commands((ROOT / "docs" / "sweeps.md").read_text())
    assert any(words[:2] == ["sweep", "run"] for words in commands)
    for words in commands:
        command, path = root, ["advisor"]
        for word in words:
            subcommands = getattr(command, "commands", None)
            if word.startswith("-") or subcommands is None:
                break
            assert word in subcommands, f"`{' '.join([*path, word])}` is not a command"
            command, path = subcommands[word], [*path, word]
        assert command is not root, f"`advisor {' '.join(words)}` names no command"
        # Options shown must exist on the command they are given to.
        known = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)}
        for word in words:
            if word.startswith("--"):
                assert word.split("=", 1)[0] in known, f"{word} is not an option of {path}"

"""The README's sample answer is what the command prints: its `advisor recommend` block runs on a
fresh store of the shipped knowledge, and its output must equal the block shown below it."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _example() -> tuple[list[str], str]:
    text = (ROOT / "README.md").read_text().split("## What an answer looks like", 1)[1]
    command = re.search(r"```bash\n(.*?)```", text, flags=re.S)
    assert command is not None
    shown = text[command.end():].split("```\n", 1)[1].split("```", 1)[0]
    args = shlex.split(command.group(1).replace("\\\n", " "))
    assert args[:2] == ["advisor", "recommend"], args
    return args[1:], shown


def test_the_readme_answer_is_what_the_command_prints(tmp_path: Path) -> None:
    args, shown = _example()
    env = {**os.environ, "ADVISOR_DB_URL": f"sqlite:///{tmp_path / 'fresh.db'}",
           "ADVISOR_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "advisor", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == shown, "README.md's sample answer is stale: rerun the command"

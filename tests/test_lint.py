"""The linter the project is written to (ruff, configured in pyproject.toml) passes on the whole
checkout, so a lint regression fails CI like any other test instead of waiting for a reader."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _ruff() -> list[str]:
    """ruff from the interpreter's own environment (the dev extra installs it), else PATH."""
    beside = Path(sys.executable).with_name("ruff")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("ruff")
    assert found, "ruff is not installed: `pip install -e '.[dev]'` installs it"
    return [found]


def test_ruff_passes_on_the_checkout() -> None:
    result = subprocess.run([*_ruff(), "check", "--no-cache", "."], cwd=ROOT,
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]

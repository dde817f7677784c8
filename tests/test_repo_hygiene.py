"""The checkout holds no unresolved merge: a conflict marker once reached main in the README."""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^(<{7}|>{7})( |$)|^={7}$", re.MULTILINE)
TEXT_SUFFIXES = {".md", ".py", ".yaml", ".yml", ".toml", ".sh", ".cfg", ".txt", ".html"}
SKIP_DIRS = {".git", ".venv", "node_modules", "__pycache__", ".vllm-h200", ".whl"}


def test_no_merge_conflict_markers() -> None:
    found = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]  # never walk into the virtualenv
        for name in files:
            path = Path(folder) / name
            if path.suffix not in TEXT_SUFFIXES:
                continue
            text = path.read_text(errors="replace")
            for match in MARKER.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                found.append(f"{path.relative_to(ROOT)}:{line}")
    assert not found, f"unresolved merge conflict markers: {found}"

"""Cache files are published whole: the content, readable by others, no temporary file left."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from objectives.atomic_files import atomic_write_text


def test_a_file_is_replaced_whole_and_readable_by_others(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "store.json"
    atomic_write_text(path, "first")
    atomic_write_text(path, "second")
    assert path.read_text() == "second"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in path.parent.iterdir()] == ["store.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "meta.json"
    atomic_write_text(path, "kept")
    with pytest.raises(TypeError):
        atomic_write_text(path, 123)  # type: ignore[arg-type]
    assert path.read_text() == "kept" and [p.name for p in tmp_path.iterdir()] == ["meta.json"]

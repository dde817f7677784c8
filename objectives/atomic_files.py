"""Cache files written so that readers never see half of one.

Trials, sweep workers and test workers share cache directories (datasets, RAG stores, model
directories); a file that one of them is rewriting must never be read half-written by another.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["atomic_write_bytes", "atomic_write_text"]


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename, so a reader (another
    trial or worker on the same cache) never sees a partial file."""
    _atomic_write(path, "w", text)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """:func:`atomic_write_text` for bytes (e.g. a pickled model)."""
    _atomic_write(path, "wb", data)


def _atomic_write(path: Path, mode: str, data: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    try:
        with os.fdopen(fd, mode) as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; the cache may be shared between users
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

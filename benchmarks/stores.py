"""The stores the benchmarks read: a fresh SQLite store in its own temporary directory, and the
shipped knowledge imported into one (what `advisor` itself starts from)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from knowledge import TrialStore
from knowledge.transfer import import_shipped_knowledge

__all__ = ["shipped_store", "temp_store"]


def temp_store(name: str = "bench.db") -> TrialStore:
    """An empty SQLite store named ``name`` in a new temporary directory."""
    return TrialStore(f"sqlite:///{Path(tempfile.mkdtemp()) / name}")


def shipped_store(db_url: str | None = None) -> TrialStore:
    """The store at ``db_url``; without one, a temporary store holding the shipped knowledge."""
    if db_url:
        return TrialStore(db_url)
    store = temp_store("shipped.db")
    import_shipped_knowledge(store)
    return store

"""The names of the places a sweep's trials can run (``backend:`` in a sweep file, ``--backend``),
kept apart from the sweep-file parser so the command line lists them without loading it."""

from __future__ import annotations

__all__ = ["BACKENDS"]

BACKENDS = ("local", "ray")

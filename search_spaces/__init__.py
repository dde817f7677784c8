"""Declarative knob spaces, one YAML per target, with the loader and knob types."""

from __future__ import annotations

from search_spaces.knobs import FlagMapping, Knob
from search_spaces.space import SPACES_DIR, SearchSpace, load_space

__all__ = ["SPACES_DIR", "FlagMapping", "Knob", "SearchSpace", "load_space"]

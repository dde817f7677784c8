"""Tests that need an optional extra: skipped with the reason on a machine set up without it,
failed under ``CI=true``, where ``.ci/run`` installs every extra (a missing one is a broken
setup there, not a reason to skip)."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest

__all__ = ["require_extra"]


def require_extra(module: str, extra: str) -> ModuleType:
    """``module``, imported; skip (outside CI) or fail (under CI=true) when it is missing, naming
    the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        why = f"needs {module}, from the {extra!r} extra: pip install -e '.[{extra}]'"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{why} (CI installs every extra: bash scripts/quickstart.sh "
                        "--setup-only)")
        pytest.skip(why)

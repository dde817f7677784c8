"""Fixtures the LLM serving tests of this folder share."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from objectives.llm.early_stop import SHORTCUTS_ENV
from objectives.targets.vllm_target import COMMAND_ENV
from tests.objectives.llm.stand_in import FAKE


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The vLLM target starts the stand-in server; returns the file it records requests in."""
    record = tmp_path / "requests.jsonl"
    monkeypatch.setenv(COMMAND_ENV, json.dumps([sys.executable, str(FAKE)]))
    monkeypatch.setenv("FAKE_SERVER_RECORD", str(record))
    monkeypatch.delenv(SHORTCUTS_ENV, raising=False)  # the trial shortcuts are on by default
    return record

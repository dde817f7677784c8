"""`advisor tune --enqueue`: configs measured first, given inline or from a file, as a user
types them; bad ones refused with the reason before any study is stored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.cli.context import parse_enqueued as _enqueued
from advisor.errors import AdvisorError


def test_enqueue_values_parse_inline_and_from_files(tmp_path: Path) -> None:
    listed = tmp_path / "configs.yaml"
    listed.write_text("- {x: 0.2}\n- {y: 4, mode: b}\n")
    assert _enqueued(['{"x": 0.3}', "y: 16", f"@{listed}"]) == (
        {"x": 0.3}, {"y": 16}, {"x": 0.2}, {"y": 4, "mode": "b"})
    for bad, why in [("[1, 2]", "expected a mapping"), ("{}", "expected a mapping"),
                     ("x: [", "not YAML/JSON"), (f"@{tmp_path / 'missing.yaml'}", "cannot read")]:
        with pytest.raises(AdvisorError, match=why):
            _enqueued([bad])


def test_tune_measures_enqueued_configs_first(tmp_path: Path) -> None:
    env = {**os.environ, "ADVISOR_DB_URL": f"sqlite:///{tmp_path / 'a.db'}",
           "ADVISOR_CACHE_DIR": str(tmp_path / "cache"), "ADVISOR_IMPORT_SHIPPED": "false",
           "COLUMNS": "300"}

    def advisor(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "advisor", *args], env=env,
                              capture_output=True, text=True, timeout=300)

    tune = advisor("tune", "--target", "scripted", "--trials", "3", "--name", "q", "--seed", "1",
                   "--enqueue", "{x: 0.25}", "--json")
    assert tune.returncode == 0, tune.stderr
    trials = json.loads(advisor("trials", "--study", "q", "--json").stdout)
    first = sorted(trials, key=lambda t: t["number"])[:2]
    assert [t["details"].get("role") for t in first] == ["engine-default", "enqueued"]
    assert first[1]["config"]["x"] == 0.25
    refused = advisor("tune", "--target", "scripted", "--trials", "2", "--name", "bad",
                      "--enqueue", "{warp: 9}")
    assert refused.returncode != 0 and "unknown knob 'warp'" in refused.stderr
    assert "bad" not in advisor("studies", "--json").stdout
    again = advisor("tune", "--target", "scripted", "--name", "q", "--resume", "--trials", "4",
                    "--enqueue", "{x: 0.5}")
    assert again.returncode != 0 and "--enqueue applies when a study starts" in again.stderr

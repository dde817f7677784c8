"""The CLI as a user runs it: `advisor tune --paired-repeats` closes with the paired comparison of
the best config and the engine default; `advisor recommend` (model-based and --measured) says
"keep the defaults" when the default is within noise; `advisor trials` shows each trial's
validity; `advisor knowledge import` imports unusable-validity trials as invalid."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from knowledge import TrialStore
from knowledge.transfer import export_jsonl
from tests.advisor.defaults_store import DEFAULT, WITHIN, populate


def advisor(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "advisor", *args], env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "ADVISOR_DB_URL": f"sqlite:///{tmp_path / 'cli.db'}",
            "ADVISOR_CACHE_DIR": str(tmp_path / "cache"), "ADVISOR_IMPORT_SHIPPED": "false",
            "COLUMNS": "250"}


def test_tune_closes_with_the_paired_comparison(env: dict[str, str]) -> None:
    args = ["tune", "--target", "scripted", "--trials", "4", "--seed", "0", "--name", "cli-p",
            "--paired-repeats", "3"]
    run = advisor(*args, env=env)
    assert run.returncode == 0, run.stderr
    assert "best vs engine default" in run.stdout and "bootstrap interval" in run.stdout
    assert "re-measuring the best config" in run.stderr
    summary = json.loads(advisor("tune", "--target", "scripted", "--trials", "4", "--name",
                                 "cli-p", "--resume", "--json", env=env).stdout)
    paired = summary["paired_comparison"]
    assert paired["status"] == "compared" and paired["y_config"] == DEFAULT
    assert summary["trials"] == 10  # resumed: the repeats were not queued again
    listing = advisor("trials", "--study", "cli-p", "--limit", "20", env=env)
    # No trial of a target that attaches no validity label: no validity column.
    assert listing.returncode == 0 and "validity" not in listing.stdout
    refused = advisor(*args[:-1], "2", "--name", "cli-q", env=env)
    assert refused.returncode != 0 and "0 (off) or 3 to 50" in refused.stdout + refused.stderr


def test_recommend_keeps_the_defaults_and_trials_show_validity(env: dict[str, str],
                                                              tmp_path: Path) -> None:
    store = TrialStore(env["ADVISOR_DB_URL"])
    populate(store, with_invalid=True)
    store.close()
    rec = advisor("recommend", "--measured", "--target", "scripted", "--slo", WITHIN,
                  "--hardware", "any", env=env)
    assert rec.returncode == 0, rec.stderr
    lines = rec.stdout.splitlines()  # piped: one key=value per line
    assert "status=keep_defaults" in lines and "config=the engine defaults" in lines
    assert {"config.x=0.5", "config.y=8", "config.mode=a"} <= set(lines)
    # Why: the best config's gain is within the default's own scatter.
    assert any(line.startswith("versus_default=") and "a gain must exceed" in line
               for line in lines), rec.stdout
    # On a terminal (rich layout), the kept defaults are spelled out too.
    shown = advisor("recommend", "--measured", "--target", "scripted", "--slo", WITHIN,
                    "--hardware", "any", env={**env, "TTY_COMPATIBLE": "1", "NO_COLOR": "1"})
    assert shown.returncode == 0 and "the engine defaults (x=0.5 y=8 mode=a)" in shown.stdout
    data = json.loads(advisor("recommend", "--measured", "--target", "scripted", "--slo", WITHIN,
                              "--hardware", "any", "--json", env=env).stdout)
    assert data["status"] == "keep_defaults" and data["answer"] == "keep_defaults"
    assert data["config"] == DEFAULT and data["default"]["config"] == DEFAULT
    assert data["default"]["verdict"]["meets_slo"] is True
    comparison = data["comparison"]
    assert comparison["gain"] is not None and comparison["gain"] <= comparison["threshold"]
    # The invalid trial (the best by far, were it used) is neither the answer nor its evidence.
    invalid_ids = {t["id"] for t in json.loads(advisor(
        "trials", "--status", "invalid", "--json", env=env).stdout)}
    assert invalid_ids and not invalid_ids & {e["trial_id"] for e in data["evidence"]}
    model = advisor("recommend", "--target", "scripted", "--slo", WITHIN, "--hardware",
                    "cpu-test-box", "--n-vectors", "2000", env=env)
    assert model.returncode == 0, model.stderr
    assert "status=keep_defaults" in model.stdout.splitlines()
    invalid = advisor("trials", "--status", "invalid", env=env)
    assert invalid.returncode == 0 and "client_bound" in invalid.stdout
    assert "invalid" in invalid.stdout


def test_import_marks_unusable_validity_invalid(env: dict[str, str], tmp_path: Path) -> None:
    source = TrialStore(f"sqlite:///{tmp_path / 'src.db'}")
    populate(source, name="shipped")
    path = tmp_path / "shipped.jsonl"
    with path.open("w") as f:
        export_jsonl(source, f)
    source.close()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows[:2]:  # marked after the fact, still saying "complete"
        row["trial"]["details"]["validity"] = "legacy_unverified"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = advisor("knowledge", "import", str(path), env=env)
    assert run.returncode == 0, run.stderr
    assert "2 invalid" in run.stdout
    listed = json.loads(advisor("trials", "--status", "invalid", "--json", env=env).stdout)
    assert len(listed) == 2 and all(t["details"]["validity"] == "legacy_unverified"
                                    for t in listed)

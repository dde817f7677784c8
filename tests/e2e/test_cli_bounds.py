"""Absurd and malformed input on the CLI is one line on stderr and exit 2, before anything is
stored or built: unsatisfiable or empty SLOs, out-of-range budgets and limits, 400-digit numbers,
datasets larger than the machine, unreadable workload values and files (the API's side of the
same table is in tests/api/test_jobs.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from knowledge import TrialStore

HUGE = "9" * 400
TUNE = ["tune", "--target", "faiss", "--workload", "stdlib-docs-2k", "--trials", "2"]

CASES = [
    pytest.param([*TUNE, "--slo", "p95_latency_ms<=-1"], "can never hold", id="negative-latency"),
    pytest.param([*TUNE, "--slo", ","], "has no bound", id="empty-slo"),
    pytest.param([*TUNE, "--slo", "p95_latency_ms<=1,recall_at_10>=0"], "always holds",
                 id="vacuous-recall"),
    pytest.param(["tune", "--target", "faiss", "--trials", "1000000000"], "1000",
                 id="trials-beyond-the-api-cap"),
    pytest.param([*TUNE, "--trial-timeout", "0"], "must be > 0", id="zero-timeout"),
    pytest.param([*TUNE, "--timeout", "-1"], "must be > 0", id="negative-timeout"),
    pytest.param([*TUNE, "--memory-limit-mb", "-5"], "memory-limit-mb", id="negative-memory"),
    pytest.param([*TUNE, "--workload-param", f"n_base={HUGE}"], "400-digit", id="huge-int"),
    pytest.param([*TUNE, "--workload-param", "n_base=1e12"], "n_base", id="huge-stdlib-docs"),
    pytest.param(["tune", "--target", "faiss", "--workload", "synthetic-1m",
                  "--workload-param", "n_base=100000000", "--workload-param", "dim=65536"],
                 "GiB", id="bigger-than-the-machine"),
    pytest.param([*TUNE, "--workload-param", "n_base=[1, 2"], "not a YAML value",
                 id="bad-yaml-value"),
    pytest.param(["recommend", "--target", "faiss", "--slo", "p95_latency_ms<=1",
                  "--n-vectors", HUGE, "--measured"], "400-digit", id="huge-feature"),
    pytest.param(["recommend", "--target", "faiss", "--slo", ","], "has no bound",
                 id="recommend-empty-slo"),
    pytest.param([*TUNE, "--name", "../../etc/passwd"], "no paths", id="path-as-name"),
]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "ADVISOR_DB_URL": f"sqlite:///{tmp_path / 'b.db'}",
            "ADVISOR_CACHE_DIR": str(tmp_path / "cache"), "ADVISOR_IMPORT_SHIPPED": "false",
            "COLUMNS": "200"}


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "advisor", *args], env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize(("args", "reason"), CASES)
def test_bad_input_is_one_line_and_exit_2(args: list[str], reason: str, env: dict[str, str],
                                          tmp_path: Path) -> None:
    done = _run(args, env)
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert reason in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert TrialStore(env["ADVISOR_DB_URL"]).list_studies() == []  # nothing was stored
    assert not (tmp_path / "cache" / "datasets").exists()  # nothing was built


def test_a_workload_file_that_is_not_utf8_is_one_line(env: dict[str, str],
                                                       tmp_path: Path) -> None:
    bad = tmp_path / "workload.yaml"
    bad.write_bytes(b"kind: vector-search\nname: x\nparams: {n_base: \xff\xfe}\n")
    done = _run(["tune", "--target", "faiss", "--workload", str(bad)], env)
    assert done.returncode == 2 and "not UTF-8" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_db_url_into_a_missing_directory_is_refused_not_created(env: dict[str, str],
                                                                   tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "dir"
    done = _run(["studies"], {**env, "ADVISOR_DB_URL": f"sqlite:///{missing / 'x.db'}"})
    assert done.returncode == 2 and "does not exist" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "no").exists()

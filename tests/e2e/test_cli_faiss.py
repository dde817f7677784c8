"""End to end, as a user runs it: `advisor tune` on a small real FAISS corpus, then `trials`,
`studies`, `recommend` and `targets`, each as a real subprocess on a temporary store."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from tests.advisor.test_tune_suggestions import check_tune_command

pytest.importorskip("faiss")

SLO = "p95_latency_ms<=5,recall_at_10>=0.9"


def advisor(*args: str, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "advisor", *args], env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture
def env(tmp_path: Path, faiss_cache: Path) -> dict[str, str]:
    return {**os.environ, "ADVISOR_DB_URL": f"sqlite:///{tmp_path / 'e2e.db'}",
            "ADVISOR_CACHE_DIR": str(faiss_cache), "COLUMNS": "200"}


def test_tune_trials_recommend_on_real_faiss(env: dict[str, str]) -> None:
    # Only this study's trials: the shipped FAISS trials may come from this very CPU model.
    env = {**env, "ADVISOR_IMPORT_SHIPPED": "false"}
    tune = advisor("tune", "--target", "faiss", "--workload", "stdlib-docs-2k", "--slo", SLO,
                   "--trials", "5", "--seed", "0", "--name", "e2e", "--search-sweep", "--json",
                   env=env)
    assert tune.returncode == 0, tune.stderr
    summary = json.loads(tune.stdout)
    # 5 sampled configs; each trial swept nprobe / efSearch over its build, and every setting it
    # measured is a trial of its own.
    assert summary["sampled"] == 5 and summary["trials"] == 5 + summary["swept"]
    assert summary["swept"] > 0
    assert summary["complete"] + summary["failed"] == summary["trials"]
    assert summary["engine_default"]["config"]["index_type"] == "ivf_flat"
    assert summary["engine_default"]["config"]["nprobe"] == 1  # its own setting, not the best

    trials = json.loads(advisor("trials", "--study", "e2e", "--json", "--limit", "1000",
                                env=env).stdout)
    assert len(trials) == summary["trials"]
    for t in trials:
        assert t["hardware"]["cpu_count"] >= 1 and t["workload_hash"]
        if t["status"] == "complete":
            assert t["engine_versions"]["faiss"]
            assert 0 <= t["metrics"]["recall_at_10"] <= 1
            assert t["metrics"]["p50_latency_ms"] <= t["metrics"]["p99_latency_ms"]
            assert t["feasible"] == (t["metrics"]["p95_latency_ms"] <= 5
                                     and t["metrics"]["recall_at_10"] >= 0.9)
        else:
            assert t["error"]  # failed trials keep their reason

    rec = advisor("recommend", "--target", "faiss", "--slo", SLO, "--measured", "--json", env=env)
    answer = json.loads(rec.stdout)
    # The one rule: a config's windows (its trials: two sweeps may measure one config) meet
    # when at least 2/3 of them do; its qps is their median; the answer is the best such config.
    windows: dict[str, list[dict]] = {}
    for t in trials:
        if t["status"] == "complete":
            windows.setdefault(json.dumps(t["config"], sort_keys=True), []).append(t)
    meeting = {k: g for k, g in windows.items()
               if 3 * sum(t["feasible"] for t in g) >= 2 * len(g)}
    if meeting:
        assert rec.returncode == 0, rec.stderr
        assert answer["basis"] == "measured"
        best_key = max(meeting, key=lambda k: (
            statistics.median(t["metrics"]["qps"] for t in meeting[k]), len(meeting[k])))
        best = meeting[best_key]
        default = answer["default"]
        assert default["config"] == summary["engine_default"]["config"]
        if answer["status"] == "recommended":  # the measured best, which beat the default
            assert answer["config"] == best[0]["config"]
            assert sorted(answer["verdict"]["trial_ids"]) == sorted(t["id"] for t in best)
        else:  # the default met the SLO and the best did not beat it beyond its noise
            assert answer["status"] == "keep_defaults" and answer["config"] == default["config"]
            assert default["verdict"]["meets_slo"] is True
            comparison = answer["comparison"]
            assert best[0]["config"] == default["config"] or (
                comparison["gain"] is not None and comparison["gain"] <= comparison["threshold"])
        assert answer["verdict"]["meets_slo"] is True and answer["verdict"]["basis"] == "measured"
        assert all(v <= 0 for v in answer["verdict"]["margins"].values())
        assert "faiss.index_factory" in answer["launch_command"]
    else:
        assert rec.returncode == 1 and answer["status"] == "no_feasible_config"
        check_tune_command(answer["next"]["tune_command"])

    impossible = advisor("recommend", "--target", "faiss", "--measured", "--slo",
                         "p95_latency_ms<=0.000001,recall_at_10>=0.9", env=env)
    assert impossible.returncode == 1
    lines = impossible.stdout.splitlines()  # piped: one key=value per line
    assert "status=no_feasible_config" in lines
    assert any(line.startswith("summary=No faiss config meets") and
               "no measured config meets the SLO" in line for line in lines), impossible.stdout
    tune = [line.removeprefix("next=") for line in lines if line.startswith("next=")]
    assert len(tune) == 1 and tune[0].startswith("advisor tune --target faiss")
    check_tune_command(tune[0])  # a command tune accepts

    table = advisor("trials", "--study", "e2e", env=env)
    assert table.returncode == 0 and "e2e" in table.stdout
    studies = json.loads(advisor("studies", "--target", "faiss", "--json", env=env).stdout)
    assert [s["name"] for s in studies] == ["e2e"]
    assert studies[0]["trials"] == summary["trials"] and studies[0]["requested"] == 5


def test_user_errors_are_one_line_without_traceback(env: dict[str, str]) -> None:
    bad = advisor("tune", "--target", "faiss", "--slo", "p95_latency<=1", env=env)
    assert bad.returncode == 2
    assert "unknown metric 'p95_latency'" in bad.stderr and "Traceback" not in bad.stderr
    assert "did you mean 'p95_latency_ms'?" in bad.stderr  # the near miss, not a list
    far = advisor("tune", "--target", "faiss", "--slo", "throughput>=5", env=env)
    assert far.returncode == 2 and "recall_at_10" in far.stderr  # lists faiss's metrics ...
    assert "ttft_p95_ms" not in far.stderr  # ... and only faiss's
    unknown = advisor("tune", "--target", "nope", env=env)
    assert unknown.returncode == 2 and "registered targets: faiss" in unknown.stderr
    debug = advisor("--debug", "tune", "--target", "nope", env=env)
    assert "Traceback" in debug.stderr


def test_targets_lists_knobs_and_help_is_readable(env: dict[str, str]) -> None:
    listed = json.loads(advisor("targets", "--json", env=env).stdout)
    faiss = next(t for t in listed if t["name"] == "faiss")
    assert {"nlist", "nprobe", "pq_m", "pq_nbits", "hnsw_m", "ef_construction", "ef_search",
            "batch_size", "threads"} <= {k["name"] for k in faiss["knobs"]}
    for command in ("tune", "trials", "recommend", "targets", "studies", "cheatsheet"):
        helped = advisor(command, "--help", env=env)
        assert helped.returncode == 0 and "Usage" in helped.stdout


def test_shipped_h200_knowledge_is_listed_on_a_fresh_store(env: dict[str, str]) -> None:
    listed = advisor("trials", "--target", "vllm", "--hardware", "h200", "--limit", "1000",
                     "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    trials = json.loads(listed.stdout)
    assert len(trials) >= 236  # the 2026-11-30 sets (kept, invalid) and the checked 2026-12-01 set
    complete = [t for t in trials if t["status"] == "complete"]
    assert len(complete) >= 94  # 61 valid + 33 frontend_delay (2026-12-01, two sessions)
    # The measurements of the single-client days are kept for provenance and used for nothing.
    assert sum(t["status"] == "invalid" for t in trials) >= 85
    for t in trials:
        assert t["hardware"]["gpus"][0]["name"] == "NVIDIA H200"
        if t["status"] in ("complete", "invalid"):
            assert t["details"]["validity"] and "server_metrics" in t["details"]
        if t["status"] == "complete":
            assert t["engine_versions"]["vllm"] == "0.26.0"
            assert "--load-format" in t["details"]["argv"]  # the exact command is kept
            assert t["metrics"]["output_tokens_per_s"] > 0
            assert t["details"]["server_metrics"]["available"] is True
            assert t["details"]["validity"] in ("valid", "frontend_delay")
    again = json.loads(advisor("trials", "--target", "vllm", "--hardware", "h200", "--limit",
                               "1000", "--json", env=env).stdout)
    assert len(again) == len(trials)  # imported once, not on every command

"""The validity gate end to end on CPU: the vLLM target's trial against the stand-in server, whose
/metrics holds its own view of every request; a client made to lag on purpose (an injected
event-loop stall) is flagged and re-measured with more client processes."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from objectives.llm.client import FAULT_STALL_ENV
from objectives.llm.workload import load_preset
from objectives.targets.vllm_target import COMMAND_ENV, VllmTarget
from objectives.workload import Workload

FAKE = Path(__file__).with_name("fake_openai_server.py")


def workload(**target_params: Any) -> Workload:
    return load_preset(
        "chat", model="tiny-llama", n_requests=16, warmup_requests=2,
        arrival={"process": "poisson", "rate_rps": 16.0},
        prompt_len={"dist": "uniform", "low": 8, "high": 16},
        output_len={"dist": "uniform", "low": 8, "high": 16}).with_params(**target_params)


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(COMMAND_ENV, json.dumps([sys.executable, str(FAKE)]))


def test_every_trial_carries_the_servers_view_and_a_verdict(fake_vllm: None,
                                                            tmp_path: Path) -> None:
    m = VllmTarget().run({}, workload(client_processes=1, client_processes_max=2),
                         tmp_path / "cache")
    d = m.details
    server = d["server_metrics"]
    assert server["available"] is True and server["source"] == "vllm"
    assert server["ttft"]["count"] == 16  # the warm-up is outside the window
    assert server["generation_tokens_delta"] == sum(d["requests"]["output_tokens"])
    assert d["validity"] in ("valid", "client_bound")
    assert d["validity_gate"] == 2 and d["prefix_cache_reset"] is True
    checks = {c["name"]: c for c in d["validity_checks"]}
    assert checks["output_tokens"]["agrees"] and checks["requests_with_first_token"]["agrees"]
    assert d["validity_attempts"][-1]["client_processes"] == d["client_processes"]
    if d["validity"] == "valid":
        # Whatever disagrees is the client reading more (frontend delay), never less.
        assert all(c["agrees"] or c["excess"] > 0 for c in d["validity_checks"])


def test_a_stalled_client_is_flagged_and_measured_again_with_more_processes(
        fake_vllm: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FAULT_STALL_ENV, "40")  # blocks a one-process client 40 ms every 20 ms
    m = VllmTarget().run({}, workload(client_processes=1, client_processes_max=2),
                         tmp_path / "cache")
    attempts = m.details["validity_attempts"]
    assert attempts[0]["client_processes"] == 1
    assert attempts[0]["validity"] == "client_bound"
    assert any("event-loop lag" in r for r in attempts[0]["reasons"])
    assert len(attempts) == 2 and attempts[1]["client_processes"] == 2
    assert m.details["client_processes"] == 2


def test_with_no_room_to_escalate_the_trial_stays_client_bound(
        fake_vllm: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FAULT_STALL_ENV, "40")
    m = VllmTarget().run({}, workload(client_processes=1, client_processes_max=1),
                         tmp_path / "cache")
    assert m.details["validity"] == "client_bound"
    assert len(m.details["validity_attempts"]) == 1
    assert m.metrics["ttft_p95_ms"] > 0  # the figures are kept for the record


def test_an_endpoint_without_metrics_gives_unchecked_trials(
        fake_vllm: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_SERVER_NO_METRICS", "1")
    m = VllmTarget().run({}, workload(), tmp_path / "cache")
    assert m.details["server_metrics"]["available"] is False
    assert m.details["validity"] in ("unchecked", "client_bound")

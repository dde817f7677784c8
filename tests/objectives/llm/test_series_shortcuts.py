"""The shortcuts of a trial's series on one server start (objectives/llm/serving_target.py):
warm-up once, client processes carried forward after the gate re-measured a window, and a higher
arrival rate left unmeasured once a lower one missed the SLO, against the stand-in server; all of
them off with ADVISOR_TRIAL_SHORTCUTS=0."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.errors import EngineStartError, NotMeasuredError, TrialFailedError
from objectives import parse_slo
from objectives.llm.client import FAULT_STALL_ENV
from objectives.llm.early_stop import SHORTCUTS_ENV
from objectives.llm.serving_target import _TRUSTED as TRUSTED
from objectives.llm.workload import at_rate
from objectives.measurement import Measurement
from objectives.runner import error_type_of
from objectives.targets.vllm_target import VllmTarget
from tests.objectives.llm.stand_in import short_workload


def measured(result: Measurement | Exception) -> Measurement:
    assert isinstance(result, Measurement), result
    return result


@pytest.mark.parametrize("shortcuts", [True, False])
def test_a_miss_leaves_the_higher_rate_unmeasured(fake_vllm: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  shortcuts: bool) -> None:
    # Every first token comes 300 ms late: 6x the bound, at every rate.
    monkeypatch.setenv("FAKE_SERVER_FIRST_TOKEN_DELAY_S", "0.3")
    if not shortcuts:
        monkeypatch.setenv(SHORTCUTS_ENV, "0")
    base = short_workload(30, 50.0)
    series = [base, at_rate(base, 100.0, seed_offset=1), at_rate(base, 25.0, seed_offset=2)]
    target = VllmTarget()
    target.trial_slo = parse_slo("ttft_p95_ms<=50,output_tokens_per_s>=1")
    # Only a miss the validity gate trusted implies one at a higher rate. On a loaded machine
    # the client can lag behind its own schedule and the gate distrusts the window; then the
    # higher rate is measured (rightly) and the series runs again, on a fresh server.
    for attempt in range(3):
        fake_vllm.write_text("")
        first_, higher, lower_ = target.run_series({}, series, tmp_path / f"cache{attempt}")
        first, lower = measured(first_), measured(lower_)
        if not shortcuts or first.details["validity"] in TRUSTED:
            break
        assert isinstance(higher, Measurement)
    else:
        pytest.fail(f"the gate distrusted the first window 3 times: {first.details['validity']}")
    bodies = len(fake_vllm.read_text().splitlines())
    assert first.metrics["ttft_p95_ms"] > 50 and lower.metrics["ttft_p95_ms"] > 50
    if not shortcuts:  # every window whole, each after its own warm-up
        high = measured(higher)
        assert [m.details["warmup_requests"] for m in (first, high, lower)] == [2, 2, 2]
        assert not any("settled" in m.details for m in (first, high, lower))
        assert "not_measured" not in first.details
        # Every attempt sends its whole window (the gate may measure a lagging client twice).
        # On a machine loaded by other tests a few requests can fail to connect, or be cut off
        # by the drain limit before they left the client: those never reach the server, and the
        # window counts them (failed_requests, cut_requests).
        windows = (first, high, lower)
        planned = 3 * 2 + sum(m.details["n_requests"] * len(m.details["validity_attempts"])
                              for m in windows)
        lost = sum(int(m.metrics.get("cut_requests", 0)) + int(m.metrics.get("failed_requests", 0))
                   for m in windows)
        assert bodies <= planned
        if all(len(m.details["validity_attempts"]) == 1 for m in windows):
            assert bodies >= planned - lost, (bodies, planned, lost)
        return
    assert isinstance(higher, NotMeasuredError)
    assert str(higher) == ("not measured: ttft_p95_ms missed the SLO at 50 req/s on the same "
                           "engine start, and latency does not improve at a higher rate")
    assert first.details["not_measured"] == [
        {"workload": "chat@100rps", "series_index": 1, "reason": str(higher)}]
    # The lower rate is measured, without a second warm-up, and settles its own miss.
    assert (first.details["warmup_requests"], lower.details["warmup_requests"]) == (2, 0)
    assert lower.details["series_index"] == 2
    sent = [len(m.details["requests"]["index"]) for m in (first, lower)]
    if all(len(m.details["validity_attempts"]) == 1 for m in (first, lower)):
        assert bodies == 2 + sum(sent)  # (a lagging client's window is measured twice)
    assert first.details["settled"]["metric"] == "ttft_p95_ms" and sent[0] <= 30


def test_a_lower_rate_or_another_shape_is_still_measured_after_a_miss(
        fake_vllm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_SERVER_FIRST_TOKEN_DELAY_S", "0.3")
    base = short_workload(30, 50.0)
    longer = short_workload(60, 100.0).with_params(output_len={"dist": "fixed", "value": 6})
    target = VllmTarget()
    target.trial_slo = parse_slo("ttft_p95_ms<=50")
    first, other = target.run_series({}, [base, longer], tmp_path / "cache")
    assert "settled" in measured(first).details and "not_measured" not in measured(first).details
    assert "settled" in measured(other).details  # measured (and settled) on its own


@pytest.mark.parametrize("shortcuts", [True, False])
def test_client_processes_carry_forward_after_the_gate_re_measured(
        fake_vllm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        shortcuts: bool) -> None:
    monkeypatch.setenv(FAULT_STALL_ENV, "40")  # a one-process client lags: client-bound
    if not shortcuts:
        monkeypatch.setenv(SHORTCUTS_ENV, "0")
    clients = {"client_processes": 1, "client_processes_max": 2}
    base = short_workload(10, 20.0, **clients)
    slower = short_workload(5, 10.0, **clients).with_params(seed=1)
    first, second = VllmTarget().run_series({}, [base, slower], tmp_path / "cache")
    attempts = [[a["client_processes"] for a in measured(m).details["validity_attempts"]]
                for m in (first, second)]
    assert attempts[0] == [1, 2]
    # The next window starts where the first one ended (else from its own 1 again).
    assert attempts[1][0] == (2 if shortcuts else 1)


def test_a_server_that_dies_mid_window_fails_the_trial_with_the_engines_reason(
        fake_vllm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the H100 (2026-12-07, trial #12 of docs/benchmarks/h100-study-2026-12-07) a server
    that stopped answering mid-window was stored as the client's "all 480 requests failed
    (ConnectError ...)", an advisor error the failure model ignores. A server that exited is the
    config's own failure: `engine_start`, with its exit code and the log's root cause."""
    monkeypatch.setenv("FAKE_SERVER_DIE_AFTER", "3")  # past the warm-up, inside the window
    base = short_workload(30, 50.0)
    with pytest.raises(EngineStartError) as failed:
        VllmTarget().run_series({}, [base, at_rate(base, 100.0, seed_offset=1)],
                                tmp_path / "cache")
    assert error_type_of(failed.value) == "engine_start"
    assert "exited (code 1)" in str(failed.value), failed.value
    assert "CUDA out of memory" in str(failed.value), failed.value


def test_a_window_that_fails_while_the_server_is_up_keeps_its_own_reason(
        fake_vllm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_SERVER_REFUSE", "The decoder prompt cannot be empty")
    with pytest.raises(TrialFailedError, match="decoder prompt cannot be empty"):
        VllmTarget().run_series({}, [short_workload(10, 50.0)], tmp_path / "cache")

"""The validity gate on constructed windows: agreement, a lagging client, a client that reads
less than the server, a healthy client behind a slow frontend, counts that do not match, and an
endpoint without metrics."""

from __future__ import annotations

from typing import Any

import pytest

from objectives.llm.requests import RequestRecord
from objectives.llm.validity import (
    CLIENT_BOUND,
    FRONTEND_DELAY,
    MAX_LOOP_LAG_P99_MS,
    SERVER_DISAGREES,
    UNCHECKED,
    VALID,
    Tolerance,
    judge,
)


def records(ttft_s: float, *, n: int = 40, tokens: int = 20, gap_s: float = 0.01,
            late_s: float = 0.0) -> list[RequestRecord]:
    out = []
    for i in range(n):
        arrival = i * 0.1
        first = arrival + ttft_s
        chunks = [first + k * gap_s for k in range(tokens)]
        out.append(RequestRecord(index=i, scheduled_s=arrival, prompt_len=8,
                                 sent_s=arrival + late_s, chunk_times_s=chunks,
                                 end_s=chunks[-1], output_tokens=tokens))
    return out


def server_view(ttft_ms: float, *, n: int = 40, tokens: int = 20, tpot_ms: float = 10.0,
                bracket: tuple[float, float] | None = None) -> dict[str, Any]:
    lo, hi = bracket or (ttft_ms * 0.9, ttft_ms * 1.1)
    e2e = ttft_ms + tpot_ms * (tokens - 1)
    return {
        "ttft": {"count": n, "mean_ms": ttft_ms, "p50_ms": ttft_ms, "p50_bracket_ms": [lo, hi],
                 "p95_ms": ttft_ms, "p95_bracket_ms": [lo, hi]},
        "tpot": {"count": n, "mean_ms": tpot_ms, "p95_ms": tpot_ms,
                 "p95_bracket_ms": [tpot_ms * 0.9, tpot_ms * 1.1]},
        "e2e": {"count": n, "mean_ms": e2e, "p95_ms": e2e, "p95_bracket_ms": [e2e * 0.9, e2e]},
        "generation_tokens_delta": n * tokens,
    }


def test_agreeing_windows_are_valid() -> None:
    v = judge(records(0.05), server_view(50.0), loop_lag_s=[0.001] * 100)
    assert v.validity == VALID and v.ok and not v.reasons
    assert {c.name for c in v.checks} >= {"ttft_mean_ms", "ttft_p95_ms", "tpot_p95_ms",
                                          "output_tokens", "requests_with_first_token"}
    assert all(c.agrees for c in v.checks)


def test_a_lagging_event_loop_makes_the_window_client_bound() -> None:
    lag = [0.001] * 90 + [0.05] * 10  # p99 = 50 ms
    v = judge(records(0.05), server_view(50.0), loop_lag_s=lag)
    assert v.validity == CLIENT_BOUND
    assert v.loop_lag_p99_ms is not None and v.loop_lag_p99_ms > MAX_LOOP_LAG_P99_MS
    assert any("event-loop lag" in r for r in v.reasons)


def test_late_sends_make_it_client_bound_unless_a_cap_held_them() -> None:
    late = records(0.05, late_s=0.05)
    assert judge(late, server_view(50.0)).validity == CLIENT_BOUND
    assert judge(late, server_view(50.0), capped=True).validity == VALID


def test_a_healthy_client_reading_more_than_the_server_records_the_frontend_delay() -> None:
    v = judge(records(0.300), server_view(50.0), loop_lag_s=[0.001] * 100)
    assert v.validity == FRONTEND_DELAY and not v.ok  # valid means agreement, nothing else
    assert v.frontend_delay_ms == pytest.approx(250.0)
    assert v.reasons and all("client" in r for r in v.reasons)


def test_a_client_reading_less_than_the_server_disagrees() -> None:
    v = judge(records(0.01), server_view(200.0), loop_lag_s=[0.001] * 100)
    assert v.validity == SERVER_DISAGREES
    assert any(not c.agrees and c.excess < 0 for c in v.checks)


def test_other_traffic_on_the_server_disagrees() -> None:
    view = server_view(50.0)
    view["generation_tokens_delta"] *= 2
    view["ttft"]["count"] *= 2
    assert judge(records(0.05), view).validity == SERVER_DISAGREES


def test_without_server_metrics_only_the_client_is_checked() -> None:
    assert judge(records(0.05), None).validity == UNCHECKED
    assert judge(records(0.05, late_s=0.1), None).validity == CLIENT_BOUND
    v = judge(records(0.05), {"available": False, "reason": "HTTP 404"})
    assert v.validity == UNCHECKED


def test_a_percentile_agrees_anywhere_inside_its_bucket() -> None:
    # Server p95 only known to lie in [100, 250] ms: a client p95 of 240 ms agrees.
    view = server_view(170.0, bracket=(100.0, 250.0))
    view["ttft"]["mean_ms"] = 240.0
    v = judge(records(0.240), view)
    p95 = next(c for c in v.checks if c.name == "ttft_p95_ms")
    assert p95.agrees and p95.excess == 0 and p95.bracket == (100.0, 250.0)


def test_the_tolerance_has_a_floor_and_a_relative_part() -> None:
    tol = Tolerance()
    assert tol.allowed_ms("ttft", 10.0) == 20.0
    assert tol.allowed_ms("ttft", 1000.0) == pytest.approx(150.0)
    assert tol.allowed_ms("tpot", 4.0) == 1.0


def test_cut_requests_keep_e2e_out_of_the_comparison() -> None:
    recs = records(0.05)
    recs[-1].cut_s = recs[-1].end_s
    recs[-1].end_s = None
    recs[-1].error = "cut off"
    v = judge(recs, server_view(50.0))
    assert not any(c.name.startswith("e2e") for c in v.checks)


# -- servers without latency histograms: per-request streamed timings and a decode counter ------


def streamed(recs: list[RequestRecord], *, prompt_ms: float, tpot_ms: float,
             tokens: int = 20) -> list[RequestRecord]:
    """``recs`` with the timings a server like llama.cpp's streams back with each request."""
    for r in recs:
        r.server_timings = {"prompt_ms": prompt_ms, "decode_ms": tpot_ms * (tokens - 1),
                            "decode_tokens": float(tokens)}
    return recs


def counters_only(*, decode_s: float, tokens: int = 800) -> dict[str, Any]:
    return {"generation_tokens_delta": tokens, "decode_seconds_delta": decode_s}


def test_streamed_timings_that_agree_make_a_window_valid() -> None:
    # Client: TTFT 50 ms, 10 ms between tokens; the server took the request up 5 ms after it
    # arrived (a 45 ms prompt) and decoded each token in 10 ms.
    recs = streamed(records(0.05), prompt_ms=45.0, tpot_ms=10.0)
    v = judge(recs, counters_only(decode_s=40 * 19 * 0.010), loop_lag_s=[0.001] * 100)
    assert v.validity == VALID, v.reasons
    names = {c.name for c in v.checks}
    assert {"streamed_tpot_mean_ms", "streamed_tpot_p95_ms", "ttft_mean_over_streamed_prompt_ms",
            "decode_total_ms", "output_tokens"} <= names


def test_a_client_reading_ttft_below_the_servers_prompt_time_disagrees() -> None:
    # The server says the prompt alone took 200 ms; the client read a first token after 50 ms.
    v = judge(streamed(records(0.05), prompt_ms=200.0, tpot_ms=10.0), None)
    assert v.validity == SERVER_DISAGREES
    assert any("streamed_prompt" in r for r in v.reasons)


def test_queueing_above_the_servers_prompt_time_is_not_a_disagreement() -> None:
    # 500 ms of waiting for a free slot: the server's prompt time is only a floor for TTFT.
    v = judge(streamed(records(0.5), prompt_ms=20.0, tpot_ms=10.0), None)
    assert v.validity == VALID, v.reasons


def test_slower_tokens_than_the_server_streamed_are_not_valid() -> None:
    # The healthy client read 10 ms per token, the server says 5 ms: latency on top of the
    # server's, labelled; a client reading 10 ms against 20 ms disagrees.
    assert judge(streamed(records(0.05), prompt_ms=40.0, tpot_ms=5.0), None
                 ).validity == FRONTEND_DELAY
    assert judge(streamed(records(0.05), prompt_ms=40.0, tpot_ms=20.0), None
                 ).validity == SERVER_DISAGREES


def test_the_decode_counter_must_match_the_clients_spans() -> None:
    spans_s = 40 * 19 * 0.010
    assert judge(records(0.05), counters_only(decode_s=spans_s)).validity == VALID
    assert judge(records(0.05), counters_only(decode_s=spans_s * 2)).validity == SERVER_DISAGREES
    recs = records(0.05)
    recs[-1].cut_s, recs[-1].end_s, recs[-1].error = recs[-1].end_s, None, "cut off"
    # A cut request's span is not the server's: without another source nothing is checked.
    assert judge(recs, counters_only(decode_s=spans_s * 2)).validity == UNCHECKED


def test_a_window_stopped_early_does_not_count_the_tokens_of_the_requests_it_cut() -> None:
    """A window stopped once its SLO miss was settled cuts every request in flight at once; the
    server goes on generating for them until it sees the disconnects, so it counts more tokens
    than the client read (6-30 % in the H100's settled windows): not a disagreement then."""
    view = server_view(50.0)
    view["generation_tokens_delta"] = int(view["generation_tokens_delta"] * 1.25)
    whole = judge(records(0.05), view)
    assert whole.validity == SERVER_DISAGREES
    assert any(r.startswith("output_tokens") for r in whole.reasons)
    stopped = judge(records(0.05), view, stopped_early=True)
    assert stopped.validity == VALID, stopped.reasons
    assert "output_tokens" not in {c.name for c in stopped.checks}
    # Every other check still runs: a client reading less than the server is still caught.
    assert judge(records(0.02), server_view(50.0), stopped_early=True).validity \
        == SERVER_DISAGREES

"""Per-request LLM metrics and their summary on hand-built records: the vLLM definitions, the
E2E = TTFT + sum(ITL) identity, goodput, numpy percentiles, and degenerate records."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from advisor.errors import SLOParseError, TrialFailedError
from objectives import parse_slo
from objectives.llm.metrics import (
    PERCENTILES,
    goodput_bounds_from_slo,
    goodput_from_samples,
    per_request,
    request_samples,
    summarize,
)
from objectives.llm.requests import RequestRecord
from objectives.registry import metrics_for_target

# Reported by the targets from the engine, not summarized from the requests.
LLM_METRICS = {m.name for m in metrics_for_target("vllm")} - {"peak_memory_mb", "weights_mb",
                                                                "bits_per_weight"}


def record(index: int = 0, *, scheduled: float = 0.0, sent: float | None = None,
           chunks: list[float] | None = None, end: float | None = None, tokens: int | None = None,
           error: str | None = None) -> RequestRecord:
    chunks = [] if chunks is None else chunks
    return RequestRecord(
        index=index, scheduled_s=scheduled, prompt_len=16,
        sent_s=scheduled if sent is None else sent, chunk_times_s=list(chunks),
        end_s=(chunks[-1] if chunks else None) if end is None else end,
        output_tokens=len(chunks) if tokens is None else tokens, error=error)


def test_per_request_definitions() -> None:
    # Scheduled at 1.0, sent at 1.1 (held back), chunks at 1.3, 1.35, 1.45, 1.5, ended at 1.6.
    r = record(scheduled=1.0, sent=1.1, chunks=[1.3, 1.35, 1.45, 1.5], end=1.6, tokens=7)
    p = per_request(r)
    assert p.ttft_s == pytest.approx(0.3)  # from the scheduled arrival, not the send
    assert p.queue_delay_s == pytest.approx(0.1)
    assert p.e2e_s == pytest.approx(0.6)
    assert p.itl_s == pytest.approx((0.05, 0.1, 0.05))
    assert p.tpot_s == pytest.approx((0.6 - 0.3) / 6)
    assert p.output_tokens == 7


def test_one_token_has_no_tpot() -> None:
    p = per_request(record(chunks=[0.2], tokens=1))
    assert p.tpot_s is None and p.itl_s == ()


@given(st.floats(0, 100), st.lists(st.floats(1e-4, 5.0), min_size=1, max_size=50))
def test_e2e_equals_ttft_plus_sum_of_itl(start: float, steps: list[float]) -> None:
    chunks = list(start + np.cumsum(steps))
    p = per_request(record(scheduled=start, chunks=chunks))
    assert abs(p.e2e_s - (p.ttft_s + math.fsum(p.itl_s))) <= 1e-9


@pytest.mark.parametrize("bad,reason", [
    (record(chunks=[]), "no token chunk"),
    (record(chunks=[0.1, 0.2], error="HTTP 500: boom"), "HTTP 500"),
    (record(chunks=[0.5, 0.6], end=0.4), "before its last chunk"),
    (record(chunks=[0.5, 0.4], end=0.7), "not in order"),
    (record(scheduled=1.0, sent=0.5, chunks=[1.5]), "scheduled_s <= sent_s"),
    (record(chunks=[0.1], tokens=0), "0 output tokens"),
])
def test_degenerate_records_are_rejected(bad: RequestRecord, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        per_request(bad)


def scripted_run() -> list[RequestRecord]:
    """Four requests: two good ones, one too slow per token only, one failed."""
    return [
        # TTFT 100 ms, TPOT (400-100)/3 = 100 ms, E2E 400 ms.
        record(0, scheduled=0.0, chunks=[0.1, 0.2, 0.3, 0.4]),
        # TTFT 50 ms, TPOT (250-50)/4 = 50 ms, E2E 250 ms; 2 chunks carry 5 tokens.
        record(1, scheduled=1.0, chunks=[1.05, 1.25], tokens=5),
        # TTFT 50 ms (fine) but TPOT (1050-50)/2 = 500 ms, E2E 1050 ms.
        record(2, scheduled=2.0, chunks=[2.05, 2.55, 3.05]),
        record(3, scheduled=3.0, error="HTTP 500: overloaded"),
    ]


def test_summary_matches_hand_computed_values() -> None:
    m = summarize(scripted_run(), duration_s=4.0)
    assert set(m) == LLM_METRICS
    assert m["failed_requests"] == 1
    assert m["requests_per_s"] == pytest.approx(3 / 4.0)
    assert m["goodput_requests_per_s"] == m["requests_per_s"]  # no bounds: every success is good
    assert m["output_tokens_per_s"] == pytest.approx((4 + 5 + 3) / 4.0)
    assert m["ttft_mean_ms"] == pytest.approx((100 + 50 + 50) / 3)
    assert m["e2e_p50_ms"] == pytest.approx(400)
    assert m["tpot_mean_ms"] == pytest.approx((100 + 50 + 500) / 3)
    itls = [100, 100, 100, 200, 500, 500]
    assert m["itl_mean_ms"] == pytest.approx(np.mean(itls))


def test_percentiles_are_numpy_linear() -> None:
    rng = np.random.default_rng(0)
    ttfts = rng.uniform(0.01, 2.0, size=37)
    records = [record(i, scheduled=float(i), chunks=[i + float(t), i + float(t) + 0.01])
               for i, t in enumerate(ttfts)]
    m = summarize(records, duration_s=40.0)
    for q in PERCENTILES:
        assert m[f"ttft_p{q}_ms"] == pytest.approx(np.percentile(ttfts * 1000, q), rel=1e-9)
    assert m["ttft_p99_ms"] != pytest.approx(np.percentile(ttfts * 1000, 99, method="lower"))


@pytest.mark.parametrize("bounds,good", [
    ({"ttft_ms": 120}, 3),
    ({"ttft_ms": 60}, 2),
    ({"tpot_ms": 150}, 2),  # request 2 fails on TPOT alone
    ({"ttft_ms": 120, "tpot_ms": 150}, 2),
    ({"ttft_ms": 120, "tpot_ms": 150, "e2e_ms": 300}, 1),
    ({"e2e_ms": 1}, 0),
    ({}, 3),
])
def test_goodput_counts_requests_meeting_every_bound(bounds: dict[str, float], good: int) -> None:
    m = summarize(scripted_run(), duration_s=4.0, goodput_slo_ms=bounds)
    assert m["goodput_requests_per_s"] == pytest.approx(good / 4.0)


def test_single_token_request_passes_a_tpot_bound_as_in_vllm() -> None:
    m = summarize([record(chunks=[0.1], tokens=1)], duration_s=1.0,
                  goodput_slo_ms={"tpot_ms": 1})
    assert m["goodput_requests_per_s"] == 1.0
    # No request has a TPOT or an ITL: those families are left out, not reported as 0.
    assert not any(k.startswith(("tpot_", "itl_")) for k in m)


def test_unknown_goodput_bound_is_rejected() -> None:
    with pytest.raises(SLOParseError, match="itl_ms"):
        summarize(scripted_run(), duration_s=1.0, goodput_slo_ms={"itl_ms": 5})


def test_all_failed_raises_trial_failed_with_reasons() -> None:
    records = [record(0, error="HTTP 503: busy"), record(1, chunks=[]),
               record(2, error="ConnectError: refused")]
    with pytest.raises(TrialFailedError, match=r"HTTP 503: busy.*no token chunk.*refused"):
        summarize(records, duration_s=1.0)


def test_degenerate_records_count_as_failed() -> None:
    records = [*scripted_run()[:2], record(5, chunks=[]), record(6, chunks=[0.1], end=None)]
    records[-1].end_s = None
    m = summarize(records, duration_s=2.0)
    assert m["failed_requests"] == 2 and m["requests_per_s"] == 1.0


def test_inconsistent_successful_record_is_a_bug_not_a_failure() -> None:
    with pytest.raises(ValueError, match="not in order"):
        summarize([record(chunks=[0.3, 0.2], end=0.4)], duration_s=1.0)


def test_goodput_bounds_from_slo_take_upper_latency_bounds() -> None:
    slo = parse_slo("ttft_p95_ms<=300, ttft_p99_ms<=250, tpot_mean_ms<=40, e2e_p50_ms<=2000, "
                    "itl_p95_ms<=30, requests_per_s>=5")
    assert goodput_bounds_from_slo(slo) == {"ttft_ms": 250, "tpot_ms": 40, "e2e_ms": 2000}
    assert goodput_bounds_from_slo(parse_slo("")) == {}


def test_goodput_is_recomputed_from_stored_samples_for_any_slo() -> None:
    from objectives.llm.metrics import goodput_from_samples, request_samples, with_goodput
    from objectives.measurement import Measurement
    from objectives.slo import parse_slo

    def rec(i: int, ttft: float, end: float, n: int, error: str | None = None) -> RequestRecord:
        if error:
            return RequestRecord(index=i, scheduled_s=0.0, prompt_len=4, error=error)
        chunks = [ttft + k * (end - ttft) / max(n - 1, 1) for k in range(n)]
        return RequestRecord(index=i, scheduled_s=0.0, prompt_len=4, sent_s=0.0,
                             chunk_times_s=chunks, end_s=end, output_tokens=n)

    # TTFT 0.1 s / TPOT 10 ms; TTFT 0.5 s / TPOT 10 ms; TTFT 0.1 s / TPOT 100 ms; failed.
    records = [rec(0, 0.1, 0.19, 10), rec(1, 0.5, 0.59, 10), rec(2, 0.1, 1.0, 10),
               rec(3, 0, 0, 0, error="HTTP 500")]
    samples = request_samples(records)
    assert samples["ttft_ms"] == [100.0, 500.0, 100.0, None]
    assert samples["tpot_ms"][:3] == pytest.approx([10.0, 10.0, 100.0])
    assert goodput_from_samples(samples, duration_s=2.0, bounds_ms={}) == 1.5
    assert goodput_from_samples(samples, duration_s=2.0, bounds_ms={"ttft_ms": 300}) == 1.0
    assert goodput_from_samples(samples, duration_s=2.0,
                                bounds_ms={"ttft_ms": 300, "tpot_ms": 40}) == 0.5
    m = Measurement(metrics={"goodput_requests_per_s": 1.5, "requests_per_s": 1.5},
                    engine_versions={}, details={"requests": samples, "load_duration_s": 2.0})
    rescored = with_goodput(m, parse_slo("ttft_p95_ms<=300,tpot_p99_ms<=40"))
    assert rescored.metrics["goodput_requests_per_s"] == 0.5
    assert rescored.details["goodput_bounds_ms"] == {"ttft_ms": 300.0, "tpot_ms": 40.0}
    assert rescored.metrics["requests_per_s"] == 1.5
    assert with_goodput(Measurement({"x": 1.0}, {}), parse_slo("ttft_p95_ms<=1")).metrics == {
        "x": 1.0}  # nothing to rescore without samples


def _cut(index: int, *, scheduled: float, chunks: list[float], cut: float,
         sent: float | None = None) -> RequestRecord:
    return RequestRecord(index=index, scheduled_s=scheduled, prompt_len=16, sent_s=sent,
                         chunk_times_s=list(chunks), end_s=None, output_tokens=len(chunks),
                         error=f"cut off at {cut:g} s, unfinished", cut_s=cut)


def test_cut_requests_enter_ttft_and_e2e_as_lower_bounds() -> None:
    done = record(0, scheduled=0.0, chunks=[0.1, 0.2, 0.3])  # TTFT 100 ms, E2E 300 ms
    streaming = _cut(1, scheduled=1.0, sent=1.0, chunks=[1.5, 1.7], cut=3.0)  # TTFT 500, E2E>=2000
    unsent = _cut(2, scheduled=2.0, chunks=[], cut=3.0)  # TTFT >= 1000, E2E >= 1000
    m = summarize([done, streaming, unsent], duration_s=3.0,
                  goodput_slo_ms={"ttft_ms": 5000, "e2e_ms": 5000})
    assert m["ttft_p50_ms"] == pytest.approx(500.0)  # of 100, 500, 1000
    assert m["ttft_mean_ms"] == pytest.approx((100 + 500 + 1000) / 3)
    assert m["e2e_p50_ms"] == pytest.approx(1000.0)  # of 300, 2000, 1000
    assert m["itl_mean_ms"] == pytest.approx((100 + 100 + 200) / 3)  # cut chunk gaps count
    assert m["tpot_mean_ms"] == pytest.approx(100.0)  # only the finished request has a TPOT
    assert m["output_tokens_per_s"] == pytest.approx((3 + 2) / 3.0)
    assert m["requests_per_s"] == pytest.approx(1 / 3.0)
    assert m["goodput_requests_per_s"] == pytest.approx(1 / 3.0)  # a cut request is never good
    assert (m["failed_requests"], m["cut_requests"]) == (0.0, 2.0)
    samples = request_samples([done, streaming, unsent])
    assert samples["cut"] == [False, True, True]
    assert samples["ttft_ms"][1:] == [500.0, 1000.0] and samples["e2e_ms"][1:] == [2000.0, 1000.0]
    assert samples["tpot_ms"][1:] == [None, None] and samples["output_tokens"][1:] == [2, 0]
    loose = {"ttft_ms": 1e9, "e2e_ms": 1e9}
    assert goodput_from_samples(samples, duration_s=3.0, bounds_ms=loose) == pytest.approx(1 / 3)


def test_a_run_where_everything_was_cut_still_measures() -> None:
    m = summarize([_cut(0, scheduled=0.0, chunks=[0.4], cut=2.0)], duration_s=2.0)
    assert m["cut_requests"] == 1 and m["requests_per_s"] == 0.0
    assert m["ttft_p95_ms"] == pytest.approx(400.0) and m["e2e_p95_ms"] == pytest.approx(2000.0)
    assert "cut" not in request_samples([record(0, chunks=[0.1])])  # no column without cuts

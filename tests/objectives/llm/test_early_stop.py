"""Windows that stop once their SLO miss is settled (objectives/llm/early_stop.py): the exact
binomial bound, which bounds can be settled, and the vLLM target's windows against the stand-in
server, whose first token can be made slow far beyond a bound (no timing is asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from objectives import parse_slo
from objectives.llm.early_stop import (
    CONFIDENCE,
    MIN_REQUESTS,
    SHORTCUTS_ENV,
    ExceedanceTally,
    MissWatch,
    binomial_sf,
    clopper_pearson_lower,
    exceedances,
    miss_bounds,
    shortcuts_enabled,
)
from objectives.llm.requests import RequestRecord, RequestSpec
from objectives.targets.vllm_target import VllmTarget
from tests.objectives.llm.stand_in import short_workload

#: Every request's first token comes this late: 20x the bound the slow tests set.
SLOW_FIRST_TOKEN_S = 1.0
MISSED = "ttft_p95_ms<=50"


# -- the statistics -----------------------------------------------------------------------------

@pytest.mark.parametrize(("k", "n"), [(1, 1), (3, 20), (20, 20), (5, 100), (40, 60), (1, 5000),
                                      (900, 1000), (250, 4000)])
def test_the_lower_bound_is_the_beta_quantile_of_clopper_pearson(k: int, n: int) -> None:
    stats = pytest.importorskip("scipy.stats")
    expected = float(stats.beta.ppf(1 - CONFIDENCE, k, n - k + 1))
    assert clopper_pearson_lower(k, n) == pytest.approx(expected, rel=1e-6, abs=1e-12)
    for p in (0.01, 0.05, 0.5, 0.9):
        assert binomial_sf(k, n, p) == pytest.approx(float(stats.binom.sf(k - 1, n, p)),
                                                     rel=1e-7, abs=1e-300)


def test_known_values_without_scipy() -> None:
    # k = n: P(X >= n) = p^n, so the bound is (1 - confidence)^(1/n).
    assert clopper_pearson_lower(20, 20) == pytest.approx((1 - CONFIDENCE) ** (1 / 20), rel=1e-9)
    assert clopper_pearson_lower(0, 50) == 0.0
    assert binomial_sf(0, 10, 0.3) == 1.0 and binomial_sf(11, 10, 0.3) == 0.0
    with pytest.raises(ValueError, match="0 <= k <= n"):
        clopper_pearson_lower(5, 4)


def test_only_upper_bounds_on_request_latency_percentiles_can_be_settled() -> None:
    slo = parse_slo("ttft_p95_ms<=300,tpot_p99_ms<=40,itl_p95_ms<=10,e2e_mean_ms<=5000,"
                    "e2e_p50_ms<=2000,output_tokens_per_s>=100")
    bounds = miss_bounds(slo)
    assert [(b.metric, b.latency, b.quantile) for b in bounds] == [
        ("ttft_p95_ms", "ttft_ms", 0.95), ("tpot_p99_ms", "tpot_ms", 0.99),
        ("e2e_p50_ms", "e2e_ms", 0.5)]
    assert bounds[0].threshold_s == pytest.approx(0.3)
    assert miss_bounds(None) == ()


def test_a_miss_is_settled_only_over_enough_requests_and_beyond_doubt() -> None:
    bounds = miss_bounds(parse_slo("ttft_p95_ms<=300"))
    requests = [RequestSpec(i, i * 0.1, (1, 2), 4) for i in range(100)]  # 10 req/s for 10 s
    watch = MissWatch(bounds, requests)
    # Every request so far exceeds, but fewer than MIN_REQUESTS have arrived.
    assert watch.judge([MIN_REQUESTS - 1], (MIN_REQUESTS - 2) * 0.1) is None
    settled = watch.judge([MIN_REQUESTS], (MIN_REQUESTS - 1) * 0.1)
    assert settled is not None and settled.metric == "ttft_p95_ms"
    assert settled.scheduled == MIN_REQUESTS and settled.lower_bound > 0.05
    # 3 of 60 (5 %) exceed: consistent with a p95 at the bound, so not settled.
    assert watch.judge([3], 5.95) is None
    # 12 of 60 (20 %): settled, and its bound is the exact one.
    settled = watch.judge([12], 5.95)
    assert settled is not None
    assert settled.lower_bound == pytest.approx(clopper_pearson_lower(12, 60))


def test_the_incremental_tally_counts_what_a_full_count_does() -> None:
    bounds = miss_bounds(parse_slo("ttft_p95_ms<=100,tpot_p90_ms<=20,e2e_p99_ms<=400"))
    records = [RequestRecord(index=i, scheduled_s=i * 0.05, prompt_len=2) for i in range(40)]
    tally = ExceedanceTally(bounds)
    for step in range(1, 41):
        now = step * 0.05
        # Request i is sent on arrival, its first token comes (i % 7) * 40 ms later and it ends
        # 8 tokens of (i % 3) * 15 ms later; one in nine fails.
        for r in records:
            first = r.scheduled_s + (r.index % 7) * 0.04
            end = first + 7 * (r.index % 3) * 0.015
            if r.sent_s is None and r.scheduled_s <= now:
                r.sent_s = r.scheduled_s
            if not r.chunk_times_s and first <= now and r.index % 9:
                r.chunk_times_s = [first + k * (end - first) / 7 for k in range(8)]
            if r.end_s is None and end <= now:
                r.end_s, r.output_tokens = end, 8
                if not r.index % 9:
                    r.error = "server error"
        assert tally(records, now) == exceedances(records, bounds, now)
    assert all(k > 0 for k in tally(records, 2.0))  # every bound saw exceedances


def test_shortcuts_are_on_unless_the_variable_says_0() -> None:
    assert shortcuts_enabled({})
    assert shortcuts_enabled({SHORTCUTS_ENV: "1"})
    assert not shortcuts_enabled({SHORTCUTS_ENV: "0"})
    assert not shortcuts_enabled({SHORTCUTS_ENV: "off"})


# -- windows against the stand-in server --------------------------------------------------------

def target(slo: str | None) -> VllmTarget:
    vllm = VllmTarget()
    vllm.trial_slo = parse_slo(slo) if slo else None
    return vllm


def sent_bodies(record: Path) -> int:
    return len(record.read_text().splitlines())


@pytest.mark.parametrize("processes", [1, 2])
def test_a_window_stops_once_its_miss_is_settled(fake_vllm: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 processes: int) -> None:
    monkeypatch.setenv("FAKE_SERVER_FIRST_TOKEN_DELAY_S", str(SLOW_FIRST_TOKEN_S))
    m = target(MISSED).run({}, short_workload(400, client_processes=processes), tmp_path / "cache")
    settled = m.details["settled"]
    assert settled["verdict"] == "miss" and settled["metric"] == "ttft_p95_ms"
    assert settled["scheduled"] >= MIN_REQUESTS and settled["lower_bound"] > 0.05
    assert settled["exceeding"] <= settled["scheduled"]
    # 400 requests arrive over ~8 s; the miss is plain after ~20: far fewer were sent.
    assert settled["sent"] < 200 and len(m.details["requests"]["index"]) == settled["sent"]
    if len(m.details["validity_attempts"]) == 1:  # (a lagging client's is measured again)
        assert sent_bodies(fake_vllm) == 2 + settled["sent"]  # the warm-up, then the window
    assert m.details["n_requests"] == 400 and m.details["client_processes"] >= processes
    # A normal measured trial: its numbers are what was measured, and the miss is real.
    assert m.metrics["ttft_p95_ms"] > 50
    assert m.metrics["failed_requests"] == 0
    cut = m.metrics["cut_requests"]
    assert cut == sum(m.details["requests"].get("cut", []))


def test_a_window_that_meets_its_slo_runs_whole(fake_vllm: Path, tmp_path: Path) -> None:
    m = target("ttft_p95_ms<=5000,e2e_p99_ms<=20000").run({}, short_workload(30),
                                                          tmp_path / "cache")
    assert "settled" not in m.details
    assert len(m.details["requests"]["index"]) == 30 and m.metrics["cut_requests"] == 0
    assert sent_bodies(fake_vllm) == 2 + 30 * len(m.details["validity_attempts"])


def test_shortcuts_off_measures_the_whole_window(fake_vllm: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_SERVER_FIRST_TOKEN_DELAY_S", str(SLOW_FIRST_TOKEN_S))
    monkeypatch.setenv(SHORTCUTS_ENV, "0")
    m = target(MISSED).run({}, short_workload(30), tmp_path / "cache")
    assert "settled" not in m.details
    assert len(m.details["requests"]["index"]) == 30 and m.metrics["cut_requests"] == 0
    assert m.metrics["ttft_p95_ms"] > 50


def test_without_the_studys_slo_nothing_is_settled(fake_vllm: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_SERVER_FIRST_TOKEN_DELAY_S", str(SLOW_FIRST_TOKEN_S))
    m = target(None).run({}, short_workload(30), tmp_path / "cache")
    assert "settled" not in m.details and len(m.details["requests"]["index"]) == 30

"""Drift verdicts: a change counts only beyond the measured noise and the minimum change."""

from __future__ import annotations

import pytest

from advisor.sweeps.drift import compare_cell, factor_change, summarize_values
from advisor.sweeps.spec import DriftPolicy

WORSE = {"qps": "lower", "p95_latency_ms": "higher"}
BOUNDS = [("p95_latency_ms", "<=", 1.0)]
POLICY = DriftPolicy(noise_factor=3, min_change=0.1)


def verdict(prev: dict[str, list[float]], cur: dict[str, list[float]],
            policy: DriftPolicy = POLICY) -> str:
    return compare_cell("c", config={"x": 1}, previous=prev, current=cur, worse_when=WORSE,
                        slo_bounds=BOUNDS, policy=policy).status


def test_summary_statistics() -> None:
    s = summarize_values([9.0, 10.0, 11.0])
    assert s["mean"] == pytest.approx(10.0) and s["cv"] == pytest.approx(0.1) and s["n"] == 3


def test_same_measurements_are_steady() -> None:
    same = {"qps": [100.0, 102.0, 98.0], "p95_latency_ms": [0.5, 0.52, 0.48]}
    assert verdict(same, same) == "steady"


def test_a_drop_beyond_noise_is_a_regression_and_a_rise_an_improvement() -> None:
    prev = {"qps": [100.0, 101.0, 99.0], "p95_latency_ms": [0.5, 0.5, 0.5]}
    assert verdict(prev, {"qps": [60.0, 61.0, 59.0], "p95_latency_ms": [0.5, 0.5, 0.5]}) \
        == "regressed"
    assert verdict(prev, {"qps": [150.0, 151.0, 149.0], "p95_latency_ms": [0.5, 0.5, 0.5]}) \
        == "improved"


def test_noisy_repeats_widen_the_threshold() -> None:
    # cv ~ 0.2: a 30 % drop is inside 3 x noise, so it is not a regression.
    prev = {"qps": [80.0, 100.0, 120.0]}
    cur = {"qps": [56.0, 70.0, 84.0]}
    result = compare_cell("c", config=None, previous=prev, current=cur, worse_when=WORSE,
                          slo_bounds=[], policy=DriftPolicy(noise_factor=3, min_change=0.1))
    assert result.status == "steady"
    assert result.metrics[0].threshold == pytest.approx(0.6, rel=0.01)
    strict = compare_cell("c", config=None, previous=prev, current=cur, worse_when=WORSE,
                          slo_bounds=[], policy=DriftPolicy(noise_factor=1, min_change=0.1))
    assert strict.status == "regressed"


def test_min_change_guards_noise_free_measurements() -> None:
    prev, cur = {"qps": [100.0] * 3}, {"qps": [95.0] * 3}
    assert verdict(prev, cur) == "steady"  # -5 % < min_change 10 %
    assert verdict(prev, cur, DriftPolicy(noise_factor=3, min_change=0.01)) == "regressed"


def test_an_slo_missed_now_is_a_regression_even_within_noise() -> None:
    prev = {"p95_latency_ms": [0.95, 0.99, 0.97]}
    cur = {"p95_latency_ms": [1.02, 1.03, 1.01]}  # +5 %, below min_change, but over 1 ms
    result = compare_cell("c", config=None, previous=prev, current=cur, worse_when=WORSE,
                          slo_bounds=BOUNDS, policy=DriftPolicy())
    assert result.status == "regressed"
    assert result.slo_previously_met is True and result.slo_now_met is False


def test_without_both_runs_there_is_no_baseline() -> None:
    assert verdict({}, {"qps": [1.0]}) == "no-baseline"
    assert verdict({"qps": [1.0]}, {}) == "no-baseline"


def test_moves_are_factors_the_same_either_way() -> None:
    assert factor_change(100.0, 50.0) == pytest.approx(1.0)
    assert factor_change(50.0, 100.0) == pytest.approx(1.0)
    assert factor_change(100.0, 100.0) == 0.0
    assert factor_change(0.0, 5.0) == 0.0 and factor_change(2.0, -2.0) == pytest.approx(2.0)


def test_a_throughput_drop_counts_past_a_bar_of_one_or_more() -> None:
    # A bar of 3 (a move past 4x): a relative change cannot fall below -100 %, so a 20x drop of
    # a maximized metric must be read as a factor to count at all.
    bar = DriftPolicy(noise_factor=3, min_change=3.0)
    prev = {"qps": [100.0] * 3, "p95_latency_ms": [0.5] * 3}
    assert verdict(prev, {"qps": [5.0] * 3, "p95_latency_ms": [0.5] * 3}, bar) == "regressed"
    assert verdict(prev, {"qps": [30.0] * 3, "p95_latency_ms": [0.5] * 3}, bar) == "steady"
    faster = {"qps": [100.0] * 3, "p95_latency_ms": [0.025] * 3}  # latency 20x lower
    assert verdict(prev, faster, bar) == "improved"


def test_a_drop_and_a_rise_of_one_factor_get_one_verdict() -> None:
    prev = {"qps": [100.0] * 3}
    drop, rise = {"qps": [100 / 1.15] * 3}, {"qps": [115.0] * 3}  # 1.15x either way
    assert verdict(prev, drop) == "regressed" and verdict(prev, rise) == "improved"
    drift = compare_cell("c", config=None, previous=prev, current=drop, worse_when=WORSE,
                         slo_bounds=[], policy=POLICY).metrics[0]
    assert drift.factor_change == pytest.approx(0.15) and drift.change == pytest.approx(-0.1304,
                                                                                       abs=1e-3)

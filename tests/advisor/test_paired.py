"""Paired comparisons on constructed repeats: the bootstrap interval brackets the difference of
means, the verdict follows the interval and the metric's direction, the result is seeded and
round-trips through storage, and too few or blocked repeats are refused."""

from __future__ import annotations

import json

import pytest

from advisor.paired import (
    MIN_REPEATS,
    Better,
    PairedComparison,
    PairedComparisonError,
    Repeat,
    check_interleaved,
    compare,
)

BETTER: dict[str, Better] = {"qps": "higher", "p95_latency_ms": "lower"}


def arms(x_values: list[dict[str, float]], y_values: list[dict[str, float]]
         ) -> tuple[list[Repeat], list[Repeat]]:
    """X and Y measured alternately (X at even places, Y at odd), as the driver queues them."""
    x = [Repeat("best", 2 * i, m, trial_id=100 + 2 * i) for i, m in enumerate(x_values)]
    y = [Repeat("default", 2 * i + 1, m, trial_id=101 + 2 * i) for i, m in enumerate(y_values)]
    return x, y


def test_clear_difference_is_better_or_worse_by_direction() -> None:
    x, y = arms([{"qps": 610, "p95_latency_ms": 1.30}, {"qps": 598, "p95_latency_ms": 1.26},
                 {"qps": 605, "p95_latency_ms": 1.33}],
                [{"qps": 500, "p95_latency_ms": 1.01}, {"qps": 507, "p95_latency_ms": 0.98},
                 {"qps": 495, "p95_latency_ms": 1.00}])
    result = compare(x, y, better=BETTER, seed=1)
    qps, p95 = result.metric("qps"), result.metric("p95_latency_ms")
    assert qps is not None and p95 is not None
    assert qps.mean_x == pytest.approx(604.333, abs=1e-3) and qps.mean_y == pytest.approx(500.667,
                                                                                        abs=1e-3)
    assert qps.difference == pytest.approx(qps.mean_x - qps.mean_y)
    assert qps.relative_difference == pytest.approx(qps.difference / qps.mean_y)
    lo, hi = qps.interval
    assert 0 < lo <= qps.difference <= hi  # the point estimate lies inside its interval
    # Bootstrap means stay inside each arm's range, so the interval does too.
    assert lo >= min(v.metrics["qps"] for v in x) - max(v.metrics["qps"] for v in y)
    assert hi <= max(v.metrics["qps"] for v in x) - min(v.metrics["qps"] for v in y)
    assert qps.verdict == "better"  # higher qps is better
    assert p95.verdict == "worse" and p95.interval[0] > 0  # higher latency is worse
    assert result.x == "best" and result.y == "default" and result.level == 0.95
    assert result.x_trials == (100, 102, 104) and result.y_trials == (101, 103, 105)


def test_overlapping_repeats_are_within_noise() -> None:
    x, y = arms([{"qps": 505, "p95_latency_ms": 1.0}, {"qps": 470, "p95_latency_ms": 1.1},
                 {"qps": 530, "p95_latency_ms": 0.9}],
                [{"qps": 500, "p95_latency_ms": 1.05}, {"qps": 520, "p95_latency_ms": 0.95},
                 {"qps": 480, "p95_latency_ms": 1.0}])
    result = compare(x, y, better=BETTER, seed=0)
    for m in result.metrics:
        assert m.interval[0] <= 0 <= m.interval[1]
        assert m.verdict == "within_noise"
    assert result.verdict("qps") == "within_noise" and result.verdict("unknown") is None


def test_seeded_and_stored_form_round_trips() -> None:
    x, y = arms([{"qps": 505}, {"qps": 470}, {"qps": 530}, {"qps": 515}],
                [{"qps": 500}, {"qps": 520}, {"qps": 480}, {"qps": 490}])
    a = compare(x, y, better=BETTER, seed=7, x_config={"x": 0.6}, y_config={"x": 0.5},
                context={"study": "s"})
    assert compare(x, y, better=BETTER, seed=7).metrics == a.metrics  # same seed, same interval
    data = json.loads(json.dumps(a.to_dict()))
    back = PairedComparison.from_dict(data)
    assert back == a
    assert data["method"].startswith("percentile bootstrap") and data["resamples"] >= 1000
    # Only metrics every repeat measured are compared (p95 was never measured here).
    assert [m["metric"] for m in data["metrics"]] == ["qps"]


def test_fewer_than_three_repeats_are_refused() -> None:
    x, y = arms([{"qps": 600}, {"qps": 610}], [{"qps": 500}, {"qps": 505}])
    with pytest.raises(PairedComparisonError, match=f"at least {MIN_REPEATS}"):
        compare(x, y, better=BETTER)
    x, y = arms([{"qps": 600}] * 3, [{"qps": 500}] * 3)
    with pytest.raises(PairedComparisonError, match="both arms"):
        compare(x, [], better=BETTER)


def test_blocked_arms_are_refused_and_abba_is_accepted() -> None:
    blocked_x = [Repeat("best", i, {"qps": 600.0}) for i in range(3)]
    blocked_y = [Repeat("default", 3 + i, {"qps": 500.0}) for i in range(3)]
    with pytest.raises(PairedComparisonError, match="not measured interleaved"):
        compare(blocked_x, blocked_y, better=BETTER)
    # X Y Y X X Y: never more than one ahead, so interleaved (a re-queued repeat does this).
    order_x, order_y = [0, 3, 4], [1, 2, 5]
    check_interleaved([Repeat("best", o, {}) for o in order_x],
                      [Repeat("default", o, {}) for o in order_y])
    with pytest.raises(PairedComparisonError, match="share one place"):
        check_interleaved([Repeat("best", 0, {})], [Repeat("default", 0, {})])


def test_identical_arms_are_within_noise_and_bad_input_names_the_rule() -> None:
    x, y = arms([{"qps": 500.0}] * 3, [{"qps": 500.0}] * 3)
    assert compare(x, y, better=BETTER).verdict("qps") == "within_noise"
    with pytest.raises(ValueError, match="0 < level < 1"):
        compare(x, y, better=BETTER, level=1.0)
    with pytest.raises(ValueError, match="direction"):
        compare(x, y, better={"qps": "up"})  # type: ignore[dict-item]

"""The search-sweep explorer: monotone ladders measured cheapest first, dominated settings
skipped (as FAISS's ParameterSpace.explore skips them), budgets honoured."""

from __future__ import annotations

import pytest

from objectives.search_sweep import explore, explore_by_quality, power_ladder


def test_power_ladder_has_both_ends_and_the_values_asked_for() -> None:
    assert power_ladder(1, 90) == [1, 2, 4, 8, 16, 32, 64, 90]
    assert power_ladder(8, 1024, [62, 2000]) == [8, 16, 32, 62, 64, 128, 256, 512, 1024]
    assert power_ladder(5, 5) == [5]
    with pytest.raises(ValueError):
        power_ladder(9, 3)


def test_one_ladder_stops_at_the_quality_ceiling() -> None:
    calls: list[int] = []

    def measure(setting: dict[str, int]) -> tuple[float, float]:
        calls.append(setting["n"])
        return min(1.0, setting["n"] / 8), float(setting["n"])  # (quality, cost)

    result = explore({"n": [1, 2, 4, 8, 16, 32]}, measure, quality=lambda m: m[0],
                     cost=lambda m: m[1], quality_ceiling=1.0)
    assert calls == [1, 2, 4, 8]  # 16 and 32 cannot beat n=8's quality 1.0 at a lower cost
    assert (result.pruned, result.unreached) == (2, 0)
    assert [s["n"] for s, _ in result.points] == calls


def test_without_a_ceiling_a_plateau_is_pruned_only_below_a_measured_setting() -> None:
    # Quality flat from a=2 on: with nothing measured above, there is no bound to prune with.
    result = explore({"a": [1, 2, 3]}, lambda s: (min(s["a"], 2), s["a"]),
                     quality=lambda m: m[0], cost=lambda m: m[1])
    assert len(result.points) == 3 and result.pruned == 0


def test_two_ladders_prune_settings_dominated_by_a_cheaper_one() -> None:
    # Quality saturates once a + b >= 2 (positions); cost grows with both.
    def measure(s: dict[str, int]) -> tuple[float, float]:
        return min(1.0, (s["a"] + s["b"]) / 2), float(s["a"] + 2 * s["b"])

    result = explore({"a": [0, 1, 2, 3], "b": [0, 1, 2]}, measure, quality=lambda m: m[0],
                     cost=lambda m: m[1], quality_ceiling=1.0)
    measured = [(s["a"], s["b"]) for s, _ in result.points]
    assert measured[0] == (0, 0)  # cheapest first
    assert (3, 2) not in measured  # above a saturated, cheaper setting
    assert result.pruned + len(measured) == 12 and result.pruned > 0


def test_point_and_time_budgets_stop_the_sweep() -> None:
    result = explore({"n": list(range(20))}, lambda s: (s["n"] / 20, s["n"]),
                     quality=lambda m: m[0], cost=lambda m: m[1], max_points=5)
    assert len(result.points) == 5 and result.unreached == 15
    result = explore({"n": list(range(20))}, lambda s: (s["n"] / 20, s["n"]),
                     quality=lambda m: m[0], cost=lambda m: m[1], budget_s=0.0)
    assert len(result.points) == 1  # at least one setting is always measured


def test_quality_first_times_only_the_cheapest_setting_per_level() -> None:
    # Quality (cheap to probe) rises with n and saturates at n=16; timing is what costs.
    probed: list[int] = []
    timed: list[int] = []

    def probe(setting: dict[str, int]) -> float:
        probed.append(setting["n"])
        return min(1.0, setting["n"] / 16)

    def measure(setting: dict[str, int]) -> int:
        timed.append(setting["n"])
        return setting["n"]

    result = explore_by_quality({"n": [1, 2, 4, 8, 16, 32, 64]}, measure, probe,
                                quality_levels=[0.3, 0.5, 0.95, 2.0], include={"n": 2},
                                quality_ceiling=1.0)
    assert probed == [1, 2, 4, 8, 16]  # nothing above the first setting at the ceiling
    # 0.3 -> n=8 (0.5 reaches it too), 0.95 and the best (1.0) -> n=16, and the own n=2;
    # a level no setting reaches (2.0) is dropped.
    assert timed == [2, 8, 16]
    assert [s["n"] for s, _ in result.points] == timed
    assert (result.pruned, result.unreached) == (4, 0)


def test_quality_first_honours_the_point_budget() -> None:
    result = explore_by_quality({"n": [1, 2, 3, 4]}, lambda s: s["n"], lambda s: s["n"] / 4,
                                quality_levels=[0.25, 0.5, 0.75], max_points=2)
    assert [s["n"] for s, _ in result.points] == [1, 2] and result.unreached == 1


def test_quality_first_stops_probing_at_the_highest_level() -> None:
    probed: list[int] = []

    def probe(setting: dict[str, int]) -> float:
        probed.append(setting["n"])
        return min(1.0, setting["n"] / 16)

    result = explore_by_quality({"n": [1, 2, 4, 8, 16, 32]}, lambda s: s["n"], probe,
                                quality_levels=[0.5], quality_ceiling=1.0)
    assert probed == [1, 2, 4, 8] and [s["n"] for s, _ in result.points] == [8]
    # No level reached: the best probed setting is timed, so the sweep says what is possible.
    result = explore_by_quality({"n": [1, 2]}, lambda s: s["n"], lambda s: s["n"] / 16,
                                quality_levels=[0.9])
    assert [s["n"] for s, _ in result.points] == [2]

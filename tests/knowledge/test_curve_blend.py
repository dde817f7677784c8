"""The load curves blended with a simulator (knowledge/curve_blend.py): chosen per metric by the
curves' own held-out rates, calibrated on them, and never where the simulator does not help.

The simulators here are scripted (a fixed function of the known queue); the real one, fitted on
the shipped GPU trials through the ``llm-serving`` entry point, is tested in
tests/objectives/llm/test_simulation.py."""

from __future__ import annotations

import math
import pickle
from collections.abc import Mapping
from typing import Any

import pytest

from knowledge.curve_blend import MIN_HELD_OUT, SIM_WEIGHT, fit_blend, fit_simulation
from knowledge.load_curve import LoadCurves
from tests.knowledge.test_load_curve import roles_of, rows, truth

#: Rates with gaps around both knees, so the curves alone misplace them when one is held out.
SPARSE = (10.0, 30.0, 50.0, 70.0, 110.0)


class Scripted:
    """A simulator answering the true figures times ``factor`` (1: a perfect one)."""

    def __init__(self, factor: float = 1.0, metrics: tuple[str, ...] = ("ttft_p95_ms",)):
        self.factor = factor
        self.metrics = metrics
        self.calls = 0

    def predict(self, config: Mapping[str, Any], workload: Mapping[str, float]
                ) -> dict[str, float] | None:
        self.calls += 1
        figures = truth(config["knob"], workload["rate_rps"])
        return {m: v * self.factor for m, v in figures.items() if m in self.metrics}


def fitted(noise: float = 0.05, rates: tuple[float, ...] = SPARSE) -> tuple[LoadCurves, tuple]:
    data = rows(noise, seed=4, rates=rates)
    return LoadCurves(roles=roles_of(data[2])).fit(*data), data


def test_a_simulator_that_helps_is_blended_for_the_metrics_it_improves() -> None:
    curves, data = fitted()
    blend = fit_blend(curves, Scripted(), *data)
    assert blend is not None
    assert blend.metrics == ("ttft_p95_ms",)  # the only figure the simulator answers
    score = blend.scores["ttft_p95_ms"]
    assert score.n >= MIN_HELD_OUT and score.blend_log < score.curve_log
    assert score.blend_mape < score.curve_mape
    # The answer is the geometric mean of the two, inside its own calibrated interval.
    curves.blend_ = blend
    workload = {"rate_rps": 60.0, "prompt_len": 256.0}
    got = curves.predict({"knob": "a"}, workload, "ttft_p95_ms")
    assert got is not None
    value, low, high = got
    sim = truth("a", 60.0)["ttft_p95_ms"]
    curves.blend_ = None
    ref = curves.predict({"knob": "a"}, workload, "ttft_p95_ms")
    assert ref is not None
    alone = ref[0]
    assert value == pytest.approx(math.exp((1 - SIM_WEIGHT) * math.log(alone)
                                           + SIM_WEIGHT * math.log(sim)))
    assert low < value < high
    # A figure the blend does not answer is the curve's alone.
    curves.blend_ = blend
    assert curves.predict({"knob": "a"}, workload, "output_tokens_per_s") is not None
    assert curves.held_out_error({"knob": "a"}, workload, "ttft_p95_ms") is not None


def test_a_simulator_that_does_not_help_is_not_blended() -> None:
    curves, data = fitted()
    assert fit_blend(curves, Scripted(factor=6.0), *data) is None
    assert fit_blend(curves, None, *data) is None


def test_a_simulator_that_places_nothing_is_not_blended() -> None:
    class Silent:
        def predict(self, config: Mapping[str, Any], workload: Mapping[str, float]) -> None:
            return None

    curves, data = fitted()
    assert fit_blend(curves, Silent(), *data) is None


def test_the_intervals_are_never_narrower_than_the_repeat_noise() -> None:
    curves, data = fitted(noise=0.2)
    blend = fit_blend(curves, Scripted(), *data)
    assert blend is not None
    for (metric, band), sd in curves.repeat_sd_.items():
        if metric in blend.half_width:
            for (b, _), width in blend.half_width[metric].items():
                if b == band:
                    assert width >= 1.645 * sd - 1e-12


def test_figures_are_simulated_once_and_not_pickled() -> None:
    curves, data = fitted()
    sim = Scripted()
    blend = fit_blend(curves, sim, *data)
    assert blend is not None
    calls = sim.calls
    distinct = {(c["knob"], w["rate_rps"]) for c, w in zip(data[0], data[1], strict=True)}
    assert calls <= len(distinct)
    blend.figures({"knob": "a"}, {"rate_rps": 12.5, "prompt_len": 256.0})
    blend.figures({"knob": "a"}, {"rate_rps": 12.5, "prompt_len": 256.0})
    assert sim.calls == calls + 1
    again = pickle.loads(pickle.dumps(blend))
    assert again.metrics == blend.metrics and not again._cache


def test_no_simulator_for_a_workload_kind_without_an_entry_point() -> None:
    from types import SimpleNamespace

    unknown = SimpleNamespace(workload_spec={"kind": "no-such-kind", "params": {}})
    assert fit_simulation([unknown]) is None
    llm = SimpleNamespace(workload_spec={"kind": "llm-serving", "params": {}})
    assert fit_simulation([unknown, llm]) is None  # mixed kinds: no one simulator


def test_a_simulator_that_only_errs_low_is_not_chosen_for_a_lower_mape() -> None:
    """MAPE caps an answer that is too low at 100 % and not one too high, so a simulator far
    below the truth can lower it while the answers get worse: the choice reads the log error."""
    from types import SimpleNamespace

    n = 2 * MIN_HELD_OUT
    # The truth is 100 everywhere; the curve errs by 3x either way; the simulator says 10.
    held = [(i, "ttft_p95_ms", 300.0 if i % 2 else 100.0 / 3, 0, 1) for i in range(n)]
    curves = SimpleNamespace(held_out_=held, coverage=0.9, repeat_sd_={})

    class Low:
        def predict(self, config: Mapping[str, Any], workload: Mapping[str, float]
                    ) -> dict[str, float]:
            return {"ttft_p95_ms": 10.0}

    rows = ([{"knob": str(i)} for i in range(n)], [{"rate_rps": float(i + 1)} for i in range(n)],
            [{"ttft_p95_ms": 100.0}] * n)
    blend = fit_blend(curves, Low(), *rows)  # type: ignore[arg-type]
    assert blend is None  # the log error chose the curves
    # ... although the blend's MAPE was far lower (63 % against 133 %):
    mixed = [math.sqrt(p * 10.0) for _, _, p, _, _ in held]
    assert sum(abs(m - 100) / 100 for m in mixed) / n < sum(
        abs(p - 100) / 100 for _, _, p, _, _ in held) / n


def test_an_unmeasured_config_the_simulator_places_blends_its_knob_level_answer() -> None:
    """A config without a curve of its own: the knob-level answer's geometric mean with the
    simulator's figure, inside the knob-level interval's wider log half-width; a metric the
    context does not blend, or a config the simulator cannot place, keeps the knob-level
    answer (None)."""
    curves, data = fitted()
    blend = fit_blend(curves, Scripted(), *data)
    assert blend is not None
    workload = {"rate_rps": 60.0, "prompt_len": 256.0}
    sim = truth("a", 60.0)["ttft_p95_ms"]
    value, low, high = 4.0 * sim, 2.0 * sim, 16.0 * sim  # a knob-level answer far too high
    got = blend.predict_unmeasured({"knob": "a"}, workload, "ttft_p95_ms", value, low, high)
    assert got is not None
    mixed, lo, hi = got
    assert mixed == pytest.approx(math.exp((1 - SIM_WEIGHT) * math.log(value)
                                           + SIM_WEIGHT * math.log(sim)))
    # The knob-level answer's wider log half-width (log 4, above it) around the blend.
    assert lo == pytest.approx(mixed / 4.0) and hi == pytest.approx(mixed * 4.0)
    assert blend.predict_unmeasured({"knob": "a"}, workload, "output_tokens_per_s",
                                    value, low, high) is None
    assert blend.predict_unmeasured({"knob": "a"}, workload, "ttft_p95_ms",
                                    value, value * 2, high) is None  # not an interval

    class Partial(Scripted):
        def predict(self, config: Mapping[str, Any], workload: Mapping[str, float]
                    ) -> dict[str, float] | None:
            return None if config["knob"] == "new" else super().predict(config, workload)

    partial = fit_blend(curves, Partial(), *data)
    assert partial is not None and not partial.places({"knob": "new"}, workload)
    assert partial.predict_unmeasured({"knob": "new"}, workload, "ttft_p95_ms",
                                      value, low, high) is None

"""Load curves (knowledge/load_curve.py): roles read from names, the fitted shape against a
known queue, monotone predictions, calibrated intervals, and the curve answering for measured
configs in a context's predictions."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from knowledge.load_curve import LoadCurves, LoadRoles, load_roles

CAPACITY = {"a": 60.0, "b": 90.0}
RATES = (10.0, 20.0, 30.0, 40.0, 50.0, 55.0, 70.0, 90.0, 110.0)


def truth(config: str, rate: float) -> dict[str, float]:
    """A server of capacity mu: served rate min(rate, mu) bent smoothly, TTFT flat then a queue
    (rho / (1 - rho), capped) then a run's backlog past capacity; a throughput metric."""
    mu = CAPACITY[config]
    rho = rate / mu
    served = 1 / ((1 / rate) ** 6 + (1 / mu) ** 6) ** (1 / 6)
    capped = min(rho, 0.95)
    ttft = 40.0 * (1 + 0.5 * capped / (1 - capped)) + 3000.0 * max(0.0, 1 - 1 / rho)
    return {"requests_per_s": served, "output_tokens_per_s": 128 * served, "ttft_p95_ms": ttft,
            "goodput_requests_per_s": served * (1.0 if rho < 1 else 0.2)}


def rows(noise: float, seed: int = 0, rates: tuple[float, ...] = RATES
         ) -> tuple[list[dict[str, str]], list[dict[str, float]], list[dict[str, float]]]:
    rng = random.Random(seed)
    configs, workloads, measured = [], [], []
    for config in CAPACITY:
        for rate in rates:
            for _ in range(3):
                configs.append({"knob": config})
                workloads.append({"rate_rps": rate, "prompt_len": 256.0})
                measured.append({m: v * math.exp(rng.gauss(0, noise))
                                 for m, v in truth(config, rate).items()})
    return configs, workloads, measured


def roles_of(measured: list[dict[str, float]]) -> LoadRoles:
    values = {m: [r[m] for r in measured] for m in measured[0]}
    roles = load_roles(values, ["rate_rps", "prompt_len"])
    assert roles is not None
    return roles


def test_roles_come_from_the_unit_suffixes() -> None:
    roles = roles_of(rows(0.0)[2])
    assert roles.rate == "rate_rps"
    # Every completed request counts; a goodput counts only the good ones (a smaller median).
    assert roles.served == "requests_per_s"
    assert roles.latencies == ("ttft_p95_ms",)
    assert set(roles.throughputs) == {"requests_per_s", "output_tokens_per_s",
                                      "goodput_requests_per_s"}
    assert load_roles({"p95_latency_ms": [1.0]}, ["n_vectors"]) is None


def test_capacity_and_shape_are_recovered_without_noise() -> None:
    configs, workloads, measured = rows(0.0)
    curves = LoadCurves(roles=roles_of(measured)).fit(configs, workloads, measured)
    # The goodput falls past capacity: no monotone curve is fitted to it.
    assert "goodput_requests_per_s" not in curves.metrics_
    for config, mu in CAPACITY.items():
        curve = curves.curve({"knob": config}, {"rate_rps": 1.0, "prompt_len": 256.0})
        assert curve is not None and curve.seen
        assert curve.capacity == pytest.approx(mu, rel=0.1)
        for rate in (15.0, 45.0, 100.0):  # between measured rates
            want = truth(config, rate)
            for m in ("ttft_p95_ms", "output_tokens_per_s"):
                got = curves.predict({"knob": config}, {"rate_rps": rate, "prompt_len": 256.0}, m)
                assert got is not None
                assert got[0] == pytest.approx(want[m], rel=0.15), (config, rate, m)
                assert got[1] <= got[0] <= got[2]


def test_predictions_are_monotone_in_the_rate() -> None:
    configs, workloads, measured = rows(0.15, seed=3)
    curves = LoadCurves(roles=roles_of(measured)).fit(configs, workloads, measured)
    grid = np.linspace(5, 150, 60)
    for config in CAPACITY:
        curve = curves.curve({"knob": config}, {"rate_rps": 1.0, "prompt_len": 256.0})
        assert curve is not None
        for m in curves.metrics_:
            values = curve.predict(m, grid)
            assert values is not None and np.all(np.diff(values) >= -1e-9 * values[1:]), m


def test_no_curve_for_an_unmeasured_config_or_workload() -> None:
    configs, workloads, measured = rows(0.05)
    curves = LoadCurves(roles=roles_of(measured)).fit(configs, workloads, measured)
    assert curves.predict({"knob": "c"}, {"rate_rps": 30.0, "prompt_len": 256.0},
                          "ttft_p95_ms") is None
    assert curves.predict({"knob": "a"}, {"rate_rps": 30.0, "prompt_len": 512.0},
                          "ttft_p95_ms") is None
    assert curves.predict({"knob": "a"}, {"prompt_len": 256.0}, "ttft_p95_ms") is None


def test_intervals_cover_fresh_measurements_at_unmeasured_rates() -> None:
    configs, workloads, measured = rows(0.1, seed=1)
    curves = LoadCurves(roles=roles_of(measured)).fit(configs, workloads, measured)
    rng = random.Random(7)
    inside, total = 0, 0
    for config in CAPACITY:
        for rate in (15.0, 25.0, 35.0, 45.0, 60.0, 80.0, 100.0):
            for _ in range(20):
                v = truth(config, rate)["ttft_p95_ms"] * math.exp(rng.gauss(0, 0.1))
                p = curves.predict({"knob": config}, {"rate_rps": rate, "prompt_len": 256.0},
                                   "ttft_p95_ms")
                assert p is not None
                inside += p[1] <= v <= p[2]
                total += 1
    assert inside / total >= 0.8


def test_the_held_out_rate_error_is_kept_per_load_band_and_grows_with_noise() -> None:
    """What an answer read off a curve quotes as its accuracy: the leave-one-rate-out MAPE in
    the asked rate's load band; more measurement noise, more error; none for an unmeasured
    config or a metric without curves."""
    def error(noise: float, rate: float) -> tuple[float, int]:
        configs, workloads, measured = rows(noise, seed=2)
        curves = LoadCurves(roles=roles_of(measured)).fit(configs, workloads, measured)
        held = curves.held_out_error({"knob": "a"}, {"rate_rps": rate, "prompt_len": 256.0},
                                     "ttft_p95_ms")
        assert held is not None
        assert curves.held_out_error({"knob": "c"}, {"rate_rps": rate, "prompt_len": 256.0},
                                     "ttft_p95_ms") is None
        assert curves.held_out_error({"knob": "a"}, {"rate_rps": rate, "prompt_len": 256.0},
                                     "goodput_requests_per_s") is None
        return held

    light, n = error(0.02, 20.0)
    assert n > 0 and 0 < light < 0.2
    assert error(0.3, 20.0)[0] > light
    # The queue's onset and the backlog are harder to place than the flat part.
    assert error(0.02, 80.0)[0] > light


def test_a_config_with_few_rates_borrows_the_shape() -> None:
    configs, workloads, measured = rows(0.05, seed=2)
    # Config "b" measured at three rates only.
    keep = [i for i, (c, w) in enumerate(zip(configs, workloads, strict=True))
            if c["knob"] == "a" or w["rate_rps"] in (10.0, 40.0, 110.0)]
    configs = [configs[i] for i in keep]
    workloads = [workloads[i] for i in keep]
    measured = [measured[i] for i in keep]
    curves = LoadCurves(roles=roles_of(measured)).fit(configs, workloads, measured)
    wl = {"rate_rps": 30.0, "prompt_len": 256.0}
    for rate in (25.0, 60.0, 80.0):  # unmeasured rates of "b", below and past the knee
        wl["rate_rps"] = rate
        pb = curves.predict({"knob": "b"}, wl, "ttft_p95_ms")
        assert pb is not None
        assert pb[0] == pytest.approx(truth("b", rate)["ttft_p95_ms"], rel=0.25), rate


def test_below_its_lowest_measured_rate_a_latency_is_bounded_by_its_value_there() -> None:
    """A config measured only near and past capacity says nothing about its floor: below its
    lowest rate the upper end of a latency's interval is at least that rate's (a latency does
    not fall as the rate grows), however the curve's own floor reads there. Rates within its
    range, and throughputs, keep the curve's interval."""
    configs, workloads, measured = rows(0.05, seed=4, rates=(80.0, 100.0, 110.0))
    keep = [i for i, c in enumerate(configs) if c["knob"] == "a"]
    configs, workloads, measured = ([x[i] for i in keep] for x in (configs, workloads, measured))
    curves = LoadCurves(roles=roles_of(measured)).fit(configs, workloads, measured)
    at = {r: curves.predict({"knob": "a"}, {"rate_rps": r, "prompt_len": 256.0}, "ttft_p95_ms")
          for r in (20.0, 50.0, 80.0, 95.0)}
    assert all(p is not None for p in at.values())
    low, lowest = at[20.0], at[80.0]
    assert low is not None and lowest is not None
    assert low[2] >= lowest[2] and low[1] <= low[0] <= low[2]
    assert truth("a", 20.0)["ttft_p95_ms"] <= low[2]
    inside = at[95.0]
    assert inside is not None and inside[2] < 2 * inside[0]  # within its range: its own width
    tput = [curves.predict({"knob": "a"}, {"rate_rps": r, "prompt_len": 256.0},
                           "output_tokens_per_s") for r in (20.0, 80.0)]
    assert tput[0] is not None and tput[1] is not None and tput[0][2] < tput[1][2]


def _llm_trials(noise: float = 0.03, rates: tuple[float, ...] = RATES) -> list:
    """TrialRecords of the queue truth above: configs "a" and "b" at every rate (of ``rates``),
    and config "c" (capacity of "a") measured at one rate only, as a one-off study would leave
    it."""
    import hashlib

    from knowledge import TrialRecord
    from knowledge.models import TrialStatus

    rng = random.Random(3)
    out: list[TrialRecord] = []
    for config, at in (("a", rates), ("b", rates), ("c", (50.0,))):
        for rate in at:
            spec = {"kind": "llm-serving", "name": f"chat@{rate}",
                    "params": {"arrival": {"process": "poisson", "rate_rps": rate},
                               "prompt_len": 256, "output_len": 128}}
            for _ in range(2):
                out.append(TrialRecord(
                    study_id=1, number=len(out), target="scripted-llm", config={"knob": config},
                    config_hash=config, workload_spec=spec,
                    workload_hash=hashlib.sha256(str(rate).encode()).hexdigest()[:16],
                    hardware={}, hardware_key="h", advisor_version="test",
                    status=TrialStatus.COMPLETE,
                    metrics={m: v * math.exp(rng.gauss(0, noise))
                             for m, v in truth("a" if config == "c" else config,
                                               rate).items()}))
    return out


def test_below_every_measured_rate_no_answer_promises_less_latency_than_at_the_lowest() -> None:
    """A context that measured one config only at and past its capacity (as a fold of the 1B's
    held-out-config audit trains on) knows no latency floor: asked below its lowest rate, the
    measured config, the same settings recorded without a knob added later, and an unmeasured
    config get a latency's upper end no lower than their own at that rate."""
    from knowledge.surrogates import ContextKey, fit_context

    trials = [t for t in _llm_trials(rates=(80.0, 100.0, 110.0)) if t.config["knob"] == "a"]
    for t in trials:
        t.config = {"knob": "a", "tp": 1}
    ctx = fit_context(ContextKey("scripted-llm", "h", "m", "v"), trials, score=False)
    configs = [{"knob": "a", "tp": 1}, {"knob": "a"}, {"knob": "d", "tp": 1}]
    low = ctx.predict(configs, {"rate_rps": 20.0, "prompt_len": 256.0, "output_len": 128.0})
    lowest = ctx.predict(configs, {"rate_rps": 80.0, "prompt_len": 256.0, "output_len": 128.0})
    assert np.all(low["ttft_p95_ms"][2] >= lowest["ttft_p95_ms"][2])
    assert np.all(low["ttft_p95_ms"][0] <= low["ttft_p95_ms"][2])


def test_held_out_rates_are_scored_apart_from_configs_measured_there_only() -> None:
    """Held out by workload, a config measured at other rates is predicted from its curve; one
    measured at the held-out rate only is a held-out config. The score reports both apart."""
    from knowledge.surrogates import ContextKey, cross_validate

    trials = _llm_trials()
    key = ContextKey("scripted-llm", "h", "m", "v")
    score = cross_validate(key, trials, metrics=["ttft_p95_ms"], group_by="workload",
                           folds=5)["ttft_p95_ms"]
    assert score.seen_config_n == 2 * 2 * len(RATES)
    assert score.unseen_config_n == 2
    assert score.seen_config_mape is not None and score.seen_config_mape < 0.3
    assert score.unseen_config_mape is not None
    total = ((score.seen_config_mape * score.seen_config_n
              + score.unseen_config_mape * score.unseen_config_n)
             / (score.seen_config_n + score.unseen_config_n))
    assert score.mape == pytest.approx(total)
    by_config = cross_validate(key, trials, metrics=["ttft_p95_ms"], folds=3)["ttft_p95_ms"]
    assert by_config.seen_config_mape is None and by_config.seen_config_n == 0


def test_a_latency_that_falls_in_one_config_keeps_its_curves_a_falling_goodput_does_not() -> None:
    """Two sessions that read one rate differently can make a config's latency medians fall;
    dropping the metric then lost every config's curve. Latencies keep their curves; a goodput
    that falls past capacity (it does in every config) gets none."""
    configs, workloads, measured = rows(noise=0.0)
    for m, w in zip(measured, workloads, strict=True):
        if w["rate_rps"] == 70.0:
            m["ttft_p95_ms"] *= 20  # 70 req/s read by a session that saw 20x the others
    curves = LoadCurves(roles=roles_of(measured)).fit(configs, workloads, measured)
    assert "ttft_p95_ms" in curves.metrics_
    assert "goodput_requests_per_s" not in curves.metrics_
    wl = {"rate_rps": 25.0, "prompt_len": 256.0}
    pred = curves.predict({"knob": "b"}, wl, "ttft_p95_ms")
    assert pred is not None
    assert pred[0] == pytest.approx(truth("b", 25.0)["ttft_p95_ms"], rel=0.25)


def test_a_knob_added_later_and_never_varied_does_not_split_a_config_in_two() -> None:
    """Trials measured before a knob existed lack it; later ones record it at the one value the
    engine used anyway. Both are one config, one curve; a knob set to two values still counts."""
    from knowledge.load_curve import unvaried_knobs

    assert unvaried_knobs([{"a": 1}, {"a": 1, "tp": 1}, {"a": 2, "tp": 1}]) == {"tp"}
    assert unvaried_knobs([{"a": 1}, {"a": 1, "tp": 1}, {"a": 2, "tp": 2}]) == frozenset()
    assert unvaried_knobs([{"a": 1, "tp": 1}, {"a": 2, "tp": 1}]) == frozenset()
    configs, workloads, measured = rows(noise=0.0)
    later = [{**c, "tp": 1} if w["rate_rps"] >= 55.0 else c
             for c, w in zip(configs, workloads, strict=True)]
    curves = LoadCurves(roles=roles_of(measured)).fit(later, workloads, measured)
    assert len(curves.curves_) == 2  # one per config, not one per form
    for form in ({"knob": "a"}, {"knob": "a", "tp": 1}):
        curve = curves.curve(form, {"rate_rps": 30.0, "prompt_len": 256.0})
        assert curve is not None and len(curve.rates) == len(RATES)

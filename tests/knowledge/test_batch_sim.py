"""The continuous-batching simulator: exact timings on hand-checked cases, the client's figures,
the drain limit, and the fit recovering a known step-time model from simulated runs."""

from __future__ import annotations

import numpy as np
import pytest

from knowledge.batch_sim import (
    Observation,
    RequestStream,
    StepModel,
    fit_batch_model,
    prefill_cost_ms,
    simulate,
)

FLAT = StepModel(fixed_ms=10.0, per_sequence_ms=0.0, per_prefill_token_ms=0.0)


def _stream(arrivals, prompts, outputs, drain=None) -> RequestStream:
    return RequestStream(np.asarray(arrivals, float), np.asarray(prompts, float),
                         np.asarray(outputs, float), drain)


def test_one_request_takes_one_prefill_step_then_one_step_per_token() -> None:
    step = StepModel(fixed_ms=5.0, per_sequence_ms=1.0, per_prefill_token_ms=0.1)
    run = simulate(_stream([0.0], [100], [4]), slots=8, token_budget=512, step=step)
    # prefill step: 5 + 0.1 * 100 = 15 ms (it yields the first token); three decode steps of
    # 5 + 1 * 1 = 6 ms each.
    assert run.first_token_s[0] == pytest.approx(0.015)
    assert run.finish_s[0] == pytest.approx(0.015 + 3 * 0.006)
    figures = run.metrics()
    assert figures["ttft_p95_ms"] == pytest.approx(15.0)
    assert figures["tpot_p50_ms"] == pytest.approx(6.0)
    assert figures["output_tokens_per_s"] == pytest.approx(4 / 0.033)


def test_one_slot_serves_requests_one_after_the_other() -> None:
    run = simulate(_stream([0.0, 0.0], [10, 10], [3, 3]), slots=1, token_budget=512, step=FLAT)
    # the first holds the slot for 3 steps (prefill + 2 decodes); the second starts after it
    assert run.finish_s[0] == pytest.approx(0.030)
    assert run.admitted_s[1] == pytest.approx(0.030)
    assert run.first_token_s[1] == pytest.approx(0.040)
    assert run.waited_steps[1] == 3
    assert not run.queue_free()


def test_a_long_prompt_is_chunked_by_the_token_budget() -> None:
    run = simulate(_stream([0.0], [2500], [2]), slots=4, token_budget=1024, step=FLAT)
    # 1024 + 1024 + 452 prompt tokens: three steps, the third yields the first token
    assert run.first_token_s[0] == pytest.approx(0.030)
    assert run.finish_s[0] == pytest.approx(0.040)


def test_decode_steps_share_the_batch() -> None:
    step = StepModel(fixed_ms=4.0, per_sequence_ms=1.0, per_prefill_token_ms=0.0)
    run = simulate(_stream([0.0, 0.0], [8, 8], [5, 5]), slots=2, token_budget=64, step=step)
    # one prefill step for both (4 ms), then 4 decode steps of 4 + 2 = 6 ms
    assert run.first_token_s == pytest.approx([0.004, 0.004])
    assert run.finish_s == pytest.approx([0.028, 0.028])


def test_the_drain_limit_cuts_requests_still_running() -> None:
    # one slot, 10 ms steps: the first request is done at 0.2 s, the second then needs 1 s more,
    # past the drain limit 0.5 s after the last arrival
    run = simulate(_stream([0.0, 0.001], [4, 4], [20, 100], drain=0.5), slots=1,
                   token_budget=64, step=FLAT)
    assert run.finish_s[0] == pytest.approx(0.2)
    assert run.first_token_s[1] == pytest.approx(0.21)
    assert np.isnan(run.finish_s[1])
    assert 0.501 <= run.end_s <= 0.52
    figures = run.metrics()
    # the cut request counts with its lower bound (the run's end) and never in TPOT
    assert figures["e2e_mean_ms"] == pytest.approx((200 + (run.end_s - 0.001) * 1e3) / 2)
    assert figures["tpot_p50_ms"] == pytest.approx(10.0)
    assert figures["requests_per_s"] == pytest.approx(1 / run.end_s)
    assert figures["output_tokens_per_s"] == pytest.approx(run.produced.sum() / run.end_s)


def test_bad_limits_and_streams_are_refused() -> None:
    with pytest.raises(ValueError, match="slots >= 1"):
        simulate(_stream([0.0], [4], [4]), slots=0, token_budget=64, step=FLAT)
    with pytest.raises(ValueError, match="one prompt and one output length"):
        _stream([0.0, 1.0], [4], [4, 4])
    with pytest.raises(ValueError, match="at least one observation"):
        fit_batch_model([])


def _poisson(rate: float, n: int, seed: int) -> RequestStream:
    rng = np.random.default_rng(seed)
    return RequestStream(np.cumsum(rng.exponential(1 / rate, n)),
                         np.clip(np.round(256 * np.exp(0.8 * rng.standard_normal(n))), 16, 2048),
                         np.clip(np.round(128 * np.exp(0.6 * rng.standard_normal(n))), 16, 512),
                         15.0)


def test_the_fit_recovers_a_known_step_model_and_offset() -> None:
    """Runs simulated with a known step model at four rates and two slot limits stand in for
    measurements: their mean iteration times, per-request TTFTs (plus 20 ms outside the
    engine) and figures; the fit must give back the costs and the offset."""
    truth = StepModel(fixed_ms=5.0, per_sequence_ms=0.05, per_prefill_token_ms=0.025)
    observations = []
    for k, (rate, slots) in enumerate([(5, 256), (10, 256), (20, 256), (30, 256), (20, 24)]):
        stream = _poisson(rate, int(8 * rate), seed=k)
        run = simulate(stream, slots, 8192, truth)
        ttft = (run.first_token_s - stream.arrivals_s) * 1e3 + 20.0
        figures = run.metrics()
        figures = {m: v + 20.0 if m.startswith(("ttft_", "e2e_")) else v
                   for m, v in figures.items()}
        mean_step = float(np.dot(run.step_regressors, truth.as_tuple()))
        observations.append(Observation(stream, slots, 8192, mean_step, figures, ttft))
    assert prefill_cost_ms(observations) == pytest.approx(0.025, rel=0.05)
    model = fit_batch_model(observations)
    assert model.step.fixed_ms == pytest.approx(5.0, rel=0.1)
    assert model.step.per_sequence_ms == pytest.approx(0.05, rel=0.2)
    assert model.offsets_ms["ttft_p95_ms"] == pytest.approx(20.0, abs=3.0)
    # and it predicts a held-out run (another slot limit, another seed) closely
    held = _poisson(25, 200, seed=99)
    expected = simulate(held, 16, 8192, truth).metrics()["ttft_p95_ms"] + 20.0
    assert model.predict(held, 16, 8192)["ttft_p95_ms"] == pytest.approx(expected, rel=0.1)


def test_the_frontend_delays_every_token_it_streams_and_takes_requests_in_between() -> None:
    from knowledge.batch_sim import Frontend

    slow = Frontend(per_token_ms=5.0)
    run = simulate(_stream([0.0, 0.012], [10, 10], [4, 1]), slots=4, token_budget=64,
                   step=FLAT, frontend=slow)
    # the first: prefill step to 10 ms, its token sent at 15 ms; decode steps end at 20, 30,
    # 40 ms, each token sent 5 ms later (the stretch of three steps is taken in one go)
    assert run.first_token_s[0] == pytest.approx(0.015)
    assert run.finish_s[0] == pytest.approx(0.045)
    # the second arrives at 12 ms while the frontend streams the first token (to 15 ms)
    assert run.admitted_s[1] == pytest.approx(0.020)


def test_a_saturated_frontend_holds_requests_back() -> None:
    """Streaming 40 sequences at 1 ms a token takes 40 ms per 10-ms step: the frontend, not
    the engine, sets the pace, and requests wait to be taken in."""
    from knowledge.batch_sim import Frontend

    stream = _stream(np.linspace(0, 0.2, 80), [10] * 80, [50] * 80)
    free = simulate(stream, 256, 4096, FLAT).metrics()
    held = simulate(stream, 256, 4096, FLAT, Frontend(per_token_ms=1.0)).metrics()
    assert held["output_tokens_per_s"] < 0.5 * free["output_tokens_per_s"]
    assert held["ttft_p95_ms"] > 3 * free["ttft_p95_ms"]


def test_the_fit_chooses_the_frontend_the_runs_were_measured_behind() -> None:
    from knowledge.batch_sim import Frontend, fit_batch_models

    truth = StepModel(fixed_ms=3.0, per_sequence_ms=0.02, per_prefill_token_ms=0.01)
    frontend = Frontend(per_token_ms=0.05)
    observations = []
    for k, rate in enumerate([5, 20, 60, 90]):  # at least 200 requests a run: light load too
        stream = _poisson(rate, max(200, int(6 * rate)), seed=k)
        run = simulate(stream, 256, 8192, truth, frontend)
        ttft = (run.first_token_s - stream.arrivals_s) * 1e3
        mean_step = float(np.dot(run.step_regressors, truth.as_tuple()))
        observations.append(Observation(stream, 256, 8192, mean_step, run.metrics(), ttft))
    models = fit_batch_models({"one class": observations, "a class with no run": []})
    assert list(models) == ["one class"]  # a class without runs gets no model, and no error
    assert models["one class"].frontend.per_token_ms == pytest.approx(0.05)


@pytest.mark.parametrize("seed", range(4))
def test_the_event_heap_equals_the_per_sequence_loop_to_the_last_bit(seed: int) -> None:
    """Random streams (a handful to hundreds of requests, light load to far past the knee, rounded
    arrival times that tie), batch limits from 1 to 1,024 slots, step models, frontends and drain
    limits: every per-request time, count and regressor equal to the reference's."""
    from knowledge.batch_sim import Frontend
    from tests.knowledge.per_sequence_sim import _per_sequence_simulate

    rng = np.random.default_rng(seed)
    for case in range(60):
        n = int(rng.integers(1, 300))
        rate = float(rng.choice([1, 10, 50, 150, 400]))
        arrivals = np.cumsum(rng.exponential(1 / rate, n))
        arrivals -= arrivals[0]
        if rng.random() < 0.2:
            arrivals = np.round(arrivals, 2)
        stream = _stream(arrivals, rng.integers(1, 3000, n), rng.integers(1, 600, n),
                         None if rng.random() < 0.3 else float(rng.choice([0.5, 5, 15])))
        slots = int(rng.choice([1, 4, 64, 256, 1024]))
        budget = int(max(slots, rng.choice([64, 512, 2048, 8192])))
        step = StepModel(float(rng.uniform(0, 8)), float(rng.uniform(0, 0.1)),
                         float(rng.uniform(0, 0.05)))
        frontend = Frontend(float(rng.choice([0.0, 0.0, 0.05, 0.5])))
        fast = simulate(stream, slots, budget, step, frontend)
        ref = _per_sequence_simulate(stream, slots, budget, step, frontend)
        for name in ("first_token_s", "finish_s", "admitted_s", "waited_steps", "produced",
                     "step_regressors"):
            assert np.array_equal(getattr(fast, name), getattr(ref, name), equal_nan=True), (
                seed, case, name)
        assert (fast.end_s, fast.mean_step_ms) == (ref.end_s, ref.mean_step_ms), (seed, case)

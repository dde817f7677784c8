"""The continuous-batching simulator fitted to real trials (objectives/llm/simulation.py): the
shipped H200 vLLM trials of the 3B shape (15 trials, one engine start per rate), reached through
the ``llm-serving`` entry point as the knowledge layer reaches it."""

from __future__ import annotations

import math

import pytest

from knowledge import TrialStore
from knowledge.curve_blend import fit_simulation
from knowledge.store import TrialFilter
from knowledge.surrogates import fit_load_curves, workload_features
from knowledge.surrogates.training import _usable
from knowledge.transfer import import_file, shipped_file
from objectives.llm.simulation import SEED_OFFSET, SEEDS, LLMSimulation


@pytest.fixture(scope="module")
def trials(tmp_path_factory: pytest.TempPathFactory) -> list:
    store = TrialStore(f"sqlite:///{tmp_path_factory.mktemp('sim') / 'k.db'}")
    import_file(store, shipped_file("h200-vllm-3b-2026-12-03.jsonl"))
    rows = _usable(store.list_trials(TrialFilter(status="complete")))
    assert len(rows) >= 10
    return rows


@pytest.fixture(scope="module")
def sim(trials: list) -> LLMSimulation:
    fitted = fit_simulation(trials)  # through the entry point
    assert isinstance(fitted, LLMSimulation)
    return fitted


def test_a_measured_config_is_simulated_at_any_rate(trials: list, sim: LLMSimulation) -> None:
    t = trials[0]
    features = workload_features(t.workload_spec)
    rates = sorted(workload_features(x.workload_spec)["rate_rps"] for x in trials)
    light = sim.predict(t.config, {**features, "rate_rps": rates[0] / 2})
    heavy = sim.predict(t.config, {**features, "rate_rps": rates[-1] * 1.5})
    assert light is not None and heavy is not None
    for figures in (light, heavy):
        assert all(math.isfinite(v) and v > 0 for v in figures.values())
        assert {"ttft_p95_ms", "tpot_p95_ms", "output_tokens_per_s"} <= set(figures)
    # Past every measured rate the queue shows: first tokens wait longer, more tokens flow.
    assert heavy["ttft_p95_ms"] > light["ttft_p95_ms"]
    assert heavy["output_tokens_per_s"] > light["output_tokens_per_s"]


def test_streams_are_the_stored_lengths_at_the_asked_rate_on_unseen_seeds(
        trials: list, sim: LLMSimulation) -> None:
    features = workload_features(trials[0].workload_spec)
    base = sim.template(features)
    assert base is not None
    streams = sim.streams({**features, "rate_rps": 2 * features["rate_rps"]})
    assert len(streams) == SEEDS
    window = base["n_requests"] / base["arrival"]["rate_rps"]
    assert all(len(s.arrivals_s) == round(window * 2 * features["rate_rps"]) for s in streams)
    assert len({s.arrivals_s.tobytes() for s in streams}) == SEEDS  # each seed its own
    stored = {int(x.workload_spec["params"].get("seed", 0)) for x in trials}
    assert min(stored) + SEED_OFFSET > max(stored)  # no stored trial used those seeds


def test_what_it_cannot_place_it_says_so(trials: list, sim: LLMSimulation) -> None:
    features = workload_features(trials[0].workload_spec)
    # Lengths no stored workload has: no stream to move to the asked rate.
    assert sim.predict(trials[0].config, {**features, "prompt_len": 7.0}) is None
    assert sim.predict(trials[0].config, {k: v for k, v in features.items()
                                          if k != "rate_rps"}) is None
    # A config whose step class was never measured (another quantization).
    assert sim.predict({**trials[0].config, "quantization": "no-such-scheme"}, features) is None


def test_the_blend_answers_as_the_geometric_mean_where_chosen(trials: list) -> None:
    blended = fit_load_curves(trials)
    alone = fit_load_curves(trials, blend=False)
    assert blended is not None and alone is not None and alone.blend_ is None
    # On these trials the blend's held-out rates read a lower log error for TPOT p95 and a
    # higher one for TTFT p95 and output tokens/s (docs/knowledge.md): only TPOT is blended.
    assert blended.blended("tpot_p95_ms")
    assert not blended.blended("ttft_p95_ms") and not blended.blended("output_tokens_per_s")
    t = trials[0]
    features = workload_features(t.workload_spec)
    sim = blended.blend_.figures(t.config, features)
    assert sim is not None
    for metric in blended.metrics_:
        got, ref = blended.predict(t.config, features, metric), alone.predict(
            t.config, features, metric)
        assert got is not None and ref is not None
        if blended.blended(metric):
            assert got[0] == pytest.approx(math.sqrt(ref[0] * sim[metric]))
        else:
            assert got == ref


def test_an_answer_says_its_figures_are_blended_and_quotes_the_blends_error(
        trials: list) -> None:
    from advisor.answers.model_based import _curve_notes, _curve_quality
    from knowledge.surrogates import context_of, fit_context

    ctx = fit_context(context_of(trials[0]), trials, score=False)
    t = trials[0]
    features = workload_features(t.workload_spec)
    notes = _curve_notes(ctx, t.config, features)
    assert any("geometric mean of this curve and the engine simulator" in n
               and "tpot_p95_ms" in n and "ttft_p95_ms" not in n for n in notes), notes
    quality = _curve_quality(ctx, t.config, features, ["tpot_p95_ms", "ttft_p95_ms"])
    assert quality["tpot_p95_ms"]["basis"].startswith("load curve blended with the engine")
    assert quality["ttft_p95_ms"]["basis"] == "load curve, each rate held out in turn"
    assert ctx.load_curves is not None and ctx.load_curves.blend_ is not None
    from knowledge.load_curve import HEAVY_LOAD

    curve = ctx.curve_of(t.config, features)
    assert curve is not None
    band = int(features["rate_rps"] >= HEAVY_LOAD * curve.capacity)
    mape, n = ctx.load_curves.blend_.rate_error["tpot_p95_ms"][band]
    assert quality["tpot_p95_ms"]["mape"] == pytest.approx(mape)
    assert quality["tpot_p95_ms"]["n"] == n


def test_an_unmeasured_config_of_a_measured_class_blends_the_knob_level_answer(
        trials: list) -> None:
    """The 3B's one config with other batch limits has no curve of its own: the simulator
    places it from the measured config, so its blended figures (TPOT p95 here) are the
    knob-level answer's geometric mean with the simulator's, inside the knob-level interval's
    wider log half-width; the rest are the knob-level answer."""
    from advisor.answers.model_based import _curve_notes
    from knowledge.surrogates import context_of, fit_context

    ctx = fit_context(context_of(trials[0]), trials, score=False)
    assert ctx.load_curves is not None and ctx.load_curves.blend_ is not None
    blend = ctx.load_curves.blend_
    features = workload_features(trials[0].workload_spec)
    measured = trials[0].config
    other = {**measured, blend.simulation.slots: 48}
    assert ctx.curve_of(other, features) is None and blend.places(other, features)
    # Its limits were never measured in its class: one replayed stream, not SEEDS.
    sim_of = blend.simulation
    assert (sim_of.step_class(measured), *sim_of.limits(measured)) in sim_of.measured
    assert (sim_of.step_class(other), *sim_of.limits(other)) not in sim_of.measured
    metrics = ["tpot_p95_ms", "ttft_p95_ms"]
    got = ctx.predict([other], features, metrics)
    ctx.load_curves.blend_ = None
    try:
        knob_level = ctx.predict([other], features, metrics)
    finally:
        ctx.load_curves.blend_ = blend
    sim = blend.figures(other, features)
    assert sim is not None
    value, low, high = (float(a[0]) for a in got["tpot_p95_ms"])
    ref, ref_low, ref_high = (float(a[0]) for a in knob_level["tpot_p95_ms"])
    assert value == pytest.approx(math.sqrt(ref * sim["tpot_p95_ms"]))
    half = max(math.log(ref_high / ref), math.log(ref / ref_low))
    assert math.log(high / value) == pytest.approx(half)
    assert math.log(value / low) == pytest.approx(half)
    assert [float(a[0]) for a in got["ttft_p95_ms"]] == [
        float(a[0]) for a in knob_level["ttft_p95_ms"]]
    notes = _curve_notes(ctx, other, features)
    assert any("blended with the engine simulator" in n and "tpot_p95_ms" in n
               for n in notes), notes
    # A config the simulator cannot place (a step class never measured) is not blended.
    unplaced = {**measured, "block_size": 128}
    assert not blend.places(unplaced, features)
    assert _curve_notes(ctx, unplaced, features) == []


def test_the_prefix_cache_follows_the_knob_of_its_role(sim: LLMSimulation) -> None:
    """The fit reads the prefix-cache knob by role (vLLM's `enable_prefix_caching`): a config
    with it on replays shared prompt prefixes as prefilled once, one with it off every time."""
    assert sim.prefix_cache == "enable_prefix_caching"
    assert sim.caches_prefixes({}) is True  # vLLM's default: on
    assert sim.caches_prefixes({"enable_prefix_caching": False}) is False

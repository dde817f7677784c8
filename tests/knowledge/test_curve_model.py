"""The knob-level model of load curves (knowledge/curve_model.py): a held-out config's curve
predicted from the others' through the knob that sets its capacity, monotone in the rate, with
an interval that holds the truth; the baseline ignores the knob; too few curves answer nothing."""

from __future__ import annotations

import functools
import math
import random

import numpy as np
import pytest

from knowledge.curve_model import FAMILIES, MIN_CURVES, KnobCurveModel
from knowledge.load_curve import LoadCurves, load_roles
from knowledge.surrogates import FeatureEncoder

BATCHES = (8, 16, 32, 64, 128, 256)


def capacity(batch: int) -> float:
    """Capacity grows with the batch cap, by a constant factor per doubling."""
    return 10.0 * batch ** 0.4


def truth(batch: int, rate: float) -> dict[str, float]:
    mu = capacity(batch)
    rho = rate / mu
    served = 1 / ((1 / rate) ** 6 + (1 / mu) ** 6) ** (1 / 6)
    capped = min(rho, 0.95)
    ttft = (30.0 + 2 * math.log2(batch)) * (1 + 0.5 * capped / (1 - capped)) \
        + 2000.0 * max(0.0, 1 - 1 / rho)
    return {"requests_per_s": served, "output_tokens_per_s": 128 * served, "ttft_p95_ms": ttft}


def trials(batches: tuple[int, ...], noise: float = 0.03, seed: int = 0
           ) -> tuple[list[dict], list[dict[str, float]], list[dict[str, float]]]:
    """Each config at five rates from 0.3 to 1.3 of its capacity, twice."""
    rng = random.Random(seed)
    configs, workloads, measured = [], [], []
    for batch in batches:
        for share in (0.3, 0.6, 0.85, 1.0, 1.3):
            for _ in range(2):
                rate = round(share * capacity(batch), 2)
                configs.append({"batch": batch, "eager": False})
                workloads.append({"rate_rps": rate, "prompt_len": 256.0})
                measured.append({m: v * math.exp(rng.gauss(0, noise))
                                 for m, v in truth(batch, rate).items()})
    return configs, workloads, measured


@functools.cache
def curves_of(batches: tuple[int, ...]) -> tuple[LoadCurves, FeatureEncoder]:
    """The load curves of ``batches``' trials and their encoder (cached: tests only read them)."""
    configs, workloads, measured = trials(batches)
    values = {m: [r[m] for r in measured] for m in measured[0]}
    roles = load_roles(values, ["rate_rps", "prompt_len"])
    assert roles is not None
    return (LoadCurves(roles=roles).fit(configs, workloads, measured),
            FeatureEncoder().fit(configs, workloads))


@functools.cache
def fitted(batches: tuple[int, ...], family: str = "ridge") -> KnobCurveModel:
    """The model over ``batches``' curves (cached: tests only read it)."""
    curves, encoder = curves_of(batches)
    return KnobCurveModel(family=family).fit(curves, encoder.transform)


def error(model: KnobCurveModel, batch: int, metric: str) -> float:
    errs = []
    for share in (0.3, 0.7, 0.9, 1.2):
        rate = share * capacity(batch)
        got = model.predict({"batch": batch, "eager": False},
                            {"rate_rps": rate, "prompt_len": 256.0}, metric)
        assert got is not None
        errs.append(abs(got[0] / truth(batch, rate)[metric] - 1))
    return float(np.mean(errs))


def test_a_held_out_configs_curve_follows_its_knob() -> None:
    held = 64
    model = fitted(tuple(b for b in BATCHES if b != held))
    assert model.fitted_ and model.n_curves_ == len(BATCHES) - 1
    cap = model.capacity({"batch": held, "eager": False}, {"rate_rps": 1.0, "prompt_len": 256.0})
    assert cap == pytest.approx(capacity(held), rel=0.1)
    assert error(model, held, "output_tokens_per_s") < 0.1
    assert error(model, held, "ttft_p95_ms") < 0.25
    # The baseline, blind to the knob, is far worse on the same config.
    mean = fitted(tuple(b for b in BATCHES if b != held), family="mean")
    assert error(mean, held, "output_tokens_per_s") > 2 * error(model, held,
                                                                 "output_tokens_per_s")


def test_predictions_grow_with_the_rate_and_the_interval_holds_the_truth() -> None:
    model = fitted(tuple(b for b in BATCHES if b != 32))
    config, hits, total = {"batch": 32, "eager": False}, 0, 0
    last = 0.0
    for rate in np.linspace(5, 60, 23):
        got = model.predict(config, {"rate_rps": float(rate), "prompt_len": 256.0},
                            "ttft_p95_ms")
        assert got is not None
        value, low, high = got
        assert low <= value <= high
        assert value >= last - 1e-9
        last = value
        hits += low <= truth(32, float(rate))["ttft_p95_ms"] <= high
        total += 1
    assert hits >= 0.8 * total


def test_too_few_curves_or_an_unmodelled_figure_answer_nothing() -> None:
    model = fitted(BATCHES[:MIN_CURVES - 1])
    assert not model.fitted_
    assert model.predict({"batch": 64, "eager": False},
                         {"rate_rps": 30.0, "prompt_len": 256.0}, "ttft_p95_ms") is None
    model = fitted(BATCHES)
    assert model.predict({"batch": 64, "eager": False},
                         {"rate_rps": 30.0, "prompt_len": 256.0}, "recall_at_10") is None
    assert model.predict({"batch": 64, "eager": False}, {"prompt_len": 256.0},
                         "ttft_p95_ms") is None


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_fits_and_predicts(family: str) -> None:
    model = fitted(BATCHES, family=family)
    got = model.predict({"batch": 48, "eager": False}, {"rate_rps": 20.0, "prompt_len": 256.0},
                        "ttft_p95_ms")
    assert got is not None and got[0] > 0


@pytest.mark.parametrize("family", FAMILIES)
def test_many_configs_at_once_read_what_each_reads_alone(family: str) -> None:
    model = fitted(tuple(b for b in BATCHES if b != 64), family=family)
    configs = [{"batch": b, "eager": False} for b in (8, 48, 64, 200)]
    workload = {"rate_rps": 25.0, "prompt_len": 256.0}
    metrics = ["ttft_p95_ms", "output_tokens_per_s", "recall_at_10"]
    many = model.predict_many(configs, workload, metrics)
    assert many is not None and set(many) == {"ttft_p95_ms", "output_tokens_per_s"}
    for metric, rows in many.items():
        alone = [model.predict(c, workload, metric) for c in configs]
        assert np.asarray(rows) == pytest.approx(np.asarray(alone), rel=1e-9)
    assert model.predict_many([], workload, metrics) is None
    assert model.predict_many(configs, {"prompt_len": 256.0}, metrics) is None


def test_an_unknown_family_is_refused() -> None:
    with pytest.raises(ValueError, match="family"):
        KnobCurveModel(family="forest")


def test_a_context_answers_an_unmeasured_config_from_its_predicted_curve() -> None:
    """fit_context fits the knob-level model beside the curves; a config without a curve of its
    own takes the predicted curve's figures, a measured one keeps its own curve's."""
    import hashlib

    from knowledge import TrialRecord
    from knowledge.models import TrialStatus
    from knowledge.surrogates import ContextKey, fit_context

    configs, workloads, measured = trials(tuple(b for b in BATCHES if b != 64))
    records = []
    for config, wl, values in zip(configs, workloads, measured, strict=True):
        rate = wl["rate_rps"]
        spec = {"kind": "llm-serving", "name": f"chat@{rate}",
                "params": {"arrival": {"process": "poisson", "rate_rps": rate},
                           "prompt_len": 256}}
        records.append(TrialRecord(
            study_id=1, number=len(records), target="scripted-llm", config=config,
            config_hash=str(config["batch"]), workload_spec=spec,
            workload_hash=hashlib.sha256(str(rate).encode()).hexdigest()[:16], hardware={},
            hardware_key="h", advisor_version="test", status=TrialStatus.COMPLETE,
            metrics=values))
    ctx = fit_context(ContextKey("scripted-llm", "h", "m", "v"), records, score=False,
                      metrics=["ttft_p95_ms", "output_tokens_per_s"])
    assert ctx.knob_curves is not None and ctx.load_curves is not None
    held, measured_config = {"batch": 64, "eager": False}, {"batch": 32, "eager": False}
    rate = 0.7 * capacity(64)
    wl = {"rate_rps": rate, "prompt_len": 256.0}
    pred = ctx.predict([held, measured_config], wl, ["output_tokens_per_s"])
    value = pred["output_tokens_per_s"][0]
    want = ctx.knob_curves.predict(held, wl, "output_tokens_per_s")
    assert want is not None and value[0] == pytest.approx(want[0])
    assert value[0] == pytest.approx(truth(64, rate)["output_tokens_per_s"], rel=0.15)
    own = ctx.load_curves.predict(measured_config, wl, "output_tokens_per_s")
    assert own is not None and value[1] == pytest.approx(own[0])

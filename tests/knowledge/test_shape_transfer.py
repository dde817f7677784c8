"""The shape transfer (knowledge/shape_transfer.py): a known power law across synthetic shapes is
recovered for a shape held out, intervals are never narrower than the held-out-shape error, and
the shipped H200 data's three shapes each predicted from the other two (the figures
docs/knowledge.md reports)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from advisor.shape_eval import shape_rows
from knowledge import TrialStore
from knowledge.shape_transfer import MeasuredShape, ShapeTransfer, leave_one_shape_out
from knowledge.transfer import import_file, shipped_file

#: Capacity ~ parameters^-0.5, latency floors ~ parameters^0.4 (the law the transfer must find);
#: the KV bytes per token are scrambled so that they explain nothing.
PARAMS = {"s1": 1e9, "s2": 2e9, "s4": 4e9, "s8": 8e9}
KV = {"s1": 64e3, "s2": 16e3, "s4": 128e3, "s8": 32e3}


def capacity(p: float) -> float:
    return 100.0 * (p / 1e9) ** -0.5


def truth(p: float, rate: float) -> dict[str, float]:
    cap = capacity(p)
    served = rate / (1 + (rate / cap) ** 6) ** (1 / 6)
    rho = min(rate / cap, 0.95)
    floor = (p / 1e9) ** 0.4
    return {"requests_per_s": served, "output_tokens_per_s": 128.0 * served,
            "ttft_p95_ms": 30.0 * floor * (1 + rho / (1 - rho)),
            "tpot_p95_ms": 4.0 * floor * (1 + 0.5 * rho)}


def shape(name: str, noise: float = 0.0, seed: int = 0) -> MeasuredShape:
    rng = np.random.default_rng(seed)
    p = PARAMS[name]
    rates = [u * capacity(p) for u in (0.1, 0.25, 0.4, 0.55, 0.7, 0.85, 1.1, 1.4) for _ in (0, 1)]
    metrics = [{k: v * math.exp(noise * rng.standard_normal()) for k, v in truth(p, r).items()}
               for r in rates]
    return MeasuredShape(name, {"parameters": p, "kv_bytes_per_token": KV[name]},
                         tuple(rates), tuple(metrics))


def test_a_known_power_law_is_recovered_for_a_held_out_shape() -> None:
    transfer = ShapeTransfer().fit([shape(n, 0.01, i) for i, n in enumerate(("s1", "s2", "s8"))])
    assert transfer.feature_ == "parameters"  # the scrambled KV bytes explain nothing
    assert transfer.errors_["parameters"] < transfer.errors_["kv_bytes_per_token"]
    p = PARAMS["s4"]
    rate = 0.3 * capacity(p)
    pred = transfer.predict({"parameters": p, "kv_bytes_per_token": KV["s4"]}, rate)
    assert pred.position == "interpolation" and pred.beyond == 1.0
    assert pred.capacity[0] == pytest.approx(capacity(p), rel=0.08)
    for metric, value in truth(p, rate).items():
        v, lo, hi = pred.metrics[metric]
        assert v == pytest.approx(value, rel=0.1), metric
        assert lo <= value <= hi, metric


def test_held_out_shapes_score_the_law_and_widen_the_intervals() -> None:
    shapes = [shape(n, 0.01, i) for i, n in enumerate(PARAMS)]
    held = leave_one_shape_out(shapes, "parameters", ["ttft_p95_ms", "output_tokens_per_s"])
    assert [h.name for h in held] == list(PARAMS)
    assert [h.position for h in held] == ["extrapolation", "interpolation", "interpolation",
                                          "extrapolation"]
    for h in held:
        assert h.capacity_ape < 0.1
        light = h.mape("output_tokens_per_s", 0)
        assert light is not None and light < 0.1
    transfer = ShapeTransfer().fit(shapes)
    for metric, widths in transfer.half_width_.items():
        for (position, band), width in widths.items():
            errors = [e for h in transfer.held_out_ for u, e in h.log_errors(metric)
                      if int(u >= 0.85) == band
                      and (position == "extrapolation" or h.position == "interpolation")]
            assert width >= max(errors, default=0.0), (metric, position, band)
    # Outside the measured parameters, the answer says so and how far.
    far = transfer.predict({"parameters": 32e9, "kv_bytes_per_token": 1e5}, 10.0)
    assert far.position == "extrapolation" and far.beyond == pytest.approx(4.0)


def test_fewer_than_three_shapes_cannot_be_calibrated() -> None:
    with pytest.raises(ValueError, match="needs >= 3 measured shapes"):
        ShapeTransfer().fit([shape("s1"), shape("s2")])


@pytest.fixture(scope="module")
def h200() -> TrialStore:
    store = TrialStore("sqlite://")
    for name in ("h200-vllm-crosscheck-2026-12-01.jsonl", "h200-vllm-3b-2026-12-03.jsonl"):
        import_file(store, shipped_file(name))
    return store


def test_the_shipped_shapes_each_predicted_from_the_other_two(h200: TrialStore) -> None:
    metrics = ["ttft_p95_ms", "tpot_p95_ms", "output_tokens_per_s"]
    rows = shape_rows(h200, target="vllm", hardware="h200", metrics=metrics)
    chosen = [r for r in rows if r["chosen"]]
    assert {r["shape"] for r in chosen} == {
        "llama-3.2-1b", "llama-3-8b", "llama-h3072-i8192-l28-a24-kv8-v128256-ctx131072-tied"}
    assert {r["config"] for r in chosen} == {"engine default"}  # the only config on 3 shapes
    assert chosen[0]["feature"] == "parameters"  # lower held-out error than KV bytes here
    by_shape = {r["shape"]: r for r in chosen}
    assert by_shape["llama-h3072-i8192-l28-a24-kv8-v128256-ctx131072-tied"]["position"] == (
        "interpolation")
    for r in chosen:
        # Every shape is scored at every rate it was measured at, on every metric.
        assert set(r["mape"]) == set(metrics) and r["rates"] >= 5
        assert all(0 <= v < 1.0 for v in r["mape"].values()), r["mape"]
        # Throughput below capacity is the figure that transfers best (docs/knowledge.md).
        assert r["mape_light"]["output_tokens_per_s"] < 0.15

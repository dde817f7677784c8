"""SLO parsing (valid and invalid) and the margin sign <=> SLO met invariant."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from advisor.errors import SLOParseError
from objectives import parse_slo
from objectives.metrics import METRICS
from objectives.slo import Bound


def test_parses_the_documented_examples() -> None:
    slo = parse_slo("p95_latency_ms<=2, recall_at_10>=0.95")
    assert [str(b) for b in slo.bounds] == ["p95_latency_ms<=2", "recall_at_10>=0.95"]
    llm = parse_slo("ttft_p95_ms<=300,tpot_p95_ms<=40")
    assert llm.metrics == ["ttft_p95_ms", "tpot_p95_ms"]
    assert llm.bounds[0] == Bound("ttft_p95_ms", "<=", 300.0)


def test_accepts_spaces_scientific_notation_and_empty() -> None:
    slo = parse_slo("  p99_latency_ms <= 1.5e1 ,  qps>=1e3 ")
    assert slo.bounds == (Bound("p99_latency_ms", "<=", 15.0), Bound("qps", ">=", 1000.0))
    assert parse_slo("").bounds == ()


@pytest.mark.parametrize("text, fragment", [
    ("p95_latency_ms<2", "cannot parse"),
    ("p95_latency_ms<=", "cannot parse"),
    ("p95_latency_ms==2", "cannot parse"),
    ("latency<=2", "unknown metric 'latency'"),
    ("p95_latency_ms<=two", "cannot parse"),
    ("recall_at_10>=1.5", "fraction"),
    ("p95_latency_ms<=1,p95_latency_ms<=2", "given twice"),
])
def test_invalid_expressions_name_the_problem_and_list_metrics(text: str, fragment: str) -> None:
    with pytest.raises(SLOParseError) as info:
        parse_slo(text)
    message = str(info.value)
    assert fragment in message
    if "unknown" in fragment or "cannot parse" in fragment:
        assert "p95_latency_ms" in message and "recall_at_10" in message  # lists valid metrics


@pytest.mark.parametrize(("text", "meant"), [
    ("ttft_p95<=300", "ttft_p95_ms"), ("p95_latency<=1", "p95_latency_ms"),
    ("recall_at10>=0.9", "recall_at_10"), ("tpot_p95_msec<=40", "tpot_p95_ms"),
])
def test_a_near_miss_names_the_metric_meant_instead_of_listing_them_all(
        text: str, meant: str) -> None:
    with pytest.raises(SLOParseError) as info:
        parse_slo(text)
    message = str(info.value)
    assert message.endswith(f"did you mean {meant!r}?"), message
    assert message.count("_ms") + message.count("recall_at") <= 2  # no list of every metric


def test_an_unknown_metric_lists_only_the_asked_targets_metrics() -> None:
    known = ["p95_latency_ms", "qps", "recall_at_10"]
    with pytest.raises(SLOParseError) as info:
        parse_slo("throughput>=5", known)
    assert str(info.value).endswith("valid metrics are: p95_latency_ms, qps, recall_at_10")
    with pytest.raises(SLOParseError, match="did you mean 'p95_latency_ms'"):
        parse_slo("p95_latncy_ms<=1", known)
    assert parse_slo("qps>=5", known).metrics == ["qps"]


@given(threshold=st.floats(min_value=0.001, max_value=1e6),
       value=st.floats(min_value=0, max_value=1e7, allow_nan=False),
       op=st.sampled_from(["<=", ">="]))
def test_margin_sign_iff_bound_holds(threshold: float, value: float, op: str) -> None:
    bound = Bound("p95_latency_ms", op, threshold)  # type: ignore[arg-type]
    holds = value <= threshold if op == "<=" else value >= threshold
    assert (bound.margin(value) <= 0) == holds
    assert bound.holds(value) == holds


def test_slo_met_iff_every_margin_nonpositive() -> None:
    slo = parse_slo("p95_latency_ms<=2,recall_at_10>=0.9")
    assert slo.is_met({"p95_latency_ms": 2.0, "recall_at_10": 0.9})
    assert not slo.is_met({"p95_latency_ms": 2.01, "recall_at_10": 0.99})
    assert not slo.is_met({"p95_latency_ms": 1.0, "recall_at_10": 0.89})
    margins = slo.margins({"p95_latency_ms": 3.0, "recall_at_10": 0.99})
    assert margins["p95_latency_ms<=2"] == pytest.approx(0.5)
    assert margins["recall_at_10>=0.9"] == pytest.approx(-0.1)


def test_missing_or_nan_metric_violates() -> None:
    slo = parse_slo("p95_latency_ms<=2")
    assert math.isinf(slo.margins({})["p95_latency_ms<=2"])
    assert not slo.is_met({"p95_latency_ms": float("nan")})


def test_check_metrics_rejects_metrics_a_target_lacks() -> None:
    slo = parse_slo("ttft_p95_ms<=300")
    with pytest.raises(SLOParseError, match="does not report 'ttft_p95_ms'"):
        slo.check_metrics("faiss", {"qps", "p95_latency_ms"})


def test_every_metric_name_carries_a_unit() -> None:
    for name, spec in METRICS.items():
        assert spec.unit, name
        if spec.unit == "ms":
            assert name.endswith("_ms"), name

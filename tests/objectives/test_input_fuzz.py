"""Property-based fuzz of what users type: the SLO parser and the workload parameter checks either
accept a value or refuse it with the project's own error — never another exception (an
OverflowError from a 400-digit number, a TypeError from a list where a number belongs), which
the CLI would print as a traceback and the API answer with a 500."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advisor.errors import AdvisorError
from advisor.inputs import check_numbers, requested_slo
from objectives.datasets.vectors import dataset_params
from objectives.llm.workload import LLMWorkloadSpec, load_preset

FUZZ = settings(max_examples=300, derandomize=True, deadline=None,
                suppress_health_check=list(HealthCheck))
_METRICS = ["p95_latency_ms", "recall_at_10", "qps", "ttft_p95_ms", "failed_requests", "nope"]
numbers = st.one_of(st.integers(), st.integers(min_value=-(10**400), max_value=10**400),
                    st.floats(allow_nan=True, allow_infinity=True))
values = st.recursive(st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=8)),
                      lambda inner: st.one_of(st.lists(inner, max_size=3),
                                              st.dictionaries(st.text(max_size=6), inner,
                                                              max_size=3)),
                      max_leaves=6)


@FUZZ
@given(st.one_of(
    st.text(max_size=60),
    st.lists(st.tuples(st.sampled_from(_METRICS), st.sampled_from(["<=", ">=", "<", "=="]),
                       numbers), max_size=4).map(
        lambda bounds: ",".join(f"{m}{op}{v}" for m, op, v in bounds))))
def test_the_slo_parser_accepts_or_refuses_with_its_own_error(text: str) -> None:
    try:
        slo = requested_slo(text)
    except AdvisorError:
        return
    assert slo.bounds  # an accepted SLO always constrains something


@FUZZ
@given(st.dictionaries(st.sampled_from(["dataset", "n_base", "n_queries", "k", "seed", "dim",
                                        "n_clusters", "other"]), values, max_size=5))
def test_vector_workload_params_are_accepted_or_refused_cleanly(params: dict[str, Any]) -> None:
    try:
        clean = dataset_params(params)
    except AdvisorError:
        return
    assert all(isinstance(v, int | str) for v in clean.values())


_CHAT = dict(load_preset("chat").params)


@FUZZ
@given(st.dictionaries(st.sampled_from(["n_requests", "seed", "warmup_requests", "drain_limit_s",
                                        "prompt_len", "output_len", "arrival", "shared_prefix"]),
                       values, max_size=3))
def test_llm_workload_params_are_accepted_or_refused_cleanly(change: dict[str, Any]) -> None:
    try:
        LLMWorkloadSpec.from_params({**_CHAT, **change})
    except AdvisorError:
        return


@FUZZ
@given(values)
def test_the_number_check_refuses_only_with_its_own_error(value: Any) -> None:
    try:
        check_numbers(value, "x")
    except AdvisorError:
        return

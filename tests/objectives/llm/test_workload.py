"""LLM workloads: seeded reproducibility, arrival statistics, exact lengths, shared prefixes,
trace replay, presets, CPU scaling, and validation errors that name the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from advisor.errors import WorkloadError
from objectives.llm.models import N_SPECIAL_TOKENS
from objectives.llm.workload import (
    KIND,
    PRESETS,
    LLMWorkloadSpec,
    at_rate,
    cpu_scaled,
    generate_requests,
    generate_warmup_requests,
    load_preset,
    max_concurrency,
    prefix_cached_tokens,
    request_shapes,
)
from objectives.workload import Workload

VOCAB = 2048


def params(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "n_requests": 50, "seed": 7,
        "arrival": {"process": "poisson", "rate_rps": 10.0},
        "prompt_len": {"dist": "uniform", "low": 20, "high": 40},
        "output_len": {"dist": "fixed", "value": 8},
    }
    return {**base, **overrides}


def spec(**overrides: Any) -> LLMWorkloadSpec:
    return LLMWorkloadSpec.from_params(params(**overrides))


def gaps(s: LLMWorkloadSpec) -> np.ndarray:
    arrivals = np.array([r.arrival_s for r in generate_requests(s, VOCAB)])
    return np.diff(np.concatenate([[0.0], arrivals]))


def test_same_seed_same_requests_and_other_seed_differs() -> None:
    a = generate_requests(spec(), VOCAB)
    assert a == generate_requests(spec(), VOCAB)
    assert a != generate_requests(spec(seed=8), VOCAB)


def test_rate_change_keeps_prompts_and_lengths() -> None:
    slow = generate_requests(spec(), VOCAB)
    fast = generate_requests(spec(arrival={"process": "poisson", "rate_rps": 50.0}), VOCAB)
    assert [r.prompt_token_ids for r in slow] == [r.prompt_token_ids for r in fast]
    assert [r.arrival_s for r in slow] != [r.arrival_s for r in fast]


def test_requests_sorted_indexed_and_token_ids_in_range() -> None:
    reqs = generate_requests(spec(), VOCAB)
    assert [r.index for r in reqs] == list(range(50))
    arrivals = [r.arrival_s for r in reqs]
    assert arrivals == sorted(arrivals) and arrivals[0] > 0
    ids = np.concatenate([r.prompt_token_ids for r in reqs])
    assert ids.min() >= N_SPECIAL_TOKENS and ids.max() < VOCAB


def test_poisson_mean_rate_and_exponential_gaps() -> None:
    g = gaps(spec(n_requests=4000, arrival={"process": "poisson", "rate_rps": 8.0}))
    assert 1 / g.mean() == pytest.approx(8.0, rel=0.05)
    assert g.std() / g.mean() == pytest.approx(1.0, abs=0.07)  # CV of an exponential is 1


def test_gamma_burstiness_below_one_is_burstier_with_same_rate() -> None:
    n = 4000
    poisson = gaps(spec(n_requests=n, arrival={"process": "poisson", "rate_rps": 8.0}))
    bursty = gaps(spec(n_requests=n, arrival={"process": "gamma", "rate_rps": 8.0,
                                              "burstiness": 0.25}))
    assert 1 / bursty.mean() == pytest.approx(8.0, rel=0.1)
    cv = bursty.std() / bursty.mean()
    assert cv > poisson.std() / poisson.mean()
    assert cv == pytest.approx(2.0, rel=0.15)  # CV of Gamma(k) gaps is 1/sqrt(k)


@pytest.mark.parametrize("dist,lo,hi", [
    ({"dist": "fixed", "value": 33}, 33, 33),
    ({"dist": "uniform", "low": 5, "high": 9}, 5, 9),
    ({"dist": "lognormal", "median": 100, "sigma": 1.0, "min": 16, "max": 300}, 16, 300),
])
def test_lengths_inside_bounds_and_exact(dist: dict[str, Any], lo: int, hi: int) -> None:
    reqs = generate_requests(spec(n_requests=500, prompt_len=dist, output_len=dist), VOCAB)
    for r in reqs:
        assert lo <= r.prompt_len <= hi and lo <= r.output_len <= hi
        assert len(r.prompt_token_ids) == r.prompt_len
    lens = {r.prompt_len for r in reqs}
    if dist["dist"] == "uniform":
        assert lens == set(range(5, 10))  # both ends reachable
    if dist["dist"] == "lognormal":
        assert {16, 300} <= lens  # clipped at both ends
        assert np.median([r.prompt_len for r in reqs]) == pytest.approx(100, rel=0.15)


def test_integer_length_is_shorthand_for_fixed() -> None:
    s = spec(prompt_len=12, output_len=3)
    assert {(r.prompt_len, r.output_len) for r in generate_requests(s, VOCAB)} == {(12, 3)}


def test_shared_prefixes_are_shared_within_a_group_and_cover_the_fraction() -> None:
    s = spec(n_requests=400, prompt_len={"dist": "uniform", "low": 40, "high": 80},
             shared_prefix={"fraction": 0.3, "length": 24, "groups": 3})
    reqs = generate_requests(s, VOCAB)
    prefixed = [r for r in reqs if r.prefix_group is not None]
    assert len(prefixed) == round(0.3 * 400)
    assert {r.prefix_group for r in prefixed} == {0, 1, 2}
    by_group: dict[int, set[tuple[int, ...]]] = {}
    for r in prefixed:
        assert r.shared_prefix_len == 24
        by_group.setdefault(r.prefix_group, set()).add(r.prompt_token_ids[:24])  # type: ignore[arg-type]
    assert all(len(p) == 1 for p in by_group.values())
    assert len({next(iter(p)) for p in by_group.values()}) == 3  # distinct per group
    # The prefix is part of the prompt length, and the rest differs between requests.
    assert all(40 <= r.prompt_len <= 80 for r in reqs)
    assert len({r.prompt_token_ids[24:] for r in prefixed}) == len(prefixed)
    for r in reqs:
        if r.prefix_group is None:
            assert r.shared_prefix_len == 0


def test_concurrency_process_arrives_at_zero_and_caps() -> None:
    s = spec(arrival={"process": "concurrency", "concurrency": 6})
    assert {r.arrival_s for r in generate_requests(s, VOCAB)} == {0.0}
    assert max_concurrency(s) == 6
    assert max_concurrency(spec()) is None
    capped = spec(arrival={"process": "poisson", "rate_rps": 3, "max_concurrency": 2})
    assert max_concurrency(capped) == 2


def write_trace(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_trace_replay_reads_the_file(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.jsonl", [
        {"arrival_s": 0.5, "prompt_len": 10, "output_len": 4},
        {"arrival_s": 0.1, "prompt_len": 20, "output_len": 2},
        {"arrival_s": 2.0, "prompt_len": 30, "output_len": 6},
    ])
    s = LLMWorkloadSpec.from_params({"arrival": {"process": "trace", "trace": str(trace)}})
    assert s.n_requests == 3
    reqs = generate_requests(s, VOCAB)
    assert [(r.arrival_s, r.prompt_len, r.output_len) for r in reqs] == [
        (0.1, 20, 2), (0.5, 10, 4), (2.0, 30, 6)]
    first = LLMWorkloadSpec.from_params({"n_requests": 2,
                                         "arrival": {"process": "trace", "trace": str(trace)}})
    assert [r.arrival_s for r in generate_requests(first, VOCAB)] == [0.1, 0.5]


def test_bad_trace_lines_name_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"arrival_s": 0, "prompt_len": 3, "output_len": 1}\n{"arrival_s": 1}\n')
    with pytest.raises(WorkloadError, match=r"bad.jsonl:2.*prompt_len"):
        LLMWorkloadSpec.from_params({"arrival": {"process": "trace", "trace": str(bad)}})
    with pytest.raises(WorkloadError, match=r"arrival\.trace"):
        LLMWorkloadSpec.from_params({"arrival": {"process": "trace",
                                                 "trace": str(tmp_path / "missing.jsonl")}})


def test_warmup_requests_are_separate_short_and_unrelated() -> None:
    s = spec(n_requests=50, prompt_len={"dist": "uniform", "low": 60, "high": 90},
             shared_prefix={"fraction": 1.0, "length": 40, "groups": 1})
    assert s.warmup_requests == 8
    warm = generate_warmup_requests(s, VOCAB)
    assert len(warm) == 8 and {r.arrival_s for r in warm} == {0.0}
    assert {(r.prompt_len, r.output_len) for r in warm} == {(32, 8)}
    measured = generate_requests(s, VOCAB)
    prefix = measured[0].prompt_token_ids[:32]
    assert all(r.prompt_token_ids != prefix for r in warm)
    assert spec(n_requests=3).warmup_requests == 3
    assert spec(warmup_requests=0).warmup_requests == 0


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_loads_validates_and_scales_for_cpu(name: str) -> None:
    wl = load_preset(name)
    assert wl.kind == KIND and wl.name == name
    full = LLMWorkloadSpec.from_workload(wl)
    assert full.n_requests >= 200
    small = cpu_scaled(wl)
    assert small.name == f"{name}-cpu" and small.spec_hash != wl.spec_hash
    s = LLMWorkloadSpec.from_workload(small)
    assert s.model == "tiny-llama" and s.n_requests == 24
    reqs = generate_requests(s, VOCAB)
    assert all(4 <= r.prompt_len <= 64 and 2 <= r.output_len <= 16 for r in reqs)
    if s.arrival.process in ("poisson", "gamma"):
        assert s.arrival.rate_rps == 4.0
    # The scaled workload round-trips through plain data unchanged.
    assert LLMWorkloadSpec.from_params(s.to_params()) == s


def test_preset_overrides_and_unknown_preset() -> None:
    wl = load_preset("chat", model="tiny-llama", n_requests=10)
    assert wl.params["model"] == "tiny-llama" and wl.params["n_requests"] == 10
    with pytest.raises(WorkloadError, match="chat, rag-long-prompt, batch-summarize"):
        load_preset("nope")
    with pytest.raises(WorkloadError, match="n_requests"):
        load_preset("chat", n_requests=0)


def test_rag_preset_shares_prefixes() -> None:
    s = LLMWorkloadSpec.from_workload(load_preset("rag-long-prompt"))
    assert s.shared_prefix is not None and s.shared_prefix.length == 512
    small = LLMWorkloadSpec.from_workload(cpu_scaled(load_preset("rag-long-prompt")))
    assert small.shared_prefix is not None
    assert small.prompt_len is not None
    assert 1 <= small.shared_prefix.length < small.prompt_len.lower


def test_wrong_kind_is_rejected() -> None:
    with pytest.raises(WorkloadError, match="llm-serving"):
        LLMWorkloadSpec.from_workload(Workload("vector-search", "x", {}))


@pytest.mark.parametrize("overrides,field", [
    ({"n_requests": 0}, "n_requests"),
    ({"n_requests": 2.5}, "n_requests"),
    ({"warmup_requests": -1}, "warmup_requests"),
    ({"seed": "x"}, "seed"),
    ({"model": ""}, "model"),
    ({"bogus": 1}, "bogus"),
    ({"arrival": {"process": "uniform"}}, "arrival.process"),
    ({"arrival": {"process": "poisson"}}, "arrival.rate_rps"),
    ({"arrival": {"process": "poisson", "rate_rps": -1}}, "arrival.rate_rps"),
    ({"arrival": {"process": "gamma", "rate_rps": 1, "burstiness": 0}}, "arrival.burstiness"),
    ({"arrival": {"process": "concurrency", "concurrency": 0}}, "arrival.concurrency"),
    ({"arrival": {"process": "poisson", "rate_rps": 1, "concurrency": 4}}, "concurrency"),
    ({"arrival": {"process": "trace"}}, "arrival.trace"),
    ({"prompt_len": {"dist": "normal"}}, "prompt_len.dist"),
    ({"prompt_len": {"dist": "uniform", "low": 9, "high": 3}}, "prompt_len.low"),
    ({"prompt_len": {"dist": "fixed", "value": 0}}, "prompt_len.value"),
    ({"output_len": {"dist": "lognormal", "median": 10, "sigma": 1}}, "output_len.max"),
    ({"output_len": {"dist": "lognormal", "median": -1, "max": 9}}, "output_len.median"),
    ({"output_len": None}, "output_len"),
    ({"shared_prefix": {"fraction": 1.5, "length": 4}}, "shared_prefix.fraction"),
    ({"shared_prefix": {"fraction": 0.5, "length": 20}}, "shared_prefix.length"),
    ({"shared_prefix": {"fraction": 0.5, "length": 4, "groups": 0}}, "shared_prefix.groups"),
])
def test_bad_specs_name_the_field(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(WorkloadError, match=field.replace(".", r"\.")):
        spec(**overrides)


def test_missing_required_fields_are_named() -> None:
    p = params()
    for key in ("n_requests", "arrival", "prompt_len", "output_len"):
        partial = {k: v for k, v in p.items() if k != key}
        with pytest.raises(WorkloadError, match=key):
            LLMWorkloadSpec.from_params(partial)


def test_vocab_must_leave_room_for_ordinary_tokens() -> None:
    with pytest.raises(WorkloadError, match="vocab_size"):
        generate_requests(spec(), N_SPECIAL_TOKENS)


def test_at_rate_keeps_the_window_and_draws_other_prompts() -> None:
    base = load_preset("chat", n_requests=400, arrival={"process": "poisson", "rate_rps": 40.0})
    faster = at_rate(base, 120.0, seed_offset=1)
    spec, fast_spec = LLMWorkloadSpec.from_workload(base), LLMWorkloadSpec.from_workload(faster)
    assert faster.name == "chat@120rps" and faster.spec_hash != base.spec_hash
    assert fast_spec.arrival.rate_rps == 120.0 and fast_spec.n_requests == 1200
    assert fast_spec.seed == spec.seed + 1
    assert (fast_spec.prompt_len, fast_spec.output_len) == (spec.prompt_len, spec.output_len)
    a, b = generate_requests(spec, 32000), generate_requests(fast_spec, 32000)
    assert a[0].prompt_token_ids != b[0].prompt_token_ids  # no prefix-cache hits from the first
    window = (a[-1].arrival_s, b[-1].arrival_s)
    assert window[1] == pytest.approx(window[0], rel=0.15)
    assert at_rate(base, 0.01, seed_offset=2).params["n_requests"] == 1  # at least one request


def test_at_rate_refuses_what_has_no_rate() -> None:
    closed = load_preset("chat", arrival={"process": "concurrency", "concurrency": 4})
    with pytest.raises(WorkloadError, match="poisson or gamma"):
        at_rate(closed, 10.0, seed_offset=1)
    base = load_preset("chat")
    with pytest.raises(WorkloadError, match="rate_rps"):
        at_rate(base, 0.0, seed_offset=1)
    with pytest.raises(WorkloadError, match="seed_offset >= 1"):
        at_rate(base, 10.0, seed_offset=0)


@pytest.mark.parametrize("vocab", [VOCAB, 128_256])
def test_prefix_cached_tokens_follow_the_generated_prefix_groups(vocab: int) -> None:
    """A request's shared prefix is cached when an earlier request carried the same one: the
    groups are the generated requests' own (which depend on the vocabulary), first arrivals
    pay the whole prompt."""
    s = spec(n_requests=120, prompt_len={"dist": "uniform", "low": 600, "high": 900},
             shared_prefix={"fraction": 0.5, "length": 512, "groups": 4})
    cached = prefix_cached_tokens(s, vocab)
    seen: set[int] = set()
    for r, c in zip(generate_requests(s, vocab), cached, strict=True):
        assert c == (512 if r.prefix_group in seen else 0)
        assert (r.prefix_group is None) <= (c == 0)
        if r.prefix_group is not None:
            seen.add(r.prefix_group)
    assert len(seen) == 4 and int(cached.sum()) == 512 * (60 - 4)
    assert not prefix_cached_tokens(spec(), vocab).any()  # no shared prefix: nothing cached


def test_request_shapes_are_the_generated_requests_without_their_tokens() -> None:
    """What a batching model replays is exactly what the client sends: the same arrivals and
    lengths, drawn from the same seeded streams."""
    s = spec(n_requests=200, prompt_len={"dist": "lognormal", "median": 256, "sigma": 0.8,
                                          "min": 16, "max": 2048},
             output_len={"dist": "uniform", "low": 16, "high": 300})
    arrivals, prompts, outputs = request_shapes(s)
    reqs = generate_requests(s, VOCAB)
    assert arrivals.tolist() == [r.arrival_s for r in reqs]
    assert prompts.tolist() == [r.prompt_len for r in reqs]
    assert outputs.tolist() == [r.output_len for r in reqs]

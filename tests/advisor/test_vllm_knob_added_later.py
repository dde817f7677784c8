"""Trials stored before ``performance_mode`` joined the vLLM space lack the key: they ran at
vLLM's default (balanced) and must read as the default config, in the answers' grouping, the
default's stored form, the load curves and the terminal view, never as a config of their own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from advisor.answers import RecommendationRequest, plan_recommendation
from advisor.answers.model_based import _default_as_measured, _same_config
from advisor.cli.answer_view import _config_text
from knowledge import TrialFilter, TrialStatus, TrialStore
from knowledge.cache import ModelCache
from knowledge.load_curve import config_key, unvaried_knobs
from knowledge.surrogates import workload_features
from knowledge.transfer import import_shipped_knowledge
from objectives.registry import get_target

KNOB = "performance_mode"
DEFAULT = get_target("vllm").space().default_config()
OLD_DEFAULT = {k: v for k, v in DEFAULT.items() if k != KNOB}


def test_the_space_default_carries_the_knob_at_balanced() -> None:
    assert DEFAULT[KNOB] == "balanced" and KNOB not in OLD_DEFAULT


def test_an_old_default_groups_with_the_new_default_and_a_mode_does_not() -> None:
    assert _same_config("vllm", OLD_DEFAULT) == _same_config("vllm", DEFAULT)
    assert _same_config("vllm", {**OLD_DEFAULT, KNOB: "balanced"}) == _same_config("vllm", DEFAULT)
    for mode in ("interactivity", "throughput"):
        assert _same_config("vllm", {**OLD_DEFAULT, KNOB: mode}) != _same_config("vllm", DEFAULT)


def test_the_defaults_stored_form_is_found_among_old_and_new_trials() -> None:
    def ctx(*configs: dict[str, Any]) -> Any:
        return cast(Any, SimpleNamespace(configs=list(configs)))

    interactive = {**OLD_DEFAULT, KNOB: "interactivity"}
    assert _default_as_measured(DEFAULT, ctx(OLD_DEFAULT, OLD_DEFAULT, DEFAULT)) == OLD_DEFAULT
    assert _default_as_measured(DEFAULT, ctx(OLD_DEFAULT, DEFAULT, DEFAULT)) == DEFAULT
    assert _default_as_measured(DEFAULT, ctx(interactive)) == DEFAULT  # never measured


def test_old_and_new_default_trials_share_one_load_curve_while_the_knob_is_unvaried() -> None:
    unvaried = unvaried_knobs([OLD_DEFAULT, DEFAULT])
    assert KNOB in unvaried
    assert config_key(OLD_DEFAULT, {"rate_rps": 10.0}, "rate_rps", unvaried) == \
        config_key(DEFAULT, {"rate_rps": 10.0}, "rate_rps", unvaried)


# -- on the shipped H200 knowledge (every stored vLLM trial predates the knob) ----------------

@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TrialStore, Path]]:
    tmp = tmp_path_factory.mktemp("shipped")
    store = TrialStore(f"sqlite:///{tmp / 'k.db'}")
    import_shipped_knowledge(store)
    yield store, tmp / "cache"


def _old_default_trials(store: TrialStore, rate: float) -> set[int]:
    """Stored llama-3-8b H200 trials within 10 % of ``rate`` whose config is the default as it
    was recorded before the knob existed: every knob it sets at its default, this one missing
    (and, in older trials, the parallel sizes too). Read straight from the store."""
    ids = set()
    for t in store.list_trials(TrialFilter(target="vllm", status=TrialStatus.COMPLETE,
                                           hardware_key="h200")):
        if (t.workload_spec.get("params") or {}).get("model") != "llama-3-8b":
            continue
        assert KNOB not in t.config  # the premise: the shipped trials predate the knob
        r = workload_features(t.workload_spec).get("rate_rps", 0.0)
        if (all(k in OLD_DEFAULT and OLD_DEFAULT[k] == v for k, v in t.config.items())
                and r and max(r / rate, rate / r) <= 1.1 + 1e-9):
            ids.add(int(t.id or 0))
    return ids


@pytest.mark.parametrize("measured", [True, False], ids=["measured", "model"])
def test_the_answer_finds_the_default_in_trials_that_lack_the_knob(
        shipped: tuple[TrialStore, Path], measured: bool) -> None:
    store, cache = shipped
    stored = _old_default_trials(store, 60)
    assert len(stored) >= 2
    answer = plan_recommendation(store, RecommendationRequest(
        target="vllm", slo="ttft_p95_ms<=300,tpot_p95_ms<=40", hardware="h200",
        model="llama-3-8b", workload={"rate_rps": 60}, measured=measured),
        models=lambda: ModelCache(store, cache, target="vllm").get())
    assert answer.default is not None and answer.default.verdict is not None
    assert answer.default.verdict.basis == "measured"
    # Its measured windows are exactly those trials (none is left out as "another config").
    assert set(answer.default.verdict.trial_ids) == stored
    assert answer.default.verdict.windows == len(stored)
    assert _same_config("vllm", answer.default.config or {}) == _same_config("vllm", DEFAULT)
    # The terminal view lists what a config changes against the defaults: a config in the old
    # stored form changes one knob, not the knob it lacks.
    changed = answer.model_copy(update={"status": "recommended",
                                        "config": {**OLD_DEFAULT, "block_size": 32}})
    assert _config_text(changed) == "block_size=32 (the rest at the engine defaults)"
    both = changed.model_copy(update={"config": {**DEFAULT, "block_size": 32}})
    assert _config_text(both) == "block_size=32 (the rest at the engine defaults)"

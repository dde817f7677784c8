"""Warm start from knowledge (advisor/warm_start.py): what a new study queues first and in which
order, that nothing is queued twice or against the study's fixed knobs or past its budget, that
the sweep layer keeps its order, and that the queued trials shorten TPE's random start-up."""

from __future__ import annotations

from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from advisor.driver import StudySpec
from advisor.objective import Objective
from advisor.samplers import STARTUP_TRIALS, make_sampler
from advisor.sampling import suggest_config
from advisor.settings import Settings
from advisor.sweeps.spec import CellSpec
from advisor.sweeps.warmstart import warm_start_configs
from advisor.warm_start import BEST_KNOWN, WarmStartConfig, study_warm_start, summary_line
from knowledge import TrialStore
from objectives import parse_slo
from tests.advisor.defaults_store import (
    DEFAULT,
    FAST,
    HARDWARE,
    LOOSE,
    NEAR,
    WITHIN,
    WORKLOAD,
    populate,
)
from tests.scripted_target import ScriptedTarget

QPS = Objective.parse("maximize:qps")


@pytest.fixture
def store(settings: Settings) -> TrialStore:
    s = TrialStore(settings.db_url)
    populate(s)
    return s


def _spec(slo: str, **kw: Any) -> StudySpec:
    fields: dict[str, Any] = dict(name="new", target="scripted", slo=parse_slo(slo),
                                  objective=QPS, workload=WORKLOAD, n_trials=20, seed=0)
    fields.update(kw)
    return StudySpec(**fields)


def _plan(store: TrialStore, settings: Settings, spec: StudySpec,
          said: list[str] | None = None) -> list[WarmStartConfig]:
    return study_warm_start(store, settings, spec, hardware_key=HARDWARE,
                            say=(said if said is not None else []).append)


def test_recommendation_then_best_known_never_repeating_a_queued_config(
        store: TrialStore, settings: Settings) -> None:
    loose = _plan(store, settings, _spec(LOOSE))
    assert [w.source for w in loose] == ["recommendation", *["best-known"] * BEST_KNOWN]
    assert loose[0].config == FAST  # what `advisor recommend` answers for the loose SLO
    configs = [w.config for w in loose]
    assert DEFAULT not in configs and len({str(c) for c in configs}) == len(configs)
    space = ScriptedTarget().space()
    assert all(space.validate_config(c) == c for c in configs)  # complete, inside the space
    # Under the standard SLO the recommender keeps the defaults: the default is already trial 0.
    within = _plan(store, settings, _spec(WITHIN))
    assert [w.source for w in within] == ["best-known"] * BEST_KNOWN
    assert within[0].config == NEAR and DEFAULT not in [w.config for w in within]
    # Without the default trial, the default is a candidate like any other.
    alone = _plan(store, settings, _spec(WITHIN, include_default=False))
    assert alone[0] == WarmStartConfig(DEFAULT, "recommendation")
    # An --enqueue config is not queued again either (it is compared once completed).
    enqueued = _plan(store, settings, _spec(LOOSE, enqueued=({"x": 0.6, "y": 32},)))
    assert FAST not in [w.config for w in enqueued] and len(enqueued) == BEST_KNOWN


def test_budget_fixed_knobs_and_an_empty_store(store: TrialStore, settings: Settings,
                                                tmp_path: Any) -> None:
    # The budget leaves room for one config after the default.
    assert [w.source for w in _plan(store, settings, _spec(LOOSE, n_trials=2))] == [
        "recommendation"]
    assert _plan(store, settings, _spec(LOOSE, n_trials=1)) == []
    # Every known config has mode=a: under mode=b each one is skipped, and said, never an error.
    said: list[str] = []
    assert _plan(store, settings, _spec(LOOSE, fixed={"mode": "b"}), said) == []
    assert said and all(line.startswith(("warm start: a recommendation config skipped (sets ",
                                         "warm start: a best-known config skipped (sets "))
                        and "but the study fixes {'mode': 'b'})" in line for line in said)
    # Another machine's trials are not this machine's knowledge; an empty store has none.
    other = study_warm_start(store, settings, _spec(LOOSE), hardware_key="cpu-elsewhere-64c")
    empty = TrialStore(f"sqlite:///{tmp_path / 'empty.db'}")
    assert other == [] == study_warm_start(empty, settings, _spec(LOOSE), hardware_key=HARDWARE)
    assert summary_line([]) == "warm start: nothing to queue for this SLO, workload and hardware"
    assert summary_line([WarmStartConfig(FAST, "recommendation"),
                         WarmStartConfig(NEAR, "best-known")]) == (
        "warm start: 2 config(s) queued (1 recommendation, 1 best-known)")


def test_sweep_cells_keep_their_order(store: TrialStore) -> None:
    cell = CellSpec(key="scripted/-/w/standard", target="scripted", model=None,
                    workload=WORKLOAD, tier="standard", slo=parse_slo(LOOSE), objective=QPS,
                    trials=5)
    previous = {"x": 0.5, "y": 32, "mode": "a"}  # also the second best known: listed once
    warm = warm_start_configs(store, cell, hardware_key=HARDWARE, previous_best=previous,
                              use_recommendation=False, best_known=3, models=None)
    assert warm == [WarmStartConfig(previous, "previous-run"), WarmStartConfig(FAST, "best-known"),
                    WarmStartConfig({"x": 0.7, "y": 32, "mode": "a"}, "best-known")]


@pytest.mark.parametrize(("queued", "modelled"),
                         [(STARTUP_TRIALS - 1, False), (STARTUP_TRIALS, True)])
def test_queued_trials_count_towards_tpe_start_up(queued: int, modelled: bool) -> None:
    """The project's TPE samples at random until STARTUP_TRIALS (5) trials are complete, enqueued
    ones included: after that many queued configs were measured, the next comes from its model."""
    space = ScriptedTarget().space()
    sampler = make_sampler("tpe", seed=0)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for i in range(queued):
        study.enqueue_trial({"x": 0.3 + 0.02 * i, "y": 8 + i, "mode": "a"})
        trial = study.ask()
        assert suggest_config(trial, space)["x"] == pytest.approx(0.3 + 0.02 * i)
        study.tell(trial, float(i))
    study.ask()
    (frozen,) = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    relative = sampler.sample_relative(study, frozen,
                                       sampler.infer_relative_search_space(study, frozen))
    assert bool(relative) is modelled

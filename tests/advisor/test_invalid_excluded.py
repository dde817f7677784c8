"""An invalid trial (measured, failed its validity check) is kept, and reaches nothing that uses
measurements: no surrogate model, no recommendation or its evidence, no cheat-sheet row, Pareto
plot or rule of thumb, no study "best", no warm start, no sweep best, no noise estimate."""

from __future__ import annotations

import pytest

from advisor.answers.model_based import RecommendationQuery, recommend, recommend_measured
from advisor.cheatsheet import build_cheatsheet
from advisor.driver import StudyDriver
from advisor.objective import Objective
from advisor.settings import Settings
from advisor.sweeps.spec import CellSpec
from advisor.sweeps.warmstart import best_measured
from knowledge import TrialRecord, TrialStatus, TrialStore
from knowledge.cache import KnowledgeModels
from objectives import parse_slo
from tests.advisor.defaults_store import HARDWARE, INVALID, LOOSE, WITHIN, WORKLOAD, populate

QPS = Objective.parse("maximize:qps")


@pytest.fixture
def store(settings: Settings) -> TrialStore:
    s = TrialStore(settings.db_url)
    populate(s, with_invalid=True)
    return s


@pytest.fixture
def invalid(store: TrialStore) -> TrialRecord:
    (trial,) = [t for t in store.list_trials() if t.status == TrialStatus.INVALID]
    assert trial.config == INVALID and trial.metrics["qps"] == 5000.0
    return trial


def test_no_model_is_fitted_on_it(store: TrialStore, invalid: TrialRecord) -> None:
    models = KnowledgeModels.fit(store, score=False)
    assert models.contexts
    for ctx in models.contexts.values():
        assert invalid.id not in ctx.trial_ids and INVALID not in ctx.configs
        assert INVALID not in ctx.failed_configs  # not a failure either: it says nothing
        assert max(m["qps"] for m in ctx.measured) < 1000


def test_no_recommendation_uses_it(store: TrialStore, invalid: TrialRecord) -> None:
    for slo in (WITHIN, LOOSE):
        rec = recommend_measured(store, target="scripted", slo=parse_slo(slo), objective=QPS)
        assert rec.trial is not None and rec.trial.id != invalid.id
        assert rec.considered == 11  # the invalid trial is not even considered
        assert rec.baseline is not None and invalid.id not in rec.baseline.default_trials
        model = recommend(store, RecommendationQuery(target="scripted", slo=slo,
                                                     hardware=HARDWARE,
                                                     workload={"n_vectors": 2000}))
        assert model.config != INVALID
        assert invalid.id not in {e.trial_id for e in model.evidence}
        assert model.predicted["qps"].value < 1000


def test_no_cheatsheet_row_plot_or_rule_uses_it(store: TrialStore, invalid: TrialRecord) -> None:
    sheet = build_cheatsheet(store, target="scripted").to_dict()
    assert sheet["rows"]
    for row in sheet["rows"]:
        assert invalid.id not in row["evidence_trial_ids"] and row["config"] != INVALID
        assert row["evidence_count"] == 11
    for section in sheet["contexts"]:
        assert section["trials"] == 11
        for plot in section["pareto"]:
            assert invalid.id not in plot["trial_ids"]
            assert all(y < 1000 for _, y in plot["points"])


def test_no_best_warm_start_or_sweep_best_uses_it(store: TrialStore, invalid: TrialRecord,
                                                  settings: Settings) -> None:
    result = StudyDriver(store, settings).result("defaults")
    assert result.best is not None and result.best.id != invalid.id
    assert result.count(TrialStatus.INVALID) == 1 and result.n_feasible == result.count(
        TrialStatus.COMPLETE) - sum(not t.feasible for t in result.trials
                                    if t.status == TrialStatus.COMPLETE)
    cell = CellSpec(key="scripted/-/w/standard", target="scripted", model=None,
                    workload=WORKLOAD, tier="standard", slo=parse_slo(WITHIN), objective=QPS,
                    trials=5)
    warm = best_measured(store.list_trials(), cell, 20)
    assert warm and invalid.id not in {t.id for t in warm}
    from advisor.sweeps.runner import SweepRunner

    assert SweepRunner._best(object(), cell, store.list_trials()).id != invalid.id  # type: ignore[arg-type,union-attr]

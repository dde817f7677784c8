"""Never below the default: every answer is compared with the engine default under the same
workload, and "keep the defaults" is the answer when the default meets the SLO and the best is not
better beyond the noise (paired comparison, else repeated default trials, else the margin); both
recommenders, the cheat-sheet and its value lookup say so."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.answers.model_based import (
    ModelRecommendation,
    Recommendation,
    RecommendationQuery,
    recommend,
    recommend_measured,
)
from advisor.answers.versus_default import KEEP_DEFAULTS_MARGIN, decide
from advisor.cheatsheet import build_cheatsheet, knob_value
from advisor.objective import Objective
from advisor.paired import Repeat, compare
from advisor.pairing import PROVENANCE_KEY
from knowledge import TrialStore
from knowledge.cache import KnowledgeModels
from objectives import parse_slo
from tests.advisor.defaults_store import (
    DEFAULT,
    FAST,
    HARDWARE,
    LOOSE,
    NEAR,
    WITHIN,
    WORKLOAD,
    new_study,
    populate,
    write_trial,
)

QPS = Objective.parse("maximize:qps")


@pytest.fixture
def store(tmp_path: Path) -> TrialStore:
    return TrialStore(f"sqlite:///{tmp_path / 'defaults.db'}")


def measured(store: TrialStore, slo: str = WITHIN) -> Recommendation:
    return recommend_measured(store, target="scripted", slo=parse_slo(slo), objective=QPS)


def test_measured_answer_keeps_the_defaults_within_noise(store: TrialStore) -> None:
    populate(store)
    rec = measured(store)
    assert rec.answer == "keep_defaults" and rec.found
    assert rec.trial is not None and rec.trial.config == DEFAULT
    # Every window of the default at this workload counts, whatever role it was recorded with.
    assert rec.verdict is not None and rec.verdict.windows == len(rec.windows) == 4
    assert rec.launch_command == "scripted --x 0.5 --y 8 --mode a"
    assert all(m <= 0 for m in rec.margins.values())
    b = rec.baseline
    assert b is not None and b.basis == "default_repeats"
    assert (b.default_source or "").startswith("measured at this workload")
    assert b.candidate_config == NEAR and len(b.default_trials) == 4
    assert b.default_figures["qps"] == pytest.approx(497.5)  # the median of its 4 windows
    assert b.gain is not None and b.threshold is not None and 0 < b.gain <= b.threshold
    data = rec.to_dict()
    assert data["answer"] == "keep_defaults" and data["recommended"]["config"] == DEFAULT
    assert data["baseline"]["candidate_config"] == NEAR and "scatter" in data["baseline"]["reason"]


def test_measured_answer_returns_a_config_clearly_better_than_the_default(store: TrialStore
                                                                          ) -> None:
    populate(store, near_qps=600.0)
    rec = measured(store)
    assert rec.answer == "config" and rec.trial is not None and rec.trial.config == NEAR
    assert rec.baseline is not None and rec.baseline.gain is not None
    assert rec.baseline.gain > rec.baseline.threshold  # type: ignore[operator]
    loose = measured(store, LOOSE)
    assert loose.answer == "config" and loose.trial is not None and loose.trial.config == FAST


def test_with_one_default_measurement_the_documented_margin_decides(store: TrialStore) -> None:
    populate(store, name="one", default_qps=(500.0,), near_qps=500.0 * (1 + KEEP_DEFAULTS_MARGIN)
             - 1)
    rec = measured(store)
    assert rec.answer == "keep_defaults" and rec.baseline is not None
    assert rec.baseline.basis == "margin" and rec.baseline.threshold == KEEP_DEFAULTS_MARGIN
    other = TrialStore(store.url.replace("defaults.db", "other.db"))
    populate(other, name="one", default_qps=(500.0,), near_qps=500.0 * (1 + KEEP_DEFAULTS_MARGIN)
             + 5)
    assert measured(other).answer == "config"


def _store_paired(store: TrialStore, name: str, near: list[float], default: list[float]) -> None:
    """A stored paired comparison of NEAR against the default, as a study's end writes it."""
    x = [Repeat("best", 2 * i, {"qps": v}, trial_id=None) for i, v in enumerate(near)]
    y = [Repeat("default", 2 * i + 1, {"qps": v}) for i, v in enumerate(default)]
    cmp = compare(x, y, better={"qps": "higher"}, x_config=NEAR, y_config=DEFAULT)
    study = store.get_study(name)
    assert study is not None
    store.update_provenance(study.id or 0, {PROVENANCE_KEY: {"status": "compared",
                                                             **cmp.to_dict()}})


def test_a_paired_comparison_of_the_pair_overrides_the_noise_estimate(store: TrialStore) -> None:
    populate(store)  # unpaired, NEAR is within the default repeats' noise ...
    _store_paired(store, "defaults", [512.0, 513.0, 511.0], [500.0, 499.0, 501.0])
    rec = measured(store)  # ... but paired, interleaved, it is reliably better
    assert rec.answer == "config" and rec.trial is not None and rec.trial.config == NEAR
    assert rec.baseline is not None and rec.baseline.basis == "paired"
    assert rec.baseline.paired is not None and rec.baseline.paired["x_config"] == NEAR
    _store_paired(store, "defaults", [520.0, 480.0, 505.0], [500.0, 515.0, 490.0])
    rec = measured(store)
    assert rec.answer == "keep_defaults" and rec.baseline is not None
    assert rec.baseline.basis == "paired" and "within the noise" in rec.baseline.reason


def test_a_default_missing_the_slo_never_blocks_a_config(store: TrialStore) -> None:
    populate(store)
    rec = measured(store, "recall_at_10>=0.95,p95_latency_ms<=0.48")
    assert rec.answer == "config" and rec.trial is not None
    assert rec.trial.metrics["p95_latency_ms"] <= 0.48
    assert rec.baseline is not None and rec.baseline.basis == "default_misses_slo"


def test_the_default_of_another_study_with_the_same_workload_is_used(store: TrialStore) -> None:
    populate(store, name="search-only", with_default=False, near_qps=510.0)
    assert measured(store).baseline.basis == "no_default"  # type: ignore[union-attr]
    other = new_study(store, "defaults-only")
    for i, qps in enumerate((505.0, 500.0, 495.0)):
        write_trial(store, other, i, DEFAULT, {"qps": qps, "p95_latency_ms": 0.5,
                                               "recall_at_10": 0.99})
    rec = measured(store)
    assert rec.answer == "keep_defaults" and rec.baseline is not None
    # Windows of the default measured at this workload count, whichever study measured them.
    assert (rec.baseline.default_source or "").startswith("measured at this workload")
    assert rec.trial is not None and rec.trial.workload_hash == WORKLOAD.spec_hash


def test_a_candidate_worse_than_a_default_meeting_the_slo_is_never_returned() -> None:
    slo = parse_slo(WITHIN)
    figures = {"qps": 480.0, "p95_latency_ms": 0.5, "recall_at_10": 0.99}
    for values in ((), (500.0,), (490.0, 500.0, 510.0)):
        verdict = decide(objective=QPS, slo=slo, candidate_config=NEAR, candidate_figures=figures,
                         default_config=DEFAULT, default_figures={**figures, "qps": 500.0},
                         default_meets_slo=True, default_objective_values=values)
        assert verdict.answer == "keep_defaults" and verdict.gain is not None
        assert verdict.gain < 0
    lower = decide(objective=Objective.parse("minimize:p95_latency_ms"), slo=slo,
                   candidate_config=NEAR, candidate_figures={"p95_latency_ms": 0.3},
                   default_config=DEFAULT, default_figures={"p95_latency_ms": 0.5},
                   default_meets_slo=True)
    assert lower.answer == "config" and lower.gain == pytest.approx(0.4)  # 40 % lower latency


def test_an_objective_counted_equal_says_why_instead_of_a_zero_gain() -> None:
    """Where the caller sets both configs' objective to one figure (a throughput the offered
    load sets), the reason gives the caller's why, not "+0.0 % against it"."""
    slo = parse_slo(WITHIN)
    figures = {"qps": 500.0, "p95_latency_ms": 0.5, "recall_at_10": 0.99}
    verdict = decide(objective=QPS, slo=slo, candidate_config=NEAR, candidate_figures=figures,
                     default_config=DEFAULT, default_figures=figures, default_meets_slo=True,
                     default_objective_values=(490.0, 500.0, 510.0),
                     equal_because="the offered load sets it")
    assert verdict.answer == "keep_defaults" and verdict.gain == 0
    assert verdict.reason.endswith("qps counts as equal to it: the offered load sets it")
    assert "+0.0" not in verdict.reason
    # without the why, a zero gain is reported as one
    plain = decide(objective=QPS, slo=slo, candidate_config=NEAR, candidate_figures=figures,
                   default_config=DEFAULT, default_figures=figures, default_meets_slo=True)
    assert "+0.0% against it" in plain.reason


@pytest.fixture
def models(store: TrialStore) -> KnowledgeModels:
    populate(store)
    return KnowledgeModels.fit(store, score=False)


def _ask(store: TrialStore, models: KnowledgeModels, slo: str) -> ModelRecommendation:
    return recommend(store, RecommendationQuery(target="scripted", slo=slo, hardware=HARDWARE,
                                                workload={"n_vectors": 2000}), models=models)


def test_model_answer_keeps_the_defaults_within_noise(store: TrialStore,
                                                      models: KnowledgeModels) -> None:
    rec = _ask(store, models, WITHIN)
    assert rec.status == "recommended" and rec.answer == "keep_defaults"
    assert rec.config == DEFAULT and rec.launch_command == "scripted --x 0.5 --y 8 --mode a"
    assert all(m <= 0 for m in rec.conservative_margins.values())  # the usual guarantee holds
    b = rec.baseline
    assert b is not None and b.default_figures_basis == "measured"
    assert b.candidate_config != DEFAULT and b.gain is not None and b.gain <= b.threshold  # type: ignore[operator]
    data = rec.to_dict()
    assert data["answer"] == "keep_defaults" and data["config"] == DEFAULT
    assert data["baseline"]["default_config"] == DEFAULT


def test_model_answer_returns_a_clearly_better_config(store: TrialStore,
                                                      models: KnowledgeModels) -> None:
    rec = _ask(store, models, LOOSE)
    assert rec.answer == "config" and rec.config is not None and rec.config["y"] == 32
    assert rec.baseline is not None and rec.baseline.gain > rec.baseline.threshold  # type: ignore[operator]


def test_cheatsheet_rows_say_keep_the_defaults(store: TrialStore, models: KnowledgeModels
                                               ) -> None:
    sheet = build_cheatsheet(store, target="scripted", models=models)
    by_tier = {r.tier.name: r for r in sheet.rows}
    standard = by_tier["standard"]
    assert standard.tier.slo == WITHIN and standard.answer.answer == "keep_defaults"
    assert by_tier["throughput"].answer.answer == "config"
    row = next(r for r in sheet.to_dict()["rows"] if r["tier"] == "standard")
    assert row["answer"] == "keep_defaults" and row["config"] == DEFAULT
    assert row["comparison"]["reason"]
    md, page = sheet.to_markdown(), sheet.to_html()
    # A keep-the-defaults row says "defaults" instead of repeating every knob.
    assert "| **defaults**: " in md and "x=0.5 y=8 mode=a" not in md.split("**defaults**")[1][:40]
    assert "<b>defaults</b>" in page
    value = knob_value(sheet, "y", target="scripted", tier="standard")
    assert value["answer"] == "keep_defaults" and value["value"] == 8


def test_a_study_alternating_two_configs_yields_their_paired_comparison(store: TrialStore
                                                                        ) -> None:
    """Two co-resident servers measured in turn (no arm labels): compared by config, stored,
    and then used by the measured recommender for exactly that pair."""
    from advisor.pairing import outcome_of_configs

    study = new_study(store, "co-resident")
    figures = {"p95_latency_ms": 0.5, "recall_at_10": 0.99}
    for i, (near, default) in enumerate([(560.0, 500.0), (565.0, 498.0), (558.0, 503.0)]):
        write_trial(store, study, 2 * i, NEAR, {**figures, "qps": near})
        write_trial(store, study, 2 * i + 1, DEFAULT, {**figures, "qps": default})
    trials = store.trials_of_study(study.id or 0)
    data = outcome_of_configs(trials, study, NEAR, DEFAULT)
    assert data["status"] == "compared" and data["x_trials"] == [t.id for t in trials[0::2]]
    assert next(m for m in data["metrics"] if m["metric"] == "qps")["verdict"] == "better"
    assert outcome_of_configs(trials[:4], study, NEAR, DEFAULT)["status"] == "refused"
    store.update_provenance(study.id or 0, {PROVENANCE_KEY: data})
    rec = measured(store)
    assert rec.answer == "config" and rec.trial is not None and rec.trial.config == NEAR
    assert rec.baseline is not None and rec.baseline.basis == "paired"

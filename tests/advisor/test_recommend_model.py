"""The model-based recommender: never answers with a config that misses the SLO by the one rule
(its measured windows at the workload, else its conservative bound), is held against held-out
measurements, and flags questions outside its data."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from advisor.answers.model_based import RecommendationQuery, recommend
from advisor.answers.rule import measured_verdict, windows_needed
from advisor.errors import SLOParseError, UnknownTargetError
from advisor.evaluation import holdout_feasibility
from knowledge import TrialStore
from knowledge.cache import KnowledgeModels
from knowledge.surrogates import context_of, workload_features
from objectives import parse_slo
from tests.knowledge.synthetic_trials import HARDWARE, populate, truth


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> TrialStore:
    s = TrialStore(f"sqlite:///{tmp_path_factory.mktemp('rec') / 'k.db'}")
    populate(s, n_configs=40, sizes=(1000, 2000, 4000), repeats=2)
    return s


@pytest.fixture(scope="module")
def models(store: TrialStore) -> KnowledgeModels:
    return KnowledgeModels.fit(store)


def ask(store: TrialStore, models: KnowledgeModels, slo: str, **kw: object):  # type: ignore[no-untyped-def]
    return recommend(store, RecommendationQuery(target="scripted", slo=slo, **kw),  # type: ignore[arg-type]
                     models=models)


SLOS = ["p95_latency_ms<=0.5", "p95_latency_ms<=1,recall_at_10>=0.8",
        "p95_latency_ms<=0.3,recall_at_10>=0.7", "recall_at_10>=0.9", "p95_latency_ms<=2"]


@pytest.mark.parametrize("slo", SLOS)
@pytest.mark.parametrize("n_vectors", [1000, 2000, 3000])
def test_conservative_bound_of_the_answer_meets_the_slo(store: TrialStore,
                                                        models: KnowledgeModels, slo: str,
                                                        n_vectors: int) -> None:
    rec = ask(store, models, slo, workload={"n_vectors": n_vectors})
    assert rec.status in ("recommended", "no_feasible_config", "undecided")
    bounds = parse_slo(slo).bounds
    if rec.status == "undecided":  # nothing promised; the straddling candidate is named
        assert rec.config is None and rec.closest is not None
        verdict = rec.closest["verdict"]
        assert verdict["basis"] == "predicted" and verdict["meets_slo"] is False
        assert verdict["text"].startswith("undecided")
        low_ends = {b.metric: rec.closest["predicted"][b.metric] for b in bounds}
        assert all(b.holds(low_ends[b.metric]["low" if b.op == "<=" else "high"])
                   for b in bounds)
        assert rec.tune_command is not None and "--trials" in rec.tune_command
    if rec.status == "recommended":
        assert rec.config is not None and rec.launch_command
        assert rec.verdict is not None and rec.verdict.meets
        for b in bounds:
            p = rec.predicted[b.metric]
            assert p.low <= p.value <= p.high
            if rec.verdict.basis == "predicted":
                assert b.holds(p.high if b.op == "<=" else p.low), (b, p)
        if rec.verdict.basis == "predicted":
            assert all(m <= 0 for m in rec.conservative_margins.values())
        else:  # measured windows at the workload decided: at least 2 of 3 met every bound
            assert rec.verdict.windows_met >= 2 * rec.verdict.windows / 3
        # and the truth agrees: the surface is known
        true = truth(rec.config, n_vectors)
        slack = 1.15  # measurement noise is 4 %; the interval is conservative, not exact
        for b in bounds:
            v = true[b.metric]
            assert (v <= b.threshold * slack) if b.op == "<=" else (v >= b.threshold / slack)
        assert rec.evidence and rec.confidence in ("high", "medium", "low")
        d = rec.to_dict()
        json.dumps(d)
        assert d["predicted"][bounds[0].metric]["basis"] == "predicted"
    else:
        assert rec.config is None and rec.confidence == "none" and rec.tune_command


def test_impossible_slo_is_no_feasible_config_with_a_tune_command(
        store: TrialStore, models: KnowledgeModels) -> None:
    rec = ask(store, models, "p95_latency_ms<=0.001", workload={"n_vectors": 2000})
    assert rec.status == "no_feasible_config" and rec.config is None
    assert rec.closest is not None and rec.tune_command.startswith("advisor tune --target scripted")


def test_reused_predictions_equal_predicting_every_config(models: KnowledgeModels) -> None:
    """An answer predicts the measured configs once, to rank its seeds, and reuses those rows
    when it predicts them with the one-knob variations: the same figures, in the asked order."""
    from advisor.answers.model_based import _predict_reusing

    ctx = next(iter(models.contexts.values()))
    measured = ctx.configs[:10]
    workload = dict(ctx.workloads[0].features)
    metrics = sorted(ctx.metrics)
    known = ctx.predict(measured, workload, metrics)
    variants = [{**c, "x": round(c["x"] + 0.01, 3)} for c in ctx.configs[10:14]]
    for asked in ([variants[0], *measured[3:1:-1], *variants[1:], measured[0]], measured[::-1]):
        reused = _predict_reusing(ctx, asked, workload, metrics, measured, known)
        direct = ctx.predict(asked, workload, metrics)
        assert set(reused) == set(direct) == set(metrics)
        for m in metrics:
            for got, want in zip(reused[m], direct[m], strict=True):
                assert got.tolist() == pytest.approx(want.tolist(), rel=1e-12)


def test_held_out_feasible_but_infeasible_rate_is_low(store: TrialStore) -> None:
    trials = store.list_trials()
    slos = [parse_slo(s) for s in SLOS]
    audit = holdout_feasibility(context_of(trials[0]), trials, slos=slos, folds=5)
    assert audit.pairs == len(trials) * len(slos)
    assert audit.predicted_feasible > 20  # the filter is not vacuous
    rate = audit.false_feasible_rate
    assert rate is not None and rate <= 0.1, audit.to_dict()
    assert audit.recommendations > 0
    assert (audit.recommendation_infeasible_rate or 0.0) <= 0.2
    print(f"held-out false-feasible rate: {rate:.1%} of {audit.predicted_feasible}")


def test_other_hardware_is_not_covered(store: TrialStore, models: KnowledgeModels) -> None:
    rec = ask(store, models, "p95_latency_ms<=1", hardware="nvidia-h100")
    assert rec.status == "not_covered" and rec.confidence == "none" and rec.config is None
    assert HARDWARE in rec.confidence_reason
    assert rec.tune_command and rec.tune_command.startswith("advisor tune --target scripted")


def test_other_model_is_not_covered(store: TrialStore, models: KnowledgeModels) -> None:
    rec = ask(store, models, "p95_latency_ms<=1", model="llama-3-70b")
    assert rec.status == "not_covered" and "llama-3-70b" in rec.confidence_reason


def test_far_workload_is_not_covered(store: TrialStore, models: KnowledgeModels) -> None:
    rec = ask(store, models, "p95_latency_ms<=1", workload={"n_vectors": 1_000_000})
    assert rec.status == "not_covered" and rec.config is None
    assert rec.borrowed_workload is not None  # names the nearest measured workload
    assert "n_base=1000000" in (rec.tune_command or "")


def test_close_workload_is_borrowed_and_named(store: TrialStore, models: KnowledgeModels
                                              ) -> None:
    rec = ask(store, models, "p95_latency_ms<=2", workload={"n_vectors": 5000})
    assert rec.status == "recommended"
    assert rec.borrowed_workload is not None
    assert rec.borrowed_workload["name"] == "scripted-4000"
    assert math.isclose(rec.borrowed_workload["factor"], 1.25, rel_tol=1e-3)
    assert rec.confidence in ("low", "medium")
    exact = ask(store, models, "p95_latency_ms<=2", workload={"n_vectors": 4000})
    assert exact.borrowed_workload is None


def test_bad_input_raises_advisor_errors(store: TrialStore, models: KnowledgeModels) -> None:
    with pytest.raises(UnknownTargetError):
        recommend(store, RecommendationQuery(target="nope", slo="qps>=1"), models=models)
    with pytest.raises(SLOParseError):
        ask(store, models, "p95_latency_ms<=")
    with pytest.raises(SLOParseError):
        ask(store, models, "ttft_p95_ms<=100")  # not a metric the scripted target reports


def test_recommend_fits_on_demand_without_models(tmp_path: Path) -> None:
    s = TrialStore(f"sqlite:///{tmp_path / 'k.db'}")
    populate(s, n_configs=12, sizes=(2000,), repeats=1)
    rec = recommend(s, RecommendationQuery(target="scripted", slo="p95_latency_ms<=5"))
    assert rec.status == "recommended"
    empty = TrialStore(f"sqlite:///{tmp_path / 'e.db'}")
    none = recommend(empty, RecommendationQuery(target="scripted", slo="p95_latency_ms<=5"))
    assert none.status == "not_covered" and none.tune_command


def _shipped_faiss_files() -> list[Path]:
    from knowledge.transfer import shipped_files

    return shipped_files(pattern="cpu-faiss-*")


@pytest.fixture(scope="module", params=_shipped_faiss_files() or [None],
                ids=lambda p: p.stem if p else "none")
def shipped_faiss(request: pytest.FixtureRequest,
                  tmp_path_factory: pytest.TempPathFactory) -> TrialStore:
    """One shipped FAISS set (one machine: one hardware context) in a store of its own."""
    from knowledge.transfer import import_file

    s = TrialStore(f"sqlite:///{tmp_path_factory.mktemp('shipped') / 'k.db'}")
    if request.param is not None:
        import_file(s, request.param)
    return s


def test_shipped_faiss_answers_follow_the_one_rule(shipped_faiss: TrialStore) -> None:
    """Every shipped FAISS answer meets its SLO by the rule (advisor/answers/rule.py): a config
    measured at the asked size is judged by its windows there (k of n, those very trials), one
    never measured there by the conservative end of every interval."""
    trials = shipped_faiss.list_trials()
    if not trials:
        pytest.skip("no shipped FAISS knowledge")
    by_id = {t.id: t for t in trials}
    hardware = trials[0].hardware_key
    models = KnowledgeModels.fit(shipped_faiss, score=False)
    answered = measured = 0
    for slo in ("p95_latency_ms<=0.2,recall_at_10>=0.95", "recall_at_10>=0.9",
                "p95_latency_ms<=0.1,recall_at_10>=0.9", "p99_latency_ms<=0.5"):
        for n in (2000, 5000, 8000):
            rec = recommend(shipped_faiss, RecommendationQuery(
                target="faiss", slo=slo, hardware=hardware, workload={"n_vectors": n}),
                models=models)
            if rec.status == "recommended":
                answered += 1
                verdict, config = rec.verdict, rec.config
                assert verdict is not None and verdict.meets is True, rec.to_dict()
                assert config is not None
                if verdict.basis == "measured":
                    measured += 1
                    # Its windows are stored trials of this config at this size, and they give
                    # the verdict again: at least 2/3 of them meet every bound.
                    windows = [by_id[i] for i in verdict.trial_ids]
                    assert len(windows) == verdict.windows > 0, rec.to_dict()
                    for t in windows:
                        assert abs(math.log(workload_features(t.workload_spec)["n_vectors"] / n)
                                   ) <= math.log(1.1), (t.id, n)
                        assert {k: t.config[k] for k in config if k in t.config} == {
                            k: v for k, v in config.items() if k in t.config}, t.id
                    again = measured_verdict(parse_slo(slo), [t.metrics for t in windows],
                                             rec.quality_headroom, verdict.trial_ids)
                    assert again == verdict, rec.to_dict()
                    assert verdict.windows_met >= windows_needed(verdict.windows)
                else:
                    assert verdict.basis == "predicted", rec.to_dict()
                    assert all(m <= 0 for m in rec.conservative_margins.values()), rec.to_dict()
                # A set measured on a larger machine may answer with more threads than this
                # one has: then there is no launch command here, and the answer says why.
                if int(config["threads"]) <= (os.cpu_count() or 1):
                    assert "faiss.index_factory" in (rec.launch_command or ""), rec.to_dict()
                else:
                    assert rec.launch_command is None, rec.to_dict()
                    assert "launch command unavailable" in rec.confidence_reason
    assert answered >= 6 and measured > 0  # both halves of the rule ran


def test_shipped_faiss_held_out_false_feasible_rate(shipped_faiss: TrialStore) -> None:
    trials = [t for t in shipped_faiss.list_trials() if t.status == "complete"]
    if not trials:
        pytest.skip("no shipped FAISS knowledge")
    audit = holdout_feasibility(context_of(trials[0]), trials, folds=5)
    rate = audit.false_feasible_rate
    print(f"shipped FAISS: {audit.false_feasible} of {audit.predicted_feasible} held-out "
          f"(trial, SLO) pairs predicted feasible measured infeasible ({rate})")
    assert audit.predicted_feasible >= 20
    assert rate is not None and rate <= 0.1, audit.to_dict()

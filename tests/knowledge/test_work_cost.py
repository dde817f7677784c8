"""The fitted cost law of vector search: it recovers known unit costs, never gives work a
negative cost, turns work into a rate the way batched calls do, applies only to the metrics and
contexts it describes, and lets a surrogate predict a sum of stages that no power law fits."""

from __future__ import annotations

import numpy as np
import pytest

from knowledge.surrogates import FeatureEncoder, IntervalRegressor, cost_law, derived_features
from knowledge.work_cost import CostLaw, WorkCost


def _work(n: int, seed: int) -> np.ndarray:
    """Two stages whose work spans four decades each, independently."""
    rng = np.random.default_rng(seed)
    return 10.0 ** rng.uniform(0, 4, size=(n, 2))


def test_a_noise_free_time_law_is_recovered() -> None:
    work = _work(80, 0)
    cat = (np.arange(80) % 2).astype(float)  # two categories with fixed costs of their own
    X = np.column_stack([np.log(work), cat, 1 - cat])
    time = 2e-3 * work[:, 0] + 5e-5 * work[:, 1] + np.where(cat == 1, 0.3, 0.1)
    law = CostLaw(terms=(0, 1), fixed=(2, 3))
    cost = WorkCost(law=law).fit(X, np.log(time))
    # Costs: the two stages, both categories' fixed costs, the rows in neither (none here).
    np.testing.assert_allclose(cost.coef_[:4], [2e-3, 5e-5, 0.3, 0.1], rtol=1e-6)
    np.testing.assert_allclose(cost.predict(X), np.log(time), atol=1e-6)


def test_a_rate_shares_work_among_busy_threads_and_a_call_among_its_queries() -> None:
    work = _work(80, 1)
    rng = np.random.default_rng(2)
    busy = rng.integers(1, 9, 80).astype(float)
    batch = busy * rng.integers(1, 50, 80)
    seconds_per_query = (1e-6 * work[:, 0] + 2e-8 * work[:, 1] + 1e-5) / busy + 3e-4 / batch
    qps = 1 / seconds_per_query
    X = np.column_stack([np.log(work), np.log(busy), np.log(batch)])
    law = CostLaw(terms=(0, 1), rate=True, parallel=2, per_call=3)
    cost = WorkCost(law=law).fit(X, np.log(qps))
    np.testing.assert_allclose(cost.coef_, [1e-6, 2e-8, 1e-5, 3e-4], rtol=1e-6)
    # More busy threads: more queries per second; more work per query: fewer.
    more_threads, more_work = X.copy(), X.copy()
    more_threads[:, 2] += np.log(2)
    more_work[:, 0] += np.log(2)
    assert np.all(cost.predict(more_threads) > cost.predict(X))
    assert np.all(cost.predict(more_work) < cost.predict(X))


def test_work_never_gets_a_negative_cost() -> None:
    """Noise that makes a stage look like it saves time cannot buy it a negative unit cost:
    predicted time never falls when any stage does more work."""
    work = _work(60, 3)
    rng = np.random.default_rng(4)
    time = 1e-3 * work[:, 0] * np.exp(rng.normal(0, 0.3, 60)) / (1 + 1e-3 * work[:, 1])
    X = np.log(work)
    cost = WorkCost(law=CostLaw(terms=(0, 1))).fit(X, np.log(time))
    assert np.all(cost.coef_ >= 0)
    for j in (0, 1):
        more = X.copy()
        more[:, j] += 1.0
        assert np.all(cost.predict(more) >= cost.predict(X) - 1e-12)


def test_a_missing_stage_costs_nothing_and_predictions_stay_in_range() -> None:
    work = _work(40, 5)
    X = np.log(work)
    X[:20, 1] = np.nan  # half the rows have no second stage
    time = 1e-3 * work[:, 0] + np.where(np.isnan(X[:, 1]), 0.0, 1e-4 * work[:, 1])
    cost = WorkCost(law=CostLaw(terms=(0, 1))).fit(X, np.log(time))
    np.testing.assert_allclose(cost.predict(X), np.log(time), atol=1e-6)
    far = np.array([[40.0, 40.0]])  # e^40 units of work: clipped to the widened range
    assert cost.predict(far)[0] == cost.hi_


def test_the_law_applies_to_single_query_times_and_qps_of_vector_search() -> None:
    wl = {"n_vectors": 8000.0, "dim": 384.0, "k": 10.0}
    configs = [{"index_type": "ivf_flat", "nlist": 64, "nprobe": 4, "batch_size": 8,
                "threads": 2},
               {"index_type": "hnsw", "ef_search": 32, "hnsw_m": 16, "batch_size": 1,
                "threads": 1}]
    enc = FeatureEncoder().fit(configs, [wl, wl])
    p95, qps = cost_law(enc, "p95_latency_ms"), cost_law(enc, "qps")
    assert p95 is not None and not p95.rate and p95.parallel is None
    assert qps is not None and qps.rate
    assert qps.parallel == enc.columns_.index("busy_threads")
    assert qps.per_call == enc.columns_.index("batch_size")
    assert [enc.columns_[j] for j in p95.fixed] == ["index_type=hnsw", "index_type=ivf_flat"]
    assert {enc.columns_[j] for j in p95.terms} >= {"work_graph", "work_queue", "work_coarse",
                                                   "work_flat_scan"}
    # Not a per-query time or rate: the batch's wall time, recall, build time.
    for metric in ("batch_p95_latency_ms", "recall_at_10", "build_time_s"):
        assert cost_law(enc, metric) is None
    # No per-query work (LLM serving): no law, whatever the metric.
    llm = FeatureEncoder().fit([{"max_num_seqs": 64}, {"max_num_seqs": 128}],
                               [{"rate_rps": 8.0}, {"rate_rps": 16.0}])
    assert cost_law(llm, "e2e_p95_ms") is None and cost_law(llm, "qps") is None


def test_queue_work_is_quadratic_in_ef_up_to_the_graph() -> None:
    wl = {"n_vectors": 8000.0, "dim": 384.0, "k": 10.0}
    hnsw = derived_features({"ef_search": 64, "hnsw_m": 16}, wl)
    assert hnsw["work_queue"] == 2 * 64**2
    assert hnsw["query_work"] == 64 * 32 * 384 + 2 * 64**2
    # IVF-HNSW: the queue holds max(ef, nprobe) centroids, at most nlist of them.
    assert derived_features({"nlist": 500, "nprobe": 50, "ef_search": 16, "hnsw_m": 4},
                            wl)["work_queue"] == 2 * 50**2
    assert derived_features({"nlist": 1784, "nprobe": 15, "ef_search": 4000, "hnsw_m": 17},
                            wl)["work_queue"] == 2 * 1784**2


def _stages(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """log(time) of a sum of two stages with fixed costs, plus noise: its log is no linear
    function of the stages' logs, and which stage dominates changes across the space."""
    rng = np.random.default_rng(seed)
    work = _work(n, seed)
    time = (1e-3 * work[:, 0] + 2e-5 * work[:, 1] + 0.05) * np.exp(rng.normal(0, 0.03, n))
    return np.log(work), np.log(time)


def test_a_surrogate_with_the_law_predicts_a_sum_of_stages() -> None:
    X, y = _stages(120, 6)
    Xt, yt = _stages(300, 7)
    law = CostLaw(terms=(0, 1))
    plain = IntervalRegressor().fit(X, y)
    with_law = IntervalRegressor(cost_law=law).fit(X, y)
    assert with_law.cost_law_ == law
    err_plain = float(np.mean(np.abs(np.exp(plain.predict(Xt) - yt) - 1)))
    err_law = float(np.mean(np.abs(np.exp(with_law.predict(Xt) - yt) - 1)))
    assert err_law < 0.06 and err_law < 0.6 * err_plain, (err_law, err_plain)
    centre, low, high = with_law.predict_interval(Xt)
    assert np.all(low <= centre) and np.all(centre <= high)


@pytest.mark.parametrize("useful", [True, False])
def test_a_pilot_out_of_bag_picks_one_kind_of_member(useful: bool) -> None:
    """Members all use the law, or none does, whichever did better out of bag; the pilot's
    losers are dropped, so the forest keeps its size."""
    X, y = _stages(120, 10)
    if not useful:  # the figure no longer depends on the work the law reads
        rng = np.random.default_rng(11)
        X = np.column_stack([X, rng.uniform(0, 1, len(y))])
        y = np.sin(6 * X[:, 2])
        X[:, :2] = rng.permutation(X[:, :2])
    reg = IntervalRegressor(cost_law=CostLaw(terms=(0, 1)), n_trees=24).fit(X, y)
    errors = reg.oob_error_
    assert set(errors) == {"cost-law", "plain"}
    kinds = {member[2] is not None for member in reg.estimator_}
    assert len(reg.estimator_) == 24 and len(kinds) == 1
    assert kinds == {reg.cost_law_ is not None}
    assert (reg.cost_law_ is not None) == (errors["cost-law"] <= errors["plain"])
    assert (reg.cost_law_ is not None) == useful


def test_too_few_distinct_rows_fit_no_law() -> None:
    X, y = _stages(15, 8)
    reg = IntervalRegressor(cost_law=CostLaw(terms=(0, 1))).fit(X, y)
    assert reg.cost_law_ is None


@pytest.mark.parametrize("rate", [False, True])
def test_a_fit_that_never_converges_leaves_a_constant_feature(
        rate: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    import scipy.optimize

    def stuck(*args: object, **kwargs: object) -> None:
        raise RuntimeError("Maximum number of iterations reached.")

    monkeypatch.setattr(scipy.optimize, "nnls", stuck)
    X, y = _stages(30, 9)
    cost = WorkCost(law=CostLaw(terms=(0, 1), rate=rate)).fit(X, y)
    assert np.all(cost.coef_ == 0)
    assert len(set(cost.predict(X).tolist())) == 1

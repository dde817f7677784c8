"""Surrogate models: calibrated intervals, held-out accuracy on a known surface, grouped CV,
transforms that keep predictions physical, and the model cache's freshness rules."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest

from knowledge import TrialStore
from knowledge.cache import KnowledgeModels, ModelCache, data_key
from knowledge.surrogates import (
    FeatureEncoder,
    IntervalRegressor,
    context_of,
    cross_validate,
    fit_context,
    workload_features,
)
from tests.knowledge.synthetic_trials import populate, random_config, truth


@pytest.fixture
def syn_store(tmp_path: Path) -> TrialStore:
    store = TrialStore(f"sqlite:///{tmp_path / 'k.db'}")
    populate(store)
    return store


def test_workload_features_read_llm_and_vector_specs() -> None:
    llm = {"kind": "llm-serving", "params": {"arrival": {"process": "poisson", "rate_rps": 60},
                                             "prompt_len": {"median": 256}, "output_len": 128}}
    assert workload_features(llm) == {"rate_rps": 60.0, "prompt_len": 256.0, "output_len": 128.0}
    vec = {"kind": "vector-search", "params": {"dataset": "stdlib-docs", "n_base": 8000, "k": 10}}
    assert workload_features(vec) == {"n_vectors": 8000.0, "dim": 384.0, "k": 10.0}
    assert workload_features({"n_vectors": 5e4, "dim": 128}) == {"n_vectors": 5e4, "dim": 128.0}


def test_encoder_marks_inactive_knobs_missing_and_one_hots_strings() -> None:
    enc = FeatureEncoder().fit([{"mode": "a", "y": 4}, {"mode": "b", "y": 8, "z": 2}], [{}, {}])
    X = enc.transform([{"mode": "a", "y": 4}], [{}])
    row = dict(zip(enc.columns_, X[0], strict=True))
    assert row["mode=a"] == 1.0 and row["mode=b"] == 0.0
    assert math.isclose(row["y"], math.log(4)) and math.isnan(row["z"])


@pytest.mark.parametrize("family", ["forest", "gp"])
def test_intervals_are_ordered_and_cover_held_out_points(family: str) -> None:
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, size=(160, 3))
    y = np.sin(3 * X[:, 0]) + X[:, 1] + rng.normal(0, 0.1, 160)
    reg = IntervalRegressor(family=family).fit(X[:120], y[:120])
    centre, low, high = reg.predict_interval(X[120:])
    assert np.all(low <= centre) and np.all(centre <= high)
    coverage = float(np.mean((y[120:] >= low) & (y[120:] <= high)))
    assert 0.75 <= coverage <= 1.0, coverage


def test_no_mape_for_a_metric_measured_at_zero(syn_store: TrialStore) -> None:
    """A relative error of a measured zero is undefined: a count that is mostly 0 (cut
    requests) gets no MAPE (the cheat-sheet printed 10^15 %), still its coverage."""
    trials = syn_store.list_trials()
    for i, t in enumerate(trials):
        t.metrics = {**t.metrics, "cut_requests": float(i % 3 == 0)}
    scores = cross_validate(context_of(trials[0]), trials, folds=3,
                            metrics=["cut_requests", "qps"])
    assert scores["cut_requests"].mape is None
    assert scores["cut_requests"].coverage is not None
    assert scores["qps"].mape is not None


def test_regressor_validates_family_and_fit_state() -> None:
    with pytest.raises(ValueError, match="family"):
        IntervalRegressor(family="magic")
    with pytest.raises(RuntimeError, match="not fitted"):
        IntervalRegressor().predict(np.zeros((1, 2)))


def test_held_out_accuracy_on_a_known_surface(syn_store: TrialStore) -> None:
    trials = syn_store.list_trials()
    key = context_of(trials[0])
    scores = cross_validate(key, trials, folds=5)
    # 32 training configs of a smooth 3-knob surface with 4 % noise: a broken model (or one fitted
    # on the wrong scale) lands far above these bounds; a mean predictor sits near 100 %.
    assert scores["p95_latency_ms"].mape is not None and scores["p95_latency_ms"].mape < 0.25
    assert scores["qps"].mape is not None and scores["qps"].mape < 0.25
    for s in scores.values():
        assert s.n_groups == 40  # grouped by config: repeats never straddle a split
        assert s.coverage is not None and 0.7 <= s.coverage <= 1.0


def test_predictions_stay_physical_and_track_truth(syn_store: TrialStore) -> None:
    trials = syn_store.list_trials()
    ctx = fit_context(context_of(trials[0]), trials, score=False)
    rng = random.Random(7)
    configs = [random_config(rng) for _ in range(30)]
    pred = ctx.predict(configs, {"n_vectors": 2000.0, "dim": 64.0})
    assert np.all(pred["qps"][1] > 0) and np.all(pred["p95_latency_ms"][1] > 0)
    assert np.all((pred["recall_at_10"][1] >= 0) & (pred["recall_at_10"][2] <= 1))
    true_lat = np.array([truth(c, 2000)["p95_latency_ms"] for c in configs])
    assert np.corrcoef(np.log(true_lat), np.log(pred["p95_latency_ms"][0]))[0, 1] > 0.9


def test_cache_refits_only_when_the_store_changes(syn_store: TrialStore, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    cache = ModelCache(syn_store, tmp_path / "cache")
    first = cache.get()
    assert first.data == data_key(syn_store) and cache.path is not None and cache.path.exists()

    def no_fit(*args: object, **kwargs: object) -> KnowledgeModels:
        raise AssertionError("refitted although the store did not change")

    monkeypatch.setattr(KnowledgeModels, "fit", no_fit)
    assert cache.get() is first
    fresh = ModelCache(syn_store, tmp_path / "cache")  # a new process: loads from disk
    loaded = fresh.get()
    assert loaded.data == first.data and set(loaded.contexts) == set(first.contexts)
    monkeypatch.undo()
    populate(syn_store, n_configs=3, sizes=(8000,), repeats=1, seed=3, study_prefix="more")
    refreshed = fresh.get()
    assert refreshed.data.trials == first.data.trials + 3
    assert fresh.get(refit=False) is refreshed


def test_noise_floor_comes_from_repeats_only(syn_store: TrialStore) -> None:
    from knowledge.surrogates import noise_floor

    trials = syn_store.list_trials()
    floor, n = noise_floor(trials, "p95_latency_ms")
    # 40 configs x 3 sizes x 2 repeats, 4 % log-normal noise: pairwise error ~ 4 % * sqrt(2)
    assert n == 240 and floor is not None and 0.02 < floor < 0.1
    single = [t for t in trials if t.number % 2 == 0]  # one measurement per config and size
    assert noise_floor(single, "p95_latency_ms") == (None, 0)


def test_stores_of_the_same_imports_share_one_fit(syn_store: TrialStore, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from knowledge.cache import content_key
    from knowledge.transfer import export_jsonl, import_file

    data = tmp_path / "data.jsonl"
    with data.open("w") as f:
        export_jsonl(syn_store, f)
    shared = tmp_path / "shared"
    stores = [TrialStore(f"sqlite:///{tmp_path / f'fresh{i}.db'}") for i in range(3)]
    for store in stores:
        import_file(store, data)
    assert content_key(stores[0]) is not None
    assert content_key(stores[0]) == content_key(stores[1])
    assert content_key(syn_store) is None  # measured here, not imported
    first = ModelCache(stores[0], tmp_path / "c0", shared_dir=shared).get()

    def no_fit(*args: object, **kwargs: object) -> KnowledgeModels:
        raise AssertionError("fitted again although the same imports were fitted before")

    monkeypatch.setattr(KnowledgeModels, "fit", no_fit)
    second = ModelCache(stores[1], tmp_path / "c1", shared_dir=shared).get()
    assert second.data == first.data and set(second.contexts) == set(first.contexts)
    monkeypatch.undo()
    # One more trial, measured in the third store: its content is its own, and so is its fit.
    populate(stores[2], n_configs=1, sizes=(8000,), repeats=1, seed=5, study_prefix="local")
    assert content_key(stores[2]) is None
    third = ModelCache(stores[2], tmp_path / "c2", shared_dir=shared).get()
    assert third.data.trials == first.data.trials + 1


def test_fresh_stores_fitting_at_once_fit_the_shared_content_once(
        syn_store: TrialStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two caches that need the same shared fit at the same moment (two processes on fresh
    stores, or two test workers) take turns on its lock file: one fits, the other loads."""
    import threading
    import time

    from knowledge.transfer import export_jsonl, import_file

    data = tmp_path / "data.jsonl"
    with data.open("w") as f:
        export_jsonl(syn_store, f)
    stores = [TrialStore(f"sqlite:///{tmp_path / f'fresh{i}.db'}") for i in range(2)]
    for store in stores:
        import_file(store, data)
    real_fit = KnowledgeModels.fit.__func__  # type: ignore[attr-defined]
    fits: list[float] = []

    def slow_fit(cls: type[KnowledgeModels], *args: object, **kwargs: object) -> KnowledgeModels:
        fits.append(time.monotonic())
        time.sleep(0.5)  # both caches are surely waiting on the shared file by now
        return real_fit(cls, *args, **kwargs)

    monkeypatch.setattr(KnowledgeModels, "fit", classmethod(slow_fit))
    results: list[KnowledgeModels] = []
    threads = [threading.Thread(target=lambda i=i: results.append(
        ModelCache(stores[i], tmp_path / f"c{i}", shared_dir=tmp_path / "shared").get()))
        for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(results) == 2 and len(fits) == 1, fits
    assert results[0].fitted_at == results[1].fitted_at


def _two_target_stores(tmp_path: Path, n: int) -> list[TrialStore]:
    """``n`` fresh stores holding the same imported trials of two targets."""
    from knowledge.transfer import export_jsonl, import_file

    source = TrialStore(f"sqlite:///{tmp_path / 'two-targets.db'}")
    populate(source, n_configs=10, sizes=(1000, 4000), repeats=2, seed=11, study_prefix="a")
    populate(source, n_configs=10, sizes=(1000, 4000), repeats=2, seed=12, study_prefix="b",
             target="other")
    data = tmp_path / "two-targets.jsonl"
    with data.open("w") as f:
        export_jsonl(source, f)
    source.close()
    stores = [TrialStore(f"sqlite:///{tmp_path / f'fresh{i}.db'}") for i in range(n)]
    for store in stores:
        import_file(store, data)
    return stores


def test_a_target_cache_takes_its_contexts_from_the_fit_of_every_target(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A served store fits every target; a later one-target command on the same content (a
    fresh store of the same imports) takes its contexts out of that fit instead of fitting
    them again, and they answer exactly as a fit of that target alone does."""
    stores = _two_target_stores(tmp_path, 2)
    shared = tmp_path / "shared"
    whole = ModelCache(stores[0], tmp_path / "c0", shared_dir=shared).get()
    assert {k.target for k in whole.contexts} == {"scripted", "other"}

    def no_fit(*args: object, **kwargs: object) -> KnowledgeModels:
        raise AssertionError("fitted a target although every target was fitted on this content")

    monkeypatch.setattr(KnowledgeModels, "fit", no_fit)
    part = ModelCache(stores[1], tmp_path / "c1", shared_dir=shared, target="other").get()
    assert set(part.contexts) == {k for k in whole.contexts if k.target == "other"}
    assert part.data == whole.data == data_key(stores[1])
    # Kept as that target's own shared fit: the next one loads it without the others.
    again = ModelCache(stores[1], tmp_path / "c2", shared_dir=shared, target="other").get()
    assert set(again.contexts) == set(part.contexts)
    monkeypatch.undo()
    alone = KnowledgeModels.fit(stores[1], target="other")
    assert set(alone.contexts) == set(part.contexts)
    for key, ctx in alone.contexts.items():
        mine = part.contexts[key]
        workload = ctx.features[0]
        got, want = mine.predict(ctx.configs, workload), ctx.predict(ctx.configs, workload)
        assert set(got) == set(want)
        for metric, (value, low, high) in want.items():
            np.testing.assert_allclose(got[metric][0], value, rtol=1e-12)
            np.testing.assert_allclose(got[metric][1], low, rtol=1e-12)
            np.testing.assert_allclose(got[metric][2], high, rtol=1e-12)
            assert mine.metrics[metric].score == ctx.metrics[metric].score


def test_a_target_cache_waits_for_a_fit_of_every_target_under_way(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While another process fits every target on the same content, a one-target cache waits
    for that fit and takes its part, rather than fitting the same trials beside it."""
    import threading
    import time

    stores = _two_target_stores(tmp_path, 2)
    real_fit = KnowledgeModels.fit.__func__  # type: ignore[attr-defined]
    fits: list[str | None] = []
    started = threading.Event()

    def slow_fit(cls: type[KnowledgeModels], *args: object, **kwargs: object) -> KnowledgeModels:
        fits.append(kwargs.get("target"))  # type: ignore[arg-type]
        started.set()
        time.sleep(1.0)  # the one-target cache surely looks while this fit is under way
        return real_fit(cls, *args, **kwargs)

    monkeypatch.setattr(KnowledgeModels, "fit", classmethod(slow_fit))
    results: dict[str, KnowledgeModels] = {}
    whole = threading.Thread(target=lambda: results.__setitem__("whole", ModelCache(
        stores[0], tmp_path / "c0", shared_dir=tmp_path / "shared").get()))
    whole.start()
    assert started.wait(timeout=60)
    results["part"] = ModelCache(stores[1], tmp_path / "c1", shared_dir=tmp_path / "shared",
                                 target="scripted").get()
    whole.join(timeout=120)
    assert fits == [None], fits
    assert results["part"].fitted_at == results["whole"].fitted_at
    assert {k.target for k in results["part"].contexts} == {"scripted"}


def test_search_work_features_follow_the_index_structure() -> None:
    from knowledge.surrogates import derived_features

    wl = {"n_vectors": 8000.0, "dim": 384.0, "k": 10.0}
    flat = derived_features({"index_type": "ivf_flat", "nlist": 100, "nprobe": 4,
                             "batch_size": 1, "threads": 2}, wl)
    assert flat["scanned_vectors"] == 320.0 and flat["busy_threads"] == 1.0
    assert flat["coarse_distances"] == 100.0 and flat["distance_evals"] == 420.0
    assert flat["work_coarse"] == 100 * 384 and flat["work_flat_scan"] == 320 * 384
    assert flat["query_work"] == 420 * 384 and flat["work_lists"] == 4.0
    pq8 = derived_features({"nlist": 100, "nprobe": 4, "pq_m": 48, "pq_nbits": 8}, wl)
    assert pq8["work_codes"] == 320 * 48 and pq8["work_pq_table"] == 256 * 384
    assert "work_flat_scan" not in pq8 and "work_packed_codes" not in pq8
    assert pq8["query_work"] == 100 * 384 + 320 * 48 + 256 * 384
    pq6 = derived_features({"nlist": 100, "nprobe": 4, "pq_m": 48, "pq_nbits": 6}, wl)
    assert pq6["work_packed_codes"] == 320 * 48 and "work_codes" not in pq6
    # HNSW: max(ef, k) candidates of 2M neighbours, at most the graph's N nodes, and a queue
    # of those candidates scanned twice per expanded node (test_work_cost.py).
    hnsw = derived_features({"ef_search": 64, "hnsw_m": 16, "batch_size": 8, "threads": 2}, wl)
    assert hnsw["graph_visits"] == 64 * 32
    assert hnsw["query_work"] == 64 * 32 * 384 + 2 * 64**2
    assert derived_features({"ef_search": 5, "hnsw_m": 4}, wl)["graph_visits"] == 10 * 8
    assert derived_features({"ef_search": 400, "hnsw_m": 32}, wl)["graph_visits"] == 8000
    # IVF-HNSW: the graph indexes nlist centroids and must return nprobe of them.
    ivf_hnsw = derived_features({"nlist": 500, "nprobe": 50, "ef_search": 16, "hnsw_m": 4}, wl)
    assert ivf_hnsw["graph_visits"] == 50 * 8 and ivf_hnsw["coarse_distances"] == 400
    assert "work_coarse" not in ivf_hnsw and ivf_hnsw["work_graph"] == 400 * 384
    # Only what the inputs allow: no dim, no multiply-adds; no knobs of an index, nothing.
    assert "query_work" not in derived_features({"nlist": 100, "nprobe": 4},
                                                {"n_vectors": 8000.0})
    assert derived_features({"max_num_seqs": 64}, {"rate_rps": 8.0}) == {"seqs_per_rate": 8.0}


def _family_surface(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two categories (one-hot columns) whose log cost follows different power laws in x."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 3, size=(n, 2))
    fam = rng.integers(0, 2, n)
    y = np.where(fam == 1, 1.5 * x[:, 0] + 0.2 * x[:, 1], 0.2 * x[:, 0] - 1.0 * x[:, 1])
    X = np.column_stack([x, fam == 1, fam == 0]).astype(float)
    return X, y + rng.normal(0, 0.02, n)


def test_linear_forest_fits_a_power_law_per_category() -> None:
    from knowledge.surrogates.linear import _LinearBase

    X, y = _family_surface(120, 0)
    Xt, yt = _family_surface(200, 1)
    base = _LinearBase().fit(X, y, np.ones(len(y)))
    assert base.indicators_ == [2, 3]
    # One shared slope per feature leaves errors of ~0.5 in log space; per-category slopes
    # recover both laws.
    assert float(np.mean(np.abs(base.predict(Xt) - yt))) < 0.1
    reg = IntervalRegressor().fit(X, y)
    assert float(np.mean(np.abs(reg.predict(Xt) - yt))) < 0.1


def _members_surface(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The family surface plus a knob only category 0 has (missing elsewhere) and a column at
    one value but in a few rows (bootstrap samples see it with a spread of ~1e-16 or none)."""
    X, y = _family_surface(n, seed)
    rng = np.random.default_rng(seed + 100)
    knob = np.where(X[:, 3] == 1.0, rng.uniform(1, 4, n), np.nan)
    near = np.full(n, 5.0)
    near[:3] = 5.0 + 1e-13
    return np.column_stack([X, knob, near]), y + 0.3 * np.nan_to_num(knob)


@pytest.mark.parametrize("family", ["linear-forest", "forest"])
@pytest.mark.parametrize("law", [False, True])
def test_members_predicted_together_equal_one_at_a_time(family: str, law: bool,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """An answer predicts every member on a few hundred configs at once; the result must be
    each member's own prediction, also where members clip a far value to their range, have
    0/1 columns with slopes of their own (different ones per bootstrap sample), see a knob
    missing, or a column of (almost) one value."""
    from knowledge.surrogates import families
    from knowledge.surrogates.families import _member_layout
    from knowledge.work_cost import CostLaw

    if law:
        # Members with the law must be there to be predicted: the pilot that chooses between
        # law and plain members is told the law wins. On this surface their out-of-bag errors
        # are within 2 % of each other for the linear forest, and which one wins differs between
        # installs: a fresh one of 2026-12-05 (numpy 2.4.6, scipy 1.17.1, scikit-learn 1.9.1)
        # dropped the law where CI's install before it had kept it.
        monkeypatch.setattr(families, "_oob_error",
                            lambda X, y, members, in_bag:
                            0.0 if members and members[0][2] is not None else 1.0)
    X, y = _members_surface(150, 0)
    reg = IntervalRegressor(family=family, cost_law=CostLaw(terms=(0, 1)) if law else None,
                            n_trees=24).fit(X, y)
    if family == "linear-forest":
        assert any(m[0].indicators_ for m in reg.estimator_)
    if law:
        assert all(m[2] is not None for m in reg.estimator_)
    Xt, _ = _members_surface(80, 1)
    far = Xt.copy()
    far[:, 0] = far[:, 0] * 4 - 6  # outside every member's range on both sides: clipped
    far[:20, 5] = 7.0  # the one-valued column away from its value
    assert len({_member_layout(m) for m in reg.estimator_}) == 1  # one array operation
    for rows in (X, Xt, far):
        one_at_a_time = np.stack([reg._member_predict(m, rows) for m in reg.estimator_])
        together = reg._members_predict(reg.estimator_, rows)
        np.testing.assert_allclose(together, one_at_a_time, rtol=0, atol=1e-9)


def test_ridges_of_different_layouts_predicted_together_equal_their_own() -> None:
    """Bootstrap samples differ in which 0/1 columns get slopes of their own, and a sample that
    saw one value of a column has a spread of ~1e-16 there (rounding): the shared products must
    still give each ridge's own prediction, digit for digit up to summation order."""
    from knowledge.surrogates.linear import _linear_bases_predict, _LinearBase

    X, y = _family_surface(120, 0)
    level = np.where(np.arange(120) % 3 == 0, 1.7, 0.7)
    X = np.column_stack([X, level])
    y = y + level
    few = X.copy()  # category 1 at a handful of distinct rows: no slopes of its own
    few[few[:, 2] == 1.0, 0] = 1.0
    few[few[:, 2] == 1.0, 1] = np.round(few[few[:, 2] == 1.0, 1])
    one_level = X[:, 4] == 0.7  # the level column at one value: std 2.2e-16, not 0
    bases = [_LinearBase().fit(few, y, np.ones(120)),
             _LinearBase().fit(X, y, np.ones(120)),
             _LinearBase().fit(X[one_level], y[one_level], np.ones(int(one_level.sum())))]
    assert bases[0].indicators_ == [] and bases[1].indicators_ == [2, 3]
    assert 0 < bases[2].std_[4] < 1e-12
    Xt, _ = _family_surface(60, 1)
    Xt[:5, 0] = 40.0  # far outside every range: clipped
    Xt[5:8, 1] = np.nan
    for level in (np.where(np.arange(60) % 2 == 0, 0.7, 1.7), np.full(60, 0.7)):
        rows = np.column_stack([Xt, level])
        together = _linear_bases_predict(bases, rows)
        for m, base in enumerate(bases):
            np.testing.assert_allclose(together[m], base.predict(rows), rtol=0, atol=1e-9)


def test_linear_base_does_not_explode_on_a_column_seen_at_one_value() -> None:
    from knowledge.surrogates.linear import _LinearBase

    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, 60)
    rare = np.full(60, np.nan)
    rare[:3] = [2.0, 2.0 + 1e-6, 2.0]  # present in three rows, at (almost) one value
    X = np.column_stack([x, rare])
    y = 2 * x + rng.normal(0, 0.01, 60)
    base = _LinearBase().fit(X, y, np.ones(60))
    far = np.array([[0.5, 9.0]])  # a held-out value far outside the seen one
    assert abs(float(base.predict(far)[0]) - 1.0) < 1.0


def test_a_category_of_few_distinct_rows_gets_no_slopes_of_its_own() -> None:
    """Two configs at many rates (the H200 contexts): per-category slopes would overfit."""
    from knowledge.surrogates.linear import _LinearBase

    X, y = _family_surface(120, 0)
    X[X[:, 2] == 1.0, 0] = 1.0  # category 1: one x0 value ...
    X[X[:, 2] == 1.0, 1] = np.round(X[X[:, 2] == 1.0, 1])  # ... and four of x1: <= 4 rows
    base = _LinearBase().fit(X, y, np.ones(len(y)))
    assert base.indicators_ == []


def test_a_fit_over_identical_rows_is_their_mean() -> None:
    """One config at one workload: nothing varies, and the linear part is the weighted mean."""
    from knowledge.surrogates.linear import _LinearBase

    X = np.ones((4, 3))
    base = _LinearBase().fit(X, np.array([1.0, 2.0, 3.0, 4.0]), np.array([1.0, 1.0, 1.0, 5.0]))
    assert base.predict(np.ones((1, 3)))[0] == pytest.approx((1 + 2 + 3 + 4 * 5) / 8)


@pytest.mark.parametrize("shape", [(60, 8), (12, 30)])  # more rows than columns, and fewer
def test_the_closed_form_ridge_is_scikit_learns(shape: tuple[int, int]) -> None:
    """The linear part solves ridge itself (scikit-learn's checks cost ten times the solve);
    it must give scikit-learn's answer, bootstrap weights (repeat counts) included."""
    from sklearn.linear_model import Ridge

    from knowledge.surrogates.linear import weighted_ridge

    rng = np.random.default_rng(shape[0])
    X = rng.normal(size=shape) * rng.uniform(0.1, 10, shape[1])
    y = X @ rng.normal(size=shape[1]) + rng.normal(0, 0.5, shape[0]) + 3.0
    w = rng.integers(1, 4, shape[0]).astype(float)
    coef, intercept = weighted_ridge(X, y, w, alpha=1.0)
    ref = Ridge(alpha=1.0).fit(X, y, sample_weight=w)
    np.testing.assert_allclose(coef, ref.coef_, rtol=1e-7, atol=1e-9)
    assert intercept == pytest.approx(float(ref.intercept_), rel=1e-7, abs=1e-9)


def test_zero_one_columns_are_exactly_the_two_valued_ones() -> None:
    from knowledge.surrogates.linear import _zero_one_columns

    nan = np.nan
    X = np.array([[0, 1, 0, 2, nan, 1],
                  [1, 1, 0, 0, 0, nan],
                  [nan, 1, 0, 1, 1, 0]], dtype=float)
    # column 0: {0, 1} with a NaN; 1 and 2: one value only; 3: has a 2; 4 and 5: {0, 1}
    assert _zero_one_columns(X) == [0, 4, 5]


def test_instance_groups_join_a_sweep_with_its_instance_and_its_configs_repeats() -> None:
    from knowledge.models import TrialRecord
    from knowledge.surrogates import instance_groups

    def trial(study: int, number: int, config: str, swept_from: int | None = None
              ) -> TrialRecord:
        return TrialRecord(study_id=study, number=number, target="t", config={"c": config},
                           config_hash=config, workload_spec={}, workload_hash="w",
                           hardware={}, hardware_key="h", advisor_version="0",
                           swept_from=swept_from)

    trials = [
        trial(1, 0, "a"),                 # an instance of study 1 and the settings it swept
        trial(1, 1, "a-wide", swept_from=0),
        trial(1, 2, "b"),                 # an instance of its own
        trial(2, 0, "a-wide"),            # another study measured a swept config: joined
        trial(2, 1, "c"),
        trial(2, 2, "d", swept_from=1),   # study 2's instance 1, not study 1's trial 1
    ]
    g = instance_groups(trials)
    assert g[0] == g[1] == g[3]
    assert len({g[0], g[2], g[4]}) == 3
    assert g[4] == g[5]


def test_distinct_rows_counted_as_one_row_at_a_time_would() -> None:
    """The vectorised count of distinct rows answers as the row-by-row count did: a row with a
    NaN equals no other row, -0.0 equals 0.0, and no rows hold no distinct row."""
    from knowledge.surrogates.linear import _distinct_rows_at_least

    def row_by_row(rows: np.ndarray, need: int) -> bool:
        if len(rows) < need:
            return False
        seen: set[bytes] = set()
        unequal = 0
        for row in np.ascontiguousarray(rows):
            if np.isnan(row).any():
                unequal += 1
            else:
                seen.add((row + 0.0).tobytes())
            if len(seen) + unequal >= need:
                return True
        return False

    rng = np.random.default_rng(7)
    for _ in range(3000):
        n, d = int(rng.integers(0, 30)), int(rng.integers(0, 4))
        X = rng.integers(-2, 3, (n, d)).astype(float)
        X[rng.random((n, d)) < 0.05] = np.nan
        X[rng.random((n, d)) < 0.1] = -0.0
        need = int(rng.integers(0, 35))
        assert _distinct_rows_at_least(X, need) == row_by_row(X, need), (X, need)

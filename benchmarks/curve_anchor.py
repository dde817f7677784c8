"""Unmeasured configs of a load-curve context, held out by config: the knob-level surrogate alone
against the surrogate anchored to the context's reference curve (its prediction at the asked
rate times the surrogates' ratio of the two configs there) and the reference curve alone.

    PYTHONPATH=. python benchmarks/curve_anchor.py                 # the shipped knowledge
    PYTHONPATH=. python benchmarks/curve_anchor.py --db-url URL    # another store

Scores only held-out trials whose config has no curve of any form on the training side (a
config measured at other rates is a held-out *rate*, which the curves answer). Prints one line
per context and metric; the figures in docs/benchmarks/load-curves-2026-12-06/ (held-out configs)
come from this script.
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks.stores import shipped_store
from knowledge import TrialStatus
from knowledge.load_curve import config_key, unvaried_knobs
from knowledge.store import TrialFilter
from knowledge.surrogates import (
    DEFAULT_FAMILY,
    FeatureEncoder,
    IntervalRegressor,
    context_of,
    cost_law,
    fit_load_curves,
    metric_transform,
    workload_features,
)
from knowledge.surrogates.training import _usable, _xy
from knowledge.surrogates.transforms import _forward, _inverse

METRICS = ("ttft_p95_ms", "tpot_p95_ms", "output_tokens_per_s")


def evaluate(trials: list, metric: str, folds: int) -> dict[str, list[float]] | None:
    """Per candidate, the absolute percentage errors on held-out configs without a curve."""
    from sklearn.model_selection import GroupKFold

    usable = _usable(trials)
    wl = [workload_features(t.workload_spec) for t in usable]
    encoder = FeatureEncoder().fit([t.config for t in usable], wl)
    X, y, groups, idx = _xy(usable, encoder, metric)
    n_groups = len(set(groups.tolist()))
    if n_groups < 2:
        return None
    kind = metric_transform(metric, y)
    z = _forward(kind, y)
    law = cost_law(encoder, metric) if kind == "log" else None
    unvaried = unvaried_knobs([t.config for t in usable])
    errors: dict[str, list[float]] = {"surrogate": [], "anchored": [], "reference curve": []}
    for train, test in GroupKFold(n_splits=min(folds, n_groups)).split(X, z, groups):
        curves = fit_load_curves([usable[i] for i in idx[train]], blend=False)
        if curves is None:
            continue
        reg = IntervalRegressor(family=DEFAULT_FAMILY, cost_law=law).fit(
            X[train], z[train], groups[train])
        ref = max(curves.curves_.values(), key=lambda c: len(c.rates))
        ref_config = next(usable[i].config for i in idx[train]
                          if curves.curve(usable[i].config, wl[i]) is ref)
        alone = _inverse(kind, reg.predict_interval(X[test])[0])
        # A config's identity as the curves see it over the whole context (a knob added to the
        # space later does not make a second config of the same engine settings).
        rate = curves.roles.rate
        trained = {config_key(usable[i].config, wl[i], rate, unvaried) for i in idx[train]}
        for j, i in enumerate(idx[test]):
            if config_key(usable[i].config, wl[i], rate, unvaried) in trained:
                continue  # measured at other rates: a held-out rate, not a held-out config
            at_ref = ref.predict(metric, np.asarray([wl[i][rate]]))
            if at_ref is None:
                continue
            ref_alone = _inverse(kind, reg.predict_interval(
                encoder.transform([ref_config], [wl[i]]))[0])[0]
            truth = float(y[test][j])
            errors["surrogate"].append(abs(alone[j] - truth) / truth)
            errors["anchored"].append(abs(at_ref[0] * alone[j] / ref_alone - truth) / truth)
            errors["reference curve"].append(abs(at_ref[0] - truth) / truth)
    return errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db-url", help="store to read (default: a fresh one with the shipped "
                                         "knowledge imported)")
    parser.add_argument("--target", default="vllm")
    parser.add_argument("--folds", type=int, default=5)
    args = parser.parse_args()
    store = shipped_store(args.db_url)
    grouped: dict = {}
    for t in store.list_trials(TrialFilter(target=args.target, status=TrialStatus.COMPLETE)):
        if t.metrics:
            grouped.setdefault(context_of(t), []).append(t)
    for key, trials in sorted(grouped.items()):
        for metric in METRICS:
            errors = evaluate(trials, metric, args.folds)
            if not errors or not errors["surrogate"]:
                continue
            cells = "  ".join(f"{name} {np.mean(v):6.1%}" for name, v in errors.items())
            print(f"{key.label():60} {metric:20} n={len(errors['surrogate']):3d}  {cells}",
                  flush=True)


if __name__ == "__main__":
    main()

"""Compare surrogate families on stored trials: held-out MAPE, median APE, 90%-interval coverage
and fit time per context and metric (grouped 5-fold CV: a config's repeats are held out together).

    PYTHONPATH=. python benchmarks/surrogates.py                 # the shipped knowledge
    PYTHONPATH=. python benchmarks/surrogates.py --db-url URL    # another store

Prints one table; the figures in docs/benchmarks.md come from this script.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from knowledge import TrialStatus, TrialStore
from knowledge.store import TrialFilter
from knowledge.surrogates import (
    FAMILIES,
    FeatureEncoder,
    IntervalRegressor,
    context_of,
    metric_transform,
    workload_features,
)
from knowledge.surrogates.training import _xy
from knowledge.surrogates.transforms import _forward, _inverse
from knowledge.transfer import import_shipped_knowledge

GOAL_METRICS = ("p95_latency_ms", "qps", "ttft_p95_ms", "tpot_p95_ms", "output_tokens_per_s")


def evaluate(trials: list, metric: str, family: str, folds: int) -> dict[str, float] | None:
    from sklearn.model_selection import GroupKFold

    encoder = FeatureEncoder().fit([t.config for t in trials],
                                   [workload_features(t.workload_spec) for t in trials])
    X, y, groups, _ = _xy(trials, encoder, metric)
    if len(y) < 8:
        return None
    kind = metric_transform(metric, y)
    z = _forward(kind, y)
    ape: list[float] = []
    inside: list[bool] = []
    fit_s = 0.0
    k = min(folds, len(set(groups.tolist())))
    for train, test in GroupKFold(n_splits=k).split(X, z, groups):
        started = time.perf_counter()
        reg = IntervalRegressor(family=family).fit(X[train], z[train], groups[train])
        fit_s += time.perf_counter() - started
        c, lo, hi = reg.predict_interval(X[test])
        ape.extend((np.abs(_inverse(kind, c) - y[test]) / np.abs(y[test])).tolist())
        inside.extend(((z[test] >= lo) & (z[test] <= hi)).tolist())
    return {"n": len(y), "mape": float(np.mean(ape)), "median_ape": float(np.median(ape)),
            "coverage": float(np.mean(inside)), "fit_s": fit_s / k}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db-url", help="store to read (default: a fresh one with the shipped "
                                         "knowledge imported)")
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--folds", type=int, default=5)
    args = parser.parse_args()
    if args.db_url:
        store = TrialStore(args.db_url)
    else:
        tmp = Path(tempfile.mkdtemp()) / "bench.db"
        store = TrialStore(f"sqlite:///{tmp}")
        import_shipped_knowledge(store)
    grouped: dict = {}
    for t in store.list_trials(TrialFilter(status=TrialStatus.COMPLETE)):
        if t.metrics:
            grouped.setdefault(context_of(t), []).append(t)
    print(f"{'context':48} {'metric':20} {'family':14} {'n':>4} {'MAPE':>7} {'medAPE':>7} "
          f"{'cover90':>7} {'fit s':>6}")
    for key, trials in sorted(grouped.items()):
        for metric in GOAL_METRICS:
            for family in args.families.split(","):
                try:
                    r = evaluate(trials, metric, family, args.folds)
                except ValueError as exc:  # e.g. HGB binning a fold where a knob is all-NaN
                    print(f"{key.label():48} {metric:20} {family:14} failed: {exc}")
                    continue
                if r is None:
                    continue
                print(f"{key.label():48} {metric:20} {family:14} {r['n']:4d} "
                      f"{r['mape']:7.1%} {r['median_ape']:7.1%} {r['coverage']:7.0%} "
                      f"{r['fit_s']:6.2f}", flush=True)


if __name__ == "__main__":
    main()

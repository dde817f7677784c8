"""Held-out configs of a load-curve context: the knob-level surrogate against load curves predicted
from the knobs (knowledge/curve_model.py, every family), one config held out at a time.

    # the shipped knowledge (--db-url URL: another store)
    PYTHONPATH=. python docs/benchmarks/h200-knobs-2026-12-04/curve_knobs.py
    PYTHONPATH=. python docs/benchmarks/h200-knobs-2026-12-04/curve_knobs.py --json out.json

Each config (its curve identity: knobs added to the space later left out) is held out with every
trial it has, at every rate; the load curves, the curve model and the surrogate are fitted on the
rest and predict each held-out trial at its rate (where a curve model does not answer, e.g. too
few curves, the surrogate's prediction stands, as in the context's predictions; the share it
answered is printed below each line). Scored per trial (MAPE) and split by whether the
held-out config was measured at several rates (it would have had a curve of its own) or one.
Prints one line per context, metric and split; the figures in docs/knowledge.md (held-out configs)
come from this script.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from benchmarks.stores import shipped_store
from knowledge import TrialStatus
from knowledge.curve_model import FAMILIES, KnobCurveModel
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


def evaluate(trials: list, metrics: tuple[str, ...]) -> dict[str, dict[str, dict[str, list]]]:
    """metric -> split ("several rates" / "one rate") -> candidate -> absolute % errors, and
    "inside" -> candidate -> whether each trial fell in the 90 % interval."""
    usable = _usable(trials)
    wl = [workload_features(t.workload_spec) for t in usable]
    curves_all = fit_load_curves(usable, blend=False)
    if curves_all is None:
        return {}
    rate = curves_all.roles.rate
    unvaried = unvaried_knobs([t.config for t in usable])
    identity = [config_key(t.config, w, rate, unvaried) for t, w in zip(usable, wl, strict=True)]
    rates_of: dict[str, set[float]] = {}
    for key, w in zip(identity, wl, strict=True):
        rates_of.setdefault(key, set()).add(w.get(rate, 0.0))
    out: dict[str, dict[str, dict[str, list]]] = {}
    for held in sorted(set(identity)):
        test = [i for i, k in enumerate(identity) if k == held]
        train = [i for i, k in enumerate(identity) if k != held]
        train_trials = [usable[i] for i in train]
        curves = fit_load_curves(train_trials, blend=False)
        if curves is None:
            continue
        encoder = FeatureEncoder().fit([t.config for t in train_trials], [wl[i] for i in train])
        models = {f: KnobCurveModel(family=f).fit(curves, encoder.transform) for f in FAMILIES}
        split = "several rates" if len(rates_of[held]) > 1 else "one rate"
        for metric in metrics:
            X, y, groups, _ = _xy(train_trials, encoder, metric)
            if len(y) < 4:
                continue
            kind = metric_transform(metric, y)
            law = cost_law(encoder, metric) if kind == "log" else None
            reg = IntervalRegressor(family=DEFAULT_FAMILY, cost_law=law).fit(
                X, _forward(kind, y), groups)
            cell = out.setdefault(metric, {}).setdefault(split, {})
            inside = out[metric].setdefault(f"inside {split}", {})
            for i in test:
                truth = usable[i].metrics.get(metric)
                if not isinstance(truth, int | float) or truth <= 0:
                    continue
                c, lo, hi = reg.predict_interval(encoder.transform([usable[i].config], [wl[i]]))
                guesses = {"surrogate": (float(_inverse(kind, c)[0]),
                                         float(_inverse(kind, lo)[0]),
                                         float(_inverse(kind, hi)[0]))}
                for f, model in models.items():
                    # As the context's predictions do: the surrogate's where the model does
                    # not answer (a config outside the region the curves span).
                    p = model.predict(usable[i].config, wl[i], metric)
                    guesses[f"curves:{f}"] = p if p is not None else guesses["surrogate"]
                    answered = out[metric].setdefault(f"answered {split}", {})
                    answered.setdefault(f"curves:{f}", []).append(p is not None)
                for name, (v, low, high) in guesses.items():
                    cell.setdefault(name, []).append(abs(v - truth) / truth)
                    inside.setdefault(name, []).append(low <= truth <= high)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db-url", help="store to read (default: a fresh one with the shipped "
                                         "knowledge imported)")
    parser.add_argument("--target", default="vllm")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    args = parser.parse_args()
    store = shipped_store(args.db_url)
    grouped: dict = {}
    for t in store.list_trials(TrialFilter(target=args.target, status=TrialStatus.COMPLETE)):
        if t.metrics:
            grouped.setdefault(context_of(t), []).append(t)
    report = []
    for key, trials in sorted(grouped.items()):
        result = evaluate(trials, METRICS)
        for metric, splits in result.items():
            for split, cands in splits.items():
                if split.startswith(("inside", "answered")) or "surrogate" not in cands:
                    continue
                cover = splits[f"inside {split}"]
                answered = {n: float(np.mean(v)) for n, v in splits[f"answered {split}"].items()}
                cells = "  ".join(f"{name} {np.mean(v):6.1%} ({np.mean(cover[name]):.0%})"
                                  for name, v in cands.items())
                print(f"{key.label():48} {metric:20} {split:13} n={len(cands['surrogate']):3d}"
                      f"  {cells}", flush=True)
                report.append({"context": key.label(), "metric": metric, "split": split,
                               "n": len(cands["surrogate"]),
                               "mape": {n: float(np.mean(v)) for n, v in cands.items()},
                               "coverage": {n: float(np.mean(cover[n])) for n in cands},
                               "answered_by_curves": answered})
                print(" " * 84 + "answered from predicted curves: " + "  ".join(
                    f"{n} {a:.0%}" for n, a in answered.items()))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()

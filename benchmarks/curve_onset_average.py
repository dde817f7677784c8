"""Tried, not adopted: average each latency curve over where its queue starts instead of taking
the best-fitting onset. A curve of five or more rates searches its queue onset over a grid of
capacity scales (``knowledge.load_curve._SCALES``) and keeps the one of least squared relative
error; near a knee several onsets fit almost as well and predict a held-out rate 10x apart.
Here every onset is kept with weight ``exp(-(err - best err) / (2 T))`` and the prediction is
the weighted geometric mean, so an uncertain knee gives a middling figure instead of an extreme.

Scored, per temperature T, on both held-out-rate tests of the shipped H200 vLLM data:

- the eval's 5 folds over workloads (``advisor knowledge eval --target vllm --group-by
  workload``; configs measured at other rates), 8B and 1B;
- the between-rates trials no fold leaks into (``benchmarks/between_rates.py``: nine 8B configs
  at 22.5-67.5 req/s, left out of the fit).

    PYTHONPATH=. python benchmarks/curve_onset_average.py                 # shipped, T 0.02 / 0.1
    PYTHONPATH=. python benchmarks/curve_onset_average.py -T 0.05 --json out.json

This is an experiment harness: it swaps the onset choice inside ``knowledge.load_curve`` for
the run, and nothing in the product reads it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import knowledge.load_curve as load_curve
from benchmarks import between_rates
from benchmarks.stores import shipped_store
from knowledge import TrialStatus
from knowledge.store import TrialFilter
from knowledge.surrogates import context_of, cross_validate

MODELS = ("llama-3-8b", "llama-3.2-1b")
METRICS = ["ttft_p95_ms", "tpot_p95_ms"]


class _Mixture(tuple):
    """(scale, coefficients) of the best onset, for callers that unpack a fit, with every
    onset's (weight, scale, coefficients) in ``mix``."""

    mix: list[tuple[float, float, np.ndarray]]


@contextlib.contextmanager
def averaged_onsets(temperature: float) -> Iterator[None]:
    """Within the block, latency curves of their own shape average over their queue onsets."""
    fit, predict = load_curve._fit_latency, load_curve.ConfigCurve.predict

    def fit_averaged(rate: np.ndarray, y: np.ndarray, capacity: float, scales: Sequence[float],
                     shape: Any = None) -> Any:
        if shape is not None or len(scales) == 1:
            return fit(rate, y, capacity, scales, shape)
        fits = []
        for onset in scales:  # the shipped fit at each onset, with its squared relative error
            scale, coef = fit(rate, y, capacity, (onset,))
            error = np.sum((load_curve._latency_basis(rate, capacity * scale) @ coef / y - 1) ** 2)
            fits.append((float(error), scale, coef))
        least = min(f[0] for f in fits)
        weights = np.asarray([math.exp(-(f[0] - least) / (2 * temperature)) for f in fits])
        weights /= weights.sum()
        best = fits[int(np.argmax(weights))]
        mixture = _Mixture((best[1], best[2]))
        mixture.mix = [(float(w), s, c) for w, (_, s, c) in zip(weights, fits, strict=True)]
        return mixture

    def predict_averaged(self: load_curve.ConfigCurve, metric: str,
                         rate: np.ndarray) -> np.ndarray | None:
        fitted = self.latency.get(metric)
        if not isinstance(fitted, _Mixture):
            return predict(self, metric, rate)
        rate = np.maximum(np.asarray(rate, dtype=float), 1e-9)
        logs = sum(w * np.log(np.maximum(
            load_curve._latency_basis(rate, self.capacity * s) @ c, 1e-9))
            for w, s, c in fitted.mix)
        return np.asarray(np.exp(logs))

    load_curve._fit_latency = fit_averaged
    load_curve.ConfigCurve.predict = predict_averaged  # type: ignore[method-assign]
    try:
        yield
    finally:
        load_curve._fit_latency = fit
        load_curve.ConfigCurve.predict = predict  # type: ignore[method-assign]


def fold_scores() -> list[dict[str, Any]]:
    """The eval's held-out-rate MAPE (configs measured at other rates) per shape and metric."""
    store = shipped_store()
    trials = [t for t in store.list_trials(TrialFilter(target="vllm",
                                                       status=TrialStatus.COMPLETE)) if t.metrics]
    rows = []
    for key in sorted({context_of(t) for t in trials}):
        if key.model not in MODELS:
            continue
        mine = [t for t in trials if context_of(t) == key]
        for metric, s in cross_validate(key, mine, group_by="workload", metrics=METRICS).items():
            rows.append({"test": "folds", "context": key.label(), "metric": metric,
                         "n": s.seen_config_n, "mape": s.seen_config_mape})
    return rows


def between_scores() -> list[dict[str, Any]]:
    return [{"test": "between", **{k: r[k] for k in ("context", "metric", "n", "mape",
                                                      "median_ape", "coverage")}}
            for r in between_rates.score(quiet=True) if r["metric"] in METRICS]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-T", "--temperature", type=float, action="append",
                        help="temperature(s) of the onset weights (default: 0.02 and 0.1)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    report = []
    for temperature in [None, *(args.temperature or [0.02, 0.1])]:
        with (averaged_onsets(temperature) if temperature else contextlib.nullcontext()):
            rows = fold_scores() + between_scores()
        label = "shipped (best onset)" if temperature is None else f"averaged, T={temperature:g}"
        for row in rows:
            row["curves"] = label
            print(f"{label:22} {row['test']:8} {row['context']:44} {row['metric']:12} "
                  f"n={row['n']:3d}  MAPE {row['mape']:6.1%}", flush=True)
        report.extend(rows)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()

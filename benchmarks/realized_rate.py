"""Does the load a trial's seeded stream actually offered explain its figures better than the
nominal rate? The held-out-rate scores of ``advisor knowledge eval --group-by workload`` on the
shipped vLLM data, with each trial's rate feature read four ways:

- ``nominal``: the workload's ``rate_rps`` (what the shipped models use; the baseline);
- ``realized``: requests / last arrival of the trial's own stream (a seed's 8-s Poisson stream
  offers 5 % more or less than nominal: ``max_num_seqs`` tests at "52.5 req/s", seed 7, offered
  45.9);
- ``peak:W``: the busiest W-second window of that stream, in requests per second (the burst a
  p95 latency sees);
- ``scaled-throughput``: nominal rate, but each trial's output tokens/s divided by the output
  tokens its stream offered per second (times the nominal rate: the seed's share of the
  throughput taken out).

    PYTHONPATH=. python benchmarks/realized_rate.py                    # all four, 8B and 1B
    PYTHONPATH=. python benchmarks/realized_rate.py --mode peak:1 --json out.json

The streams come from ``objectives.llm.workload.request_shapes`` (the same seeded draws the
client sent). This is an experiment harness: it swaps the rate feature inside
``knowledge.surrogates`` for the run, and nothing in the product reads it.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

import knowledge.surrogates as surrogate
from benchmarks.stores import shipped_store
from knowledge import TrialStatus
from knowledge.store import TrialFilter
from objectives.llm.server import ServingWorkload
from objectives.llm.workload import request_shapes
from objectives.registry import get_target

MODELS = ("llama-3-8b", "llama-3.2-1b")
METRICS = ["ttft_p95_ms", "tpot_p95_ms", "output_tokens_per_s"]
MODES = ("nominal", "realized", "peak:1", "peak:2", "peak:4", "scaled-throughput")
_nominal_features = surrogate.workload_features


def _feature_lookups() -> list[ModuleType]:
    """The surrogate modules holding ``workload_features`` as a global: the package is split by
    concern and each module that reads the features looks the name up in its own globals, so the
    swap replaces it in every one of them."""
    return [m for name, m in sorted(sys.modules.items())
            if (name == surrogate.__name__ or name.startswith(surrogate.__name__ + "."))
            and getattr(m, "workload_features", None) is _nominal_features]


@functools.cache
def stream_load(spec_json: str, peak_window_s: float) -> tuple[float, float] | None:
    """(offered requests/s, offered output tokens/s) of a stored spec's measured stream: over
    the whole stream, or its busiest ``peak_window_s`` window (requests/s only); None for a
    stream without arrival times."""
    params = json.loads(spec_json).get("params") or {}
    # The target's own parameters (e.g. a start-up timeout) set apart, as a trial does.
    spec, _ = ServingWorkload.check(params, target_keys=get_target("vllm").target_params)
    arrivals, _, outputs = request_shapes(spec)
    if len(arrivals) < 2 or arrivals[-1] <= 0:
        return None
    rate = len(arrivals) / float(arrivals[-1])
    if peak_window_s > 0:
        counts = np.searchsorted(arrivals, arrivals + peak_window_s) - np.arange(len(arrivals))
        rate = float(counts.max()) / peak_window_s
    return rate, float(outputs.sum()) / float(arrivals[-1])


def _features(mode: str) -> Any:
    window = float(mode.split(":", 1)[1]) if mode.startswith("peak:") else 0.0

    def features(spec: Mapping[str, Any]) -> dict[str, float]:
        out = _nominal_features(spec)
        if mode in ("nominal", "scaled-throughput") or "rate_rps" not in out \
                or not isinstance(spec.get("params"), Mapping):
            return out
        load = stream_load(json.dumps(spec, sort_keys=True), window)
        return out if load is None else {**out, "rate_rps": load[0]}
    return features


def score(mode: str, rows: list[Any], key: Any) -> dict[str, dict[str, Any]]:
    lookups = _feature_lookups()
    for module in lookups:
        module.workload_features = _features(mode)  # type: ignore[attr-defined]
    try:
        if mode == "scaled-throughput":
            for t in rows:
                load = stream_load(json.dumps(t.workload_spec, sort_keys=True), 0.0)
                nominal = _nominal_features(t.workload_spec).get("rate_rps")
                if load is not None and nominal and "output_tokens_per_s" in t.metrics:
                    # Tokens/s per offered token/s, times the nominal rate (so the figure still
                    # grows with the rate as the curves expect). Relative errors are unchanged
                    # by a known per-trial factor: scoring this figure scores its prediction
                    # times that factor.
                    t.metrics = {**t.metrics, "output_tokens_per_s":
                                 t.metrics["output_tokens_per_s"] * nominal / load[1]}
        scores = surrogate.cross_validate(key, rows, group_by="workload", metrics=METRICS)
    finally:
        for module in lookups:
            module.workload_features = _nominal_features  # type: ignore[attr-defined]
    return {m: s.to_dict() for m, s in scores.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", action="append", choices=MODES,
                        help="rate reading(s) to score (default: all)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    store = shipped_store()
    done = TrialFilter(target="vllm", status=TrialStatus.COMPLETE)
    report = []
    for mode in args.mode or MODES:
        trials = [t for t in store.list_trials(done) if t.metrics]  # fresh rows per mode
        by_ctx: dict[Any, list[Any]] = {}
        for t in trials:
            by_ctx.setdefault(surrogate.context_of(t), []).append(t)
        for key, rows in sorted(by_ctx.items()):
            if key.model not in MODELS:
                continue
            for metric, s in score(mode, rows, key).items():
                row = {"mode": mode, "context": key.label(), "metric": metric, "n": s["n"],
                       "mape_seen_config": s.get("seen_config_mape"),
                       "coverage": s["interval_coverage"]}
                report.append(row)
                mape = row["mape_seen_config"]
                print(f"{mode:18} {key.model:14} {metric:20} n={s['n']:3d}  MAPE "
                      f"{'-' if mape is None else f'{mape:6.1%}'}  coverage "
                      f"{row['coverage']:4.0%}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()

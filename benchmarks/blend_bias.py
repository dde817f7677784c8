"""Which way the curves, the simulator and their blend err on held-out rates, per load band.

    PYTHONPATH=. python benchmarks/blend_bias.py

Fits every shipped GPU serving context's load curves with their blend (knowledge/curve_blend.py)
and reads the curves' leave-one-rate-out predictions (the ones the blend's choice reads), each
beside the simulator's and the blend's figure at that rate: per context, metric and load band
(below / from 85 % of the config's capacity), the median log error (signed: below 0 reads low),
the mean absolute log error (what the choice compares) and MAPE.
"""

from __future__ import annotations

import math

import numpy as np

from benchmarks.stores import shipped_store
from knowledge import TrialStatus
from knowledge.curve_blend import SIM_WEIGHT, mix
from knowledge.store import TrialFilter
from knowledge.surrogates import context_of, fit_load_curves, workload_features
from knowledge.surrogates.training import _usable

METRICS = ("ttft_p95_ms", "tpot_p95_ms")


def main() -> None:
    trials = _usable(shipped_store().list_trials(TrialFilter(status=TrialStatus.COMPLETE)))
    contexts: dict = {}
    for t in trials:
        contexts.setdefault(context_of(t), []).append(t)
    for key, rows in sorted(contexts.items(), key=lambda kv: kv[0].label()):
        curves = fit_load_curves(rows)
        if curves is None or curves.blend_ is None:
            continue
        workloads = [workload_features(t.workload_spec) for t in rows]
        for metric in METRICS:
            errors: dict[tuple[int, str], list[float]] = {}
            for i, m, pred, band, _ in curves.held_out_:
                sim = (curves.blend_.figures(rows[i].config, workloads[i]) or {}).get(m)
                truth = rows[i].metrics.get(m)
                if m != metric or not sim or not truth:
                    continue
                for name, p in (("curve", pred), ("simulator", sim),
                                ("blend", mix(pred, sim, SIM_WEIGHT))):
                    errors.setdefault((band, name), []).append(math.log(p / truth))
            for band in (0, 1):
                cells = []
                for name in ("curve", "simulator", "blend"):
                    e = np.asarray(errors.get((band, name), []))
                    if len(e):
                        cells.append(f"{name} median {np.median(e):+.2f} mean|log| "
                                     f"{np.mean(np.abs(e)):.2f} MAPE "
                                     f"{np.mean(np.abs(np.exp(e) - 1)):.1%}")
                if cells:
                    print(f"{key.label():40.40} {metric:12} {'from' if band else 'below'} 85 % "
                          f"n={len(errors[(band, 'curve')]):3d}  " + "  ".join(cells))


if __name__ == "__main__":
    main()

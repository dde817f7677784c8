"""The rows a context's models are fitted on: usable trials, the metrics worth a model, the
measured workloads, and one metric's design matrix.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from knowledge.models import TrialRecord
from knowledge.surrogates.features import FeatureEncoder, WorkloadPoint, workload_features
from objectives.kinds import workload_kinds

__all__ = []


#: Metrics never modelled: counters and bookkeeping, not performance.
_SKIP_METRICS = frozenset({"failed_requests"})


#: Prefixes of the per-stage metrics of pipelines, as the workload kinds declare their stages.
_STAGES = tuple(f"{stage}_" for kind in workload_kinds() for stage in kind.stages)


def _usable(trials: Sequence[TrialRecord]) -> list[TrialRecord]:
    return [t for t in trials if t.status == "complete" and t.metrics]


def _metric_names(trials: Sequence[TrialRecord], min_share: float = 0.8) -> list[str]:
    counts: dict[str, int] = {}
    for t in trials:
        for m, v in t.metrics.items():
            if m not in _SKIP_METRICS and isinstance(v, int | float) and math.isfinite(v):
                counts[m] = counts.get(m, 0) + 1
    # p90s sit between the modelled p50/p95/p99 and are never asked for more than those. Of a
    # pipeline trial's per-stage breakdown only the mean and p95 are modelled: they are what the
    # cheat-sheet's stage shares and SLOs use, and each modelled metric costs a fit.
    return sorted(m for m, c in counts.items() if c >= max(2, min_share * len(trials))
                  and "_p90" not in m and not _stage_detail(m))


def _stage_detail(metric: str) -> bool:
    return metric.startswith(_STAGES) and metric.endswith(("_p50_ms", "_p99_ms"))


def _workload_points(trials: Sequence[TrialRecord]) -> list[WorkloadPoint]:
    seen: dict[str, WorkloadPoint] = {}
    for t in trials:
        w = seen.get(t.workload_hash)
        if w is None:
            seen[t.workload_hash] = WorkloadPoint(
                str(t.workload_spec.get("name", "")), t.workload_hash, dict(t.workload_spec),
                workload_features(t.workload_spec), 1)
        else:
            seen[t.workload_hash] = WorkloadPoint(w.name, w.spec_hash, w.spec, w.features,
                                                  w.trials + 1)
    return sorted(seen.values(), key=lambda w: (-w.trials, w.spec_hash))


def _xy(trials: Sequence[TrialRecord], encoder: FeatureEncoder, metric: str
        ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    keep = [i for i, t in enumerate(trials) if isinstance(t.metrics.get(metric), int | float)
            and math.isfinite(t.metrics[metric])]
    rows = [trials[i] for i in keep]
    X = encoder.transform([t.config for t in rows],
                          [workload_features(t.workload_spec) for t in rows])
    y = np.asarray([float(t.metrics[metric]) for t in rows])
    groups = np.asarray([t.config_hash for t in rows])
    # Positions, not `t in rows`: that compared records field by field, O(n^2) (18 of the 65 s
    # the shipped vector-search fit took).
    return X, y, groups, np.asarray(keep, dtype=int)

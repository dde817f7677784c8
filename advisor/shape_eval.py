"""``advisor knowledge eval --group-by shape``: each measured shape predicted from the others
(:func:`knowledge.shape_transfer.leave_one_shape_out`) and scored against its own measured
per-rate medians, for every config measured on enough shapes, with every candidate feature.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from advisor.answers.shapes import measured_shape, shape_groups
from knowledge import TrialStore
from knowledge.shape_transfer import CANDIDATE_FEATURES, ShapeTransfer, leave_one_shape_out
from objectives.registry import get_target

__all__ = ["shape_rows"]


def shape_rows(store: TrialStore, *, target: str, hardware: str | None = None,
               metrics: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """One row per (context, config, feature, held-out shape): its capacity error and, per
    metric, the MAPE over its measured rates (``mape``) and below heavy load (``mape_light``).
    ``chosen`` marks the feature :class:`ShapeTransfer` picks (lowest mean held-out MAPE)."""
    default = get_target(target).space().default_config()
    rows: list[dict[str, Any]] = []
    for group in shape_groups(store, target, hardware, default):
        for diff, shapes in sorted(group.transferable().items(), key=lambda kv: kv[0] != "{}"):
            measured = [measured_shape(m, ts) for m, ts in sorted(shapes.items())]
            chosen = ShapeTransfer().fit(measured).feature_
            wanted = list(metrics) if metrics else None
            context = " / ".join([target, group.hardware_key, group.engine_version or "-",
                                  ", ".join(f"{k}={v:g}" for k, v in group.rest.items())])
            for feature in CANDIDATE_FEATURES:
                for h in leave_one_shape_out(measured, feature, wanted):
                    rows.append({"context": context,
                                 "config": "engine default" if diff == "{}" else diff,
                                 "feature": feature, "chosen": feature == chosen,
                                 "rates": len({r for e in h.errors.values() for r, _, _ in e}),
                                 **h.to_dict(),
                                 "mape_light": {m: h.mape(m, 0) for m in h.errors}})
    return rows

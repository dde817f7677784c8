"""Load curves inside a context's answers: measured configs' curves answer for the metrics
they model, the knob-level curve model and the simulator blend for configs without one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from knowledge.curve_blend import fit_blend, fit_simulation
from knowledge.curve_model import KNOB_CURVE_FAMILY, KnobCurveModel
from knowledge.load_curve import LoadCurves, load_roles
from knowledge.models import TrialRecord
from knowledge.surrogates.features import FeatureEncoder, workload_features

__all__ = ["fit_knob_curves", "fit_load_curves"]


def _with_curves(curves: LoadCurves | None, configs: Sequence[Mapping[str, Any]],
                 workload: Mapping[str, float],
                 out: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
                 knob: KnobCurveModel | None = None
                 ) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``out`` with each config's load-curve prediction in place of the surrogate's, for the
    metrics its curve models; a config with no curve of its own takes the curve ``knob``
    predicts from its knobs, where that model answers (else the surrogate's stands), blended
    with the context's simulator where that places the config
    (:meth:`knowledge.curve_blend.CurveBlend.predict_unmeasured`)."""
    if curves is None:
        return out
    uncurved = [i for i, config in enumerate(configs) if curves.curve(config, workload) is None]
    from_knobs = (knob.predict_many([configs[i] for i in uncurved], workload, list(out))
                  if knob is not None and uncurved else None) or {}
    unmeasured = set(uncurved)
    for name, (c, lo, hi) in out.items():
        knob_p = dict(zip(uncurved, from_knobs.get(name, []), strict=False))
        for i, config in enumerate(configs):
            p = (_unmeasured_answer(curves, config, workload, name, knob_p.get(i),
                                    (c[i], lo[i], hi[i])) if i in unmeasured
                 else curves.predict(config, workload, name))
            if p is not None:
                c[i], lo[i], hi[i] = p
    return out


def _unmeasured_answer(curves: LoadCurves, config: Mapping[str, Any],
                       workload: Mapping[str, float], metric: str,
                       from_knobs: tuple[float, float, float] | None,
                       surrogate: tuple[float, float, float]
                       ) -> tuple[float, float, float] | None:
    """The answer for a config with no load curve of its own: the curve its knobs predict
    (``from_knobs``), else the ``surrogate``'s, blended with the context's simulator where that
    places the config; None where the surrogate's answer stands as it is."""
    blend = getattr(curves, "blend_", None)
    if blend is None:
        return from_knobs
    value, low, high = from_knobs if from_knobs is not None else surrogate
    return blend.predict_unmeasured(config, workload, metric, float(value), float(low),
                                    float(high)) or from_knobs


def fit_knob_curves(curves: LoadCurves | None, encoder: FeatureEncoder
                    ) -> KnobCurveModel | None:
    """The knob-level model of ``curves`` (:data:`KNOB_CURVE_FAMILY`), or None where none is
    chosen or too few curves show their capacity (:data:`knowledge.curve_model.MIN_CURVES`)."""
    if curves is None or KNOB_CURVE_FAMILY is None:
        return None
    model = KnobCurveModel(family=KNOB_CURVE_FAMILY).fit(curves, encoder.transform)
    return model if model.fitted_ else None


def fit_load_curves(trials: Sequence[TrialRecord], *, blend: bool = True
                    ) -> LoadCurves | None:
    """The load curves of a context's measured configs, or None where its names declare no
    offered rate and served rate (:func:`knowledge.load_curve.load_roles`) or no config was
    measured at two rates. ``blend``: also blend them with the simulator of the trials'
    workload kind where their own held-out rates prefer it (:mod:`knowledge.curve_blend`)."""
    wl = [workload_features(t.workload_spec) for t in trials]
    values: dict[str, list[float]] = {}
    for t in trials:
        for m, v in t.metrics.items():
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
                values.setdefault(m, []).append(float(v))
    roles = load_roles(values, sorted({f for w in wl for f in w}))
    if roles is None:
        return None
    configs, measured = [t.config for t in trials], [t.metrics for t in trials]
    curves = LoadCurves(roles=roles).fit(configs, wl, measured)
    if not curves.curves_ or not curves.half_width_:
        return None
    if blend:
        curves.blend_ = fit_blend(curves, fit_simulation(trials), configs, wl, measured)
    return curves

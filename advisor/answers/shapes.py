"""``recommend`` for a model shape never measured on the asked hardware: the configs measured on
several other shapes there (the engine default first) are carried to it by
:class:`knowledge.shape_transfer.ShapeTransfer`, and the answer is labelled a prediction for an
unmeasured shape (``basis: extrapolation``), with intervals widened by the held-out-shape error,
the shapes it came from and the ``advisor tune`` command that would measure it. Where it cannot
answer (weights that do not fit the GPU, a shape far outside the measured ones, a rate above the
predicted capacity) it says precisely why. Where no transferred config meets the SLO at its
intervals' conservative ends it refuses only when every one misses even at the optimistic ends;
an interval straddling the SLO answers ``undecided`` (advisor/answers/rule.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from advisor.answers.model_based import PredictedMetric, Status, trial_model
from advisor.answers.rule import Verdict, predicted_verdict, straddle_reason, undecided
from advisor.errors import AdvisorError, SLOParseError
from advisor.inputs import requested_slo
from advisor.model_config import UnmeasuredShape, unmeasured_shape
from advisor.objective import Objective
from knowledge import TrialFilter, TrialRecord, TrialStatus, TrialStore
from knowledge.shape_transfer import (
    MIN_SHAPES,
    HeldOutShape,
    MeasuredShape,
    ShapePrediction,
    ShapeTransfer,
)
from knowledge.surrogates import context_of, workload_features
from knowledge.validity import is_usable
from objectives import SLO
from objectives.hardware import hardware_matches
from objectives.llm.shapes import KV_DTYPE_BYTES, ShapeFeatures, shape_features
from objectives.registry import get_target
from objectives.workload import Workload

__all__ = ["MAX_BEYOND", "MIN_FREE_MEMORY", "ShapeRecommendation", "answer_unmeasured_shape",
           "extrapolate_shape", "measured_shape", "shape_answer_lines", "shape_groups"]

#: How far outside the measured shapes' range (as a factor of the chosen feature) an answer may
#: reach: the held-out errors calibrate steps of about 2.5x (1.24B -> 3.21B -> 8.03B).
MAX_BEYOND = 2.0
#: Share of GPU memory the weights must leave free (KV cache, activations, graphs): a server whose
#: weights fill the GPU holds no KV cache and serves nothing.
MIN_FREE_MEMORY = 0.10
#: Workload features other than the rate must lie within this factor of a measured workload's.
_SAME_WORKLOAD = 1.1
_RATE = "rate_rps"


@dataclass(frozen=True)
class ShapeRecommendation:
    """The answer for an unmeasured shape: ``status`` as :class:`ModelRecommendation`'s, every
    figure predicted (``basis`` is always ``extrapolation``; ``shape_position`` says whether
    the shape lies between measured ones, ``interpolation``, or outside them)."""

    status: Status
    target: str
    slo: SLO
    objective: Objective
    model: str
    model_shape: dict[str, Any]
    reason: str
    tune_command: str
    hardware_key: str | None = None
    engine_version: str | None = None
    workload: dict[str, float] = field(default_factory=dict)
    config: dict[str, Any] | None = None
    predicted: dict[str, PredictedMetric] = field(default_factory=dict)
    capacity_rps: PredictedMetric | None = None
    conservative_margins: dict[str, float] = field(default_factory=dict)
    shape_position: str | None = None
    beyond_factor: float | None = None
    feature: str | None = None
    measured_shapes: dict[str, dict[str, Any]] = field(default_factory=dict)
    held_out: tuple[HeldOutShape, ...] = ()
    launch_command: str | None = None
    config_is_default: bool = False

    @property
    def found(self) -> bool:
        return self.status == "recommended"

    @property
    def answer(self) -> str:
        """``keep_defaults`` when the engine default is the answer, ``config`` for another
        transferred config, ``none`` when nothing is recommended."""
        if not self.found:
            return "none"
        return "keep_defaults" if self.config_is_default else "config"

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status, "found": self.found, "basis": "extrapolation",
            "answer": self.answer, "shape_position": self.shape_position,
            "beyond_factor": self.beyond_factor, "feature": self.feature,
            "target": self.target, "slo": str(self.slo), "objective": str(self.objective),
            "hardware_key": self.hardware_key, "engine_version": self.engine_version,
            "model": self.model, "model_shape": self.model_shape, "workload": self.workload,
            "config": self.config,
            "predicted": {m: p.to_dict() for m, p in self.predicted.items()},
            "capacity_rps": None if self.capacity_rps is None else self.capacity_rps.to_dict(),
            "predicted_note": "predicted for a shape never measured on this hardware, from the "
                              "measured shapes' load curves; 90% intervals widened by the "
                              "leave-one-shape-out error; not measurements",
            "conservative_slo_margins": self.conservative_margins,
            "measured_shapes": self.measured_shapes,
            "held_out_shapes": [h.to_dict() for h in self.held_out],
            "reason": self.reason, "tune_command": self.tune_command,
            "launch_command": self.launch_command,
        }


def _diff(config: Mapping[str, Any], default: Mapping[str, Any]) -> str:
    """A config as its difference from the engine default (knobs added to the space after a
    trial ran were at their defaults in it), so one config on several shapes is keyed alike."""
    missing = object()
    return json.dumps({k: v for k, v in config.items() if default.get(k, missing) != v},
                      sort_keys=True, default=str)


def _rest(trial: TrialRecord) -> dict[str, float]:
    return {k: v for k, v in workload_features(trial.workload_spec).items() if k != _RATE}


def _same_rest(a: Mapping[str, float], b: Mapping[str, float]) -> bool:
    return all(k in b and b[k] > 0 and max(v / b[k], b[k] / v) <= _SAME_WORKLOAD
               for k, v in a.items() if v > 0)


@dataclass
class _Group:
    """The usable trials of one hardware, engine version and workload (all but the rate), by
    config (as a diff from the default) and shape."""

    hardware_key: str
    engine_version: str | None
    rest: dict[str, float]
    trials: dict[str, dict[str, list[TrialRecord]]] = field(default_factory=dict)

    def transferable(self) -> dict[str, dict[str, list[TrialRecord]]]:
        """The configs measured on at least :data:`MIN_SHAPES` shapes with known features."""
        return {c: shapes for c, shapes in self.trials.items() if len(shapes) >= MIN_SHAPES}


def shape_groups(store: TrialStore, target: str, hardware: str | None,
                 default: Mapping[str, Any]) -> list[_Group]:
    """The usable trials of ``target`` on ``hardware`` (part of a key; None: any), grouped
    for a shape transfer; trials of models without shape features are left out."""
    groups: dict[tuple[str, str | None, str], _Group] = {}
    for t in store.list_trials(TrialFilter(target=target, status=TrialStatus.COMPLETE)):
        if hardware is not None and not hardware_matches(hardware, t.hardware_key):
            continue
        model = trial_model(t)
        if (not t.metrics or not is_usable(t.details) or model is None
                or _RATE not in workload_features(t.workload_spec)
                or shape_features(model) is None):
            continue
        key = context_of(t)
        rest = _rest(t)
        g = groups.setdefault((t.hardware_key, key.engine_version,
                               json.dumps(rest, sort_keys=True)),
                              _Group(t.hardware_key, key.engine_version, rest))
        g.trials.setdefault(_diff(t.config, default), {}).setdefault(model, []).append(t)
    return list(groups.values())


def measured_shape(model: str, trials: Sequence[TrialRecord]) -> MeasuredShape:
    """The trials of one config serving ``model`` (a shape with features) as a transfer's input."""
    f = shape_features(model)
    assert f is not None
    return MeasuredShape(model, {"parameters": float(f.parameters),
                                 "kv_bytes_per_token": float(f.kv_bytes_per_token)},
                         tuple(workload_features(t.workload_spec)[_RATE] for t in trials),
                         tuple({k: float(v) for k, v in t.metrics.items()
                                if isinstance(v, int | float) and not isinstance(v, bool)}
                               for t in trials))


def _gpu_memory_bytes(trials: Sequence[TrialRecord]) -> float | None:
    """The GPU memory of the hardware record (summed over its GPUs), or None without one."""
    for t in trials:
        gpus = (t.hardware or {}).get("gpus") or []
        mib = [float(g["memory_mib"]) for g in gpus
               if isinstance(g, Mapping) and isinstance(g.get("memory_mib"), int | float)]
        if mib:
            return sum(mib) * 2**20
    return None


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB ({n / 2**30:.1f} GiB)"


def extrapolate_shape(store: TrialStore, gap: UnmeasuredShape, *, slo: str,
                      objective: str | None, workload: Mapping[str, float]
                      ) -> ShapeRecommendation | UnmeasuredShape:
    """The answer for the unmeasured shape of ``gap`` (see the module docstring), or ``gap``
    itself when nothing on the asked hardware can be carried to it (fewer than
    :data:`MIN_SHAPES` shapes measured with one config and workload), or when no rate was asked
    (with a note saying a rate would get a prediction)."""
    engine = get_target(gap.target)
    rule = requested_slo(slo)
    rule.check_metrics(gap.target, engine.reported_metrics())
    goal = Objective.parse(objective or engine.default_objective)
    if goal.metric not in engine.reported_metrics():
        raise SLOParseError(f"target {gap.target!r} does not report the objective metric "
                            f"{goal.metric!r}")
    default = engine.space().default_config()
    asked = {k: float(v) for k, v in workload.items()}
    groups = [g for g in shape_groups(store, gap.target, gap.hardware_key, default)
              if g.transferable()]
    if not groups:
        return gap
    if _RATE not in asked:
        return replace(gap, note="ask at a rate (--rate-rps) for a prediction carried from the "
                                 "measured shapes' load curves")
    rest = {k: v for k, v in asked.items() if k != _RATE}
    fitting = [g for g in groups if _same_rest(rest, g.rest)]
    shape = gap.shape
    base: dict[str, Any] = {"target": gap.target, "slo": rule, "objective": goal,
                            "model": shape.name, "model_shape": shape.to_dict(),
                            "tune_command": gap.tune_command}
    if not fitting:
        return ShapeRecommendation(
            status="not_covered", reason=f"the measured shapes were measured at workloads "
            f"{[g.rest for g in groups]} only, not {rest}; an unmeasured shape is answered "
            "only at a measured workload", workload=asked, **base)
    group = max(fitting, key=lambda g: (len(g.transferable().get(_diff({}, default), {})),
                                        sum(len(s) for s in g.transferable().values())))
    base.update(hardware_key=group.hardware_key, engine_version=group.engine_version,
                workload={**group.rest, **asked})
    configs = group.transferable()
    every = [t for shapes in configs.values() for ts in shapes.values() for t in ts]
    names = sorted({m for shapes in configs.values() for m in shapes})
    base["measured_shapes"] = {m: f.to_dict() for m in names
                               if (f := shape_features(m)) is not None}
    memory = _gpu_memory_bytes(every)
    weights = shape.parameters * KV_DTYPE_BYTES.get(shape.dtype, 2)
    if memory is not None and weights > (1 - MIN_FREE_MEMORY) * memory:
        return ShapeRecommendation(
            status="not_covered", reason=(
                f"{shape.name} does not fit {group.hardware_key}: its {shape.dtype} weights "
                f"are {_gb(weights)} ({shape.parameters / 1e9:.2f}B parameters x "
                f"{weights // shape.parameters} bytes), {weights / memory:.0%} of the "
                f"{_gb(memory)} of GPU memory, leaving less than the "
                f"{MIN_FREE_MEMORY:.0%} a KV cache and activations need; serving it takes "
                "more GPUs (or quantized weights), and no measured shape ran that way"), **base)
    rate = asked[_RATE]
    answers: list[tuple[str, ShapeTransfer, ShapePrediction, dict[str, float]]] = []
    verdicts: list[Verdict] = []  # each answer's, by the one rule
    for diff, shapes in sorted(configs.items(), key=lambda kv: kv[0] != "{}"):
        transfer = ShapeTransfer().fit([measured_shape(m, ts)
                                        for m, ts in sorted(shapes.items())])
        features = {"parameters": float(shape.parameters),
                    "kv_bytes_per_token": float(shape.kv_bytes_per_token)}
        pred = transfer.predict(features, rate, [goal.metric, *rule.metrics])
        verdicts.append(predicted_verdict(rule, pred.metrics))
        answers.append((diff, transfer, pred, verdicts[-1].margins))
    diff, transfer, pred, margins = answers[0]  # the default's when it transfers
    seen = [float(c.features[transfer.feature_]) for c in transfer.curves_]
    base.update(feature=transfer.feature_, shape_position=pred.position,
                beyond_factor=round(pred.beyond, 3), held_out=tuple(transfer.held_out_),
                capacity_rps=PredictedMetric(*pred.capacity))
    if pred.beyond > MAX_BEYOND:
        return ShapeRecommendation(
            status="not_covered", reason=(
                f"{shape.name}'s {transfer.feature_} ({getattr(shape, transfer.feature_):,}) "
                f"lies {pred.beyond:.1f}x outside the measured shapes' range "
                f"({min(seen):,.0f} .. {max(seen):,.0f}); the shape transfer is calibrated "
                f"for steps up to {MAX_BEYOND:g}x beyond it"), **base)
    if rate > pred.capacity[0]:
        return ShapeRecommendation(
            status="not_covered", reason=(
                f"the asked rate {rate:g} req/s is above {shape.name}'s predicted capacity "
                f"{pred.capacity[0]:.0f} req/s [{pred.capacity[1]:.0f} .. "
                f"{pred.capacity[2]:.0f}] with the transferred configs: past capacity the "
                "queue grows for as long as the load lasts"), **base)
    missing = [b.metric for b in rule.bounds if b.metric not in pred.metrics]
    if missing:
        return ShapeRecommendation(
            status="not_covered", reason=f"no measured shape's load curve models "
            f"{', '.join(missing)}", **base)
    feasible = [a for a in answers if a[3] and all(v <= 0 for v in a[3].values())
                and len(a[3]) == len(rule.bounds)]
    sign = 1.0 if goal.direction == "maximize" else -1.0
    # No transferred config meets: one whose intervals straddle the SLO leaves it undecided
    # (the default's first when its point prediction meets), else every one misses.
    straddling = [] if feasible else undecided(verdicts, 0 if answers[0][0] == "{}" else None)
    if feasible:
        diff, transfer, pred, margins = max(
            feasible, key=lambda a: (sign * a[2].metrics.get(goal.metric, (0.0,))[0],
                                     a[0] == "{}"))
    elif straddling:
        diff, transfer, pred, margins = answers[straddling[0]]
    shapes = configs[diff]
    model = max(shapes, key=lambda m: len(shapes[m]))
    config = dict(shapes[model][-1].config) if diff != "{}" else dict(default)
    predicted = {m: PredictedMetric(*v) for m, v in pred.metrics.items()}
    label = (f"predicted for unmeasured shape {shape.name} by {pred.position} in "
             f"{transfer.feature_} across the measured shapes {', '.join(pred.shapes)}; 90% "
             "intervals widened by the leave-one-shape-out error")
    base.update(config=config, predicted=predicted, conservative_margins=margins,
                config_is_default=diff == "{}", capacity_rps=PredictedMetric(*pred.capacity),
                launch_command=_launch(engine, config, shapes[model][-1], shape, rate))
    if straddling:
        which = ("the engine default" if diff == "{}" else f"the config {diff}")
        return ShapeRecommendation(
            status="undecided", reason=f"{label}; no transferred config's 90% interval meets "
            f"{rule}, " + straddle_reason(len(straddling), which, verdicts[straddling[0]], rule,
                                          pred.metrics)
            + "; measuring the shape decides", **base)
    if not feasible:
        return ShapeRecommendation(
            status="no_feasible_config", reason=f"{label}; no transferred config's 90% "
            f"interval meets {rule}", **base)
    return ShapeRecommendation(status="recommended", reason=label, **base)


def answer_unmeasured_shape(store: TrialStore, *, target: str, hardware: str | None,
                            shape: ShapeFeatures, model_config: str, slo: str,
                            objective: str | None, workload: Mapping[str, float]
                            ) -> ShapeRecommendation | UnmeasuredShape | None:
    """None when a complete trial of ``target`` on ``hardware`` served ``shape`` (the fitted
    models answer then); else the answer carried from the shapes measured there
    (:func:`extrapolate_shape`), or why there is none. ``model_config`` is how the asker gave
    the shape, for the ``advisor tune`` command the answer names."""
    gap = unmeasured_shape(store, target=target, hardware=hardware, shape=shape,
                           model_config=model_config, slo=slo)
    if gap is None:
        return None
    return extrapolate_shape(store, gap, slo=slo, objective=objective, workload=workload)


def _launch(engine: Any, config: Mapping[str, Any], trial: TrialRecord, shape: ShapeFeatures,
            rate: float) -> str | None:
    """The launch command for ``config`` serving ``shape`` (a measured trial's workload with the
    model and rate replaced), or None when the engine cannot build one."""
    spec = dict(trial.workload_spec)
    params = dict(spec.get("params") or {})
    params["model"] = shape.name
    arrival = params.get("arrival")
    if isinstance(arrival, Mapping):
        params["arrival"] = {**arrival, _RATE: rate}
    spec["params"] = params
    try:
        return str(engine.launch_command(dict(config), Workload.from_spec(spec)))
    except (AdvisorError, ValueError, KeyError):
        return None


def _fmt(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"


def shape_answer_lines(rec: ShapeRecommendation) -> list[str]:
    """The answer as lines of text for the CLI: what is recommended (or why not), every figure
    labelled as a prediction for an unmeasured shape, the shapes it came from and the command
    that would measure it."""
    where = rec.hardware_key or "the asked hardware"
    lines: list[str] = []
    if rec.status == "not_covered":
        lines.append(f"Not covered: {rec.reason}")
    elif rec.status == "no_feasible_config":
        lines.append(f"No {rec.target} config is predicted to meet {rec.slo} for {rec.model} "
                     f"on {where} with its widened 90% interval ({rec.shape_position}).")
        lines.append(rec.reason)
    elif rec.status == "undecided":
        lines.append(f"Undecided for {rec.slo} for {rec.model} on {where}: no {rec.target} "
                     "config is shown to meet it by its widened 90% interval, nor every one "
                     f"to miss it ({rec.shape_position}); measure it.")
        lines.append(rec.reason)
    else:
        head = ("Keep the defaults: the engine default" if rec.config_is_default
                else f"Recommended {rec.target} config")
        lines.append(f"{head} for {rec.slo} on {where}, unmeasured shape {rec.model} "
                     f"(EXTRAPOLATION to an unmeasured shape, {rec.shape_position} in "
                     f"{rec.feature}: predicted, not measured):")
        lines.append(f"  {json.dumps(rec.config, sort_keys=True)}")
        lines.append(f"  {rec.reason}")
    if rec.predicted:
        lines.append(f"predicted at {rec.workload} (basis: extrapolation to an unmeasured "
                     "shape; 90% intervals widened by the held-out-shape error):")
        if rec.capacity_rps is not None:
            c = rec.capacity_rps
            lines.append(f"  capacity_rps  {_fmt(c.value)}  [{_fmt(c.low)} .. {_fmt(c.high)}]")
        for m, p in rec.predicted.items():
            margin = next((v for k, v in rec.conservative_margins.items() if k.startswith(m)),
                          None)
            tail = "" if margin is None else (
                f"  {'meets' if margin <= 0 else 'misses'} the SLO at the interval's far end")
            lines.append(f"  {m}  {_fmt(p.value)}  [{_fmt(p.low)} .. {_fmt(p.high)}]{tail}")
    if rec.held_out:
        errs = "; ".join(
            f"{h.name} from {'+'.join(h.trained_on)} ({h.position}): capacity "
            f"{h.capacity_ape:.0%} off" for h in rec.held_out)
        lines.append(f"held-out shapes ({rec.feature}): {errs} "
                     "(advisor knowledge eval --group-by shape)")
    if rec.measured_shapes:
        lines.append(f"measured shapes: {', '.join(rec.measured_shapes)}")
    if rec.launch_command and rec.found:
        lines.append(f"launch: {rec.launch_command}")
    lines.append(f"To measure it: {rec.tune_command}")
    return lines

"""The measured data behind the cheat-sheet's figures, as plain data for the sheet's JSON form.

Which figures a context gets follows from the metrics it measured, never from its target's name.
A *serving* context (it measures TTFT) gets, per workload family measured at several arrival
rates, TTFT p95 and TPOT p95 against the rate for the tier's top configs and the engine default;
a family measured at one rate gets those metrics against the knob that moves them most. A
*vector index* context (recall@10 and QPS) gets recall@10 against QPS per index family, with each
family's Pareto front, as ann-benchmarks draws it. Every point is a measured trial (or the median
of a config's repeats); knowledge/plots.py draws them.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from advisor.errors import SLOParseError
from knowledge.rules import pareto_front
from knowledge.surrogates import ContextModels, WorkloadPoint
from objectives.metrics import metric_spec
from objectives.slo import SLO, parse_slo
from objectives.workload import canonical_json
from search_spaces import SearchSpace

__all__ = ["MAX_CURVES", "RATE_FEATURE", "SERVING_PANELS", "VECTOR_AXES",
           "context_kind", "family_knob", "knob_figure", "metric_label", "rate_figures",
           "recall_qps_figures", "slo_text"]

#: The latency metrics of a serving context's figures, one panel each.
SERVING_PANELS = ("ttft_p95_ms", "tpot_p95_ms")
#: x and y of a vector index context's figure: throughput against quality.
VECTOR_AXES = ("qps", "recall_at_10")
#: The workload feature that co-measured trials of one engine start differ in.
RATE_FEATURE = "rate_rps"
#: At most this many configs besides the engine default get a curve in a tier's rate figure:
#: more lines than that on one small panel stop being readable.
MAX_CURVES = 4

_ACRONYMS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "E2E", "qps": "QPS"}
#: Metric name suffixes that only state the unit (shown in parentheses instead).
_UNIT_SUFFIXES = ("_per_s", "_ms", "_mb", "_s")


def metric_label(metric: str) -> str:
    """An axis label with its unit: ``ttft_p95_ms`` -> ``TTFT p95 (ms)``, ``qps`` ->
    ``QPS (queries/s)``, ``recall_at_10`` -> ``recall@10 (fraction)``."""
    unit = _unit(metric)
    name = metric
    for suffix in _UNIT_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    name = re.sub(r"recall_at_(\d+)", r"recall@\1", name)
    text = " ".join(_ACRONYMS.get(w, w) for w in name.split("_"))
    if metric.endswith("_per_s"):
        text += "/s"
    return f"{text} ({unit})" if unit and not text.endswith(unit) else text


def _unit(metric: str) -> str:
    try:
        return metric_spec(metric).unit
    except SLOParseError:
        return ""


def _panels() -> list[dict[str, str]]:
    return [{"metric": m, "label": metric_label(m), "unit": _unit(m)} for m in SERVING_PANELS]


def context_kind(ctx: ContextModels) -> str:
    """``serving`` when most trials measured TTFT, ``vector_index`` when most measured recall@10
    and QPS, else ``other``: what the figures of a context can show."""
    n = max(ctx.n_trials, 1)

    def share(metric: str) -> float:
        return sum(metric in m for m in ctx.measured) / n

    if share(SERVING_PANELS[0]) >= 0.5:
        return "serving"
    if all(share(m) >= 0.5 for m in VECTOR_AXES):
        return "vector_index"
    return "other"


def _key(config: Mapping[str, Any] | None, default: Mapping[str, Any]) -> str:
    """Identity of a config, a knob it does not name taking its default: a knob added to the
    space after a trial was measured was at the engine's default in that trial."""
    return canonical_json({**default, **(config or {})})


def _bounds(slo: SLO, metrics: Sequence[str]) -> list[dict[str, Any]]:
    return [{"metric": b.metric, "op": b.op, "threshold": b.threshold} for b in slo.bounds
            if b.metric in metrics]


def _family_key(w: WorkloadPoint) -> str:
    """Workloads that differ only in their arrival rate share a family: same preset name (a
    co-measured workload is named ``<name>@<rate>rps``) and the same other features."""
    return canonical_json({"name": w.name.split("@", 1)[0],
                           "features": {k: v for k, v in w.features.items()
                                        if k != RATE_FEATURE}})


def _family_label(w: WorkloadPoint) -> str:
    extra = "".join(f", {k.split('_')[0]} {v:g}" for k, v in w.features.items()
                    if k != RATE_FEATURE)
    return w.name.split("@", 1)[0] + extra


def slo_text(slo: str) -> str:
    """``ttft_p95_ms<=500,recall_at_5>=0.9`` -> ``TTFT p95 ≤ 500 ms, recall@5 ≥ 0.9``."""
    parts = []
    for b in parse_slo(slo).bounds:
        name, unit = metric_label(b.metric).split(" (")[0], _unit(b.metric)
        shown = "" if unit in ("", "fraction") or name.endswith(unit) else f" {unit}"
        parts.append(f"{name} {'≤' if b.op == '<=' else '≥'} {b.threshold:g}{shown}")
    return ", ".join(parts)


def _median_point(ctx: ContextModels, idx: Sequence[int], metrics: Sequence[str]
                  ) -> dict[str, Any]:
    """Median, lowest and highest of each metric over the repeats ``idx``."""
    med: dict[str, float] = {}
    low: dict[str, float] = {}
    high: dict[str, float] = {}
    for m in metrics:
        values = [ctx.measured[i][m] for i in idx
                  if m in ctx.measured[i] and math.isfinite(ctx.measured[i][m])]
        if values:
            med[m], low[m], high[m] = statistics.median(values), min(values), max(values)
    return {"n": len(idx), "median": med, "low": low, "high": high,
            "trial_ids": [ctx.trial_ids[i] for i in idx]}


def _reach(points: Sequence[Mapping[str, Any]], slo: SLO, objective: str, sign: float
           ) -> tuple[float, float]:
    """How far a config's curve meets ``slo``: the highest rate where its median does (-1 when
    none), then the signed objective there (at its highest measured rate when none)."""
    met = [p for p in points if slo.is_met(p["median"])]
    at = met[-1] if met else points[-1]
    value = at["median"].get(objective)
    return (met[-1]["rate_rps"] if met else -1.0,
            sign * value if value is not None else -math.inf)


def rate_figures(ctx: ContextModels, workloads: Sequence[WorkloadPoint], tiers: Sequence[Any],
                 recommended: Mapping[tuple[str, str], Mapping[str, Any] | None],
                 default_config: Mapping[str, Any]
                 ) -> tuple[list[dict[str, Any]], list[list[WorkloadPoint]]]:
    """TTFT / TPOT p95 against arrival rate per workload family measured at two or more rates,
    and the families measured at one rate only (for :func:`knob_figure`).

    ``tiers`` are the sheet's :class:`~advisor.cheatsheet.Tier` objects; ``recommended`` maps
    (workload spec hash, tier name) to that row's recommended config. Per tier, the curves are
    the configs recommended for the tier at any rate of the family, then the configs measured
    at two or more rates that meet the tier's SLO up to the highest rate (ties: the better
    objective there), at most :data:`MAX_CURVES`; the engine default is always drawn. A point is
    the median of a config's repeats at a rate, with the lowest and highest repeat.
    """
    families: dict[str, list[WorkloadPoint]] = {}
    for w in workloads:
        families.setdefault(_family_key(w), []).append(w)
    default_key = _key(default_config, default_config)
    metrics = list(SERVING_PANELS)
    for t in tiers:
        metrics += [m for m in parse_slo(t.slo).metrics if m not in metrics]
        objective = t.objective.split(":", 1)[1]
        if objective not in metrics:
            metrics.append(objective)
    figures: list[dict[str, Any]] = []
    single: list[list[WorkloadPoint]] = []
    for members in families.values():
        hashes = {w.spec_hash for w in members}
        idx = [i for i, h in enumerate(ctx.trial_workload)
               if h in hashes and RATE_FEATURE in ctx.features[i]]
        rates = sorted({ctx.features[i][RATE_FEATURE] for i in idx})
        if len(rates) < 2:
            single.append(members)
            continue
        cells: dict[str, dict[float, list[int]]] = {}
        configs: dict[str, dict[str, Any]] = {}
        for i in idx:
            k = _key(ctx.configs[i], default_config)
            configs.setdefault(k, ctx.configs[i])
            cells.setdefault(k, {}).setdefault(ctx.features[i][RATE_FEATURE], []).append(i)
        points = {k: [{"rate_rps": r, **_median_point(ctx, by_rate[r], metrics)}
                      for r in sorted(by_rate)] for k, by_rate in cells.items()}
        letters: dict[str, str] = {}
        tier_data: list[dict[str, Any]] = []
        for t in tiers:
            slo = parse_slo(t.slo)
            direction, objective = t.objective.split(":", 1)
            sign = 1.0 if direction == "maximize" else -1.0
            rec_keys = {_key(recommended.get((w.spec_hash, t.name)), default_config)
                        for w in members
                        if recommended.get((w.spec_hash, t.name)) is not None}
            candidates = [k for k in points if k != default_key
                          and (len(points[k]) >= 2 or k in rec_keys)]
            ranks = {k: (k in rec_keys, *_reach(points[k], slo, objective, sign))
                     for k in candidates}
            chosen = sorted(candidates, key=lambda k: ranks[k], reverse=True)[:MAX_CURVES]
            if default_key in points:
                chosen.append(default_key)
            for k in chosen:
                if k not in letters:
                    letters[k] = ("default" if k == default_key
                                  else chr(ord("A") + sum(v != "default"
                                                          for v in letters.values())))
            tier_data.append({
                "tier": t.name, "slo": t.slo, "slo_text": slo_text(t.slo),
                "objective": t.objective,
                "bounds": _bounds(slo, SERVING_PANELS),
                "series": [{"key": letters[k], "recommended": k in rec_keys,
                            "meets_slo": [slo.is_met(p["median"]) for p in points[k]]}
                           for k in chosen]})
        series = [{"key": letter, "default": k == default_key, "config": configs[k],
                   "differs": {n: v for n, v in configs[k].items()
                               if default_config.get(n) != v},
                   "points": points[k]} for k, letter in letters.items()]
        series.sort(key=lambda s: (s["default"], s["key"]))
        figures.append({
            "family": _family_label(members[0]), "rates": rates,
            "workload_hashes": sorted({w.spec_hash for w in members}),
            "x": RATE_FEATURE, "x_label": "arrival rate (req/s)",
            "panels": _panels(), "default_measured": default_key in points,
            "series": series, "tiers": tier_data, "trials": len(idx)})
    return figures, single


def knob_figure(ctx: ContextModels, members: Sequence[WorkloadPoint], tiers: Sequence[Any],
                space: SearchSpace, default_config: Mapping[str, Any],
                importance: Mapping[str, float], label: str) -> dict[str, Any]:
    """For a workload family measured at one rate: TTFT / TPOT p95 of every trial against the
    knob that moves TTFT p95 most (by ``importance``, the surrogate's one-at-a-time
    sensitivity), among knobs measured at two or more values. Each point names the first tier
    (in the sheet's order, strictest first) whose SLO it meets."""
    hashes = {w.spec_hash for w in members}
    idx = [i for i, h in enumerate(ctx.trial_workload) if h in hashes]
    rates = sorted({ctx.features[i][RATE_FEATURE] for i in idx
                    if RATE_FEATURE in ctx.features[i]})
    at = f"measured at one rate only ({rates[0]:g} req/s)" if rates else "measured at one load"
    knobs = {k.name: k for k in space}
    varied = [name for name in knobs
              if len({canonical_json(ctx.configs[i].get(name)) for i in idx
                      if name in ctx.configs[i]}) >= 2]
    ranked = sorted(varied, key=lambda n: (-importance.get(n, 0.0), varied.index(n)))
    out: dict[str, Any] = {"workload_class": label, "note": at, "trials": len(idx),
                           "panels": _panels(),
                           "tiers": [{"tier": t.name, "slo": t.slo,
                                      "slo_text": slo_text(t.slo),
                                      "bounds": _bounds(parse_slo(t.slo), SERVING_PANELS)}
                                     for t in tiers],
                           "knob": None}
    if not ranked:
        out["note"] += "; every trial at the same settings"
        return out
    knob = knobs[ranked[0]]
    slos = [(t.name, parse_slo(t.slo)) for t in tiers]
    default_key = _key(default_config, default_config)
    points = []
    for i in idx:
        if knob.name not in ctx.configs[i]:
            continue
        measured = ctx.measured[i]
        points.append({
            "x": ctx.configs[i][knob.name], "trial_id": ctx.trial_ids[i],
            "metrics": {m: measured[m] for m in SERVING_PANELS if m in measured},
            "tier": next((name for name, slo in slos if slo.is_met(measured)), None),
            "default": _key(ctx.configs[i], default_config) == default_key})
    categorical = knob.type in ("categorical", "bool")
    categories = ([str(c).lower() if isinstance(c, bool) else str(c)
                   for c in (knob.choices if knob.type == "categorical" else (False, True))]
                  if categorical else [])
    if categorical:
        for p in points:
            p["x"] = str(p["x"]).lower() if isinstance(p["x"], bool) else str(p["x"])
        seen = {p["x"] for p in points}
        categories = [c for c in categories if c in seen] + sorted(seen - set(categories))
    share = importance.get(knob.name)
    out.update({
        "knob": knob.name,
        "x_label": f"{knob.name} ({knob.unit})" if knob.unit else knob.name,
        "categorical": categorical, "categories": categories, "log_x": knob.log,
        "points": points,
        "why": (f"the knob whose measured values move the TTFT p95 prediction most "
                f"({share:.0%} of its spread)" if share else
                "the first knob measured at two or more values")})
    return out


def family_knob(space: SearchSpace) -> str | None:
    """The categorical knob that other knobs depend on most (their ``when`` names it): the
    index family of a vector index, for instance. None when no knob is depended on."""
    counts = {k.name: 0 for k in space if k.type == "categorical"}
    for k in space:
        for name in k.when:
            if name in counts:
                counts[name] += 1
    best = max(counts, key=lambda n: counts[n], default=None)
    return best if best is not None and counts[best] > 0 else None


def recall_qps_figures(ctx: ContextModels, workloads: Sequence[tuple[str, WorkloadPoint]],
                       tiers: Sequence[Any], space: SearchSpace) -> list[dict[str, Any]]:
    """Per workload: recall@10 against QPS of every trial, grouped by index family (see
    :func:`family_knob`), with each family's Pareto front (more QPS and more recall are both
    better), and the tiers' recall bounds. ``workloads`` pairs each workload with its label."""
    x, y = VECTOR_AXES
    by_knob = family_knob(space)
    bounds: dict[float, list[str]] = {}
    for t in tiers:
        for b in parse_slo(t.slo).bounds:
            if b.metric == y:
                bounds.setdefault(b.threshold, []).append(t.name)
    figures = []
    for label, w in workloads:
        groups: dict[str, list[tuple[float, float]]] = {}
        for i, h in enumerate(ctx.trial_workload):
            m = ctx.measured[i]
            if h != w.spec_hash or x not in m or y not in m or m[x] <= 0:
                continue
            family = str(ctx.configs[i].get(by_knob, "other")) if by_knob else "all configs"
            groups.setdefault(family, []).append((m[x], m[y]))
        if not groups:
            continue
        families = []
        for name in sorted(groups):
            pts = groups[name]
            front = sorted(pts[j] for j in pareto_front(pts, x_lower_better=False,
                                                         y_higher_better=True))
            families.append({"name": name, "points": [list(p) for p in pts],
                             "front": [list(p) for p in front]})
        figures.append({
            "workload_class": label, "x": x, "y": y, "x_label": metric_label(x),
            "y_label": metric_label(y), "y_unit": _unit(y), "family_knob": by_knob,
            "families": families,
            "bounds": [{"metric": y, "op": ">=", "threshold": thr, "tiers": names}
                       for thr, names in sorted(bounds.items(), reverse=True)],
            "trials": sum(len(p) for p in groups.values())})
    return figures

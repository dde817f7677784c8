"""The tuning cheat-sheet: per target × hardware × model × workload class, three SLO tiers
(interactive, standard, throughput) with the recommended knob values, their figures, knob
importance, and rules of thumb fitted to the measured trials.

Every row is the planner's answer (advisor/answers/planner.py ``plan_recommendation``) to the
tier's SLO at a measured workload: the same document, figures, verdict and evidence that
``advisor recommend --json`` prints for that question, so the sheet can never disagree with it.
Each context also carries the measured data of its figures (advisor/sheet_figures.py: latency
against arrival rate, recall against QPS). Renderers (Markdown, static HTML with inline SVG plots
drawn by matplotlib) live in knowledge/render.py and knowledge/plots.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from advisor.answers import RecommendationRequest, plan_recommendation
from advisor.answers.document import Answer
from advisor.errors import InputError, NotFoundError
from advisor.sheet_figures import (
    SERVING_PANELS,
    context_kind,
    knob_figure,
    metric_label,
    rate_figures,
    recall_qps_figures,
)
from knowledge import TrialStore
from knowledge.cache import KnowledgeModels
from knowledge.rules import Rule, fit_rules, pareto_front
from knowledge.surrogates import ContextModels, WorkloadPoint
from objectives.hardware import hardware_matches
from objectives.kinds import workload_kinds
from objectives.metrics import metric_spec
from objectives.vocabulary import Tier
from objectives.workload import canonical_json

__all__ = ["TIERS", "CheatSheet", "CheatSheetRow", "Tier", "build_cheatsheet", "knob_value"]


#: Tier sets by workload kind, as the kinds declare them (objectives/kinds/). A target gets the
#: most specific set whose metrics it reports (:func:`tiers_for`).
TIERS: dict[str, tuple[Tier, ...]] = {kind.name: kind.tiers for kind in workload_kinds()
                                      if kind.tiers}


def _tier_metrics(tiers: Sequence[Tier]) -> set[str]:
    """The metrics ``tiers`` bound or optimise."""
    needed = {b.split("<=")[0].split(">=")[0] for t in tiers for b in t.slo.split(",")}
    return needed | {t.objective.split(":", 1)[1] for t in tiers}


def tiers_for(target: str) -> tuple[Tier, ...]:
    """The tiers of the most specific tier set (the one naming the most metrics) whose metrics
    ``target`` reports: a pipeline's tiers before those of the serving stage inside it."""
    from objectives.registry import get_target

    reported = get_target(target).reported_metrics()
    for tiers in sorted(TIERS.values(), key=lambda tiers: -len(_tier_metrics(tiers))):
        if _tier_metrics(tiers) <= reported:
            return tiers
    return ()


@dataclass(frozen=True)
class CheatSheetRow:
    """One recommendation of the sheet: a tier at one measured workload of one context."""

    target: str
    hardware_key: str
    model: str | None
    engine_version: str | None
    workload_class: str
    workload: dict[str, float]
    tier: Tier
    #: The planner's answer for the tier's SLO at this workload: the document `advisor
    #: recommend --json` prints for the same question.
    answer: Answer
    importance: dict[str, float]
    evidence_count: int
    #: Mean ms per pipeline stage at the recommended config, and whether predicted or, with
    #: no recommendation, measured over the workload's trials; empty for single-stage targets.
    stage_budget_ms: dict[str, float] = field(default_factory=dict)
    stage_budget_source: str = ""

    @property
    def dominant_stage(self) -> str | None:
        """The stage that takes the largest share of the latency budget."""
        if not self.stage_budget_ms:
            return None
        return max(self.stage_budget_ms, key=lambda s: self.stage_budget_ms[s])

    def to_dict(self) -> dict[str, Any]:
        a = self.answer
        return {
            "target": self.target, "hardware_key": self.hardware_key, "model": self.model,
            "engine_version": self.engine_version, "workload_class": self.workload_class,
            "workload": self.workload, "tier": self.tier.name, "slo": self.tier.slo,
            "objective": self.tier.objective, "tier_description": self.tier.description,
            "status": a.status, "answer": a.answer, "basis": a.basis, "summary": a.summary,
            "config": a.config,
            "verdict": None if a.verdict is None else a.verdict.model_dump(mode="json"),
            "comparison": None if a.comparison is None else a.comparison.model_dump(mode="json"),
            "figures": {m: f.model_dump(mode="json") for m, f in a.figures.items()},
            "confidence": a.confidence.level, "confidence_reason": a.confidence.reason,
            "launch_command": a.launch_command, "knob_importance": self.importance,
            "evidence_count": self.evidence_count,
            "evidence_trial_ids": [e.trial_id for e in a.evidence],
            "tune_command": a.next.tune_command,
            "stage_budget_ms": self.stage_budget_ms,
            "stage_budget_source": self.stage_budget_source,
            "dominant_stage": self.dominant_stage,
        }


@dataclass(frozen=True)
class ContextSection:
    """Per context: its rows' shared facts, rules of thumb, Pareto plots' data, and the measured
    data of its figures (``kind`` says which: ``serving``, ``vector_index`` or ``other``;
    ``figures`` holds ``rate``, ``single_rate`` and ``recall_qps`` lists, see
    advisor/sheet_figures.py)."""

    context: dict[str, Any]
    label: str
    trials: int
    model_quality: dict[str, dict[str, Any]]
    rules: list[Rule]
    pareto: list[dict[str, Any]]
    kind: str = "other"
    figures: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"context": self.context, "label": self.label, "trials": self.trials,
                "kind": self.kind, "model_quality": self.model_quality,
                "rules_of_thumb": [r.to_dict() for r in self.rules], "pareto": self.pareto,
                "figures": self.figures}


@dataclass(frozen=True)
class CheatSheet:
    """The whole sheet; ``to_dict`` is its JSON form, the renderers build on it."""

    rows: tuple[CheatSheetRow, ...]
    sections: tuple[ContextSection, ...]
    filters: dict[str, Any] = field(default_factory=dict)
    trials: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "slo-advisor-cheatsheet/1", "filters": self.filters,
                "trials": self.trials,
                "note": "Each row is the answer `advisor recommend` gives for the tier's SLO at "
                        "a measured workload; a figure is measured (median of its windows "
                        "there) or predicted (90% interval), as its basis says; rules of "
                        "thumb are fitted to measured trials",
                "rows": [r.to_dict() for r in self.rows],
                "contexts": [s.to_dict() for s in self.sections]}

    def to_markdown(self) -> str:
        from knowledge.render import render_markdown

        return render_markdown(self.to_dict())

    def to_html(self) -> str:
        from knowledge.render import render_html

        return render_html(self.to_dict())


def _class_name(w: WorkloadPoint) -> str:
    f = w.features
    if "rate_rps" in f:
        extra = "".join(f", {k.split('_')[0]} {f[k]:g}" for k in ("prompt_len", "output_len")
                        if k in f)
        return f"{w.name.split('@', 1)[0]} @ {f['rate_rps']:g} req/s{extra}"
    if "n_vectors" in f:
        # Presets are named after their default size; the dataset plus N and d say what it is.
        dataset = (w.spec.get("params") or {}).get("dataset") or w.name
        return f"{dataset} (N={f['n_vectors']:g}, d={f.get('dim', 0):g})"
    return w.name or w.spec_hash


def _importance(ctx: ContextModels, config: Mapping[str, Any] | None,
                workload: Mapping[str, float], metric: str) -> dict[str, float]:
    """Share of the objective's predicted spread when each knob alone sweeps its measured
    values around ``config`` (one-at-a-time sensitivity of the surrogate), summing to 1."""
    if config is None or metric not in ctx.metrics:
        return {}
    from advisor.answers.model_based import _candidates  # same variation rule as the recommender
    from objectives.registry import get_target

    space = get_target(ctx.key.target).space()
    spreads: dict[str, float] = {}
    variants = _candidates(ctx, space, [dict(config)], 400)
    by_knob: dict[str, list[dict[str, Any]]] = {}
    for v in variants:
        changed = [k for k in v if v.get(k) != config.get(k)]
        if len(changed) == 1:
            by_knob.setdefault(changed[0], []).append(v)
    for knob, configs in by_knob.items():
        pred = ctx.predict([dict(config), *configs], workload, [metric])[metric][0]
        logs = np.log(np.maximum(pred, 1e-12))
        spreads[knob] = float(logs.max() - logs.min())
    total = sum(spreads.values())
    if total <= 0:
        return {}
    return {k: round(v / total, 4)
            for k, v in sorted(spreads.items(), key=lambda kv: -kv[1])}


def _stage_budget(ctx: ContextModels, config: Mapping[str, Any] | None, w: WorkloadPoint,
                  hashes: frozenset[str]
                  ) -> tuple[dict[str, float], str]:
    """Mean ms per pipeline stage: predicted at ``config``, else measured at ``w``'s trials."""
    stages = [s for kind in workload_kinds() for s in kind.stages]
    metrics = [f"{s}_mean_ms" for s in stages if f"{s}_mean_ms" in ctx.metrics]
    if not metrics:
        return {}, ""
    if config is not None:
        predicted = ctx.predict([dict(config)], w.features, metrics)
        return ({m.removesuffix("_mean_ms"): float(predicted[m][0][0]) for m in metrics},
                "predicted")
    idx = [i for i, h in enumerate(ctx.trial_workload) if h in hashes]
    measured = {m: [ctx.measured[i][m] for i in idx if m in ctx.measured[i]] for m in metrics}
    return ({m.removesuffix("_mean_ms"): float(np.mean(v)) for m, v in measured.items() if v},
            "measured (mean of the workload's trials)")


def _pareto(ctx: ContextModels, w: WorkloadPoint, hashes: frozenset[str], objective: str,
            latency: str) -> dict[str, Any]:
    """The measured (latency, objective) points of the workloads ``hashes`` (``w``'s class)
    and their Pareto front."""
    idx = [i for i, h in enumerate(ctx.trial_workload) if h in hashes
           and objective in ctx.measured[i] and latency in ctx.measured[i]]
    points = [(ctx.measured[i][latency], ctx.measured[i][objective]) for i in idx]
    front = pareto_front(points, x_lower_better=True,
                         y_higher_better=metric_spec(objective).better == "higher")
    return {"workload_class": _class_name(w), "x": latency, "y": objective,
            "x_label": metric_label(latency), "y_label": metric_label(objective),
            "points": [[float(x), float(y)] for x, y in points],
            "front": [[float(points[i][0]), float(points[i][1])] for i in front],
            "trial_ids": [ctx.trial_ids[i] for i in idx],
            "configs": len({canonical_json(ctx.configs[i]) for i in idx})}


#: (objective, latency) of the Pareto plots per context kind (advisor/sheet_figures.py).
_PARETO_AXES = {"vector_index": ("qps", "p95_latency_ms"),
                "serving": ("output_tokens_per_s", SERVING_PANELS[0])}


def _figures(ctx: ContextModels, kind: str, kept: list[tuple[str, WorkloadPoint]],
             tiers: list[Tier], recommended: dict[tuple[str, str], dict[str, Any] | None]
             ) -> dict[str, list[dict[str, Any]]]:
    """The measured data of a context's figures (see advisor/sheet_figures.py)."""
    from objectives.registry import get_target

    out: dict[str, list[dict[str, Any]]] = {"rate": [], "single_rate": [], "recall_qps": []}
    space = get_target(ctx.key.target).space()
    default = space.default_config()
    if kind == "serving":
        out["rate"], single = rate_figures(ctx, [w for _, w in kept], tiers, recommended,
                                           default)
        names = {w.spec_hash: name for name, w in kept}
        for members in single:
            importance = _importance(ctx, default, members[0].features, SERVING_PANELS[0])
            out["single_rate"].append(knob_figure(ctx, members, tiers, space, default,
                                                  importance, names[members[0].spec_hash]))
    elif kind == "vector_index":
        out["recall_qps"] = recall_qps_figures(ctx, kept, tiers, space)
    return out


def _distinct_workloads(workloads: Sequence[WorkloadPoint]
                        ) -> list[tuple[WorkloadPoint, list[WorkloadPoint]]]:
    """One entry per class name and features (its first stored workload), with every stored
    workload that shares them: workloads that differ only in what no model reads (a seed, a
    drain limit, ``4`` against ``4.0``) get the same answer, and the sheet printed it once per
    stored spec (four identical rows per tier at 60 and 75 req/s on the H200 8B shape)."""
    groups: dict[str, list[WorkloadPoint]] = {}
    for w in workloads:
        key = canonical_json([_class_name(w), w.features])
        groups.setdefault(key, []).append(w)
    return [(same[0], same) for same in groups.values()]


def build_cheatsheet(store: TrialStore, *, target: str | None = None,
                     hardware: str | None = None, model: str | None = None,
                     workload_class: str | None = None, tier: str | None = None,
                     models: KnowledgeModels | None = None) -> CheatSheet:
    """Build the sheet from the fitted models (fitted now when ``models`` is None).

    Filters match like ``advisor trials``: ``hardware`` names a hardware key or a run of its
    dash-separated parts (objectives/hardware.py ``hardware_matches``),
    ``workload_class`` part of a class name (``chat``, ``150 req/s``, ``N=8000``).
    """
    if models is None:
        models = KnowledgeModels.fit(store, target=target)
    rows: list[CheatSheetRow] = []
    sections: list[ContextSection] = []
    for key, ctx in sorted(models.contexts.items()):
        if target and key.target != target:
            continue
        if hardware and not hardware_matches(hardware, key.hardware_key):
            continue
        if model and key.model != model:
            continue
        tiers = [t for t in tiers_for(key.target) if tier is None or t.name == tier]
        kind = context_kind(ctx)
        pareto_obj, pareto_lat = _PARETO_AXES.get(kind, _PARETO_AXES["serving"])
        pareto: list[dict[str, Any]] = []
        kept: list[tuple[str, WorkloadPoint]] = []
        recommended: dict[tuple[str, str], dict[str, Any] | None] = {}
        # Rows in the order of their workloads' features (rate, corpus size), low to high.
        for w, members in sorted(_distinct_workloads(ctx.workloads),
                                 key=lambda wm: (sorted(wm[0].features.items()), wm[0].name)):
            name = _class_name(w)
            if workload_class and workload_class.lower() not in name.lower():
                continue
            kept.extend((name, same) for same in members)
            hashes = frozenset(same.spec_hash for same in members)
            front = _pareto(ctx, w, hashes, pareto_obj, pareto_lat)
            # Drawn only where it is the context's main figure: vector indexes get recall
            # against QPS, serving workloads latency against rate or their top knob (a serving
            # front at one arrival rate is flat: throughput is the rate, not the config).
            front["plot"] = kind == "other"
            pareto.append(front)
            for t in tiers:
                answer = plan_recommendation(store, RecommendationRequest(
                    target=key.target, slo=t.slo, objective=t.objective,
                    hardware=key.hardware_key, model=key.model, workload=dict(w.features)),
                    models=models)
                obj_metric = t.objective.split(":", 1)[1]
                recommended.update({(same.spec_hash, t.name): answer.config
                                    for same in members})
                budget, source = _stage_budget(ctx, answer.config, w, hashes)
                rows.append(CheatSheetRow(
                    target=key.target, hardware_key=key.hardware_key, model=key.model,
                    engine_version=key.engine_version, workload_class=name,
                    workload=dict(w.features), tier=t, answer=answer,
                    importance=_importance(ctx, answer.config, w.features, obj_metric),
                    evidence_count=sum(1 for h in ctx.trial_workload if h in hashes),
                    stage_budget_ms=budget, stage_budget_source=source))
        if not pareto:
            continue
        quality = {m: mm.score.to_dict() for m, mm in ctx.metrics.items()
                   if mm.score is not None}
        trials = [{"config": c, "metrics": m, "features": f}
                  for c, m, f in zip(ctx.configs, ctx.measured, ctx.features, strict=True)]
        sections.append(ContextSection(key.to_dict(), key.label(), ctx.n_trials, quality,
                                       fit_rules(key.target, trials), pareto, kind,
                                       _figures(ctx, kind, kept, tiers, recommended)))
    filters = {"target": target, "hardware": hardware, "model": model,
               "workload_class": workload_class, "tier": tier}
    return CheatSheet(tuple(rows), tuple(sections), filters, models.data.trials)


def knob_value(sheet: CheatSheet, knob: str, *, target: str, hardware: str | None = None,
               model: str | None = None, workload_class: str | None = None,
               tier: str = "standard") -> dict[str, Any]:
    """One cheat-sheet value: the recommended ``knob`` for a tier, with its predicted metrics,
    evidence count and context. Raises :class:`NotFoundError` when no row or no such knob."""
    rows = [r for r in sheet.rows if r.target == target and r.tier.name == tier
            and (hardware is None or hardware_matches(hardware, r.hardware_key))
            and (model is None or r.model == model)
            and (workload_class is None or workload_class.lower() in r.workload_class.lower())]
    if not rows:
        raise NotFoundError(
            f"no cheat-sheet row for target={target!r}, hardware={hardware!r}, model={model!r}, "
            f"workload_class={workload_class!r}, tier={tier!r}; rows exist for: "
            + (", ".join(sorted({f'{r.target}/{r.hardware_key}/{r.model}/{r.workload_class}'
                                 for r in sheet.rows})) or "nothing (no fitted knowledge)"))
    exact = [r for r in rows if workload_class is not None
             and r.workload_class.lower() == workload_class.lower()]
    rows = exact or rows
    classes = sorted({r.workload_class for r in rows})
    if len(classes) > 1:
        # Several workloads (rates, corpus sizes) match: each has its own answer, and picking one
        # silently would answer a question that was not asked.
        raise InputError(
            f"workload_class {workload_class!r} matches {len(classes)} cheat-sheet rows of "
            f"{target}: {'; '.join(classes)}; give the one you mean (its rate or size) as "
            "workload_class")
    answered = [r for r in rows if r.answer.config is not None]
    if not answered:
        raise NotFoundError(f"no config meets the {tier} tier's SLO ({rows[0].tier.slo}) for "
                            f"{rows[0].workload_class}: {rows[0].answer.status}")
    row = max(answered, key=lambda r: r.evidence_count)
    config = row.answer.config or {}
    if knob not in config:
        raise NotFoundError(f"knob {knob!r} is not set by the {tier} recommendation for "
                            f"{row.workload_class} (its config: {config})")
    return {
        "knob": knob, "value": config[knob], "tier": tier, "slo": row.tier.slo,
        "objective": row.tier.objective, "target": row.target,
        "hardware_key": row.hardware_key, "model": row.model,
        "engine_version": row.engine_version, "workload_class": row.workload_class,
        "config": config, "answer": row.answer.answer, "summary": row.answer.summary,
        "figures": {m: f.model_dump(mode="json") for m, f in row.answer.figures.items()},
        "importance": row.importance.get(knob), "evidence_count": row.evidence_count,
        "confidence": row.answer.confidence.level, "matching_rows": len(rows),
    }



"""The consistency audit: every answer checked against the stored evidence it could cite.

For every fitted context, at every measured workload point and the midpoints between
neighbouring ones, for each SLO tier of the context's workload kind (and any extra SLOs given),
both the model-based and the measured answer are planned, and six checks run on them, each
against the context's own windows grouped by config at that point (one rule:
advisor/answers/rule.py):

a. the default's verdict agrees with its stored windows under the rule;
b. the measured and the model-based answers agree on the default's verdict;
c. no answer recommends a config whose windows there meet the SLO less often than the default's;
d. the measured answer finds the default wherever windows of it exist there;
e. (the docs' examples: checked by tests/, which run them as written);
f. no answer is beaten on its objective, beyond the noise, by another config measured there
   that meets the SLO under the same rule.

Used by tests/advisor/test_answer_consistency.py (0 contradictions on the shipped knowledge)
and by benchmarks/answer_consistency.py (the counts in docs/knowledge.md).
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from advisor.answers.document import Answer
from advisor.answers.model_based import (
    SAME_WORKLOAD,
    _load_bound,
    _same_config,
    _space,
    machine_of,
)
from advisor.answers.planner import plan_recommendation
from advisor.answers.request import RecommendationRequest
from advisor.answers.rule import measured_verdict
from advisor.answers.versus_default import KEEP_DEFAULTS_MARGIN, MIN_GAIN, NOISE_FACTOR, gain
from advisor.errors import AdvisorError
from advisor.objective import Objective
from knowledge import TrialStore
from knowledge.cache import KnowledgeModels
from knowledge.surrogates import ContextModels, workload_distance
from objectives import parse_slo
from objectives.kinds import kind_for_target
from objectives.workload import canonical_json

__all__ = ["AuditReport", "Contradiction", "audit_answers", "workload_points"]


@dataclass(frozen=True)
class Contradiction:
    check: str
    question: dict[str, Any]
    detail: str

    def __str__(self) -> str:
        return f"({self.check}) {json.dumps(self.question, sort_keys=True)}: {self.detail}"


@dataclass
class AuditReport:
    answers: int = 0
    questions: int = 0
    contradictions: list[Contradiction] = field(default_factory=list)
    by_check: dict[str, int] = field(default_factory=dict)

    def add(self, c: Contradiction) -> None:
        self.contradictions.append(c)
        self.by_check[c.check] = self.by_check.get(c.check, 0) + 1


def workload_points(ctx: ContextModels) -> list[dict[str, float]]:
    """The context's measured workload points and, along each feature that varies alone, the
    geometric midpoints between neighbouring values."""
    points = {canonical_json(w.features): dict(w.features) for w in ctx.workloads}
    for feature in {f for w in ctx.workloads for f in w.features}:
        groups: dict[str, list[float]] = {}
        for w in ctx.workloads:
            if feature not in w.features:
                continue
            rest = canonical_json({k: v for k, v in w.features.items() if k != feature})
            groups.setdefault(rest, []).append(float(w.features[feature]))
        for rest, values in groups.items():
            ordered = sorted(set(values))
            for lo, hi in itertools.pairwise(ordered):
                if lo > 0:
                    point = {**json.loads(rest), feature: round(math.sqrt(lo * hi), 4)}
                    points.setdefault(canonical_json(point), point)
    return list(points.values())


def _groups(ctx: ContextModels, features: dict[str, float]) -> dict[str, list[int]]:
    """The context's rows at ``features`` per config (its forms over the space's defaults)."""
    out: dict[str, list[int]] = {}
    for i, config in enumerate(ctx.configs):
        if workload_distance(features, ctx.features[i]) <= SAME_WORKLOAD:
            out.setdefault(_same_config(ctx.key.target, config), []).append(i)
    return out


def _default_key(keys: Iterable[str], default: dict[str, Any], sizes: dict[str, int]
                 ) -> str | None:
    forms = [k for k in keys if all(
        knob in default and canonical_json({knob: v}) == canonical_json({knob: default[knob]})
        for knob, v in json.loads(k).items())]
    return max(forms, key=lambda k: sizes[k]) if forms else None


def _share(verdict_met: int, n: int) -> float:
    return verdict_met / n if n else 0.0


def _objective_threshold(values: Sequence[float]) -> float:
    if len(values) >= 2 and statistics.fmean(values):
        cv = statistics.stdev(values) / abs(statistics.fmean(values))
        return max(NOISE_FACTOR * cv, MIN_GAIN)
    return KEEP_DEFAULTS_MARGIN


def audit_answers(store: TrialStore, models: KnowledgeModels, *,
                  targets: Sequence[str] | None = None, extra_slos: Sequence[str] = (),
                  max_points: int | None = None,
                  progress: Callable[[str], None] | None = None) -> AuditReport:
    """Plan and check every answer described in the module docstring (``progress`` is told
    each context and point as it is checked)."""
    report = AuditReport()
    for ctx in models.contexts.values():
        if targets is not None and ctx.key.target not in targets:
            continue
        kind = kind_for_target(ctx.key.target)
        tiers = [(t.slo, t.objective) for t in kind.tiers] if kind is not None else []
        slos = [*tiers, *((s, None) for s in extra_slos)]
        default = _space(ctx.key.target).default_config(
            machine=machine_of(store, ctx.key.target, ctx.key.hardware_key))
        points = workload_points(ctx)
        for features in points[:max_points]:
            if progress is not None:
                progress(f"{ctx.key.label()} {features} ({report.answers} answers so far, "
                         f"{len(report.contradictions)} contradictions)")
            groups = _groups(ctx, features)
            sizes = {k: len(v) for k, v in groups.items()}
            default_key = _default_key(groups, default, sizes)
            for slo_text, objective_text in slos:
                try:
                    slo = parse_slo(slo_text)
                    slo.check_metrics(ctx.key.target, list(ctx.metrics))
                except AdvisorError:  # an SLO this context does not measure: nothing to check
                    continue
                _check(report, store, models, ctx, features, slo_text, objective_text, groups,
                       default_key)
    return report


def _check(report: AuditReport, store: TrialStore, models: KnowledgeModels, ctx: ContextModels,
           features: dict[str, float], slo_text: str, objective_text: str | None,
           groups: dict[str, list[int]], default_key: str | None) -> None:
    slo = parse_slo(slo_text)
    answers: dict[bool, Answer] = {}
    base: dict[str, Any] = {"target": ctx.key.target, "slo": slo_text,
                            "hardware": ctx.key.hardware_key, "model": ctx.key.model,
                            "workload": features, "objective": objective_text}
    for measured in (False, True):
        request = RecommendationRequest(**{k: v for k, v in base.items() if v is not None},
                                        measured=measured)
        answers[measured] = plan_recommendation(store, request, models=models)
    report.questions += 1
    report.answers += 2
    verdicts = {k: measured_verdict(slo, [ctx.measured[i] for i in rows])
                for k, rows in groups.items()}
    q = {k: v for k, v in base.items() if v is not None}

    def say(check: str, detail: str) -> None:
        report.add(Contradiction(check, q, detail))

    model_answer, measured_answer = answers[False], answers[True]
    if default_key is not None:
        want = verdicts[default_key]
        for label, a in (("model", model_answer), ("measured", measured_answer)):
            got = a.default.verdict if a.default is not None else None
            if a.status == "not_covered":
                continue
            if got is None or got.basis != "measured":
                if label == "measured":
                    say("d", f"the default has {want.windows} windows here but the measured "
                             "answer cites none")
                elif got is not None and got.meets_slo != want.meets:
                    say("a", f"{label} answer: the default is {got.text} although its "
                             f"{want.windows} windows say {want.meets}")
                continue
            if got.meets_slo != want.meets or got.windows != want.windows:
                say("a", f"{label} answer: default {got.text}; its windows: "
                         f"{want.windows_met} of {want.windows}")
        m = model_answer.default.verdict if model_answer.default is not None else None
        s = measured_answer.default.verdict if measured_answer.default is not None else None
        if m is not None and s is not None and m.meets_slo != s.meets_slo:
            say("b", f"model answer says the default {m.text}; measured says {s.text}")
    for label, a in (("model", model_answer), ("measured", measured_answer)):
        if a.config is None:
            continue
        key = _same_config(ctx.key.target, a.config)
        if default_key is not None and key in verdicts:
            mine, theirs = verdicts[key], verdicts[default_key]
            if _share(mine.windows_met, mine.windows) < _share(theirs.windows_met,
                                                                theirs.windows):
                say("c", f"{label} answer's config meets in {mine.windows_met} of "
                         f"{mine.windows} windows, the default in {theirs.windows_met} of "
                         f"{theirs.windows}")
        objective = Objective.parse(a.question.objective)
        figure = a.figures.get(objective.metric)
        if figure is None:
            continue
        own = [float(ctx.measured[i][objective.metric]) for i in groups.get(key, [])
               if objective.metric in ctx.measured[i]]
        for other, rows in groups.items():
            if other == key or not verdicts[other].meets:
                continue
            values = [float(ctx.measured[i][objective.metric]) for i in rows
                      if objective.metric in ctx.measured[i]]
            if not values or _load_bound(ctx, [a.config, ctx.configs[rows[0]]], features,
                                         objective.metric):
                # Below both configs' capacities the offered load sets a throughput: the
                # answer's own rule counts them equal there, and so does the audit.
                continue
            g = gain(objective, statistics.median(values), figure.value)
            # Beyond the noise of either side: a single window carries the 10 % margin.
            if g > max(_objective_threshold(values), _objective_threshold(own)):
                say("f", f"{label} answer ({a.status}, {objective.metric} "
                         f"{figure.value:.4g} {figure.basis}) is beaten by a config measured "
                         f"here meeting the SLO in {verdicts[other].windows_met} of "
                         f"{verdicts[other].windows} windows: median "
                         f"{statistics.median(values):.4g} ({g:+.1%}, trials "
                         f"{[ctx.trial_ids[i] for i in rows]})")

"""The vocabulary a workload kind declares, so the generic layers never spell it.

knowledge/ (surrogates, rules of thumb) and advisor/ (recommender, cheat-sheet, audits) must work
for an engine they have never heard of. Everything that names a knob, a workload parameter or a
dataset lives in a :class:`WorkloadKind` declared next to the objectives that define it
(objectives/kinds/), and a target names its kind (``Target.workload_kind``). The generic layers
read the declarations through the kinds' lookup (:func:`objectives.kinds.workload_kind`,
:func:`~objectives.kinds.kind_for_target`, :func:`~objectives.kinds.workload_kinds`); this
module holds only the declaration types, so the kinds can import it and it imports none of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "DEFAULT_KIND",
    "CostLawSpec",
    "Quantile",
    "RuleOfThumb",
    "RulePoints",
    "Tier",
    "WorkloadKind",
]

#: The kind of a target that declares none: most engines serve an LLM.
DEFAULT_KIND = "llm-serving"

#: ``q(metric, percentile)``: the percentile of ``metric`` over the trials being audited (None
#: where no trial measured it).
Quantile = Callable[[str, float], "float | None"]
#: Trials as rules of thumb see them: dicts with ``config``, ``metrics`` and ``features``.
RuleTrial = Mapping[str, Any]


@dataclass(frozen=True)
class Tier:
    """An SLO tier: what "interactive" / "standard" / "throughput" means for a workload kind."""

    name: str
    slo: str
    objective: str
    description: str


@dataclass(frozen=True)
class RulePoints:
    """The (x, y) points a rule of thumb is fitted to, and the words that complete its name
    (``{subset}`` in :attr:`RuleOfThumb.name`)."""

    points: list[tuple[float, float]]
    subset: str = ""


@dataclass(frozen=True)
class RuleOfThumb:
    """A closed-form curve the cheat-sheet fits to measured trials (knowledge/rules.py fits it).

    ``points`` picks the trials' (x, y) points, or None when the rule does not apply to these
    trials at all (it is then left out, not reported as lacking data); ``curve(x, *params)`` is
    the formula with ``p0`` (or ``p0(points)``) as its starting parameters.
    """

    name: str
    formula: str
    x_label: str
    y_label: str
    points: Callable[[Sequence[RuleTrial]], RulePoints | None]
    curve: Callable[..., Any]
    p0: Sequence[float] | Callable[[list[tuple[float, float]]], Sequence[float]]
    param_names: tuple[str, ...]
    log_y: bool = False
    bounds: Any = None
    note: str = ""

    def start(self, points: list[tuple[float, float]]) -> list[float]:
        """The starting parameters for a fit to ``points``."""
        return list(self.p0(points) if callable(self.p0) else self.p0)


@dataclass(frozen=True)
class CostLawSpec:
    """Per-query work features a fitted cost law adds up (knowledge/work_cost.py), and which
    metrics it models: ``metric_role(metric)`` is ``rate`` (a throughput of batched calls),
    ``time`` (one query's time) or None (no cost law). ``parallel`` / ``per_call``: the columns
    that share a rate's work between threads and its fixed cost between a call's queries."""

    terms: tuple[str, ...]
    metric_role: Callable[[str], Literal["rate", "time"] | None]
    parallel: str | None = None
    per_call: str | None = None


def _no_features(params: Mapping[str, Any]) -> dict[str, float]:
    return {}


def _no_derived(config: Mapping[str, Any], workload: Mapping[str, float]) -> dict[str, float]:
    return {}


def _no_params(features: Mapping[str, float]) -> list[str]:
    return []


def _same_params(params: Mapping[str, Any], features: Mapping[str, float]) -> dict[str, Any]:
    return dict(params)


def _no_slos(q: Quantile) -> list[str]:
    return []


@dataclass(frozen=True)
class WorkloadKind:
    """One kind of workload (``Workload.kind``) and everything the generic layers need of it.

    - ``features(params)``: the numeric workload features of a spec's params (the public
      vocabulary of queries, e.g. an arrival rate or a corpus size);
    - ``workload_params(features)``: the inverse, as ``name=value`` workload parameters that
      ``advisor tune --workload-param`` accepts; ``launch_params(params, features)``: a measured
      spec's params moved to the asked features, for a launch command;
    - ``derived_features(config, workload)``: products and ratios of knobs and workload features
      that costs are proportional to;
    - ``tiers``: the cheat-sheet's SLO tiers; ``audit_slos(q)``: SLOs spread over what was
      measured, for the feasibility audit; ``rules_of_thumb``: curves the cheat-sheet fits;
    - ``cost_law``: the per-query work terms of a fitted cost law, if any;
    - ``stages``: the pipeline stages a request passes through, each reporting ``<stage>_*``
      latency metrics (the cheat-sheet splits a latency budget over them).
    """

    name: str
    features: Callable[[Mapping[str, Any]], dict[str, float]] = _no_features
    workload_params: Callable[[Mapping[str, float]], list[str]] = _no_params
    launch_params: Callable[[Mapping[str, Any], Mapping[str, float]], dict[str, Any]] = \
        _same_params
    derived_features: Callable[[Mapping[str, Any], Mapping[str, float]], dict[str, float]] = \
        _no_derived
    tiers: tuple[Tier, ...] = ()
    audit_slos: Callable[[Quantile], list[str]] = _no_slos
    rules_of_thumb: tuple[RuleOfThumb, ...] = field(default_factory=tuple)
    cost_law: CostLawSpec | None = None
    stages: tuple[str, ...] = ()

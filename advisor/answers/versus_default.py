"""The engine default as the first candidate of every answer: "keep the defaults" is an answer.

A recommended config is compared with the engine's default under the same workload (same
hardware, model and workload). When the default meets the SLO and the candidate is not better
on the objective beyond the noise, the answer is ``keep_defaults``, with the default's figures
and why; a candidate worse than a default that meets the SLO is never returned. What counts as
noise, strongest evidence first:

1. ``paired``: a paired comparison of exactly this candidate and the default, measured in one
   lease, interleaved (advisor/paired.py): only a ``better`` verdict on the objective recommends
   the candidate;
2. ``default_repeats``: two or more measurements of the default under this workload: the
   candidate must beat the default's mean by more than :data:`NOISE_FACTOR` times their
   coefficient of variation, and by at least :data:`MIN_GAIN`;
3. ``margin``: with neither, by more than :data:`KEEP_DEFAULTS_MARGIN`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from advisor.objective import Objective
from advisor.paired import PairedComparison
from advisor.pairing import stored_comparison
from knowledge import TrialFilter, TrialRecord, TrialStatus, TrialStore
from objectives import SLO
from objectives.workload import canonical_json

__all__ = ["KEEP_DEFAULTS_MARGIN", "MIN_GAIN", "NOISE_FACTOR", "Answer", "DefaultComparison",
           "decide", "default_trials_for", "gain", "is_default_trial", "paired_between"]

Answer = Literal["config", "keep_defaults", "none"]
Basis = Literal["paired", "default_repeats", "margin", "is_default", "default_misses_slo",
                "no_default"]
#: With no noise measured, a candidate must beat the default's objective by more than this
#: (relative) to be recommended over it: single measurements of one config have scattered by
#: 5-9 % on the project's machines (docs/knowledge.md), so 10 % is just outside one scatter.
KEEP_DEFAULTS_MARGIN = 0.10
#: With repeated default measurements, the gain must exceed this many coefficients of variation.
NOISE_FACTOR = 2.0
#: ... and never less than this (two equal default measurements do not prove zero noise).
MIN_GAIN = 0.02
#: Roles of trials that measured the engine default (the study's first trial, its re-measures).
DEFAULT_ROLES = frozenset({"engine-default", "paired-default"})


@dataclass(frozen=True)
class DefaultComparison:
    """A candidate against the engine default under the same workload, and the verdict.

    ``answer`` is ``config`` (the candidate stands) or ``keep_defaults``. ``default_figures``
    are the default's measured means (``default_figures_basis`` ``measured``) or the models'
    predictions (``predicted``); ``gain`` is the candidate's relative objective advantage over
    the default (positive: better), ``threshold`` the gain it needed.
    """

    answer: Answer
    basis: Basis
    reason: str
    default_config: dict[str, Any] | None = None
    default_figures: dict[str, float] = field(default_factory=dict)
    default_figures_basis: str | None = None
    default_source: str | None = None
    default_trials: tuple[int, ...] = ()
    default_meets_slo: bool | None = None
    candidate_config: dict[str, Any] | None = None
    candidate_figures: dict[str, float] = field(default_factory=dict)
    gain: float | None = None
    threshold: float | None = None
    paired: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"answer": self.answer, "basis": self.basis, "reason": self.reason,
                "default_config": self.default_config, "default_figures": self.default_figures,
                "default_figures_basis": self.default_figures_basis,
                "default_source": self.default_source,
                "default_trials": list(self.default_trials),
                "default_meets_slo": self.default_meets_slo,
                "candidate_config": self.candidate_config,
                "candidate_figures": self.candidate_figures, "gain": self.gain,
                "threshold": self.threshold, "paired": self.paired}


def _key(config: Mapping[str, Any] | None) -> str:
    return canonical_json(dict(config or {}))


def is_default_trial(trial: TrialRecord, default_config: Mapping[str, Any]) -> bool:
    """Whether ``trial`` measured the engine default (by its role, or by its config)."""
    return (trial.details.get("role") in DEFAULT_ROLES
            or _key(trial.config) == _key(default_config))


def default_trials_for(store: TrialStore, trial: TrialRecord, default_config: Mapping[str, Any]
                       ) -> tuple[list[TrialRecord], str | None]:
    """The usable measurements of the engine default to compare ``trial`` with, and where they
    came from: ``same_study`` (the default trials of ``trial``'s study), else ``same_workload``
    (default trials with the same workload hash on the same hardware); ``([], None)`` if none."""
    same_study = [t for t in store.trials_of_study(trial.study_id, [TrialStatus.COMPLETE])
                  if is_default_trial(t, default_config)]
    if same_study:
        return same_study, "same_study"
    same_workload = [t for t in store.list_trials(TrialFilter(
        target=trial.target, status=TrialStatus.COMPLETE, workload_hash=trial.workload_hash))
        if t.hardware_key == trial.hardware_key and is_default_trial(t, default_config)]
    return (same_workload, "same_workload") if same_workload else ([], None)


def mean_figures(rows: Sequence[Mapping[str, Any]], metrics: Sequence[str]) -> dict[str, float]:
    """The mean of each metric over the rows that measured it."""
    out: dict[str, float] = {}
    for m in metrics:
        values = [float(r[m]) for r in rows if isinstance(r.get(m), int | float)
                  and math.isfinite(float(r[m]))]
        if values:
            out[m] = statistics.fmean(values)
    return out


def cv(values: Sequence[float]) -> float | None:
    """Coefficient of variation of repeated measurements (None with fewer than two)."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    return statistics.stdev(values) / abs(mean) if mean else None


def gain(objective: Objective, candidate: float, default: float) -> float:
    """The candidate's relative objective advantage over the default (positive: better)."""
    if default == 0:
        return math.inf if objective.is_better(candidate, default) else 0.0
    rel = (candidate - default) / abs(default)
    return rel if objective.direction == "maximize" else -rel


def paired_between(store: TrialStore, *, target: str, hardware_key: str,
                   candidate: Mapping[str, Any], default: Mapping[str, Any],
                   same_workload: Any) -> PairedComparison | None:
    """A stored paired comparison of exactly ``candidate`` (arm x) against ``default``
    (arm y) on ``hardware_key``, from a study whose workload ``same_workload(study)`` accepts."""
    found: PairedComparison | None = None
    for study in store.list_studies(target):
        if study.hardware_key != hardware_key or not same_workload(study):
            continue
        comparison = stored_comparison(study)
        if (comparison is not None and _key(comparison.x_config) == _key(candidate)
                and _key(comparison.y_config) == _key(default)):
            found = comparison  # the latest study's, when several compared the pair
    return found


def decide(*, objective: Objective, slo: SLO, candidate_config: Mapping[str, Any],
           candidate_figures: Mapping[str, float], default_config: Mapping[str, Any] | None,
           default_figures: Mapping[str, float], default_meets_slo: bool | None,
           default_objective_values: Sequence[float] = (),
           paired: PairedComparison | None = None, default_figures_basis: str | None = None,
           default_source: str | None = None, default_trials: Sequence[int] = (),
           default_objective: float | None = None,
           equal_because: str | None = None,
           default_verdict: str | None = None) -> DefaultComparison:
    """The verdict of a candidate against the engine default (see the module docstring).

    ``default_meets_slo`` is ``None`` when the default was neither measured nor predicted;
    ``default_objective_values`` are its repeated measurements of the objective, for the noise;
    ``default_objective`` is the default's objective the gain is computed from (default: its
    figure in ``default_figures``; the model path passes the prediction, like the candidate's).
    ``equal_because``: why the caller gave both configs the same objective (the reason then
    says so rather than quote a gain of +0.0 %). ``default_verdict``: the one rule's verdict
    on the default in words (advisor/answers/rule.py), quoted when it decides.
    """
    common: dict[str, Any] = {
        "default_config": None if default_config is None else dict(default_config),
        "default_figures": dict(default_figures), "default_figures_basis": default_figures_basis,
        "default_source": default_source, "default_trials": tuple(default_trials),
        "default_meets_slo": default_meets_slo, "candidate_config": dict(candidate_config),
        "candidate_figures": dict(candidate_figures),
        "paired": None if paired is None else paired.to_dict()}
    if default_config is not None and _key(candidate_config) == _key(default_config):
        return DefaultComparison("keep_defaults", "is_default",
                                 "the best config meeting the SLO is the engine default", **common)
    if default_config is None or default_meets_slo is None:
        return DefaultComparison("config", "no_default",
                                 "the engine default was not measured under this workload on "
                                 "this hardware, so the candidate is not compared with it",
                                 **common)
    if not default_meets_slo:
        said = default_verdict or f"misses the SLO {slo}"
        return DefaultComparison("config", "default_misses_slo",
                                 f"the engine default {said}", **common)
    metric = objective.metric
    cand = candidate_figures.get(metric)
    dflt = default_figures.get(metric) if default_objective is None else default_objective
    g = None if cand is None or dflt is None else gain(objective, float(cand), float(dflt))
    if paired is not None and (verdict := paired.verdict(metric)) is not None:
        m = paired.metric(metric)
        assert m is not None
        lo, hi = m.interval
        where = (f"paired comparison, {m.n_x}+{m.n_y} interleaved repeats: {metric} "
                 f"difference {m.difference:+.4g} ({paired.level:.0%} interval "
                 f"[{lo:+.4g}, {hi:+.4g}])")
        if verdict == "better":
            return DefaultComparison("config", "paired", f"better than the engine default "
                                     f"beyond the noise ({where})", gain=g, **common)
        said = "within the noise of" if verdict == "within_noise" else "worse than"
        return DefaultComparison("keep_defaults", "paired",
                                 f"the engine default meets the SLO and the best config is "
                                 f"{said} it ({where})", gain=g, **common)
    if g is None:
        return DefaultComparison("config", "no_default",
                                 f"the engine default's {metric} is unknown here", **common)
    noise = cv(default_objective_values)
    if noise is not None:
        basis: Basis = "default_repeats"
        threshold = max(NOISE_FACTOR * noise, MIN_GAIN)
        how = (f"{len(default_objective_values)} measurements of the default scatter by "
               f"{noise:.1%}; a gain must exceed {threshold:.1%}")
    else:
        basis, threshold = "margin", KEEP_DEFAULTS_MARGIN
        how = (f"no repeated measurement of the default to estimate the noise; a gain must "
               f"exceed {threshold:.0%}")
    if g > threshold:
        return DefaultComparison("config", basis, f"{metric} {g:+.1%} against the engine "
                                 f"default ({how})", gain=g, threshold=threshold, **common)
    compared = (f"counts as equal to it: {equal_because}" if equal_because is not None
                and g == 0 else f"is {g:+.1%} against it ({how})")
    return DefaultComparison("keep_defaults", basis,
                             f"the engine default meets the SLO and the best config's {metric} "
                             f"{compared}", gain=g, threshold=threshold, **common)


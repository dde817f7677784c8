"""``plan_recommendation``: the one path from a question to an :class:`Answer`.

Every door (the CLI, REST, the cheat-sheet, the sweeps' report) calls it and renders what it
returns; none decides anything itself. The planner resolves names to shapes
(advisor/answers/request.py), picks the hardware when none was named, and asks one of three
evidence sources, strongest first for what the question allows:

- ``measured``: the stored trials at the asked workload only (advisor/answers/model_based.py's
  ``recommend_measured``);
- the fitted models, with measured windows at the workload deciding every config that has
  them (``recommend``);
- for a model shape never measured on the hardware, the measured shapes carried to it
  (advisor/answers/shapes.py);
- for a GPU known from a calibration profile and too few measured configs there, the simulator
  with the profile's step costs, measured windows at the workload first
  (advisor/answers/calibration.py).

Each judges the default and every candidate by the same rule (advisor/answers/rule.py); the
planner turns their result into the one document. Where no candidate meets the SLO, a predicted
interval that straddles it makes the answer ``undecided`` (measure that candidate), not a
refusal: ``no_feasible_config`` says every candidate misses (rule.py's ``undecided``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from advisor.answers.calibration import (
    CalibratedAnswer,
    CapacityAt,
    answer_from_calibration,
    calibration_profile,
    missing_calibration,
)
from advisor.answers.document import (
    Answer,
    AnswerKind,
    Capacity,
    CapacityFigure,
    Comparison,
    Confidence,
    ConfidenceLevel,
    DefaultAssessment,
    EvidenceWindow,
    Figure,
    NextStep,
    Question,
    ReplicasFigure,
    Status,
    VerdictDoc,
)
from advisor.answers.model_based import (
    ModelRecommendation,
    Recommendation,
    RecommendationQuery,
    recommend,
    recommend_measured,
    trial_model,
)
from advisor.answers.request import RecommendationRequest, ResolvedQuestion, resolve
from advisor.answers.rule import Verdict, predicted_verdict
from advisor.answers.shapes import ShapeRecommendation, answer_unmeasured_shape
from advisor.answers.versus_default import DefaultComparison
from advisor.model_config import UnmeasuredShape
from knowledge import StudyRecord, TrialStore
from knowledge.cache import KnowledgeModels
from knowledge.surrogates import workload_features
from objectives.llm.shapes import display_name

__all__ = ["ModelsSource", "evidence_by_hardware", "plan_recommendation"]

#: The fitted models, or a callable that fits/loads them only when the question needs them (a
#: measured-only or unmeasured-shape question answers without them).
ModelsSource = KnowledgeModels | Callable[[], KnowledgeModels] | None


def plan_recommendation(store: TrialStore, request: RecommendationRequest, *,
                        models: ModelsSource = None, cache_dir: Path | None = None,
                        this_hardware: str | None = None,
                        launch_model: str | None = None) -> Answer:
    """The answer to ``request`` (see the module docstring).

    ``this_hardware``: the asker's own hardware key; with no hardware named, it is answered
    for when it has trials of the target, else the measured hardware with the most evidence
    (named in the notes). ``launch_model``: the model reference a launch command serves (the
    user's local model directory, when they gave a config file from one).
    """
    q = resolve(request, launch_model=launch_model)
    hardware, hw_notes = _hardware(store, q, this_hardware)
    if q.shape is not None:
        shaped = answer_unmeasured_shape(
            store, target=q.engine.name, hardware=hardware, shape=q.shape,
            model_config=q.shape_fields or q.shape.name, slo=str(q.slo),
            objective=str(q.objective), workload=q.workload)
        if shaped is not None:
            return _with_notes(_from_shape(shaped, q, hardware), hw_notes)
    if not request.measured:
        calibration = calibration_profile(store, engine=q.engine, model=q.model_key,
                                          hardware=hardware)
        calibrated = None if calibration is None else answer_from_calibration(
            store, calibration, engine=q.engine, slo=q.slo, objective=q.objective,
            workload=q.workload, total_rate_rps=request.total_rate_rps)
        if calibrated is not None:
            return _with_notes(_from_calibration(calibrated, q), hw_notes)
    if request.measured:
        rec = recommend_measured(store, target=q.engine.name, slo=q.slo, objective=q.objective,
                                 hardware_key=hardware, model=q.model_key, workload=q.workload,
                                 launch_model=launch_model)
        return _with_notes(_from_measured(rec, q, hardware), hw_notes)
    fitted = models() if callable(models) else models
    rec_m = recommend(store, RecommendationQuery(
        target=q.engine.name, slo=str(q.slo), hardware=hardware, model=q.model_key,
        workload=dict(q.workload), objective=str(q.objective),
        model_shape=None if q.shape is None else q.shape.to_dict(),
        launch_model=launch_model), models=fitted, failure_cache_dir=cache_dir)
    answer = _from_model(rec_m, q, hardware)
    if answer.status == "not_covered":  # a calibration that would cover it, where one is near
        missing = missing_calibration(store, engine=q.engine, model=q.model_key,
                                      hardware=hardware)
        hw_notes = [*hw_notes, *([missing] if missing else [])]
    return _with_notes(answer, hw_notes)


# -- hardware ----------------------------------------------------------------------------------

def evidence_by_hardware(studies: Sequence[StudyRecord], model_key: str | None
                         ) -> dict[str, int]:
    """Per hardware key, the trials ``studies`` (one target's) budgeted there, of the model
    ``model_key`` (studies naming no model count for any; None: every study)."""
    counts: dict[str, int] = {}
    for study in studies:
        model = (study.workload_spec.get("params") or {}).get("model")
        if model_key is not None and model is not None and str(model) != model_key:
            continue
        counts[study.hardware_key] = counts.get(study.hardware_key, 0) + max(
            int(study.n_trials or 0), 1)
    return counts


def _hardware(store: TrialStore, q: ResolvedQuestion, this: str | None
              ) -> tuple[str | None, list[str]]:
    """The hardware to answer for: the asked one; else this machine's when it measured the
    target; else the measured hardware with the most trials (of the model, if one was named)."""
    if q.request.hardware is not None:
        return q.request.hardware, []
    studies = store.list_studies(q.engine.name)
    # The machines that measured the model asked, else (a model nobody measured) the target.
    counts = evidence_by_hardware(studies, q.model_key) or evidence_by_hardware(studies, None)
    if not counts:
        return this, []
    if this is not None and this in counts:
        return this, []
    chosen = max(counts, key=lambda k: (counts[k], k))
    others = sorted(k for k in counts if k != chosen)
    return chosen, [f"no hardware named: answered for {chosen}, the measured hardware with the "
                    "most evidence for this question"
                    + (f" (also measured: {', '.join(others)}; name one with --hardware)"
                       if others else "")]


def _with_notes(answer: Answer, notes: list[str]) -> Answer:
    if not notes:
        return answer
    return answer.model_copy(update={"notes": [*notes, *answer.notes]})


# -- shared pieces -----------------------------------------------------------------------------

def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: such a figure is unknown (None)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _question(q: ResolvedQuestion, hardware_key: str | None,
              workload: Mapping[str, float] | None = None) -> Question:
    return Question(target=q.engine.name, slo=str(q.slo), objective=str(q.objective),
                    hardware=q.request.hardware, hardware_key=hardware_key,
                    model=q.model_name, workload=dict(workload or q.workload),
                    measured_only=q.request.measured, total_rate_rps=q.request.total_rate_rps)


def _verdict_doc(v: Verdict | None) -> VerdictDoc | None:
    return None if v is None else VerdictDoc(**_finite(v.to_dict()))


def _comparison(b: DefaultComparison | None) -> Comparison | None:
    if b is None:
        return None
    return Comparison(basis=b.basis, reason=b.reason, gain=_finite(b.gain),
                      threshold=_finite(b.threshold), paired=_finite(b.paired))


def _figures(figures: Mapping[str, Figure]) -> dict[str, Figure]:
    return {m: f for m, f in figures.items()
            if math.isfinite(f.value)}


def _predicted_figures(predicted: Mapping[str, Any]) -> dict[str, Figure]:
    return {m: Figure(value=p.value, low=p.low, high=p.high, basis="predicted")
            for m, p in predicted.items() if math.isfinite(p.value)}


def _status(found: bool, answer: str, covered: bool, straddles: bool = False) -> Status:
    if found:
        return "keep_defaults" if answer == "keep_defaults" else "recommended"
    if straddles:
        return "undecided"
    return "no_feasible_config" if covered else "not_covered"


def _summary(status: str, q: ResolvedQuestion, hardware: str | None, verdict: Verdict | None,
             reason: str | None) -> str:
    where = f"{hardware or 'any hardware'}" + (f", {q.model_name}" if q.model_name else "")
    if status == "keep_defaults":
        return (f"Keep the engine defaults for {q.slo} on {where}: the default "
                f"{verdict.text() if verdict else 'meets the SLO'}.")
    if status == "recommended":
        return (f"Recommended {q.engine.name} config for {q.slo} on {where}: it "
                f"{verdict.text() if verdict else 'meets the SLO'}.")
    if status == "no_feasible_config":
        return f"No {q.engine.name} config meets {q.slo} on {where}" + (
            f": {reason}" if reason else ".")
    if status == "undecided":
        return (f"Undecided for {q.slo} on {where}: the predictions show no {q.engine.name} "
                "config meeting it, nor every one missing it" + (
                    f": {reason.rstrip('.')}." if reason else ".")
                + " Measure it (next) to decide.")
    return f"Not covered: {reason}" if reason else "Not covered."


def _next(tune: str | None, status: str, confidence: str) -> NextStep:
    if status == "undecided":
        return NextStep(tune_command=tune, reason=(
            "measure the candidate whose predicted interval straddles the SLO at this "
            "workload: its measured windows decide by the one rule" if tune else
            "no runnable measurement for this question"))
    if status in ("not_covered", "no_feasible_config"):
        return NextStep(tune_command=tune, reason=("measure what is missing" if tune else
                                                   "no runnable study for this question"))
    if confidence in ("low", "medium") and tune:
        return NextStep(tune_command=tune, reason="confirm the answer by measuring it")
    return NextStep(tune_command=None, reason="nothing needed: the answer rests on evidence")


# -- from each source --------------------------------------------------------------------------

def _from_model(rec: ModelRecommendation, q: ResolvedQuestion, hardware: str | None) -> Answer:
    status = _status(rec.found, rec.answer, rec.status == "no_feasible_config",
                     rec.status == "undecided")
    figures = _figures(rec.figures) or _predicted_figures(rec.predicted)
    default = None
    if rec.default_verdict is not None or rec.baseline is not None:
        default = DefaultAssessment(
            config=None if rec.baseline is None else rec.baseline.default_config,
            figures=_figures(rec.default_figures), verdict=_verdict_doc(rec.default_verdict),
            source=None if rec.baseline is None else rec.baseline.default_source)
    evidence = [EvidenceWindow(trial_id=e.trial_id, study=e.study, config=e.config,
                               measured=_finite(e.metrics), workload=e.workload,
                               workload_features=e.workload_features, meets_slo=e.meets_slo,
                               same_config=e.same_config, distance=_finite(e.distance))
                for e in rec.evidence]
    reason = None if rec.found else rec.confidence_reason
    context = None if rec.context is None else {**rec.context}
    if context is not None and context.get("model"):
        context["model_id"] = context["model"]
        context["model"] = display_name(str(context["model"]))
    closest = _finite(rec.closest)
    return Answer(
        status=status, answer=rec.answer, basis="model",
        summary=_summary(status, q, rec.hardware_key or hardware, rec.verdict, reason),
        question=_question(q, rec.hardware_key or hardware, rec.workload or None),
        config=rec.config if rec.found else None,
        launch_command=rec.launch_command if rec.found else None,
        figures=figures if rec.found else {}, verdict=_verdict_doc(rec.verdict),
        default=default, comparison=_comparison(rec.baseline), evidence=evidence,
        confidence=Confidence(level=rec.confidence, reason=rec.confidence_reason),
        next=_next(rec.tune_command, status, rec.confidence), closest=closest,
        context=context, borrowed_workload=_finite(rec.borrowed_workload),
        candidates={"considered": rec.candidates_considered,
                    "feasible": rec.candidates_feasible},
        model_quality=_finite(rec.model_quality),
        quality_headroom={m: h.to_dict() for m, h in rec.quality_headroom.items()},
        notes=list(rec.notes),
        details={"predicted": {m: _finite(p.to_dict()) for m, p in rec.predicted.items()}}
        if rec.found else {})


def _from_measured(rec: Recommendation, q: ResolvedQuestion, hardware: str | None) -> Answer:
    found = rec.trial is not None
    status = _status(found, rec.answer, rec.considered > 0)
    evidence = [EvidenceWindow(trial_id=t.id or 0, study=str(t.study_id),
                               config=t.config, measured=_finite({m: float(t.metrics[m])
                                   for m in dict.fromkeys([str(q.objective.metric),
                                                           *q.slo.metrics])
                                   if isinstance(t.metrics.get(m), int | float)}),
                               workload=str(t.workload_spec.get("name") or ""),
                               workload_features=workload_features(t.workload_spec),
                               meets_slo=q.slo.is_met(t.metrics), same_config=True)
                for t in rec.windows]
    default = None
    if rec.default_verdict is not None:
        default = DefaultAssessment(
            config=None if rec.default_trial is None else rec.default_trial.config,
            figures=_figures(rec.default_figures), verdict=_verdict_doc(rec.default_verdict),
            source=f"measured at this workload ({rec.default_verdict.windows} windows)")
    level: ConfidenceLevel
    if found:
        level, why = _measured_confidence(rec.verdict)
    else:
        level, why = "none", rec.reason or (
            f"no measured config meets the SLO ({rec.configs_considered} configs, "
            f"{rec.considered} windows considered)" if rec.considered else
            "no measured trial at this workload")
    closest = None
    if rec.closest is not None:
        closest = {"trial_id": rec.closest.id, "config": rec.closest.config,
                   "slo_margins": _finite(rec.closest_margins)}
    model = trial_model(rec.trial) if rec.trial is not None else q.model_key
    notes = []
    if rec.borrowed_workload is not None:
        bw = rec.borrowed_workload
        notes.append(f"no trial was measured at the asked workload; the nearest measured one, "
                     f"{bw.get('name')} {bw.get('features')}, {bw.get('factor')}x away, answers")
    reason = None if found else why
    return Answer(
        status=status, answer=rec.answer, basis="measured",
        summary=_summary(status, q, rec.hardware_key or hardware, rec.verdict, reason),
        question=_question(q, rec.hardware_key or hardware),
        config=None if rec.trial is None else rec.trial.config,
        launch_command=rec.launch_command if found else None,
        figures=_figures(rec.figures), verdict=_verdict_doc(rec.verdict), default=default,
        comparison=_comparison(rec.baseline), evidence=evidence,
        confidence=Confidence(level=level, reason=why),
        next=_next(rec.tune_command, status, level), closest=closest,
        context={"target": rec.target, "hardware_key": rec.hardware_key,
                 "model": None if model is None else display_name(model), "model_id": model},
        borrowed_workload=_finite(rec.borrowed_workload),
        candidates={"considered": rec.configs_considered, "feasible": rec.configs_meeting_slo,
                    "windows": rec.considered},
        quality_headroom={m: h.to_dict() for m, h in rec.quality_headroom.items()},
        notes=notes, details={})


def _measured_confidence(verdict: Verdict | None) -> tuple[ConfidenceLevel, str]:
    if verdict is None or verdict.basis != "measured":
        return "low", "no measured verdict"
    text = f"measured {verdict.windows_met} of {verdict.windows} windows meeting the SLO"
    if verdict.windows >= 3 and verdict.windows_met == verdict.windows:
        return "high", text
    return ("medium" if verdict.windows >= 2 else "low"), text + (
        "; one window only: repeat it to be sure" if verdict.windows == 1 else "")


def _from_shape(rec: ShapeRecommendation | UnmeasuredShape, q: ResolvedQuestion,
                hardware: str | None) -> Answer:
    if isinstance(rec, UnmeasuredShape):
        return Answer(status="not_covered", answer="none", basis="none",
                      summary=_summary("not_covered", q, hardware, None, rec.reason),
                      question=_question(q, rec.hardware_key or hardware),
                      confidence=Confidence(level="none", reason=rec.reason),
                      next=_next(rec.tune_command, "not_covered", "none"),
                      details={"model_shape": rec.shape.to_dict(), "measured_models": {
                          display_name(n): None if f is None else f.to_dict()
                          for n, f in rec.measured.items()}})
    status = _status(rec.found, rec.answer, rec.status == "no_feasible_config",
                     rec.status == "undecided")
    intervals = {m: (p.value, p.low, p.high) for m, p in rec.predicted.items()}
    verdict = predicted_verdict(rec.slo, intervals) if rec.predicted else None
    reason = None if rec.found else rec.reason
    return Answer(
        status=status, answer=cast(AnswerKind, rec.answer), basis="extrapolation",
        summary=_summary(status, q, rec.hardware_key or hardware, verdict, reason),
        question=_question(q, rec.hardware_key or hardware, rec.workload or None),
        config=rec.config if rec.found else None,
        launch_command=rec.launch_command if rec.found else None,
        figures=_predicted_figures(rec.predicted) if rec.found else {},
        verdict=_verdict_doc(verdict),
        confidence=Confidence(level="low" if rec.found else "none", reason=rec.reason),
        next=_next(rec.tune_command, status, "low"),
        context={"target": rec.target, "hardware_key": rec.hardware_key,
                 "engine_version": rec.engine_version, "model": q.model_name,
                 "model_id": rec.model},
        closest=None if rec.found or rec.config is None else {
            "config": rec.config, "conservative_slo_margins": _finite(rec.conservative_margins)},
        notes=[rec.reason] if rec.found else [],
        details=_finite({k: v for k, v in rec.to_dict().items() if k in (
            "shape_position", "beyond_factor", "feature", "model_shape", "capacity_rps",
            "measured_shapes", "held_out_shapes", "predicted_note")}))


def _capacity_figure(at: CapacityAt | None) -> CapacityFigure | None:
    if at is None:
        return None
    c = at.capacity
    return CapacityFigure(rate_rps=c.rate_rps, low=c.low, high=c.high, basis="predicted",
                          note=c.label + (f"; {at.note}" if at.note else ""))


def _replicas_figure(at: CapacityAt | None, total: float | None) -> ReplicasFigure | None:
    if at is None or at.replicas is None or total is None:
        return None
    r = at.replicas
    return ReplicasFigure(total_rate_rps=total, count=r.count, low=r.low, high=r.high)


def _from_calibration(rec: CalibratedAnswer, q: ResolvedQuestion) -> Answer:
    calibration = rec.calibration
    profile = calibration.profile
    status = cast(Status, rec.status)
    hardware = profile.hardware_key
    verdict = rec.verdict
    reason = rec.reason
    summary = _summary(status, q, hardware, verdict, reason).rstrip(".") + "."
    summary += (f" {calibration.label.capitalize()} on {profile.hardware} "
                f"({calibration.source}); verify it on the GPU before relying on it.")
    total = q.request.total_rate_rps
    capacity = Capacity(
        slo=str(q.slo), config=_capacity_figure(rec.capacity),
        default=_capacity_figure(rec.default_capacity),
        replicas=_replicas_figure(rec.capacity, total),
        default_replicas=_replicas_figure(rec.default_capacity, total))
    evidence = [EvidenceWindow(trial_id=t.id or 0, study=str(t.study_id), config=t.config,
                               measured=_finite({m: float(t.metrics[m]) for m in dict.fromkeys(
                                   [str(q.objective.metric), *q.slo.metrics])
                                   if isinstance(t.metrics.get(m), int | float)}),
                               workload=str(t.workload_spec.get("name") or ""),
                               workload_features=workload_features(t.workload_spec),
                               meets_slo=q.slo.is_met(t.metrics), same_config=True)
                for t in rec.windows]
    level: ConfidenceLevel = "low" if rec.config is not None else "none"
    why = (f"{calibration.label}: the simulator with the step costs of {calibration.source}, "
           "intervals widened by the calibration's measured error; not measured on this GPU "
           "at this workload" if rec.config is not None else reason or "")
    next_step = NextStep(tune_command=rec.verify_command,
                         reason="verify the calibrated answer on the GPU: the answered config "
                                "(and the defaults beside it) at the asked rate, 3 rounds")
    if status == "undecided":
        next_step = NextStep(tune_command=rec.verify_command,
                             reason="measure the candidate whose calibrated interval straddles "
                                    "the SLO on the GPU at the asked rate, 3 rounds: its "
                                    "windows decide by the one rule")
    return Answer(
        status=status, answer=cast(AnswerKind, rec.answer), basis="calibration",
        summary=summary, question=_question(q, hardware, rec.workload),
        config=rec.config, launch_command=rec.launch_command,
        figures=rec.figures if rec.config is not None else {},
        verdict=_verdict_doc(verdict),
        default=DefaultAssessment(config=rec.default_config, figures=rec.default_figures,
                                  verdict=_verdict_doc(rec.default_verdict),
                                  source=f"{profile.name}: {rec.default_verdict.text()}"),
        evidence=evidence, confidence=Confidence(level=level, reason=why), next=next_step,
        closest=_finite(rec.closest),
        context={"target": profile.target, "hardware_key": hardware,
                 "model": display_name(profile.model), "model_id": profile.model,
                 "profile": calibration.source, "profile_uid": profile.uid,
                 "engine_versions": dict(profile.engine_versions)},
        candidates={"considered": rec.considered, "feasible": rec.feasible},
        capacity=capacity, notes=list(rec.notes),
        details={"calibration": {"profile": calibration.source, "uid": profile.uid,
                                 "label": calibration.label,
                                 "transferred_from": calibration.transferred_from,
                                 "via": calibration.via,
                                 "step_ms": {"fixed": profile.fixed_ms,
                                             "per_sequence": profile.per_sequence_ms,
                                             "per_prefill_token":
                                                 profile.per_prefill_token_ms},
                                 "gpu": profile.gpu_name, "created_at": profile.created_at,
                                 "error_log": dict(profile.error_log),
                                 "noise_log": dict(profile.noise_log),
                                 "noise_source": profile.noise_source,
                                 "to_measure": [_finite(c) for c in rec.to_measure]}})

"""`advisor recommend`: a config for an SLO, from the fitted models or (``--measured``) the
stored trials, printed with its evidence and launch command.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from advisor.cli.context import (
    MODEL_CONFIG_HELP,
    TARGETS_METAVAR,
    cli_settings,
    cli_store,
    knowledge_models,
    one_line,
    out,
)
from advisor.cli.render import (
    baseline_text,
    compact_config,
    features_text,
    fmt_value,
    miss_text,
    print_json,
)
from advisor.headroom import Headroom
from advisor.inputs import requested_slo
from advisor.model_config import check_takes_model, shape_option
from advisor.objective import Objective
from advisor.presets import known_model
from advisor.recommend import (
    ModelRecommendation,
    PredictedMetric,
    Recommendation,
    RecommendationQuery,
    recommend,
    recommend_measured,
    trial_model,
)
from advisor.recommend_shape import ShapeRecommendation, answer_unmeasured_shape, shape_answer_lines
from knowledge import TrialStore
from knowledge.surrogates import workload_features
from objectives.hardware import hardware_key
from objectives.llm.models import MODEL_SHAPES
from objectives.llm.shapes import ShapeFeatures
from objectives.registry import DEFAULT_TARGET, get_target

__all__ = ["recommend_cmd"]


def recommend_cmd(
    slo: Annotated[str, typer.Option(help='The SLO to meet, e.g. "p95_latency_ms<=1,'
                                          'recall_at_10>=0.95".')],
    target: Annotated[str, typer.Option(help="Target engine.", metavar=TARGETS_METAVAR)
                      ] = DEFAULT_TARGET,
    objective: Annotated[str | None, typer.Option(
        help="What to optimise among configs meeting the SLO (default: the target's).")] = None,
    hardware: Annotated[str, typer.Option(callback=one_line,
        help="Which hardware to answer for: 'this' (this machine), 'any', or (part of) a "
             "hardware key such as h200.")] = "this",
    model: Annotated[str | None, typer.Option(callback=one_line,
        help="LLM targets: the model shape (llama-3-8b, llama-3.2-1b, ...).")] = None,
    model_config: Annotated[str | None, typer.Option("--model-config", callback=one_line,
        help=MODEL_CONFIG_HELP, metavar="PATH|KEY=VALUE,...")] = None,
    rate_rps: Annotated[float | None, typer.Option(
        help="LLM workload: Poisson arrival rate, requests/s.")] = None,
    prompt_len: Annotated[float | None, typer.Option(
        help="LLM workload: median prompt length, tokens.")] = None,
    output_len: Annotated[float | None, typer.Option(
        help="LLM workload: median output length, tokens.")] = None,
    n_vectors: Annotated[int | None, typer.Option(
        help="Vector-search workload: vectors in the index (corpus size N).")] = None,
    dim: Annotated[int | None, typer.Option(help="Vector-search workload: vector dimension.")
                   ] = None,
    explain: Annotated[bool, typer.Option(
        "--explain", help="Show the evidence trials, intervals, model quality and the "
                          "reasoning behind the confidence.")] = False,
    measured: Annotated[bool, typer.Option(
        "--measured", help="Only measured evidence: the best stored trial meeting the SLO on "
                           "this hardware, model and workload (or the nearest measured "
                           "workload, named), no models.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Recommend a config for an SLO.

    Model-based by default: fitted surrogates predict every candidate config at your workload,
    and the answer is the config with the best predicted objective whose conservative (90 %
    interval) bound meets every SLO bound, with evidence trials, a confidence verdict and the
    launch command. Questions outside the data are flagged with the `advisor tune` command that
    would cover them. Exit code 1 when no config is recommended.
    """
    tgt = get_target(target)
    hw = None if hardware == "any" else hardware_key() if hardware == "this" else hardware
    if model_config is not None:
        check_takes_model(tgt)
    shape = shape_option(model, model_config)
    model = model if shape is None else shape.name
    settings = cli_settings()
    store = cli_store(settings)
    workload = _workload_query(rate_rps, prompt_len, output_len, n_vectors, dim)
    if shape is not None and model_config is not None:
        _answer_unmeasured_shape(store, target, hw, shape, model_config, slo, as_json,
                                 objective, workload)
    if measured:
        rec = recommend_measured(store, target=target, slo=requested_slo(slo),
                                 objective=Objective.parse(objective or tgt.default_objective),
                                 hardware_key=hw, model=model, workload=workload)
        if as_json:
            print_json(out, rec.to_dict())
        else:
            _print_recommendation(rec)
        if not rec.found:
            raise typer.Exit(1)
        return
    query = RecommendationQuery(target=target, slo=slo, hardware=hw, model=model,
                                objective=objective, workload=workload,
                                model_shape=None if shape is None else shape.to_dict())
    # Validate the question before fitting anything, so a typo answers at once.
    requested_slo(slo).check_metrics(target, tgt.reported_metrics())
    answer = recommend(store, query, models=knowledge_models(settings, store, target),
                       failure_cache_dir=settings.cache_dir)
    if as_json:
        print_json(out, answer.to_dict())
    else:
        _print_model_recommendation(answer, explain)
    if not answer.found:
        raise typer.Exit(1)


def _workload_query(rate_rps: float | None, prompt_len: float | None, output_len: float | None,
                    n_vectors: int | None, dim: int | None) -> dict[str, Any]:
    given = {"rate_rps": rate_rps, "prompt_len": prompt_len, "output_len": output_len,
             "n_vectors": n_vectors, "dim": dim}
    return {k: v for k, v in given.items() if v is not None}


def _answer_unmeasured_shape(store: TrialStore, target: str, hardware: str | None,
                             shape: ShapeFeatures, model_config: str, slo: str,
                             as_json: bool, objective: str | None = None,
                             workload: dict[str, Any] | None = None) -> None:
    """``recommend --model-config`` for a shape never measured on ``hardware``: the answer
    carried from the shapes measured there (advisor/recommend_shape.py; exit 0 when it
    recommends, else 1 with the reason), or, with nothing to carry, the measured shapes and the
    tune command (exit 1). Returns when the shape was measured."""
    answer = answer_unmeasured_shape(store, target=target, hardware=hardware, shape=shape,
                                     model_config=model_config, slo=slo, objective=objective,
                                     workload=workload or {})
    if answer is None:
        return
    if isinstance(answer, ShapeRecommendation):
        if as_json:
            print_json(out, answer.to_dict())
        else:
            for line in shape_answer_lines(answer):
                out.print(escape(line), highlight=False, soft_wrap=True)
        raise typer.Exit(0 if answer.found else 1)
    if as_json:
        print_json(out, answer.to_dict())
    else:
        out.print(escape(answer.reason), highlight=False, soft_wrap=True)
    raise typer.Exit(1)


def _interval(p: PredictedMetric) -> str:
    return f"{fmt_value(p.value)}  [{fmt_value(p.low)} .. {fmt_value(p.high)}]"


def _print_model_recommendation(rec: ModelRecommendation, explain: bool) -> None:
    where = rec.hardware_key or "any hardware"
    if rec.status == "not_covered":
        out.print(f"[yellow]Not covered:[/yellow] {rec.confidence_reason}")
        if rec.borrowed_workload:
            out.print(f"Nearest measured workload: {rec.borrowed_workload['name']} "
                      f"{rec.borrowed_workload['features']}")
        _print_tune_command(rec.tune_command, "To cover it", rec.model)
        return
    ctx = rec.context or {}
    if rec.borrowed_workload:
        bw = rec.borrowed_workload
        out.print(f"[dim]Workload {rec.workload} was not measured; borrowing the nearest measured "
                  f"workload {bw['name']} {bw['features']} ({bw['factor']:g}x away"
                  f"{', inside the measured range' if bw['inside_measured_range'] else ''})."
                  "[/dim]")
    if rec.status == "no_feasible_config":
        out.print(f"[yellow]No {rec.target} config is predicted to meet {rec.slo}[/yellow] with "
                  f"its 90% interval (on {where}; {rec.candidates_considered} candidate configs "
                  f"from {ctx.get('trials')} trials).")
        if rec.closest is not None:
            misses = ", ".join(f"{k} (off by {miss_text(v)})"
                               for k, v in rec.closest["conservative_slo_margins"].items()
                               if v > 0)
            out.print(f"Closest: {escape(compact_config(rec.closest['config']))} misses {misses} "
                      "(conservative bound).")
        if rec.measured_alternative is not None:
            alt = rec.measured_alternative
            out.print(f"Measured evidence: trial {alt['trial_id']} met this SLO at this workload "
                      f"({escape(compact_config(alt['config']))}); `--measured` answers from it.")
        _print_tune_command(rec.tune_command, "To cover this SLO", rec.model)
        if explain:
            _print_evidence(rec)
        return
    head = ("[bold green]Keep the defaults[/bold green]: the engine default"
            if rec.answer == "keep_defaults" else f"[bold green]Recommended {rec.target} "
            "config[/bold green]")
    out.print(f"{head} for {rec.slo} ({rec.objective}) on {where}"
              + (f", model {rec.model}" if rec.model else "") + ":")
    out.print(f"  {compact_config(rec.config or {})}")
    if (versus := baseline_text(rec.baseline)) is not None:
        out.print(versus)
    bases = [str(q.get("basis", "")) for q in rec.model_quality.values()]
    source = ("from the load curve its knobs predict" if any("from the knobs" in b for b in bases)
              else "from this config's load curve" if any(bases) else "by the surrogate models")
    table = Table(title=f"predicted (90% intervals) - not measured: {source}")
    for c in ("metric", "predicted", "SLO", "conservative margin"):
        table.add_column(c)
    bounds = {b.metric: b for b in rec.slo.bounds}
    for m, p in rec.predicted.items():
        bound = bounds.get(m)
        margin = rec.conservative_margins.get(str(bound)) if bound else None
        table.add_row(m, _interval(p), f"{bound.op} {bound.threshold:g}" if bound else "",
                      f"{-margin:.1%} headroom" if margin is not None else "")
    out.print(table)
    _print_quality_headroom(rec.quality_headroom)
    out.print(f"Confidence: [bold]{rec.confidence}[/bold] ({rec.confidence_reason})")
    same = [e for e in rec.evidence if e.same_config]
    out.print(f"Evidence: {len(rec.evidence)} nearest measured trials"
              + (f", {len(same)} of this exact config" if same else "")
              + (" (--explain shows them)" if not explain else ""))
    if explain:
        _print_evidence(rec)
        for note in rec.notes:
            out.print(f"[dim]note: {note}[/dim]")
    out.print("Launch:")
    out.print(rec.launch_command or "(no launch command)", markup=False, highlight=False,
              soft_wrap=True)


def _print_quality_headroom(headroom: dict[str, Headroom]) -> None:
    """One line per quality bound whose metric can differ between builds of one config."""
    for h in headroom.values():
        if h.measured:
            out.print(f"Rebuild margin on {h.metric}: {h.value:.4g} kept on its SLO bound "
                      f"({h.basis}).", soft_wrap=True)
        else:
            out.print(f"[yellow]Rebuild margin on {h.metric}: {h.basis}[/yellow]; the answer keeps "
                      "no margin for it.", soft_wrap=True)


def _print_tune_command(command: str | None, why: str, model: str | None = None) -> None:
    """``why, run: <command>`` on lines of their own and never wrapped (pasted into a shell)."""
    if command is None:
        if model is not None and not known_model(model):
            out.print(f"{why}, tune a local copy of {model!r}: advisor tune --model DIR (a "
                      f"directory holding its config.json); {model!r} is not one of the model "
                      f"shapes advisor tune knows ({', '.join(MODEL_SHAPES)}).", soft_wrap=True)
        return
    out.print(f"{why}, run:")
    out.print(f"  {command}", markup=False, highlight=False, soft_wrap=True)


def _print_evidence(rec: ModelRecommendation) -> None:
    ctx = rec.context or {}
    out.print(f"Models: {ctx.get('family')} surrogates fitted on {ctx.get('trials')} trials of "
              f"{ctx.get('target')} / {ctx.get('hardware_key')}"
              + (f" / {ctx.get('model')}" if ctx.get("model") else "")
              + f" (engine {ctx.get('engine_version')}); candidates: "
              f"{rec.candidates_considered}, predicted feasible: {rec.candidates_feasible}.")
    if rec.model_quality:
        q = Table(title="model quality (held out: grouped cross-validation on stored trials; "
                        "a load curve's rates one at a time, in the asked rate's load band)")
        for c in ("metric", "MAPE", "held out", "90% interval coverage", "trials"):
            q.add_column(c)
        for m, v in rec.model_quality.items():
            q.add_row(m, f"{v['mape']:.1%}" if v.get("mape") is not None else "-",
                      _held_out_kind(str(v.get("basis") or "")),
                      f"{v['interval_coverage']:.0%}" if v.get("interval_coverage") is not None
                      else "-", str(v.get("n")))
        out.print(q)
    ev = Table(title="nearest measured trials (evidence)")
    for c in ("trial", "study", "workload", "meets SLO", "measured", "config"):
        ev.add_column(c, overflow="fold")
    for e in rec.evidence:
        ev.add_row(str(e.trial_id) + (" (same config)" if e.same_config else ""), e.study,
                   e.workload, "yes" if e.meets_slo else "no",
                   " ".join(f"{k}={fmt_value(v)}" for k, v in e.metrics.items()),
                   compact_config(e.config))
    out.print(ev)


def _held_out_kind(basis: str) -> str:
    """What a model-quality row held out, from its ``basis`` (empty: the surrogates')."""
    if "from the knobs" in basis:
        return "configs (curve from knobs)"
    return "rates (load curve)" if basis else "configs (surrogate)"


def _print_recommendation(rec: Recommendation) -> None:
    where = rec.hardware_key or "any hardware"
    asked = f"{where}" + (f", model {rec.model}" if rec.model else "") + (
        f", workload {features_text(rec.workload)}" if rec.workload else "")
    if rec.borrowed_workload is not None:
        bw = rec.borrowed_workload
        out.print(f"[yellow]No trial was measured at {features_text(rec.workload)}[/yellow]; this "
                  f"answer borrows the nearest measured workload, {bw['name']} "
                  f"({features_text(bw['features'])}, {bw['factor']:g}x away).", soft_wrap=True)
    if rec.trial is None:
        out.print(f"[yellow]No measured {rec.target} config meets {rec.slo}[/yellow] "
                  f"(on {asked}; {rec.considered} measured trials considered).", soft_wrap=True)
        if rec.reason:
            out.print(f"{escape(rec.reason[:1].upper() + rec.reason[1:])}.", soft_wrap=True)
        if rec.closest is not None:
            misses = ", ".join(f"{k} (off by {miss_text(v)})"
                               for k, v in rec.closest_margins.items() if v > 0)
            out.print(f"Closest: trial {rec.closest.id} "
                      f"[{escape(compact_config(rec.closest.config))}] misses {misses}.")
        _print_tune_command(rec.tune_command, "To cover this SLO")
        return
    t = rec.trial
    model = trial_model(t)
    head = ("[bold green]Keep the defaults[/bold green]: the engine default"
            if rec.answer == "keep_defaults" else f"[bold green]Recommended {rec.target} "
            "config[/bold green]")
    out.print(f"{head} for {rec.slo} ({rec.objective}), measured on {t.hardware_key}"
              + (f" with model {model}" if model else "") + ":")
    out.print(f"  {escape(compact_config(t.config))}")
    if (versus := baseline_text(rec.baseline)) is not None:
        out.print(versus)
    features = workload_features(t.workload_spec)
    table = Table(title=f"measured (trial #{t.number} of study id {t.study_id}, trial id {t.id}, "
                        f"workload {t.workload_spec.get('name')}"
                        + (f" {features_text(features)}" if features else "") + ")")
    table.add_column("metric")
    table.add_column("measured")
    table.add_column("SLO")
    table.add_column("headroom")
    if rec.default_trial is not None:
        table.add_column("engine default")
    bounds = {b.metric: b for b in rec.slo.bounds}
    for m in dict.fromkeys([rec.objective.metric, *rec.slo.metrics]):
        b = bounds.get(m)
        row = [m, fmt_value(t.metrics.get(m)), f"{b.op} {b.threshold:g}" if b else "",
               f"{-rec.margins[str(b)]:.1%}" if b else ""]
        if rec.default_trial is not None:
            row.append(fmt_value(rec.default_trial.metrics.get(m)))
        table.add_row(*row)
    out.print(table)
    _print_quality_headroom(rec.quality_headroom)
    out.print(f"Evidence: {rec.feasible_count} of {rec.considered} measured trials meet the SLO "
              f"on {asked}" + (" (at the borrowed workload)" if rec.borrowed_workload else "")
              + ".", soft_wrap=True)
    out.print("Launch:")
    out.print(rec.launch_command or "", markup=False, highlight=False, soft_wrap=True)


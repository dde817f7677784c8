"""`advisor knowledge ...`: move trials between stores (JSONL), fit the surrogate models and
evaluate them (and the failure model) on held-out trials.
"""

from __future__ import annotations

import gzip
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from advisor.cli.context import choice, cli_settings, cli_store, err, one_line, out, probability
from advisor.cli.progress import steps
from advisor.cli.render import emit_table, print_json
from advisor.errors import AdvisorError
from knowledge.model_choices import DEFAULT_FAILURE_FAMILY as FAILURE_FAMILY
from knowledge.model_choices import DEFAULT_FAILURE_THRESHOLD as DEFAULT_THRESHOLD
from knowledge.model_choices import DEFAULT_SURROGATE_FAMILY as DEFAULT_FAMILY
from knowledge.model_choices import FAILURE_FAMILIES, GROUP_BY, SCORE_ON
from knowledge.model_choices import SURROGATE_FAMILIES as FAMILIES
from objectives.registry import get_target

if TYPE_CHECKING:
    from knowledge import TrialRecord, TrialStore

__all__ = ["knowledge_app"]

knowledge_app = typer.Typer(
    help="The knowledge base: fit and evaluate the surrogate models; move trials between stores "
         "(JSONL).", no_args_is_help=True)


@knowledge_app.command("export")
def knowledge_export_cmd(
    output: Annotated[Path | None, typer.Option("--output", "-o",
                                                help="File to write (default: stdout).")] = None,
    target: Annotated[str | None, typer.Option(help="Only trials of this target.")] = None,
    study: Annotated[str | None, typer.Option(help="Only trials of this study.")] = None,
    hardware: Annotated[str | None, typer.Option(callback=one_line,
        help="Only trials on this hardware: its key, or a run of the key's dash-separated "
             "parts (e.g. h200, nvidia-h200, cpu).")] = None,
) -> None:
    """Export trials (with their studies and SLO margins) as JSONL, one trial per line."""
    from knowledge import TrialFilter
    from knowledge.transfer import export_jsonl

    store = cli_store()
    flt = TrialFilter(target=target, study=study, hardware_key=hardware)
    if output is None:
        n = export_jsonl(store, sys.stdout, flt)
    else:  # a name ending in .gz is written compressed, as the shipped knowledge is kept
        with (gzip.open(output, "wt", encoding="utf-8") if output.name.endswith(".gz")
              else output.open("w")) as f:
            n = export_jsonl(store, f, flt)
    err.print(f"exported {n} trials")


@knowledge_app.command("import")
def knowledge_import_cmd(
    files: Annotated[list[Path], typer.Argument(help="JSONL files written by `knowledge export` "
                                                     "(.jsonl.gz: compressed; '-' reads "
                                                     "standard input).")],
) -> None:
    """Import trials from JSONL files; trials already in the store are skipped."""
    from knowledge.transfer import import_file, import_jsonl

    store = cli_store()
    for path in files:
        if str(path) == "-":
            summary = import_jsonl(store, sys.stdin, source="<stdin>")
        else:
            if not path.is_file():
                raise AdvisorError(f"no such file: {path}")
            found = import_file(store, path)
            if found is None:
                out.print(f"{path}: already imported (same content)")
                continue
            summary = found
        out.print(f"{path}: {summary.trials_imported} trials imported, "
                  f"{summary.trials_skipped} already present, "
                  f"{summary.studies_created} new studies"
                  + (f"; {summary.trials_invalid} invalid (unusable validity label: kept, "
                     "never used)" if summary.trials_invalid else ""))


@knowledge_app.command("fit")
def knowledge_fit_cmd(
    target: Annotated[str | None, typer.Option(help="Only this target's contexts (the saved "
                                                    "model set then holds only these).")] = None,
    family: Annotated[str, typer.Option(help="Surrogate family.", **choice(FAMILIES))
                      ] = DEFAULT_FAMILY,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Fit the surrogate models on every stored trial, cross-validate them, and save both in the
    cache dir so `advisor recommend` answers without fitting."""
    from knowledge.cache import KnowledgeModels, ModelCache

    settings = cli_settings()
    store = cli_store(settings)
    with steps(err, 2, quiet=as_json) as step:
        step(f"fitting {family} surrogates on the stored trials"
             f"{f' of {target}' if target else ''} (each context cross-validated)")
        models = KnowledgeModels.fit(store, family=family, target=target)
        step(f"saving {len(models.contexts)} contexts to the cache dir")
        cache = ModelCache(store, settings.cache_dir, family=family, target=target,
                           shared_dir=settings.shared_model_dir)
        cache.save(models)
    rows = [{"context": ctx.key.label(), **mm.score.to_dict()}
            for ctx in models.contexts.values() for mm in ctx.metrics.values() if mm.score]
    if as_json:
        print_json(out, {"family": family, "fit_seconds": models.fit_seconds,
                             "trials": models.data.trials,
                             "contexts": [c.key.to_dict() | {"trials": c.n_trials}
                                          for c in models.contexts.values()],
                             "scores": rows, "saved_to": str(cache.path)})
        return
    out.print(f"fitted {family} surrogates for {len(models.contexts)} contexts from "
              f"{models.data.trials} stored trials in {models.fit_seconds:.1f} s; saved to the "
              "cache dir")
    for ctx in models.contexts.values():
        out.print(f"  {ctx.key.label()}: {ctx.n_trials} trials, {len(ctx.metrics)} metrics, "
                  f"{len(ctx.workloads)} workloads")


@knowledge_app.command("eval")
def knowledge_eval_cmd(
    target: Annotated[str | None, typer.Option(help="Only this target's contexts.")] = None,
    family: Annotated[str, typer.Option(help="Surrogate family.", **choice(FAMILIES))
                      ] = DEFAULT_FAMILY,
    folds: Annotated[int, typer.Option(min=2, help="Grouped cross-validation folds.")] = 5,
    metric: Annotated[list[str] | None, typer.Option(
        "--metric", help="Only these metrics (repeatable). Default: p95 latencies and "
                         "throughput, the issue's accuracy goal.")] = None,
    all_metrics: Annotated[bool, typer.Option("--all-metrics", help="Every modelled metric.")
                           ] = False,
    group_by: Annotated[str, typer.Option(
        help="Hold out whole 'config's (default: unseen configs), whole engine 'instance's "
             "(a trial with every setting its search sweep measured, and their configs' "
             "repeats), whole 'workload's (unseen rates / corpus sizes) or whole model "
             "'shape's (LLM targets: each measured shape predicted from the others).",
        **choice((*GROUP_BY, "shape")))] = "config",
    audit: Annotated[bool, typer.Option(
        "--audit", help="Also hold the conservative feasibility filter against held-out "
                        "measurements: the rate of configs predicted feasible but measured "
                        "infeasible, over SLOs spread across the measured range (held out as "
                        "--group-by says).")] = False,
    score_on: Annotated[str, typer.Option(
        help="Score each held-out 'trial', or the 'median' of each held-out config's repeats "
             "at one workload (what a model can be expected to hit when one measurement's "
             "repeat noise is larger than the goal).", **choice(SCORE_ON))] = "trial",
    load_curves: Annotated[bool, typer.Option(
        "--load-curves/--no-load-curves",
        help="Let measured configs' load curves answer for them (default; blended with the "
             "engine simulator for the figures each fold's training trials choose), or score "
             "the knob-level surrogates alone.")] = True,
    failures: Annotated[bool, typer.Option(
        "--failures", help="Evaluate the failure model instead (which configs fail to start): "
                           "held-out precision, recall and AUC per target and hardware, configs "
                           "held out together and whole studies held out, and the device time "
                           "its skips would have saved.")] = False,
    failure_threshold: Annotated[float | None, typer.Option(
        callback=lambda v: probability(v),
        help=f"With --failures: the skip threshold to score (default {DEFAULT_THRESHOLD:g}).")
    ] = None,
    failure_family: Annotated[str, typer.Option(
        help="With --failures: the classifier family.", **choice(FAILURE_FAMILIES))
    ] = FAILURE_FAMILY,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Held-out error per metric on the stored trials: grouped K-fold cross-validation (all
    measurements of one config are held out together), MAPE and 90%-interval coverage. With
    --failures, the failure model's held-out precision and recall instead."""
    if failures:
        if (audit or metric or all_metrics or group_by != "config" or score_on != "trial"
                or not load_curves):
            raise AdvisorError("--failures scores the failure model; --audit, --metric, "
                               "--all-metrics, --group-by, --score-on and --no-load-curves "
                               "apply to the surrogates")
        _print_failure_eval(cli_store(), target=target, family=failure_family,
                            threshold=failure_threshold or DEFAULT_THRESHOLD, folds=folds,
                            as_json=as_json)
        return
    if failure_threshold is not None or failure_family != FAILURE_FAMILY:
        raise AdvisorError("--failure-threshold and --failure-family apply with --failures only")
    if group_by == "shape":
        _print_shape_eval(cli_store(), target=target, metrics=metric, as_json=as_json)
        return
    from advisor.evaluation import audit_store_trials
    from knowledge import TrialFilter, TrialStatus
    from knowledge.cache import MIN_TRIALS
    from knowledge.surrogates import context_of, cross_validate

    store = cli_store()
    trials = store.list_trials(TrialFilter(target=target, status=TrialStatus.COMPLETE))

    grouped: dict[Any, list[TrialRecord]] = {}
    for t in trials:
        if t.metrics:
            grouped.setdefault(context_of(t), []).append(t)
    rows: list[dict[str, Any]] = []
    for key, ctx_trials in sorted(grouped.items()):
        if len(ctx_trials) < MIN_TRIALS:
            continue
        names = sorted({m for t in ctx_trials for m in t.metrics})
        wanted = names if all_metrics else metric or [m for m in names if _is_goal_metric(m)]
        scores = cross_validate(key, ctx_trials, family=family, folds=folds,
                                metrics=[m for m in wanted if m in names], group_by=group_by,
                                load_curves=load_curves, score_on=score_on)
        rows += [{"context": key.label(), **s.to_dict()} for s in scores.values()]
    audits = ([a.to_dict() for a in audit_store_trials(
        trials, target=target, family=family, folds=folds, group_by=group_by,
        load_curves=load_curves)] if audit else [])
    if as_json:
        print_json(out, {"family": family, "folds": folds, "coverage_nominal": 0.9,
                         "group_by": group_by, "score_on": score_on,
                         "load_curves": load_curves, "scores": rows,
                         "feasibility_audit": audits})
        return
    if not rows:
        out.print("no context has enough measured trials to evaluate")
        return
    scored = "median of repeats per config and workload" if score_on == "median" else "trial"
    out.print(_score_table(f"held-out error ({family}{', load curves' if load_curves else ''}, "
                           f"{folds}-fold grouped by {group_by}, scored per {scored}; goal: "
                           "MAPE <= 10% for p95 latency and throughput)", rows, 0.10))
    for a in audits:
        rate = a["false_feasible_rate"]
        rec_rate = a["recommendation_infeasible_rate"]
        out.print(f"{a['context']}: {a['false_feasible']} of {a['predicted_feasible']} held-out "
                  "(trial, SLO) pairs predicted feasible (conservative bound) measured "
                  f"infeasible ({'-' if rate is None else f'{rate:.1%}'}); "
                  f"{a['recommendations_measured_infeasible']} of {a['recommendations']} "
                  "per-fold recommendations measured infeasible "
                  f"({'-' if rec_rate is None else f'{rec_rate:.1%}'}); the filter kept "
                  f"{'-' if a['feasible_recall'] is None else format(a['feasible_recall'], '.0%')}"
                  f" of {a['measured_feasible']} measured-feasible pairs; {len(a['slos'])} SLOs")


def _score_table(title: str, rows: list[dict[str, Any]], goal: float | None) -> Table:
    table = Table(title=title)
    # Held out by workload: the error split by whether the config was measured elsewhere.
    split = any(r.get("seen_config_n") for r in rows)
    for c in ("context", "metric", "trials", "held-out groups", "MAPE",
              *(("of it: configs measured at other rates", "configs measured there only")
                if split else ()), "90% interval coverage", "noise floor (repeats)"):
        table.add_column(c)

    def part(mape: float | None, n: int) -> str:
        return "-" if mape is None else f"{mape:.1%} (n={n})"

    for r in rows:
        mape = r["mape"]
        text = "-" if mape is None else f"{mape:.1%}"
        if mape is not None and goal is not None and _is_goal_metric(r["metric"]):
            text += " [green]ok[/green]" if mape <= goal else " [yellow]above goal[/yellow]"
        cov = r["interval_coverage"]
        floor = r.get("noise_floor_mape")
        table.add_row(r["context"], r["metric"], str(r["n"]), str(r["configs"]), text,
                      *((part(r.get("seen_config_mape"), r.get("seen_config_n", 0)),
                         part(r.get("unseen_config_mape"), r.get("unseen_config_n", 0)))
                        if split else ()),
                      "-" if cov is None else f"{cov:.0%}",
                      "-" if floor is None else f"{floor:.1%} (n={r['noise_floor_n']})")
    return table


def _is_goal_metric(metric: str) -> bool:
    """The issue's accuracy goal covers p95 latencies and throughput."""
    return ("p95" in metric and "batch" not in metric) or metric in (
        "qps", "output_tokens_per_s", "requests_per_s")


def _print_shape_eval(store: TrialStore, *, target: str | None, metrics: list[str] | None,
                      as_json: bool) -> None:
    """`advisor knowledge eval --group-by shape`: leave-one-shape-out errors of the shape
    transfer (advisor/shape_eval.py), per held-out shape and candidate feature."""
    from advisor.shape_eval import shape_rows

    if target is None:
        raise AdvisorError("--group-by shape needs --target (an LLM serving target)")
    get_target(target)
    rows = shape_rows(store, target=target, metrics=metrics or None)
    if as_json:
        print_json(out, {"group_by": "shape", "target": target, "rows": rows})
        return
    if not rows:
        out.print(f"no {target} config was measured on 3 or more model shapes with one "
                  "hardware, engine version and workload")
        return
    names = list(dict.fromkeys(m for r in rows for m in r["mape"]
                               if metrics or _is_goal_metric(m)))
    table = Table(title="leave-one-shape-out error (each shape predicted from the others; "
                        "MAPE over its measured rates vs per-rate medians, light load in "
                        "brackets; * = the feature the transfer chooses)")
    for c in ("context", "config", "feature", "held out", "trained on", "capacity (pred/meas)",
              *names):
        table.add_column(c)

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:.0%}"

    for r in rows:
        table.add_row(r["context"], r["config"], r["feature"] + (" *" if r["chosen"] else ""),
                      f"{r['shape']} ({r['position']})", " + ".join(r["trained_on"]),
                      f"{r['capacity_predicted']:.0f}/{r['capacity_measured']:.0f} "
                      f"({pct(r['capacity_ape'])})",
                      *[f"{pct(r['mape'].get(m))} [{pct(r['mape_light'].get(m))}]"
                        for m in names])
    out.print(table)


def _print_failure_eval(store: TrialStore, *, target: str | None, family: str,
                        threshold: float, folds: int, as_json: bool) -> None:
    """`advisor knowledge eval --failures`: the failure model held against stored trials."""
    from advisor.failure_gate import evaluate_store

    if target is not None:
        get_target(target)  # an unknown name fails here, naming the known ones
    evaluation, data = evaluate_store(store, target=target, family=family,
                                      threshold=threshold, folds=folds)
    if as_json:
        print_json(out, {"family": family, "threshold": threshold, "folds": folds,
                         "data": data, **evaluation.to_dict()})
        return
    if not data:
        out.print("no labelled engine starts (measured or failed trials) in the store")
        return

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:.0%}"

    table = Table(title=f"failure model held out ({family}, skip at p >= {threshold:g}; "
                        f"{folds}-fold grouped by config, and leave one study out)")
    for c in ("target", "hardware", "held out", "starts", "failed (prestart)", "skipped",
              "precision", "recall", "AUC", "saved s", "lost s"):
        table.add_column(c)
    rows = [[sc.target, sc.hardware_key, "configs" if sc.scheme == "config" else "studies",
             str(h.starts), f"{h.failures} ({h.prestart_failures})", str(h.skipped),
             pct(h.precision), pct(h.recall), "-" if h.auc is None else f"{h.auc:.3f}",
             f"{h.saved_s:.0f}", f"{h.lost_s:.0f}"]
            for sc in evaluation.scores for h in [sc.held_out]]
    emit_table(out, table, rows, "table")
    for key, d in sorted(data.items()):
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(d["error_types"].items())) or "none"
        out.print(f"{key}: {d['starts']} labelled starts in {d['studies']} studies, "
                  f"{d['failures']} failed ({kinds}; {d['prestart_rejections']} refused by the "
                  "target's own checks before any engine started)")
    for scheme in ("config", "study"):
        row = [f"p >= {t:g}: {pct(h.precision)} / {pct(h.recall)} / "
               f"{h.saved_s - h.lost_s:.0f} s" for sch, t, h in evaluation.sweep if sch == scheme]
        if row:
            out.print(f"all targets, {'configs' if scheme == 'config' else 'studies'} held out "
                      f"(precision / recall / net saved): {'; '.join(row)}")
    out.print(f"[dim]evaluated in {evaluation.seconds:.1f} s; saved s: device time of the "
              "skipped failures (prestart rejections cost nothing); lost s: time of the "
              "measured trials that would have been skipped[/dim]")



@knowledge_app.command("profiles")
def knowledge_profiles_cmd(
    target: Annotated[str | None, typer.Option(help="Only profiles of this target.")] = None,
) -> None:
    """List the hardware profiles (`advisor calibrate`): machine, engine, model, step model and
    the calibration's own error."""
    import math

    from knowledge.profiles import list_profiles

    profiles = list_profiles(cli_store(), target=target)
    if not profiles:
        out.print("no hardware profiles (run `advisor calibrate` on the machine)")
        return
    table = Table(title="hardware profiles (predictions from them are labelled 'predicted from "
                        "calibration')")
    for column in ("profile", "GPU", "engine", "windows", "step ms (fixed / seq / prompt tok)",
                   "error (TTFT p95 / TPOT p95 / tok/s)"):
        table.add_column(column)
    for p in profiles:
        err_pct = " / ".join(f"{100 * math.expm1(p.error_log[m]):.0f} %" if m in p.error_log
                             else "-" for m in ("ttft_p95_ms", "tpot_p95_ms",
                                                "output_tokens_per_s"))
        table.add_row(p.name, f"{p.gpu_name} ({p.gpu_memory_mib:,.0f} MiB)",
                      ", ".join(f"{k} {v}" for k, v in p.engine_versions.items()),
                      str(len(p.probe)), f"{p.fixed_ms:.2f} / {p.per_sequence_ms:.4f} / "
                      f"{p.per_prefill_token_ms:.5f}", err_pct)
    out.print(table)

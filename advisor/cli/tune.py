"""`advisor tune`: one tuning study on this machine, planned like every front door's
(advisor/study_request.py), with a live progress bar and a summary against the engine default.
"""

from __future__ import annotations

import functools
import math
import shlex
import statistics
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from advisor.cli.context import (
    MODEL_CONFIG_HELP,
    MODELS_METAVAR,
    TARGETS_METAVAR,
    choice,
    cli_settings,
    cli_store,
    err,
    model_option,
    one_line,
    out,
    parse_enqueued,
    positive,
    probability,
    sigterm_interrupts,
    workload_overrides,
)
from advisor.cli.render import compact_config, fmt_value, paired_table, print_json
from advisor.errors import AdvisorError
from advisor.front_door import BEST_KNOWN, DEFAULT_TRIALS, Door
from advisor.inputs import MAX_TRIALS
from advisor.model_config import check_takes_model
from advisor.presets import check_model
from advisor.samplers import DEFAULT_SAMPLER, MAX_STARTUP, SAMPLERS, STARTUP_TRIALS
from knowledge import TrialStatus
from knowledge.model_choices import DEFAULT_FAILURE_THRESHOLD as DEFAULT_THRESHOLD
from objectives import parse_slo
from objectives.registry import DEFAULT_TARGET, get_target

if TYPE_CHECKING:
    from advisor.budget import BudgetTally
    from advisor.driver import StudyResult
    from advisor.objective import Objective
    from knowledge import StudyRecord, TrialRecord, TrialStore

__all__ = ["CLI_DOOR", "tune_cmd"]

#: How the command line spells a study request's fields in the errors :func:`plan_study` raises.
CLI_DOOR = Door(resume="--resume", name="--name", continue_hint="pass --resume to continue it",
                enqueue="--enqueue", startup_trials="--startup-trials", also_rate="--also-rate",
                trials="--trials", sampler="--sampler", seed="--seed",
                search_sweep="--search-sweep", paired_repeats="--paired-repeats",
                failure_gate="--failure-gate", failure_threshold="--failure-threshold")


def tune_cmd(
    target: Annotated[str, typer.Option(help="Target engine to tune (see `advisor targets`).",
                                        metavar=TARGETS_METAVAR)] = DEFAULT_TARGET,
    slo: Annotated[str | None, typer.Option(
        help='SLO to meet, e.g. "p95_latency_ms<=1,recall_at_10>=0.95". Default: the target\'s.'
    )] = None,
    objective: Annotated[str | None, typer.Option(
        help='What to optimise subject to the SLO, e.g. "maximize:qps" or '
             '"minimize:p99_latency_ms". Default: the target\'s.')] = None,
    trials: Annotated[int | None, typer.Option(
        min=1, max=MAX_TRIALS, show_default=False,
        help=f"Search trials to finish (failed ones count; the closing paired repeats and "
             f"configs the failure gate skips do not, up to one skip per trial). Default "
             f"{DEFAULT_TRIALS}; with --resume the study's own, and a value given raises or "
             "lowers it.")] = None,
    name: Annotated[str | None, typer.Option(callback=one_line,
        help="Study name (default: derived from target, workload, SLO and objective, so rerunning "
             "the same command with --resume continues it).")] = None,
    resume: Annotated[bool, typer.Option(
        help="Continue the study if it exists (recovering trials a killed run left behind) "
             "with the settings it was started with, until its search budget is spent; start "
             "it if it does not exist yet.")] = False,
    workload: Annotated[str | None, typer.Option(
        help="Workload preset name or a YAML/JSON workload file (default: the target's).")] = None,
    model: Annotated[str | None, typer.Option(callback=one_line,
        help="LLM targets: a model shape (random weights) or a local model directory. Sets the "
             "workload's `model`.", metavar=MODELS_METAVAR)] = None,
    model_config: Annotated[str | None, typer.Option("--model-config", callback=one_line,
        help=MODEL_CONFIG_HELP, metavar="PATH|KEY=VALUE,...")] = None,
    workload_param: Annotated[list[str] | None, typer.Option(
        "--workload-param", help="Override one workload parameter, KEY=VALUE (repeatable); "
                                 "the VALUE is read as YAML.")] = None,
    sampler: Annotated[str | None, typer.Option(
        help=f"Search algorithm (default {DEFAULT_SAMPLER}; kept by the study).",
        **choice(SAMPLERS))] = None,
    seed: Annotated[int | None, typer.Option(help="Sampler seed, for reproducible searches.")
                    ] = None,
    startup_trials: Annotated[int | None, typer.Option(
        min=1, max=MAX_STARTUP,
        help=f"Trials the tpe and gp samplers draw at random before they model, the engine "
             f"default and warm-start configs included (default {STARTUP_TRIALS}; Optuna's own "
             "is 10). Kept by the study for --resume.")] = None,
    trial_timeout: Annotated[float | None, typer.Option(
        "--trial-timeout", callback=positive,
        help="Kill and fail a trial after this many seconds; each trial has its own limit "
             "(default $ADVISOR_TRIAL_TIMEOUT_S or 300).")] = None,
    timeout: Annotated[float | None, typer.Option(
        "--timeout", callback=positive, hidden=True,
        help="Deprecated alias of --trial-timeout (a per-trial limit, not the study's).")
    ] = None,
    memory_limit_mb: Annotated[int | None, typer.Option(min=1,
        help="Resident-memory limit of each trial's processes (engine servers included), "
             "in MiB: over it the trial is killed and fails as oom.")] = None,
    include_default: Annotated[bool, typer.Option(
        help="Measure the engine's default config as the first trial, for comparison.")] = True,
    also_rate: Annotated[list[float] | None, typer.Option(
        "--also-rate", help="LLM serving targets: also measure every trial's config at this "
        "arrival rate in req/s (repeatable), on the same engine start, as a trial of the study "
        "<name>@<rate>rps. Same arrival window (requests scale with the rate), other prompts. "
        "--trial-timeout covers the whole trial.")] = None,
    enqueue: Annotated[list[str] | None, typer.Option(
        "--enqueue", help="Measure this config first, after the engine default (repeatable): a "
        "YAML/JSON mapping of knobs, e.g. '{knob_a: 256, knob_b: false}', "
        "or @FILE holding a mapping or a list of them. Knobs left out keep the engine default, so "
        "one knob per --enqueue ablates the default one knob at a time.")] = None,
    warm_start: Annotated[bool, typer.Option(
        help="Warm start a new study: after the engine default and --enqueue configs, measure "
             "the recommender's config for its SLO, workload and hardware, the "
             f"{BEST_KNOWN} best stored configs meeting the SLO there, and the target's "
             "textbook starting points. They count towards "
             "--trials and the sampler's random start-up; --resume never adds them.")] = True,
    search_sweep: Annotated[bool | None, typer.Option(
        "--search-sweep/--no-search-sweep", show_default=False,
        help="Where the target can, each trial builds once and sweeps its search-time "
             "knobs, timing the cheapest setting per quality level; "
             "every setting is stored as a trial of its own, outside the --trials budget, "
             "which then counts the sampled configs. Off (the default): every knob is "
             "sampled, one setting per trial. Fixed by the study when it is created.")] = None,
    paired_repeats: Annotated[int | None, typer.Option(
        min=0, max=50, help="After the search, measure the best config and the engine default "
        "this many times each, interleaved, and report their paired comparison (0: off; else "
        "at least 3). Default $ADVISOR_PAIRED_REPEATS or 3; kept by the study (a value given "
        "with --resume changes it).")] = None,
    failure_gate: Annotated[bool | None, typer.Option(
        "--failure-gate/--no-failure-gate",
        help="Skip a sampled config that the failure model, learnt from every stored trial of "
             "the target, predicts to fail (refused or crashed start, OOM, hang): it is stored "
             "as failed (predicted_failure) with the reason, and no engine starts. The engine "
             "default and --enqueue / warm-start configs always run. On by default; recorded "
             "with the study (--resume keeps it unless given).")] = None,
    failure_threshold: Annotated[float | None, typer.Option(
        callback=lambda v: probability(v),
        help=f"Failure probability at or above which the gate skips a config (default "
             f"{DEFAULT_THRESHOLD:g}, chosen for held-out precision; `advisor knowledge eval "
             "--failures`).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Run a tuning study: search the target's knobs against an SLO on this machine.

    Every trial runs in its own process (a crash, hang or rejected config fails only that
    trial) and is stored, failed ones included. SIGTERM stops the study as Ctrl-C does: the
    running trial is stopped and recorded as interrupted, and `--resume` re-queues its config.
    """
    from advisor.study_request import StudyRequest, plan_study

    if timeout is not None:
        if trial_timeout is not None:
            raise AdvisorError("give --trial-timeout only (--timeout is its deprecated alias)")
        err.print("[yellow]--timeout is deprecated[/yellow]: it limits each trial, so it is now "
                  "--trial-timeout", soft_wrap=True)
        trial_timeout = timeout
    if model_config is not None:  # before the shape is read and named: some targets take no model
        check_takes_model(get_target(target), "--model-config")
    model = model_option(model, model_config)
    if model is not None:
        check_model(model)
    sigterm_interrupts()
    settings = cli_settings()
    updates: dict[str, Any] = {}
    if trial_timeout is not None:
        updates["trial_timeout_s"] = trial_timeout
    if memory_limit_mb is not None:
        updates["trial_memory_limit_mb"] = memory_limit_mb
    settings = settings.model_copy(update=updates)
    params = [*(workload_param or []), *([f"model={model}"] if model else [])]
    # Opened once the request itself passed its checks: bad input opens no store.
    open_store = functools.cache(functools.partial(cli_store, settings))
    plan = plan_study(StudyRequest(
        target=target, slo=slo, objective=objective, workload=workload,
        workload_params=workload_overrides(params), trials=trials, sampler=sampler, seed=seed,
        startup_trials=startup_trials, include_default=include_default,
        enqueued=parse_enqueued(enqueue or []), paired_repeats=paired_repeats,
        search_sweep=search_sweep, failure_gate=failure_gate,
        failure_threshold=failure_threshold, also_rates=tuple(also_rate or ()),
        warm_start=warm_start, name=name, resume=resume, door=CLI_DOOR), open_store)
    store = open_store()
    # The engines (optuna, the warm start's planner) load only for a request that will run.
    from advisor.driver import StudyDriver
    from advisor.warm_start import pending_warm_start, warm_start_hook

    spec = plan.spec
    for line in plan.changes:  # a resume's explicit changes, one line each
        err.print(line)
    repeats = settings.paired_repeats if spec.paired_repeats is None else spec.paired_repeats
    reporter = _ProgressReporter(spec.objective, spec.slo.metrics, repeats)
    driver = StudyDriver(store, settings, reporter)
    reporter.tally_of = driver.tally
    try:
        if plan.resume:
            result = driver.resume(spec.name, plan.search_trials, paired_repeats=paired_repeats,
                                   failure_gate=failure_gate,
                                   failure_threshold=failure_threshold,
                                   on_opened=pending_warm_start(driver))
        else:
            if resume:
                err.print(f"no study named {spec.name!r} yet: starting it")
            result = driver.run(spec, on_created=warm_start_hook(driver, spec)
                                if spec.warm_start else None)
    except KeyboardInterrupt:
        reporter.progress.stop()
        hint = resume_hint(store, spec.target, spec.name, trial_timeout, memory_limit_mb)
        err.print(f"[yellow]interrupted[/yellow]; continue with: {escape(hint)}", soft_wrap=True)
        raise typer.Exit(130) from None
    _print_result(result, as_json)


def resume_hint(store: TrialStore, target: str, name: str, trial_timeout: float | None,
                memory_limit_mb: int | None, argv: Sequence[str] | None = None) -> str:
    """The shortest command that continues study ``name``: once the study exists it keeps its
    settings, so its target, name and ``--resume`` say it all (plus the per-run limits given,
    which a study does not keep); before it exists, the command as given, with ``--resume``."""
    if store.get_study(name) is None:
        args = list(sys.argv[1:] if argv is None else argv)
        if "--name" not in args and not any(a.startswith("--name=") for a in args):
            args += ["--name", name]
        return shlex.join(["advisor", *args, *([] if "--resume" in args else ["--resume"])])
    args = ["advisor", "tune", "--target", target, "--name", name, "--resume"]
    if trial_timeout is not None:
        args += ["--trial-timeout", f"{trial_timeout:g}"]
    if memory_limit_mb is not None:
        args += ["--memory-limit-mb", str(memory_limit_mb)]
    return shlex.join(args)


class _ProgressReporter:
    """Draws the live progress bar (search trials against the search budget; the closing
    paired repeats on a bar of their own) and one line per finished trial."""

    def __init__(self, objective: Objective, slo_metrics: list[str], repeats: int) -> None:
        self.objective, self.slo_metrics, self.repeats = objective, slo_metrics, repeats
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[best]}"), TimeElapsedColumn(), console=err,
        )
        self.task: Any = None
        self.repeat_task: Any = None
        #: The study's trials against its budget (set by the command to the driver's).
        self.tally_of: Callable[[StudyRecord], BudgetTally] | None = None
        self.tally: BudgetTally | None = None

    def preparing(self, message: str) -> None:
        err.print(f"[dim]{escape(message)}[/dim]")

    def started(self, study: StudyRecord, done: int, total: int) -> None:
        from advisor.budget import BudgetTally

        self.tally = self.tally_of(study) if self.tally_of else BudgetTally(total, done)
        t = self.tally
        err.print(f"study [bold]{escape(study.name)}[/bold]: {study.target}, SLO {study.slo}, "
                  f"{self.objective}; {t.search_done}/{t.search_trials} search trials already "
                  f"done" + (f", {t.repeats_done} paired repeats" if t.repeats_done else ""))
        self.progress.start()
        self.task = self.progress.add_task("search trials", total=t.search_trials,
                                           completed=min(t.search_done, t.search_trials),
                                           best="best feasible: -")
        if t.repeats_done:
            self._repeat_bar(t.repeats_done)

    def _repeat_bar(self, done: int) -> None:
        total = max(done, 2 * self.repeats)
        if self.repeat_task is None:
            self.repeat_task = self.progress.add_task("paired repeats", total=total,
                                                      completed=done, best="")
        else:
            self.progress.update(self.repeat_task, completed=done, total=total)

    def trial_finished(self, trial: TrialRecord, done: int, best: TrialRecord | None) -> None:
        from advisor.budget import REPEAT, SKIP

        assert self.tally is not None
        kind = self.tally.add(trial)
        if trial.status == TrialStatus.COMPLETE:
            shown = [self.objective.metric, *self.slo_metrics]
            figures = ", ".join(f"{m}={fmt_value(trial.metrics.get(m))}"
                                for m in dict.fromkeys(shown))
            mark = "[green]meets SLO[/green]" if trial.feasible else "[yellow]misses SLO[/yellow]"
            line = f"#{trial.number:<3} {mark}  {figures}"
        else:
            line = f"#{trial.number:<3} [red]{trial.status}[/red] ({trial.error_type}): " \
                   f"{escape((trial.error or '').splitlines()[0][:100]) if trial.error else ''}"
        if kind == REPEAT:
            line += " [dim](paired repeat)[/dim]"
        elif kind == SKIP:
            line += " [dim](skipped by the failure gate: not charged to the budget)[/dim]"
        if (sweep := trial.details.get("search_sweep")) and sweep.get("measured", 1) > 1:
            # The other settings this trial's sweep measured are trials of their own.
            line += f" [dim](+{sweep['measured'] - 1} swept)[/dim]"
        self.progress.console.print(f"{line}  [dim]{escape(compact_config(trial.config))}[/dim]")
        best_text = (f"best feasible {self.objective.metric}: {fmt_value(best.objective_value)}"
                     f" (#{best.number})" if best else "best feasible: -")
        t = self.tally
        self.progress.update(self.task, completed=min(t.search_done, t.search_trials),
                             total=t.search_trials, best=best_text)
        if kind == REPEAT:
            self._repeat_bar(t.repeats_done)

    def finished(self, result: StudyResult) -> None:
        self.progress.stop()


def _print_result(result: StudyResult, as_json: bool) -> None:
    from advisor.pairing import PROVENANCE_KEY
    from knowledge.failures import PREDICTED_FAILURE

    study = result.study
    summary = {
        "study": study.name, "target": study.target, "slo": study.slo,
        "objective": f"{study.objective_direction}:{study.objective_metric}",
        "trials": len(result.trials),
        "sampled": sum(t.swept_from is None for t in result.trials),
        "swept": sum(t.swept_from is not None for t in result.trials),
        "complete": result.count(TrialStatus.COMPLETE), "failed": result.count(TrialStatus.FAILED),
        "interrupted": result.count(TrialStatus.INTERRUPTED), "meeting_slo": result.n_feasible,
        "best": _trial_json(result.best), "engine_default": _trial_json(result.default_trial),
        "hardware_key": study.hardware_key, "db_url_hint": "see --db-url / ADVISOR_DB_URL",
        "invalid": result.count(TrialStatus.INVALID),
        "paired_comparison": study.data_provenance.get(PROVENANCE_KEY),
        "failure_gate": study.data_provenance.get("failure_gate"),
        "predicted_failures": [t.number for t in result.trials
                               if t.error_type == PREDICTED_FAILURE],
        "budget": _budget_json(result.tally),
        "best_repeats": _best_repeats(result),
    }
    if result.co_measured:
        summary["co_measured"] = [_co_summary(co) for co in result.co_measured]
    if as_json:
        print_json(out, summary)
        return
    for co in result.co_measured:
        line = _co_summary(co)
        best = line["best"]
        metric = study.objective_metric
        tail = (f"; best {metric} {fmt_value(best['metrics'].get(metric))} "
                f"(trial #{best['number']})" if best else "")
        out.print(f"measured alongside: [bold]{line['study']}[/bold]: {line['complete']} "
                  f"measured, {line['meeting_slo']} met the SLO{tail}")
    swept = (f" ({summary['sampled']} sampled configs, {summary['swept']} more settings swept "
             "within them)" if summary["swept"] else "")
    out.print(f"\n[bold]{study.name}[/bold]: {summary['complete']} measured{swept}, "
              f"{summary['failed']} failed, {summary['interrupted']} interrupted; "
              f"{summary['meeting_slo']} met the SLO {study.slo}")
    if (tally := result.tally) is not None:
        parts = [f"search {tally.search_done}/{tally.search_trials} trials"]
        if tally.repeats_done:
            parts.append(f"{tally.repeats_done} closing paired repeats")
        out.print("budget: " + ", ".join(parts))
    skipped = [t.number for t in result.trials if t.error_type == PREDICTED_FAILURE]
    if skipped:
        charged = (f"; {tally.skipped_charged} past the free share of one per budgeted trial "
                   "were charged" if tally is not None and tally.skipped_charged else
                   ", not charged to the search budget")
        out.print(f"{len(skipped)} configs skipped: predicted to fail, never started{charged} "
                  f"(trials {', '.join(f'#{n}' for n in skipped)}; `advisor trials --study "
                  f"{study.name} --status failed` shows why)")
    if result.best is None:
        out.print("[yellow]No measured config met the SLO.[/yellow] Loosen the SLO, widen the "
                  "search (--trials), or check the failed trials with `advisor trials "
                  f"--study {study.name} --status failed`.")
        return
    slo_metrics = parse_slo(study.slo).metrics
    metrics = [m for m in dict.fromkeys([study.objective_metric, *slo_metrics, "p99_latency_ms"])
               if m in result.best.metrics]
    table = Table(title="best feasible search trial vs the engine's default (measured)")
    table.add_column("metric")
    table.add_column(f"best (search trial #{result.best.number})")
    repeats = _best_repeats(result)
    if repeats:
        table.add_column(f"its {repeats['n']} repeats: mean [{repeats['level']:.0%} interval]")
    if result.default_trial is not None:
        table.add_column(f"engine default (#{result.default_trial.number})")
    for m in metrics:
        row = [m, fmt_value(result.best.metrics.get(m))]
        if repeats:
            one = repeats["metrics"].get(m)
            row.append("-" if one is None else f"{fmt_value(one['mean'])} "
                       f"[{fmt_value(one['interval'][0])}, {fmt_value(one['interval'][1])}]")
        if result.default_trial is not None:
            row.append(fmt_value(result.default_trial.metrics.get(m)))
        table.add_row(*row)
    out.print(table)
    if (paired := paired_table(study.data_provenance.get(PROVENANCE_KEY))) is not None:
        out.print(paired)
    out.print(f"best config: [bold]{compact_config(result.best.config)}[/bold]")


def _co_summary(result: StudyResult) -> dict[str, Any]:
    return {"study": result.study.name, "workload": result.study.workload_spec,
            "complete": result.count(TrialStatus.COMPLETE),
            "failed": result.count(TrialStatus.FAILED),
            "invalid": result.count(TrialStatus.INVALID), "meeting_slo": result.n_feasible,
            "best": _trial_json(result.best)}


def _trial_json(t: TrialRecord | None) -> dict[str, Any] | None:
    if t is None:
        return None
    return {"trial_id": t.id, "number": t.number, "config": t.config, "metrics": t.metrics,
            "feasible": t.feasible, "status": t.status}



def _budget_json(tally: BudgetTally | None) -> dict[str, int] | None:
    if tally is None:
        return None
    return {"search_trials": tally.search_trials, "search_done": tally.search_done,
            "paired_repeats": tally.repeats_done, "skipped_free": tally.skipped_free,
            "skipped_charged": tally.skipped_charged}


#: Confidence level of the interval shown beside the best trial's repeats.
_LEVEL = 0.95


def _best_repeats(result: StudyResult) -> dict[str, Any] | None:
    """The closing paired repeats of the best search trial's config: per metric, their mean and
    a t interval of it (None when fewer than two were measured)."""
    from advisor.pairing import BEST, arm_of

    if result.best is None:
        return None
    same = [t for t in result.trials if t.status == TrialStatus.COMPLETE
            and arm_of(t.details) == BEST and t.config_hash == result.best.config_hash]
    if len(same) < 2:
        return None
    # scipy.special, not scipy.stats: t.ppf computes this same function (equal to the last bit
    # for df 1 to 200), and importing scipy.stats cost a finished tune half a CPU-second more.
    from scipy.special import stdtrit

    t_crit = float(stdtrit(len(same) - 1, 0.5 + _LEVEL / 2))
    metrics: dict[str, Any] = {}
    for m in result.best.metrics:
        values = [float(t.metrics[m]) for t in same if t.metrics.get(m) is not None]
        if len(values) != len(same):
            continue
        mean = statistics.fmean(values)
        half = t_crit * statistics.stdev(values) / math.sqrt(len(values))
        metrics[m] = {"mean": mean, "interval": [mean - half, mean + half]}
    return {"n": len(same), "level": _LEVEL, "trials": [t.number for t in same],
            "metrics": metrics}

"""The ``advisor`` command line: targets, tune, studies, trials, recommend, serve, worker.

Errors the advisor raises on purpose are printed as one line (exit code 2); ``--debug`` shows the
traceback. Human output goes through rich; ``--json`` gives machine-readable output.
"""

from __future__ import annotations

import contextlib
import gc
import gzip
import hashlib
import logging
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from advisor import __version__
from advisor.cheatsheet import build_cheatsheet
from advisor.cli_support import (
    choice,
    emit_table,
    is_help_request,
    one_line,
    positive,
    print_json,
    table_format,
    usage_message,
)
from advisor.cli_views import baseline_text, paired_table
from advisor.driver import (
    DEFAULT_SAMPLER,
    SAMPLERS,
    CoMeasured,
    StudyDriver,
    StudyResult,
    StudySpec,
)
from advisor.errors import AdvisorError, WorkloadError
from advisor.evaluation import audit_store_trials
from advisor.failure_gate import check_threshold, evaluate_store
from advisor.headroom import Headroom
from advisor.inputs import MAX_TRIALS, check_numbers, check_study_name, requested_slo
from advisor.model_config import check_takes_model, describe, shape_option
from advisor.objective import Objective
from advisor.pairing import PROVENANCE_KEY
from advisor.presets import check_model, known_model, resolve_workload
from advisor.recommend import (
    ModelRecommendation,
    PredictedMetric,
    Recommendation,
    RecommendationQuery,
    recommend,
    recommend_measured,
    trial_model,
)
from advisor.recommend_shape import (
    ShapeRecommendation,
    answer_unmeasured_shape,
    shape_answer_lines,
)
from advisor.samplers import MAX_STARTUP, STARTUP_TRIALS
from advisor.settings import Settings, default_db_url
from advisor.warm_start import BEST_KNOWN, warm_start_hook
from knowledge import StudyRecord, TrialFilter, TrialRecord, TrialStatus, TrialStore
from knowledge.cache import KnowledgeModels, ModelCache
from knowledge.failures import DEFAULT_FAMILY as FAILURE_FAMILY
from knowledge.failures import DEFAULT_THRESHOLD, PREDICTED_FAILURE
from knowledge.failures import FAMILIES as FAILURE_FAMILIES
from knowledge.surrogate import (
    DEFAULT_FAMILY,
    FAMILIES,
    GROUP_BY,
    SCORE_ON,
    cross_validate,
    workload_features,
)
from knowledge.transfer import export_jsonl, import_file, import_jsonl, import_shipped_knowledge
from knowledge.validity import invalid_reason, validity_of
from objectives import parse_slo
from objectives.hardware import hardware_key
from objectives.llm.models import MODEL_SHAPES
from objectives.llm.shapes import ShapeFeatures
from objectives.llm.workload import KIND as LLM_KIND
from objectives.llm.workload import at_rate
from objectives.registry import TARGETS, get_target, target_names
from objectives.target import Target
from objectives.workload import Workload

__all__ = ["app", "main"]

log = logging.getLogger(__name__)
#: ``--target`` in --help: the built-in targets (out-of-tree ones are accepted too).
_TARGETS = "|".join(sorted(TARGETS))
_MODELS = "|".join([*MODEL_SHAPES, "DIR"])
_MODEL_CONFIG_HELP = (
    "LLM targets: a Hugging Face config.json (a path, or KEY=VALUE,... fields) of a dense "
    "Llama, Mistral or Qwen2 decoder, served with random weights under the shape's name (a "
    "built-in name, else one spelling the shape out). With --model, both must name one shape.")
_WIDE_HELP = "One line per row, however wide (for wide terminals or `less -S`)."
_CSV_HELP = "Comma-separated values with a header row (wins over --wide)."
_LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
app = typer.Typer(
    name="advisor",
    help="SLO-driven tuning advisor for LLM, RAG and vector-search serving.\n\n"
         "Tune real engines against a latency SLO, store every trial, and get back the config "
         "that meets the SLO with the most headroom.",
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)


class _State:
    debug = False
    db_url: str | None = None


def _settings() -> Settings:
    settings = Settings()
    if _State.db_url:
        settings = settings.model_copy(update={"db_url": _State.db_url})
    return settings


def _store(settings: Settings | None = None) -> TrialStore:
    settings = settings or _settings()
    store = TrialStore(settings.db_url, create_dir=settings.db_url == default_db_url())
    if settings.import_shipped:
        for name, summary in import_shipped_knowledge(store).items():
            log.info("imported shipped knowledge %s: %d trials", name, summary.trials_imported)
    return store


def _print_version(value: bool) -> None:
    """``--version``: eager, so it answers before click asks for a command."""
    if value:
        out.print(f"slo-advisor {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _global(
    db_url: Annotated[str | None, typer.Option(
        "--db-url", help="SQLAlchemy URL of the trial store (default: $ADVISOR_DB_URL, else a "
                         "SQLite file in your user data dir).")] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks and debug logs.")] = False,
    version: Annotated[bool, typer.Option(
        "--version", is_eager=True, callback=_print_version,
        help="Print the version and exit.")] = False,
) -> None:
    _State.debug, _State.db_url = debug, db_url
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")


# targets -------------------------------------------------------------------------------------


def _miss(margin: float) -> str:
    """A relative SLO miss for people: a percentage, or "over 100x" once the bound is so far off
    (a doubled interval on a log scale) that the digits would mean nothing."""
    return f"{margin:.1%}" if margin < 100 else "over 100x"


def _knob_range(knob: Any) -> str:
    if knob.type == "categorical":
        return ", ".join(map(str, knob.choices))
    if knob.type == "bool":
        return "true, false"
    text = f"{knob.low:g} .. {knob.high:g}" + (" (log)" if knob.log else "")
    return text + (f", <= {knob.high_from}" if knob.high_from else "")


@app.command("targets")
def targets_cmd(
    wide: Annotated[bool, typer.Option("--wide", help=_WIDE_HELP)] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """List the targets (engines) you can tune and their knobs."""
    data: list[dict[str, Any]] = []
    for name in target_names():
        target = get_target(name)
        space = target.space()
        data.append({
            "name": name, "engine": target.engine, "description": target.description,
            "default_objective": target.default_objective, "default_slo": target.default_slo,
            "workloads": sorted(target.named_workloads()),
            "knobs": [{
                "name": k.name, "type": k.type, "range": _knob_range(k), "default": k.default,
                "unit": k.unit, "stage": k.stage, "flag": k.flag_for(None),
                "when": {n: list(v) for n, v in k.when.items()}, "help": k.help,
            } for k in space],
        })
    if as_json:
        print_json(out, data)
        return
    for t in data:
        out.print(f"[bold]{t['name']}[/bold] ({t['engine']}): {t['description']}")
        out.print(f"  default objective: {t['default_objective']}   default SLO: "
                  f"{t['default_slo']}   workloads: {', '.join(t['workloads'])}")
        table = Table(show_edge=False, pad_edge=False)
        for col_name in ("knob", "type", "range / choices", "default", "unit", "engine flag",
                         "applies when"):
            table.add_column(col_name, overflow="fold")
        rows = [[k["name"], k["type"], k["range"], str(k["default"]), k["unit"], k["flag"] or "",
                 "; ".join(f"{n} in {', '.join(map(str, v))}" for n, v in k["when"].items())]
                for k in t["knobs"]]
        emit_table(out, table, rows, table_format(wide, False))
        out.print()


# tune ----------------------------------------------------------------------------------------


def _resolve_workload(target: Target, workload: str | None, params: Sequence[str]) -> Workload:
    overrides: dict[str, Any] = {}
    for item in params:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise WorkloadError(f"--workload-param expects KEY=VALUE, got {item!r}")
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            why = " ".join(str(exc).split())  # YAML's messages span lines; errors are one line
            raise WorkloadError(f"--workload-param {key.strip()}: not a YAML value ({why})"
                                ) from None
        overrides[key.strip()] = check_numbers(parsed, f"--workload-param {key.strip()}")
    return resolve_workload(target, workload, overrides)


def _default_study_name(target: str, wl: Workload, slo: str, objective: str) -> str:
    digest = hashlib.sha256(f"{wl.spec_hash}|{slo}|{objective}".encode()).hexdigest()[:6]
    return f"{target}-{wl.name}-{digest}"


class _ProgressReporter:
    """Draws the live progress bar and one line per finished trial."""

    def __init__(self, objective: Objective, slo_metrics: list[str]) -> None:
        self.objective, self.slo_metrics = objective, slo_metrics
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[best]}"), TimeElapsedColumn(), console=err,
        )
        self.task: Any = None

    def preparing(self, message: str) -> None:
        err.print(f"[dim]{message}[/dim]")

    def started(self, study: StudyRecord, done: int, total: int) -> None:
        err.print(f"study [bold]{study.name}[/bold]: {study.target}, SLO {study.slo}, "
                  f"{self.objective}; {done}/{total} trials already done")
        self.progress.start()
        self.task = self.progress.add_task("trials", total=total, completed=done,
                                           best="best feasible: -")

    def trial_finished(self, trial: TrialRecord, done: int, best: TrialRecord | None) -> None:
        if trial.status == TrialStatus.COMPLETE:
            shown = [self.objective.metric, *self.slo_metrics]
            figures = ", ".join(f"{m}={_fmt(trial.metrics.get(m))}" for m in dict.fromkeys(shown))
            mark = "[green]meets SLO[/green]" if trial.feasible else "[yellow]misses SLO[/yellow]"
            line = f"#{trial.number:<3} {mark}  {figures}"
        else:
            line = f"#{trial.number:<3} [red]{trial.status}[/red] ({trial.error_type}): " \
                   f"{(trial.error or '').splitlines()[0][:100] if trial.error else ''}"
        if (sweep := trial.details.get("search_sweep")) and sweep.get("measured", 1) > 1:
            # The other settings this trial's sweep measured are trials of their own.
            line += f" [dim](+{sweep['measured'] - 1} swept)[/dim]"
        self.progress.console.print(f"{line}  [dim]{_compact(trial.config)}[/dim]")
        best_text = (f"best feasible {self.objective.metric}: {_fmt(best.objective_value)}"
                     if best else "best feasible: -")
        # The paired re-measurement after the search grows the budget: so does the bar.
        total = max(done, int(self.progress.tasks[0].total or 0)) if self.progress.tasks else done
        self.progress.update(self.task, completed=done, total=total, best=best_text)

    def finished(self, result: StudyResult) -> None:
        self.progress.stop()


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    return str(value)


def _held_out_kind(basis: str) -> str:
    """What a model-quality row held out, from its ``basis`` (empty: the surrogates')."""
    if "from the knobs" in basis:
        return "configs (curve from knobs)"
    return "rates (load curve)" if basis else "configs (surrogate)"


def _compact(config: dict[str, Any]) -> str:
    return " ".join(f"{k}={_fmt(v)}" for k, v in config.items())


@app.command("tune")
def tune_cmd(
    target: Annotated[str, typer.Option(help="Target engine to tune (see `advisor targets`).",
                                        metavar=_TARGETS)] = "faiss",
    slo: Annotated[str | None, typer.Option(
        help='SLO to meet, e.g. "p95_latency_ms<=1,recall_at_10>=0.95". Default: the target\'s.'
    )] = None,
    objective: Annotated[str | None, typer.Option(
        help='What to optimise subject to the SLO, e.g. "maximize:qps" or '
             '"minimize:p99_latency_ms". Default: the target\'s.')] = None,
    trials: Annotated[int, typer.Option(min=1, max=MAX_TRIALS,
                                        help="Trials to finish (failed ones count).")] = 30,
    name: Annotated[str | None, typer.Option(callback=one_line,
        help="Study name (default: derived from target, workload, SLO and objective, so rerunning "
             "the same command with --resume continues it).")] = None,
    resume: Annotated[bool, typer.Option(
        help="Continue the study if it exists (recovering trials a killed run left behind) and "
             "run until --trials have finished; start it if it does not exist yet.")] = False,
    workload: Annotated[str | None, typer.Option(
        help="Workload preset name or a YAML/JSON workload file (default: the target's).")] = None,
    model: Annotated[str | None, typer.Option(callback=one_line,
        help="LLM targets: a model shape (random weights) or a local model directory. Sets the "
             "workload's `model`.", metavar=_MODELS)] = None,
    model_config: Annotated[str | None, typer.Option("--model-config", callback=one_line,
        help=_MODEL_CONFIG_HELP, metavar="PATH|KEY=VALUE,...")] = None,
    workload_param: Annotated[list[str] | None, typer.Option(
        "--workload-param", help="Override one workload parameter, KEY=VALUE (repeatable), e.g. "
                                 "n_base=5000.")] = None,
    sampler: Annotated[str, typer.Option(help="Search algorithm.", **choice(SAMPLERS))
                       ] = DEFAULT_SAMPLER,
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
        "YAML/JSON mapping of knobs, e.g. '{max_num_seqs: 256, enable_chunked_prefill: false}', "
        "or @FILE holding a mapping or a list of them. Knobs left out keep the engine default, so "
        "one knob per --enqueue ablates the default one knob at a time.")] = None,
    warm_start: Annotated[bool, typer.Option(
        help="Warm start a new study: after the engine default and --enqueue configs, measure "
             "the recommender's config for its SLO, workload and hardware, the "
             f"{BEST_KNOWN} best stored configs meeting the SLO there, and the target's "
             "textbook starting points (faiss: HNSW32/16, IVF sqrt(N)). They count towards "
             "--trials and the sampler's random start-up; --resume never adds them.")] = True,
    search_sweep: Annotated[bool, typer.Option(
        help="Where the target can (faiss: nprobe, efSearch), each trial builds once and "
             "sweeps the search-time knobs, timing the cheapest setting per quality level; "
             "every setting is stored as a trial of its own, outside the --trials budget, "
             "which then counts the sampled configs. Off (the default): every knob is "
             "sampled, one setting per trial. Fixed by the study when it is created.")] = False,
    paired_repeats: Annotated[int | None, typer.Option(
        min=0, max=50, help="After the search, measure the best config and the engine default "
        "this many times each, interleaved, and report their paired comparison (0: off; else "
        "at least 3). Default $ADVISOR_PAIRED_REPEATS or 3.")] = None,
    failure_gate: Annotated[bool | None, typer.Option(
        "--failure-gate/--no-failure-gate",
        help="Skip a sampled config that the failure model, learnt from every stored trial of "
             "the target, predicts to fail (refused or crashed start, OOM, hang): it is stored "
             "as failed (predicted_failure) with the reason, and no engine starts. The engine "
             "default and --enqueue / warm-start configs always run. On by default; recorded "
             "with the study (--resume keeps it unless given).")] = None,
    failure_threshold: Annotated[float | None, typer.Option(
        callback=lambda v: _probability(v),
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
    if timeout is not None:
        if trial_timeout is not None:
            raise AdvisorError("give --trial-timeout only (--timeout is its deprecated alias)")
        err.print("[yellow]--timeout is deprecated[/yellow]: it limits each trial, so it is now "
                  "--trial-timeout", soft_wrap=True)
        trial_timeout = timeout
    if model_config is not None:  # before the shape is read and named: faiss takes no model
        check_takes_model(get_target(target), "--model-config")
    model = _model_option(model, model_config)
    if model is not None:
        check_model(model)
    _sigterm_interrupts()
    settings = _settings()
    updates: dict[str, Any] = {}
    if trial_timeout is not None:
        updates["trial_timeout_s"] = trial_timeout
    if memory_limit_mb is not None:
        updates["trial_memory_limit_mb"] = memory_limit_mb
    settings = settings.model_copy(update=updates)
    tgt = get_target(target)
    slo_obj = requested_slo(slo or tgt.default_slo)
    obj = Objective.parse(objective or tgt.default_objective)
    params = [*(workload_param or []), *([f"model={model}"] if model else [])]
    wl = _resolve_workload(tgt, workload, params)
    study_name = name or _default_study_name(target, wl, str(slo_obj), str(obj))
    co_measured = _co_measured(study_name, wl, also_rate or [])
    store = _store(settings)
    reporter = _ProgressReporter(obj, slo_obj.metrics)
    driver = StudyDriver(store, settings, reporter)
    try:
        if name and store.get_study(name) is None:  # a new study's name: the API's rule
            check_study_name(name)
        stored = store.get_study(study_name) if resume else None
        if stored is not None:
            if slo or objective or workload or params:
                _check_same(stored, str(slo_obj), obj, wl, target)
            stored_co = stored.data_provenance.get("co_measured_studies", [])
            if also_rate and [c.name for c in co_measured] != stored_co:
                raise AdvisorError(f"--resume of study {study_name!r} with other --also-rate "
                                   f"values: it is measured with {stored_co or 'no other study'}")
            if enqueue or startup_trials is not None:
                flag = "--enqueue" if enqueue else "--startup-trials"
                raise AdvisorError(f"{flag} applies when a study starts; study {study_name!r} "
                                   "exists (start a new one with another --name)")
            result = driver.resume(study_name, trials, paired_repeats=paired_repeats,
                                   failure_gate=failure_gate,
                                   failure_threshold=failure_threshold)
        else:
            if resume:
                err.print(f"no study named {study_name!r} yet: starting it")
            spec = StudySpec(
                name=study_name, target=target, slo=slo_obj, objective=obj, workload=wl,
                n_trials=trials, sampler=sampler, seed=seed, startup_trials=startup_trials,
                include_default=include_default,
                co_measured=co_measured, enqueued=_enqueued(enqueue or []),
                paired_repeats=paired_repeats, search_sweep=search_sweep,
                failure_gate=True if failure_gate is None else failure_gate,
                failure_threshold=failure_threshold)
            result = driver.run(spec, on_created=warm_start_hook(driver, spec) if warm_start
                                else None)
    except KeyboardInterrupt:
        reporter.progress.stop()
        err.print(f"[yellow]interrupted[/yellow]; continue with: advisor tune --target {target} "
                  f"--name {study_name} --resume")
        raise typer.Exit(130) from None
    _print_result(result, as_json)


def _probability(value: float | None) -> float | None:
    """Option callback: a failure threshold is a probability in (0, 1]."""
    if value is not None:
        try:
            check_threshold(value)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
    return value


def _co_measured(study_name: str, wl: Workload, rates: list[float]) -> tuple[CoMeasured, ...]:
    """The studies ``--also-rate`` asks for: ``wl`` at each rate, named ``<study>@<rate>rps``."""
    if not rates:
        return ()
    if wl.kind != LLM_KIND:
        raise AdvisorError(f"--also-rate needs an {LLM_KIND!r} workload (an LLM serving "
                           f"target), but workload {wl.name!r} is of kind {wl.kind!r}")
    if len(set(rates)) != len(rates):
        raise AdvisorError(f"--also-rate values must differ, got {rates}")
    return tuple(CoMeasured(f"{study_name}@{rate:g}rps", at_rate(wl, rate, seed_offset=i + 1))
                 for i, rate in enumerate(rates))


def _check_same(stored: StudyRecord, slo: str, obj: Objective, wl: Workload, target: str) -> None:
    diffs = []
    if stored.target != target:
        diffs.append(f"target {stored.target!r} != {target!r}")
    if stored.slo != slo:
        diffs.append(f"SLO {stored.slo!r} != {slo!r}")
    if (stored.objective_metric, stored.objective_direction) != (obj.metric, obj.direction):
        diffs.append(f"objective {stored.objective_direction}:{stored.objective_metric} != {obj}")
    if stored.workload_hash != wl.spec_hash:
        diffs.append("the workload differs")
    if diffs:
        raise AdvisorError(f"--resume of study {stored.name!r} with different settings: "
                           f"{'; '.join(diffs)}. Resume with the original options, or start a "
                           "new study with another --name")


def _enqueued(values: Sequence[str]) -> tuple[dict[str, Any], ...]:
    """``--enqueue`` values as knob mappings: inline YAML/JSON, or @FILE with one or a list."""
    configs: list[dict[str, Any]] = []
    for value in values:
        where = f"--enqueue {value!r}"
        text = value
        if value.startswith("@"):
            path = Path(value[1:]).expanduser()
            try:
                text = path.read_text()
            except OSError as exc:
                raise AdvisorError(f"{where}: cannot read {path}: {exc.strerror or exc}") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise AdvisorError(f"{where}: not YAML/JSON: {exc}") from None
        items = data if isinstance(data, list) else [data]
        for item in items:
            if not isinstance(item, dict) or not item or not all(isinstance(k, str) for k in item):
                raise AdvisorError(f"{where}: expected a mapping of knob names to values, e.g. "
                                   "'{max_num_seqs: 256}'")
            configs.append(item)
    return tuple(configs)


def _sigterm_interrupts() -> None:
    """Make SIGTERM (a scheduler's or a deadline's stop) raise KeyboardInterrupt in the main
    thread, so a study stopped that way records its running trial as interrupted instead of
    leaving it "running" until the next `--resume`."""
    if threading.current_thread() is not threading.main_thread():
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, interrupt)


def _print_result(result: StudyResult, as_json: bool) -> None:
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
        tail = (f"; best {metric} {_fmt(best['metrics'].get(metric))} (trial #{best['number']})"
                if best else "")
        out.print(f"measured alongside: [bold]{line['study']}[/bold]: {line['complete']} "
                  f"measured, {line['meeting_slo']} met the SLO{tail}")
    swept = (f" ({summary['sampled']} sampled configs, {summary['swept']} more settings swept "
             "within them)" if summary["swept"] else "")
    out.print(f"\n[bold]{study.name}[/bold]: {summary['complete']} measured{swept}, "
              f"{summary['failed']} failed, {summary['interrupted']} interrupted; "
              f"{summary['meeting_slo']} met the SLO {study.slo}")
    skipped = [t.number for t in result.trials if t.error_type == PREDICTED_FAILURE]
    if skipped:
        out.print(f"{len(skipped)} of the failed were predicted to fail and never started "
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
    table = Table(title="best feasible trial vs the engine's default (measured)")
    table.add_column("metric")
    table.add_column(f"best (#{result.best.number})")
    if result.default_trial is not None:
        table.add_column(f"engine default (#{result.default_trial.number})")
    for m in metrics:
        row = [m, _fmt(result.best.metrics.get(m))]
        if result.default_trial is not None:
            row.append(_fmt(result.default_trial.metrics.get(m)))
        table.add_row(*row)
    out.print(table)
    if (paired := paired_table(study.data_provenance.get(PROVENANCE_KEY))) is not None:
        out.print(paired)
    out.print(f"best config: [bold]{_compact(result.best.config)}[/bold]")


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


# studies / trials ----------------------------------------------------------------------------


@app.command("studies")
def studies_cmd(
    target: Annotated[str | None, typer.Option(help="Only studies of this target.")] = None,
    wide: Annotated[bool, typer.Option("--wide", help=_WIDE_HELP)] = False,
    as_csv: Annotated[bool, typer.Option("--csv", help=_CSV_HELP)] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """List stored studies with their trial counts."""
    store = _store()
    rows: list[dict[str, Any]] = []
    for s in store.list_studies(target):
        trials = store.trials_of_study(s.id or 0)
        rows.append({
            "id": s.id, "name": s.name, "target": s.target, "slo": s.slo,
            "objective": f"{s.objective_direction}:{s.objective_metric}", "status": s.status,
            "trials": len(trials), "requested": s.n_trials,
            "swept": sum(t.swept_from is not None for t in trials),
            "complete": sum(t.status == TrialStatus.COMPLETE for t in trials),
            "failed": sum(t.status == TrialStatus.FAILED for t in trials),
            "hardware_key": s.hardware_key, "created_at": s.created_at.isoformat(),
        })
    if as_json:
        print_json(out, rows)
        return
    table = Table()
    for c in ("id", "name", "target", "status", "trials", "complete", "failed", "SLO",
              "objective", "hardware"):
        table.add_column(c, overflow="fold")
    emit_table(out, table, [
        [str(r["id"]), r["name"], r["target"], r["status"], f"{r['trials']}/{r['requested']}",
         str(r["complete"]), str(r["failed"]), r["slo"], r["objective"], r["hardware_key"]]
        for r in rows], table_format(wide, as_csv))


@app.command("trials")
def trials_cmd(
    target: Annotated[str | None, typer.Option(help="Only trials of this target.")] = None,
    study: Annotated[str | None, typer.Option(help="Only trials of this study (name).")] = None,
    status: Annotated[str | None, typer.Option(
        help="Only trials in this state.", **choice(TrialStatus.ALL))] = None,
    feasible: Annotated[bool | None, typer.Option(
        "--feasible/--infeasible", help="Only trials that met / missed their study's SLO.",
        show_default=False)] = None,
    hardware: Annotated[str | None, typer.Option(callback=one_line,
        help="Only trials whose hardware key contains this text (e.g. h200, cpu).")] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many (newest).")] = 50,
    wide: Annotated[bool, typer.Option("--wide", help=_WIDE_HELP)] = False,
    as_csv: Annotated[bool, typer.Option("--csv", help=_CSV_HELP)] = False,
    as_json: Annotated[bool, typer.Option("--json", help="All fields, as JSON.")] = False,
) -> None:
    """List stored trials (failed ones show their reason)."""
    store = _store()
    matching = store.list_trials(TrialFilter(target=target, study=study, status=status,
                                             feasible=feasible, hardware_key=hardware))
    rows = matching[-limit:]
    if len(rows) < len(matching):
        err.print(f"showing the newest {len(rows)} of {len(matching)} matching trials; "
                  f"--limit {len(matching)} shows them all")
    if as_json:
        print_json(out, [r.model_dump(mode="json") for r in rows])
        return
    if not rows and not as_csv:
        out.print("no trials match")
        return
    studies = {s.id: s for s in store.list_studies()}
    # Validity labels come from targets that check themselves (LLM serving): a column then.
    labelled = any(validity_of(r.details) for r in rows)
    table = Table()
    for c in ("id", "study", "#", "status", *(["validity"] if labelled else []), "SLO",
              "objective", "metrics", "config / error"):
        # Short columns never wrap; the long ones wrap at spaces (fold only what has none).
        table.add_column(c, no_wrap=c in ("id", "#", "status", "SLO", "objective"),
                         overflow="fold")
    cells: list[list[str]] = []
    for r in rows:
        s = studies.get(r.study_id)
        slo_metrics = parse_slo(s.slo).metrics if s else []
        shown = {m: r.metrics.get(m) for m in slo_metrics if m in r.metrics}
        metrics = " ".join(f"{k}={_fmt(v)}" for k, v in shown.items())
        tail = _compact(r.config) if r.status in TrialStatus.MEASURED else \
            f"{r.error_type}: {(r.error or '').splitlines()[0][:120] if r.error else ''}"
        slo_mark = "-" if r.status == TrialStatus.INVALID else \
            {True: "met", False: "missed", None: "-"}[r.feasible]
        validity = [invalid_reason(r.details) or validity_of(r.details) or "-"] if labelled \
            else []
        cells.append([str(r.id), s.name if s else "?", str(r.number), r.status, *validity,
                      slo_mark, _fmt(r.objective_value), metrics, tail])
    emit_table(out, table, cells, table_format(wide, as_csv))


# recommend -----------------------------------------------------------------------------------


def _models(settings: Settings, store: TrialStore, target: str | None = None
            ) -> KnowledgeModels:
    """The fitted models for ``store``: the all-target set `advisor knowledge fit` saved when it
    is current, else ``target``'s own set (fitted now when missing or stale)."""
    full = ModelCache(store, settings.cache_dir).peek()
    if full is not None:
        return full
    cache = ModelCache(store, settings.cache_dir, target=target,
                       shared_dir=settings.shared_model_dir)
    if cache.peek() is None:
        err.print("[dim]fitting the surrogate models on the stored trials first (`advisor "
                  "knowledge fit` does this ahead of time)[/dim]")
    return cache.get()


def _workload_query(rate_rps: float | None, prompt_len: float | None, output_len: float | None,
                    n_vectors: int | None, dim: int | None) -> dict[str, Any]:
    given = {"rate_rps": rate_rps, "prompt_len": prompt_len, "output_len": output_len,
             "n_vectors": n_vectors, "dim": dim}
    return {k: v for k, v in given.items() if v is not None}


def _model_option(model: str | None, model_config: str | None) -> str | None:
    """``--model`` / ``--model-config`` as the workload's ``model``; names the config's shape."""
    shape = shape_option(model, model_config)
    if shape is None:
        return model
    err.print(escape(f"--model-config {model_config}: {describe(shape)}"), highlight=False)
    return shape.name


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


@app.command("recommend")
def recommend_cmd(
    slo: Annotated[str, typer.Option(help='The SLO to meet, e.g. "p95_latency_ms<=1,'
                                          'recall_at_10>=0.95".')],
    target: Annotated[str, typer.Option(help="Target engine.", metavar=_TARGETS)] = "faiss",
    objective: Annotated[str | None, typer.Option(
        help="What to optimise among configs meeting the SLO (default: the target's).")] = None,
    hardware: Annotated[str, typer.Option(callback=one_line,
        help="Which hardware to answer for: 'this' (this machine), 'any', or (part of) a "
             "hardware key such as h200.")] = "this",
    model: Annotated[str | None, typer.Option(callback=one_line,
        help="LLM targets: the model shape (llama-3-8b, llama-3.2-1b, ...).")] = None,
    model_config: Annotated[str | None, typer.Option("--model-config", callback=one_line,
        help=_MODEL_CONFIG_HELP, metavar="PATH|KEY=VALUE,...")] = None,
    rate_rps: Annotated[float | None, typer.Option(
        help="LLM workload: Poisson arrival rate, requests/s.")] = None,
    prompt_len: Annotated[float | None, typer.Option(
        help="LLM workload: median prompt length, tokens.")] = None,
    output_len: Annotated[float | None, typer.Option(
        help="LLM workload: median output length, tokens.")] = None,
    n_vectors: Annotated[int | None, typer.Option(
        help="faiss workload: vectors in the index (corpus size N).")] = None,
    dim: Annotated[int | None, typer.Option(help="faiss workload: vector dimension.")] = None,
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
    settings = _settings()
    store = _store(settings)
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
    answer = recommend(store, query, models=_models(settings, store, target),
                       failure_cache_dir=settings.cache_dir)
    if as_json:
        print_json(out, answer.to_dict())
    else:
        _print_model_recommendation(answer, explain)
    if not answer.found:
        raise typer.Exit(1)


def _interval(p: PredictedMetric) -> str:
    return f"{_fmt(p.value)}  [{_fmt(p.low)} .. {_fmt(p.high)}]"


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
            misses = ", ".join(f"{k} (off by {_miss(v)})"
                               for k, v in rec.closest["conservative_slo_margins"].items()
                               if v > 0)
            out.print(f"Closest: {escape(_compact(rec.closest['config']))} misses {misses} "
                      "(conservative bound).")
        if rec.measured_alternative is not None:
            alt = rec.measured_alternative
            out.print(f"Measured evidence: trial {alt['trial_id']} met this SLO at this workload "
                      f"({escape(_compact(alt['config']))}); `--measured` answers from it.")
        _print_tune_command(rec.tune_command, "To cover this SLO", rec.model)
        if explain:
            _print_evidence(rec)
        return
    head = ("[bold green]Keep the defaults[/bold green]: the engine default"
            if rec.answer == "keep_defaults" else f"[bold green]Recommended {rec.target} "
            "config[/bold green]")
    out.print(f"{head} for {rec.slo} ({rec.objective}) on {where}"
              + (f", model {rec.model}" if rec.model else "") + ":")
    out.print(f"  {_compact(rec.config or {})}")
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
                   " ".join(f"{k}={_fmt(v)}" for k, v in e.metrics.items()),
                   _compact(e.config))
    out.print(ev)


def _print_recommendation(rec: Recommendation) -> None:
    where = rec.hardware_key or "any hardware"
    asked = f"{where}" + (f", model {rec.model}" if rec.model else "") + (
        f", workload {_features(rec.workload)}" if rec.workload else "")
    if rec.borrowed_workload is not None:
        bw = rec.borrowed_workload
        out.print(f"[yellow]No trial was measured at {_features(rec.workload)}[/yellow]; this "
                  f"answer borrows the nearest measured workload, {bw['name']} "
                  f"({_features(bw['features'])}, {bw['factor']:g}x away).", soft_wrap=True)
    if rec.trial is None:
        out.print(f"[yellow]No measured {rec.target} config meets {rec.slo}[/yellow] "
                  f"(on {asked}; {rec.considered} measured trials considered).", soft_wrap=True)
        if rec.reason:
            out.print(f"{escape(rec.reason[:1].upper() + rec.reason[1:])}.", soft_wrap=True)
        if rec.closest is not None:
            misses = ", ".join(f"{k} (off by {_miss(v)})" for k, v in rec.closest_margins.items()
                               if v > 0)
            out.print(f"Closest: trial {rec.closest.id} [{escape(_compact(rec.closest.config))}] "
                      f"misses {misses}.")
        _print_tune_command(rec.tune_command, "To cover this SLO")
        return
    t = rec.trial
    model = trial_model(t)
    head = ("[bold green]Keep the defaults[/bold green]: the engine default"
            if rec.answer == "keep_defaults" else f"[bold green]Recommended {rec.target} "
            "config[/bold green]")
    out.print(f"{head} for {rec.slo} ({rec.objective}), measured on {t.hardware_key}"
              + (f" with model {model}" if model else "") + ":")
    out.print(f"  {escape(_compact(t.config))}")
    if (versus := baseline_text(rec.baseline)) is not None:
        out.print(versus)
    features = workload_features(t.workload_spec)
    table = Table(title=f"measured (trial #{t.number} of study id {t.study_id}, trial id {t.id}, "
                        f"workload {t.workload_spec.get('name')}"
                        + (f" {_features(features)}" if features else "") + ")")
    table.add_column("metric")
    table.add_column("measured")
    table.add_column("SLO")
    table.add_column("headroom")
    if rec.default_trial is not None:
        table.add_column("engine default")
    bounds = {b.metric: b for b in rec.slo.bounds}
    for m in dict.fromkeys([rec.objective.metric, *rec.slo.metrics]):
        b = bounds.get(m)
        row = [m, _fmt(t.metrics.get(m)), f"{b.op} {b.threshold:g}" if b else "",
               f"{-rec.margins[str(b)]:.1%}" if b else ""]
        if rec.default_trial is not None:
            row.append(_fmt(rec.default_trial.metrics.get(m)))
        table.add_row(*row)
    out.print(table)
    _print_quality_headroom(rec.quality_headroom)
    out.print(f"Evidence: {rec.feasible_count} of {rec.considered} measured trials meet the SLO "
              f"on {asked}" + (" (at the borrowed workload)" if rec.borrowed_workload else "")
              + ".", soft_wrap=True)
    out.print("Launch:")
    out.print(rec.launch_command or "", markup=False, highlight=False, soft_wrap=True)


def _features(features: dict[str, float]) -> str:
    """``rate_rps=60 prompt_len=256``: workload features as a user types them."""
    return " ".join(f"{k}={v:g}" for k, v in features.items())


knowledge_app = typer.Typer(
    help="The knowledge base: fit and evaluate the surrogate models; move trials between stores "
         "(JSONL).", no_args_is_help=True)
app.add_typer(knowledge_app, name="knowledge")


@knowledge_app.command("export")
def knowledge_export_cmd(
    output: Annotated[Path | None, typer.Option("--output", "-o",
                                                help="File to write (default: stdout).")] = None,
    target: Annotated[str | None, typer.Option(help="Only trials of this target.")] = None,
    study: Annotated[str | None, typer.Option(help="Only trials of this study.")] = None,
    hardware: Annotated[str | None, typer.Option(callback=one_line,
        help="Only trials whose hardware key contains this text.")] = None,
) -> None:
    """Export trials (with their studies and SLO margins) as JSONL, one trial per line."""
    store = _store()
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
    store = _store()
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


# serve / worker ------------------------------------------------------------------------------

_LOOPBACK = {"127.0.0.1", "::1", "localhost"}


@app.command("serve")
def serve_cmd(
    host: Annotated[str, typer.Option(help="Address to bind (127.0.0.1: this machine only).")
                    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8000,
    worker: Annotated[bool, typer.Option(
        help="Start the job worker as a supervised child process (runs studies started with "
             "POST /v1/studies). --no-worker when `advisor worker` runs elsewhere.")] = True,
    dev_loopback: Annotated[bool, typer.Option(
        "--dev-loopback", help="Development only: with no API key configured, accept mutating "
                               "requests from this machine (refused unless --host is loopback).")
    ] = False,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.", **choice(_LOG_LEVELS))
                         ] = "info",
) -> None:
    """Serve the REST API (recommendations, cheat-sheet, studies, jobs) on the configured store.

    Mutating endpoints need an API key (ADVISOR_API_KEY or ADVISOR_API_KEY_FILE); without one
    they are refused. See docs/api.md.
    """
    import uvicorn

    from advisor.worker import WorkerSupervisor
    from api import create_app

    settings = _settings()
    if dev_loopback:
        settings = settings.model_copy(update={"api_dev_loopback": True})
    if settings.api_dev_loopback and host not in _LOOPBACK:
        raise AdvisorError(f"--dev-loopback (ADVISOR_API_DEV_LOOPBACK) is only allowed when bound "
                           f"to 127.0.0.1 or ::1, not {host!r}; configure ADVISOR_API_KEY instead")
    _store(settings).close()  # create tables and import the shipped knowledge before serving
    keys = settings.api_keys()
    mode = (f"{len(keys)} API key(s) configured" if keys else
            "no API key: mutating endpoints accept loopback clients only (--dev-loopback)"
            if settings.api_dev_loopback else
            "no API key configured: mutating endpoints are refused (set ADVISOR_API_KEY)")
    err.print(f"advisor serve on http://{host}:{port} ({mode}); API docs at /docs")
    api = create_app(settings)
    started = time.perf_counter()

    def ready(models: KnowledgeModels) -> None:
        err.print(f"knowledge models ready: {len(models.contexts)} contexts from "
                  f"{models.data.trials} trials ({time.perf_counter() - started:.1f} s)")
        # The models are a large, long-lived heap: keep them out of the garbage collector's
        # scans so its pauses do not land on request latencies.
        gc.collect()
        gc.freeze()

    # Fit (or load) in the background: /healthz answers at once, /readyz and the answers that
    # need the models say 503 (Retry-After) until they are ready.
    api.state.knowledge.warm_up(ready)
    supervisor = WorkerSupervisor(settings) if worker else None
    if supervisor is not None:
        supervisor.start()
    try:
        uvicorn.run(api, host=host, port=port, log_level=log_level,
                    access_log=False)
    finally:
        if supervisor is not None:
            supervisor.stop()


@app.command("dashboard")
def dashboard_cmd(
    host: Annotated[str, typer.Option(help="Address to bind (127.0.0.1: this machine only).")
                    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8080,
) -> None:
    """Open optuna-dashboard on the store: each study's SLO and the best trial that met it.

    Every study shows its SLO, objective and workload; every trial its SLO margins. Imported
    studies (shipped knowledge, `knowledge import`) get an Optuna study first, built from their
    stored trials, so they show too. Needs the `dashboard` extra.
    """
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    import optuna

    from advisor.dashboard import backfill_optuna_studies, dashboard_app
    from advisor.driver import optuna_storage

    settings = _settings()
    store = _store(settings)
    storage = optuna_storage(store.url)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    created = backfill_optuna_studies(store, storage)
    if created:
        err.print(f"built the Optuna studies of {created} imported studies (once per store)")
    wsgi_app = dashboard_app(storage)

    class _Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # one line per request: noise
            log.debug(format, *args)

    with make_server(host, port, wsgi_app, handler_class=_Quiet) as server:
        err.print(f"optuna-dashboard on http://{host}:{port}/dashboard (Ctrl-C stops it)")
        with contextlib.suppress(KeyboardInterrupt):
            server.serve_forever()


@app.command("worker")
def worker_cmd(
    once: Annotated[bool, typer.Option(
        "--once", help="Run the queued jobs, then exit instead of polling.")] = False,
) -> None:
    """Run studies queued over the REST API (POST /v1/studies), one at a time.

    `advisor serve` starts one for you; run it yourself with `advisor serve --no-worker`, e.g. on
    the machine whose hardware the studies should measure. SIGTERM cancels the running job's
    trial, records it, and exits.
    """
    import signal

    from advisor.worker import Worker

    settings = _settings()
    w = Worker(settings, _store(settings))
    signal.signal(signal.SIGTERM, lambda *_: w.stop())
    signal.signal(signal.SIGINT, lambda *_: w.stop())
    w.run_forever(stop_when_idle=once)


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
    settings = _settings()
    store = _store(settings)
    models = KnowledgeModels.fit(store, family=family, target=target)
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
        callback=lambda v: _probability(v),
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
        _print_failure_eval(_store(), target=target, family=failure_family,
                            threshold=failure_threshold or DEFAULT_THRESHOLD, folds=folds,
                            as_json=as_json)
        return
    if failure_threshold is not None or failure_family != FAILURE_FAMILY:
        raise AdvisorError("--failure-threshold and --failure-family apply with --failures only")
    if group_by == "shape":
        _print_shape_eval(_store(), target=target, metrics=metric, as_json=as_json)
        return
    store = _store()
    trials = store.list_trials(TrialFilter(target=target, status=TrialStatus.COMPLETE))
    from knowledge.cache import MIN_TRIALS
    from knowledge.surrogate import context_of

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


@app.command("cheatsheet")
def cheatsheet_cmd(
    fmt: Annotated[str, typer.Option("--format", help="Output format.",
                                     **choice(("md", "html", "json")))] = "md",
    output: Annotated[Path | None, typer.Option("--output", "-o",
                                                help="File to write (default: stdout).")] = None,
    target: Annotated[str | None, typer.Option(help="Only this target.")] = None,
    hardware: Annotated[str | None, typer.Option(callback=one_line,
        help="Only hardware keys containing this text (e.g. h200, cpu).")] = None,
    model: Annotated[str | None, typer.Option(callback=one_line,
                                              help="Only this model shape.")] = None,
    workload_class: Annotated[str | None, typer.Option(
        help="Only workload classes containing this text (e.g. chat, 'N=8000').")] = None,
    tier: Annotated[str | None, typer.Option(
        help="Only this tier.", **choice(("interactive", "standard", "throughput")))] = None,
) -> None:
    """The tuning cheat-sheet: recommended knob values per target x hardware x model x workload
    class x SLO tier, with predicted metrics, knob importance and fitted rules of thumb."""
    settings = _settings()
    store = _store(settings)
    sheet = build_cheatsheet(store, target=target, hardware=hardware, model=model,
                             workload_class=workload_class, tier=tier,
                             models=_models(settings, store, target))
    import json

    text = (sheet.to_markdown() if fmt == "md" else sheet.to_html() if fmt == "html"
            else json.dumps(sheet.to_dict(), indent=1, sort_keys=False))
    if output is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    else:
        output.write_text(text)
        err.print(f"wrote {output} ({len(sheet.rows)} rows, {len(sheet.sections)} contexts)")


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point: the one place where errors become exit codes.

    2: bad usage (typer's usage errors) or an error the advisor raises on purpose, each printed
    as one line on stderr (``--debug`` shows the traceback instead); 130: interrupted; other
    codes are the commands' own (``typer.Exit``).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    try:
        code = app(args=args, prog_name="advisor", standalone_mode=False)
    except AdvisorError as exc:
        if debug:
            raise
        _fail(str(exc))
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        err.print("aborted")
        sys.exit(130)
    except typer.TyperException as exc:  # typer's (vendored click) usage errors
        if debug:
            raise
        if is_help_request(exc):  # `advisor`, `advisor sweep`: no command given
            exc.show()  # type: ignore[attr-defined]
            sys.exit(2)
        _fail(usage_message(exc))

    if isinstance(code, int) and code:  # non-standalone click returns typer.Exit's code
        sys.exit(code)


def _fail(message: str) -> None:
    """Print ``error: message`` as one line on stderr (never wrapped) and exit 2."""
    err.print(f"[bold red]error:[/bold red] {escape(message)}", highlight=False, soft_wrap=True)
    sys.exit(2)


# Registered last: the sweep commands reuse this module's helpers.
from advisor.sweep_cli import sweep_app  # noqa: E402

app.add_typer(sweep_app, name="sweep")
from advisor.crosscheck_cli import crosscheck_cmd  # noqa: E402

app.command("crosscheck")(crosscheck_cmd)

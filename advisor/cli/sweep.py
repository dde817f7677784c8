"""`advisor sweep ...`: plan and run sweep files (nightly re-tuning), list runs, show reports.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from advisor.cli.context import choice, cli_settings, cli_store, err, out, sigterm_interrupts
from advisor.cli.render import fmt_value, print_json
from advisor.errors import AdvisorError
from advisor.sweeps.backend_names import BACKENDS

if TYPE_CHECKING:
    from advisor.sweeps.runner import CellResult, StudyBackend
    from advisor.sweeps.spec import CellSpec, SweepSpec
    from knowledge import StudyRecord, TrialRecord

__all__ = ["sweep_app"]

sweep_app = typer.Typer(help="Sweep files: re-tune a matrix of targets × models × workloads × SLO "
                             "tiers (nightly), with warm start, repeats and a drift report.",
                        no_args_is_help=True)


def _override(spec: SweepSpec, backend: str | None, workers: int | None,
              ray_address: str | None) -> SweepSpec:

    if backend is not None and backend not in BACKENDS:
        raise AdvisorError(f"--backend must be one of {BACKENDS}, got {backend!r}")
    ray = spec.ray if ray_address is None else dataclasses.replace(spec.ray, address=ray_address)
    return dataclasses.replace(spec, backend=backend or spec.backend,
                               workers=workers or spec.workers, ray=ray)


@sweep_app.command("plan")
def plan_cmd(
    file: Annotated[Path, typer.Argument(help="Sweep file (YAML).")],
    backend: Annotated[str | None, typer.Option(help="Where trials run (default: the file's).",
                                                **choice(BACKENDS))] = None,
    workers: Annotated[int | None, typer.Option(
        min=1, help="Trials at a time per cell (default: the file's `workers`).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Print the cells a sweep file would run and their estimated cost; runs nothing."""
    from advisor.sweeps.runner import SweepRunner
    from advisor.sweeps.spec import load_sweep

    spec = _override(load_sweep(file), backend, workers, None)
    settings = cli_settings()
    store = cli_store(settings)
    runner = SweepRunner(store, settings, spec, backend=_backend(spec, store, settings),
                         reporter=_Reporter(quiet=True))
    plans = runner.plan(spec.workers)
    total_s = sum(p.est_cell_s for p in plans)
    total_trials = sum(p.trials for p in plans)
    if as_json:
        print_json(out, {
            "sweep": spec.name, "backend": spec.backend, "workers": spec.workers,
            "cells": [{"cell": p.cell.key, "target": p.cell.target, "model": p.cell.model,
                       "workload": p.cell.workload.name, "tier": p.cell.tier,
                       "slo": str(p.cell.slo), "objective": str(p.cell.objective),
                       "trials": p.trials, "est_trial_s": round(p.est_trial_s, 1),
                       "estimate_basis": p.estimate_basis, "est_cell_s": round(p.est_cell_s)}
                      for p in plans],
            "trials": total_trials, "est_total_s": round(total_s),
            "gpu_hours": round(total_s * spec.workers * spec.ray.gpus_per_trial / 3600, 2)
            if spec.backend == "ray" else 0.0})
        return
    table = Table(title=f"sweep {spec.name}: {len(plans)} cells, backend {spec.backend}, "
                        f"{spec.workers} trial(s) at a time per cell")
    for c in ("cell", "SLO", "objective", "trials", "est. per trial", "est. cell", "basis"):
        table.add_column(c)
    for p in plans:
        table.add_row(p.cell.key, str(p.cell.slo), str(p.cell.objective), str(p.trials),
                      f"{p.est_trial_s:.0f} s", _duration(p.est_cell_s), p.estimate_basis)
    out.print(table)
    out.print(f"{total_trials} trials (budgets + repeats of the best and the previous best); "
              f"estimated {_duration(total_s)} in all (an estimate, not a measurement)")


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


@sweep_app.command("run")
def run_cmd(
    file: Annotated[Path, typer.Argument(help="Sweep file (YAML).")],
    backend: Annotated[str | None, typer.Option(help="Where trials run (default: the file's).",
                                                **choice(BACKENDS))] = None,
    workers: Annotated[int | None, typer.Option(
        min=1, help="Trials at a time per cell: worker processes (local) or concurrent Ray "
                    "trials (default: the file's `workers`).")] = None,
    ray_address: Annotated[str | None, typer.Option(
        help="Ray cluster to join, e.g. 127.0.0.1:6379 or auto (default: the file's "
             "`ray.address`, else a Ray instance started for this run).")] = None,
    new_run: Annotated[bool, typer.Option(
        "--new-run", help="Start a new run even if the latest one is unfinished (it is marked "
                          "abandoned). By default an unfinished run is resumed.")] = False,
    run_name: Annotated[str | None, typer.Option(
        help="Name of the run (default: <sweep>@<UTC date>, with .2, .3 ... when taken).")
                        ] = None,
    report_dir: Annotated[Path | None, typer.Option(
        help="Where to write summary.json and the rebuilt cheat-sheets (default: "
             "<cache dir>/sweeps/<run>).")] = None,
    refit: Annotated[bool, typer.Option(
        help="After the cells: refit the models and rebuild the cheat-sheet.")] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Run a sweep file: each cell is a warm-started study, then repeats of the best configs,
    a refit, the cheat-sheet and a drift report against the previous run.

    Exit code: 0 all cells ran and nothing regressed; 3 a cell's best config regressed beyond
    the measured noise; 4 a cell keeps failing; 5 both; 130 interrupted (rerun to resume).
    """
    from advisor.sweeps.runner import SweepRunner
    from advisor.sweeps.spec import load_sweep

    sigterm_interrupts()
    spec = _override(load_sweep(file), backend, workers, ray_address)
    settings = cli_settings()
    if spec.trial_timeout_s is not None:
        settings = settings.model_copy(update={"trial_timeout_s": spec.trial_timeout_s})
    store = cli_store(settings)
    reporter = _Reporter(quiet=as_json)
    backend_impl = _backend(spec, store, settings)
    runner = SweepRunner(store, settings, spec, backend=backend_impl, reporter=reporter,
                         refit=refit)
    try:
        run = runner.open_run(new=new_run, name=run_name)
        runner.report_dir = report_dir or settings.cache_dir / "sweeps" / run.name.replace(
            "@", "_")
        runner.report_dir.mkdir(parents=True, exist_ok=True)
        err.print(f"sweep [bold]{spec.name}[/bold] run [bold]{run.name}[/bold]: "
                  f"{len(spec.cells)} cells, backend {spec.backend}, {spec.workers} at a time")
        summary = runner.run(run)
    except KeyboardInterrupt:
        reporter.stop()
        err.print(f"[yellow]interrupted[/yellow]; rerun `advisor sweep run {file}` to resume")
        raise typer.Exit(130) from None
    finally:
        close = getattr(backend_impl, "close", None)
        if close is not None:
            close()
    reporter.stop()
    if as_json:
        print_json(out, summary)
    else:
        _print_summary(summary)
    raise typer.Exit(int(summary["exit_code"]))


def _backend(spec: SweepSpec, store: Any, settings: Any) -> StudyBackend:
    from advisor.sweeps.local import LocalBackend

    if spec.backend == "ray":
        from advisor.sweeps.ray_backend import RayBackend

        return RayBackend(store, settings, concurrency=spec.workers, options=spec.ray,
                          max_consecutive_failures=spec.max_consecutive_failures)
    return LocalBackend(store, settings, workers=spec.workers,
                        max_consecutive_failures=spec.max_consecutive_failures)


def _print_summary(summary: dict[str, Any]) -> None:
    table = Table(title=f"sweep run {summary['run']} (previous: {summary['previous_run'] or '-'})")
    for c in ("cell", "status", "trials", "met SLO", "best config", "drift"):
        table.add_column(c)
    for cell in summary["cells"]:
        counts = cell["counts"]
        drift = cell.get("drift") or {}
        moved = ", ".join(f"{m['metric']} {m['change']:+.0%} (bar {1 + m['threshold']:.3g}x "
                          "either way)"
                          for m in drift.get("metrics", []) if m["verdict"] != "steady")
        status = {"ok": "[green]ok[/green]"}.get(cell["status"], f"[red]{cell['status']}[/red]")
        best = cell.get("best") or {}
        table.add_row(cell["key"], status,
                      f"{counts.get('complete', 0)} ok / {counts.get('failed', 0)} failed"
                      + (f" / {counts['invalid']} invalid" if counts.get("invalid") else "")
                      if counts else "-", str(counts.get("meeting_slo", "-")),
                      " ".join(f"{k}={fmt_value(v)}"
                               for k, v in (best.get("config") or {}).items()),
                      f"{drift.get('status', '-')}" + (f": {moved}" if moved else ""))
    out.print(table)
    for cell in summary["cells"]:
        if cell["error"]:
            out.print(f"[red]{cell['key']}[/red]: {cell['error']}")
        for pair, data in (cell.get("paired") or {}).items():
            verdicts = ", ".join(f"{m['metric']} {m['verdict']}" for m in data.get("metrics", []))
            out.print(f"{cell['key']}: {pair} (paired, interleaved): "
                      + (verdicts if data.get("status") == "compared"
                         else f"{data.get('status')}: {data.get('reason', '')}"))
    out.print(f"{summary['regressions']} regression(s), {summary['failing_cells']} failing "
              f"cell(s); exit code {summary['exit_code']}; "
              f"report: {summary['reports'].get('summary', '-')}")


@sweep_app.command("worker", hidden=True)
def worker_cmd(
    study: Annotated[str, typer.Argument(help="Study to join.")],
    worker: Annotated[int, typer.Option(help="Index of this worker (offsets its seed).")] = 0,
    max_consecutive_failures: Annotated[int | None, typer.Option(
        help="Stop when the study's last N finished trials all failed.")] = None,
) -> None:
    """One local-backend worker: run trials of an existing study until its budget is taken."""
    from advisor.driver import StudyDriver
    from advisor.sweeps.local import EXIT_FAILING as WORKER_EXIT_FAILING

    sigterm_interrupts()
    settings = cli_settings()
    driver = StudyDriver(cli_store(settings), settings)
    try:
        result = driver.join(study, worker=worker,
                             max_consecutive_failures=max_consecutive_failures)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    if result.stopped_because == "failing":
        raise typer.Exit(WORKER_EXIT_FAILING)


@sweep_app.command("list")
def list_cmd(
    sweep: Annotated[str | None, typer.Option(help="Only runs of this sweep.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """List sweep runs, newest last."""
    runs = cli_store().sweep_runs(sweep)
    rows = [{"run": r.name, "sweep": r.sweep, "status": r.status, "backend": r.backend,
             "started": r.created_at.isoformat(timespec="seconds"),
             "regressions": r.summary.get("regressions"),
             "failing_cells": r.summary.get("failing_cells"),
             "exit_code": r.summary.get("exit_code")} for r in runs]
    if as_json:
        print_json(out, rows)
        return
    table = Table()
    for c in ("run", "status", "backend", "started", "regressions", "failing cells"):
        table.add_column(c)
    for r in rows:
        table.add_row(r["run"], r["status"], r["backend"], r["started"],
                      str(r["regressions"] if r["regressions"] is not None else "-"),
                      str(r["failing_cells"] if r["failing_cells"] is not None else "-"))
    out.print(table)


@sweep_app.command("report")
def report_cmd(
    run: Annotated[str | None, typer.Argument(help="Run name (default: the latest finished).")
                   ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Show a finished run's summary and drift report; exits with the run's exit code."""
    store = cli_store()
    if run is None:
        finished = [r for r in store.sweep_runs() if r.summary]
        if not finished:
            raise AdvisorError("no finished sweep run in this store")
        record = finished[-1]
    else:
        found = store.get_sweep_run(run)
        if found is None:
            raise AdvisorError(f"no sweep run named {run!r} (see `advisor sweep list`)")
        if not found.summary:
            raise AdvisorError(f"sweep run {run!r} has not finished ({found.status})")
        record = found
    if as_json:  # print_json: no wrapping or markup, so the output is always valid JSON
        print_json(out, record.summary)
    else:
        _print_summary(record.summary)
    raise typer.Exit(int(record.summary.get("exit_code", 0)))


class _Reporter:
    """Progress for a sweep: one bar per cell and a line per finished trial."""

    def __init__(self, *, quiet: bool) -> None:
        self.quiet = quiet
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), console=err)
        self.task: Any = None
        self.done = 0

    def message(self, text: str) -> None:
        err.print(f"[dim]{text}[/dim]")

    def cell_started(self, cell: CellSpec, study: StudyRecord, done: int, total: int) -> None:
        self.stop()
        err.print(f"cell [bold]{cell.key}[/bold]: SLO {cell.slo}, {cell.objective}; "
                  f"{done}/{total} trials already done")
        self.done = done
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), console=err)
        self.progress.start()
        self.task = self.progress.add_task(cell.key, total=total, completed=done)

    def trial_finished(self, cell: CellSpec, trial: TrialRecord) -> None:
        from knowledge import TrialStatus
        from knowledge.validity import invalid_reason

        if trial.status == TrialStatus.INTERRUPTED:
            return
        self.done += 1
        role = trial.details.get("role") or ""
        if trial.status == TrialStatus.COMPLETE:
            mark = "[green]meets SLO[/green]" if trial.feasible else "[yellow]misses SLO[/yellow]"
            figures = ", ".join(f"{m}={fmt_value(trial.metrics.get(m))}"
                                for m in dict.fromkeys([cell.objective.metric,
                                                        *cell.slo.metrics]))
        elif trial.status == TrialStatus.INVALID:
            mark = "[red]invalid[/red]"
            figures = f"validity {invalid_reason(trial.details)}: kept, not used"
        else:
            mark = f"[red]{trial.status}[/red]"
            figures = f"{trial.error_type}: {(trial.error or '').splitlines()[0][:80]}" \
                if trial.error else str(trial.error_type)
        if not self.quiet:
            self.progress.console.print(f"  #{trial.number:<3} {mark} {figures} "
                                        f"[dim]{role}[/dim]")
        study_total = self.progress.tasks[0].total if self.progress.tasks else None
        if self.task is not None:
            self.progress.update(self.task, completed=self.done,
                                 total=max(study_total or 0, self.done))

    def cell_finished(self, cell: CellSpec, result: CellResult) -> None:
        self.stop()
        drift = result.drift.status if result.drift else "-"
        err.print(f"cell [bold]{cell.key}[/bold]: {result.status}; drift: {drift}")

    def stop(self) -> None:
        if self.progress.live.is_started:
            self.progress.stop()


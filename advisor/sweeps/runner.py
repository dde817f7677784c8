"""Run a sweep: every cell as a warm-started study on a backend, then repeats, refit, cheat-sheet
and a drift report against the previous run.

A run is a row in the store (:class:`SweepRunRecord`). Running the same sweep file again while
its latest run is unfinished resumes that run: finished cells are skipped, a cell's study is
recovered (trials a killed worker left running are failed as interrupted and their configs
re-queued) and continues to its budget. A cell whose trials keep failing is stopped and reported
as failing; a rerun reports it again instead of retrying it forever.
"""

from __future__ import annotations

import json
import logging
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from advisor import __version__, pairing
from advisor.driver import StudyDriver, failure_streak
from advisor.errors import AdvisorError, StudyError, UnknownTargetError
from advisor.settings import Settings
from advisor.study_request import StudyRequest, plan_study
from advisor.sweeps.drift import CellDrift, compare_cell
from advisor.sweeps.local import EXIT_FAILING as WORKER_EXIT_FAILING
from advisor.sweeps.spec import CellSpec, SweepSpec
from advisor.sweeps.warmstart import warm_start_configs
from advisor.trial_records import trial_hardware_key
from knowledge import StudyRecord, TrialRecord, TrialStatus, TrialStore
from knowledge.cache import KnowledgeModels, ModelCache
from knowledge.models import SweepRunRecord, SweepRunStatus
from knowledge.queries import best_feasible
from objectives.hardware import fingerprint
from objectives.registry import target_class

__all__ = ["EXIT_FAILING", "EXIT_REGRESSION", "CellPlan", "CellResult", "StudyBackend",
           "SweepReporter", "SweepRunner", "exit_code_for"]

log = logging.getLogger(__name__)

#: Exit-code bits of `advisor sweep run` (cron and CI alerting read them): 0 means every cell ran
#: and nothing regressed beyond the measured noise.
EXIT_REGRESSION, EXIT_FAILING = 1 << 0, 1 << 1
_EXIT_BASE = 2  # 2 + bits: 3 regression, 4 failing cell, 5 both (typer uses 2 for bad usage)

REPEAT_ROLE, WARM_ROLE = pairing.SWEEP_REPEAT_ROLE, "warm-start"
BEST, PREVIOUS_BEST = pairing.BEST, "previous-best"
#: Seconds one trial is guessed to take when the store has no trial of the target on this
#: hardware to estimate from and the target declares no estimate (only the plan uses it).
_GUESS_TRIAL_S = 120.0


def _guess_trial_s(target: str) -> float:
    """The target's own trial-time estimate (``Target.trial_time_estimate_s``)."""
    try:
        return target_class(target).trial_time_estimate_s
    except UnknownTargetError:
        return _GUESS_TRIAL_S


def exit_code_for(regressions: int, failing: int) -> int:
    bits = (EXIT_REGRESSION if regressions else 0) | (EXIT_FAILING if failing else 0)
    return _EXIT_BASE + bits if bits else 0


class StudyBackend(Protocol):
    """Runs an existing study's remaining budget (local worker processes, or Ray Tune)."""

    name: str

    def run_study(self, study_name: str,
                  on_trial: Callable[[TrialRecord], None] | None = None) -> Any: ...

    def trial_hardware_key(self) -> str:
        """The hardware key one trial records (one GPU of several, say): warm start and the
        plan's estimates look up trials under it."""
        ...


class SweepReporter(Protocol):
    def message(self, text: str) -> None: ...
    def cell_started(self, cell: CellSpec, study: StudyRecord, done: int, total: int) -> None: ...
    def trial_finished(self, cell: CellSpec, trial: TrialRecord) -> None: ...
    def cell_finished(self, cell: CellSpec, result: CellResult) -> None: ...


@dataclass(frozen=True)
class CellPlan:
    """What one cell would cost: trials (budget + repeats) × estimated trial time / workers."""

    cell: CellSpec
    trials: int
    est_trial_s: float
    estimate_basis: str
    est_cell_s: float


@dataclass
class CellResult:
    """One cell after the run (``status``: ok, failing or error)."""

    key: str
    study: str
    status: str
    counts: dict[str, int] = field(default_factory=dict)
    best: dict[str, Any] | None = None
    repeats: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    error: str | None = None
    drift: CellDrift | None = None
    workload_hash: str = ""
    #: Paired comparisons of the configs re-measured side by side ("best-vs-previous-best").
    paired: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "study": self.study, "status": self.status,
                "counts": self.counts, "best": self.best, "repeats": self.repeats,
                "error": self.error, "workload_hash": self.workload_hash,
                "drift": self.drift.to_dict() if self.drift else None, "paired": self.paired}


class SweepRunner:
    """Plans and runs one sweep file against a store."""

    def __init__(self, store: TrialStore, settings: Settings, spec: SweepSpec, *,
                 backend: StudyBackend, reporter: SweepReporter,
                 report_dir: Path | None = None, refit: bool = True) -> None:
        self.store, self.settings, self.spec = store, settings, spec
        self.backend, self.reporter = backend, reporter
        self.report_dir, self.refit = report_dir, refit
        self.driver = StudyDriver(store, settings)

    # plan ------------------------------------------------------------------------------------

    def _hardware_key(self, cell: CellSpec) -> str:
        """The key a cell's trials are filed under: the backend's share of this machine, or
        the CPU's key for a target that runs on the CPU only."""
        try:
            uses_accelerator = target_class(cell.target).uses_accelerator
        except UnknownTargetError:
            uses_accelerator = True
        if uses_accelerator:
            return self.backend.trial_hardware_key()
        return trial_hardware_key(cell.target, fingerprint())

    def plan(self, workers: int) -> list[CellPlan]:
        """Estimated cost per cell, from the durations of stored trials of the same target on
        this hardware (same workload when there are some), else a per-target guess."""
        plans = []
        for cell in self.spec.cells:
            durations, basis = _durations(self.store, cell, self._hardware_key(cell))
            if durations:
                est = statistics.median(durations)
            else:
                est, basis = _guess_trial_s(cell.target), "guess (no stored trials)"
            n = cell.trials + 2 * self._repeats(cell)
            plans.append(CellPlan(cell, n, est, basis, est * n / max(1, workers)))
        return plans

    # run -------------------------------------------------------------------------------------

    def open_run(self, *, new: bool = False, name: str | None = None) -> SweepRunRecord:
        """The run to work on: the latest unfinished run of this sweep (resumed), else a new one
        named after today's UTC date."""
        runs = self.store.sweep_runs(self.spec.name)
        open_runs = [r for r in runs if r.status == SweepRunStatus.RUNNING]
        if name is not None and (named := self.store.get_sweep_run(name)) is not None:
            if named.sweep != self.spec.name:
                raise StudyError(f"sweep run {name!r} belongs to sweep {named.sweep!r}")
            if named.status != SweepRunStatus.RUNNING:
                raise StudyError(f"sweep run {name!r} is {named.status}; choose another --run-name")
            return named
        if open_runs and not new and name is None:
            run = open_runs[-1]
            if run.spec_hash != self.spec.spec_hash:
                raise StudyError(
                    f"sweep run {run.name!r} is unfinished but the sweep file changed since it "
                    "started; pass --new-run to abandon it and start a new run")
            self.reporter.message(f"resuming unfinished sweep run {run.name}")
            return run
        for run in open_runs:  # --new-run: the unfinished ones will not be resumed
            self.store.finish_sweep_run(run.id or 0, run.summary, SweepRunStatus.ABANDONED)
        if name is None:
            base = f"{self.spec.name}@{datetime.now(UTC):%Y-%m-%d}"
            name, i = base, 1
            while self.store.get_sweep_run(name) is not None:
                i += 1
                name = f"{base}.{i}"
        return self.store.create_sweep_run(SweepRunRecord(
            sweep=self.spec.name, name=name, spec=dict(self.spec.raw),
            spec_hash=self.spec.spec_hash, backend=self.backend.name))

    def previous_run(self, run: SweepRunRecord) -> SweepRunRecord | None:
        """The latest finished run of this sweep before ``run``."""
        earlier = [r for r in self.store.sweep_runs(self.spec.name)
                   if r.status == SweepRunStatus.FINISHED and (r.id or 0) < (run.id or 0)]
        return earlier[-1] if earlier else None

    def run(self, run: SweepRunRecord) -> dict[str, Any]:
        """Run every cell of ``run``, then repeats, refit, cheat-sheet and the drift report.
        Returns the JSON summary (also stored on the run and written to the report dir)."""
        started = time.monotonic()
        previous = self.previous_run(run)
        prev_cells = {c["key"]: c for c in (previous.summary.get("cells", []) if previous
                                            else [])}
        models = self._models_for_warm_start()
        results = []
        for cell in self.spec.cells:
            try:
                result = self._run_cell(run, cell, prev_cells.get(cell.key), models)
            except AdvisorError as exc:
                result = CellResult(cell.key, cell.study_name(run.name), "error", error=str(exc),
                                    workload_hash=cell.workload.spec_hash)
            result.drift = self._drift(cell, result, prev_cells.get(cell.key))
            self.reporter.cell_finished(cell, result)
            results.append(result)
        reports = self._after(run, results)
        regressions = sum(1 for r in results if r.drift and r.drift.status == "regressed")
        failing = sum(1 for r in results if r.status != "ok")
        hw = fingerprint()
        summary: dict[str, Any] = {
            "sweep": self.spec.name, "run": run.name,
            "previous_run": previous.name if previous else None,
            "backend": self.backend.name, "advisor_version": __version__,
            "hardware": {k: hw[k] for k in ("key", "cpu_model", "cpu_count", "gpus")
                         if k in hw},
            "cells": [r.to_dict() for r in results], "regressions": regressions,
            "failing_cells": failing, "exit_code": exit_code_for(regressions, failing),
            "duration_s": round(time.monotonic() - started, 1), "reports": reports,
            "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        if self.report_dir is not None:
            path = self.report_dir / "summary.json"
            reports["summary"] = str(path)
            path.write_text(json.dumps(summary, indent=1, default=str) + "\n")
        self.store.finish_sweep_run(run.id or 0, summary)
        return summary

    # one cell --------------------------------------------------------------------------------

    def _models_for_warm_start(self) -> dict[str, KnowledgeModels | None]:
        models: dict[str, KnowledgeModels | None] = {}
        if not self.spec.warm_start_recommendation:
            return models
        for target in dict.fromkeys(c.target for c in self.spec.cells):
            try:
                models[target] = ModelCache(self.store, self.settings.cache_dir,
                                            target=target,
                                            shared_dir=self.settings.shared_model_dir).get()
            except AdvisorError as exc:
                log.info("no models for %s yet: %s", target, exc)
                models[target] = None
        return models

    def _run_cell(self, run: SweepRunRecord, cell: CellSpec, prev: Mapping[str, Any] | None,
                  models: Mapping[str, KnowledgeModels | None]) -> CellResult:
        """Create or recover the cell's study, run it on the backend and repeat its best, all
        under the study's lease: the backend's workers join the study, a second sweep on the
        same run is refused rather than recovering this one's live trials."""
        name = cell.study_name(run.name)
        with self.driver.lease(name):
            return self._run_leased_cell(run, cell, name, prev, models)

    def _run_leased_cell(self, run: SweepRunRecord, cell: CellSpec, name: str,
                         prev: Mapping[str, Any] | None,
                         models: Mapping[str, KnowledgeModels | None]) -> CellResult:
        study = self.store.get_study(name)
        prev_best = ((prev or {}).get("best") or {}).get("config")
        if study is None:
            study = self._create(run, cell, name, prev_best, models.get(cell.target))
        else:
            study = self.driver.recover(name)
        limit = self.spec.max_consecutive_failures
        done = self.store.count_trials(study.id or 0, list(TrialStatus.FINISHED))
        self.reporter.cell_started(cell, study, done, study.n_trials)

        def on_trial(t: TrialRecord) -> None:
            self.reporter.trial_finished(cell, t)

        if failure_streak(self.store, study.id or 0) < limit:
            self._report_worker_exits(cell, self.backend.run_study(name, on_trial))
        if failure_streak(self.store, study.id or 0) >= limit or not self._measured(study):
            return self._result(cell, name, "failing", error=self._failure_reason(study))
        if self._repeats(cell):
            self._repeat(cell, name, study, prev_best, on_trial)
        return self._result(cell, name, "ok")

    def _create(self, run: SweepRunRecord, cell: CellSpec, name: str,
                prev_best: Mapping[str, Any] | None, models: KnowledgeModels | None
                ) -> StudyRecord:
        plan = plan_study(StudyRequest(
            target=cell.target, slo=str(cell.slo), objective=str(cell.objective),
            workload=cell.workload, trials=cell.trials, sampler=self.spec.sampler,
            seed=self.spec.seed, fixed=cell.fixed, name=name, user_named=False), self.store)
        study = self.driver.create(plan.spec)
        with self.store.session() as s:  # the cell's place in the sweep, for reports and drift
            rec = s.get(StudyRecord, study.id)
            assert rec is not None
            rec.data_provenance = {**rec.data_provenance, "sweep": self.spec.name,
                                   "sweep_run": run.name, "sweep_cell": cell.key}
            s.add(rec)
            s.commit()
        warm = warm_start_configs(
            self.store, cell, hardware_key=self._hardware_key(cell), previous_best=prev_best,
            use_recommendation=self.spec.warm_start_recommendation,
            best_known=self.spec.warm_start_best_known, models=models)
        queued = 0
        for item in warm:
            try:
                self.driver.enqueue(name, [item.config], role=WARM_ROLE,
                                    attrs={"advisor_source": item.source})
                queued += 1
            except AdvisorError as exc:  # e.g. a knob the space no longer has
                self.reporter.message(f"{cell.key}: warm-start config from {item.source} "
                                      f"skipped: {exc}")
        if queued:
            self.reporter.message(f"{cell.key}: warm start with {queued} config(s) from "
                                  f"{', '.join(sorted({w.source for w in warm}))}")
        return study

    def _repeats(self, cell: CellSpec) -> int:
        return self.spec.repeats if cell.repeats is None else cell.repeats

    def _measured(self, study: StudyRecord) -> bool:
        return self.store.count_trials(study.id or 0, [TrialStatus.COMPLETE]) > 0

    def _failure_reason(self, study: StudyRecord) -> str:
        failed = self.store.trials_of_study(study.id or 0, [TrialStatus.FAILED])
        reasons = [f"{t.error_type}: {(t.error or '').splitlines()[0][:200] if t.error else ''}"
                   for t in failed[-3:]]
        invalid = self.store.count_trials(study.id or 0, [TrialStatus.INVALID])
        return (f"{len(failed)} trial(s) failed, the last "
                f"{failure_streak(self.store, study.id or 0)} in a row"
                + (f"; {invalid} measured but invalid (validity check)" if invalid else "")
                + "; latest: " + " | ".join(reasons))

    def _repeat(self, cell: CellSpec, name: str, study: StudyRecord,
                prev_best: Mapping[str, Any] | None,
                on_trial: Callable[[TrialRecord], None]) -> None:
        """Measure the best config and the previous run's best ``repeats`` times each,
        interleaved (advisor/pairing.py): the noise the drift report compares against, and
        their paired comparison. Queued once; a resumed run finishes them."""
        trials = self.store.trials_of_study(study.id or 0)
        if not any(t.details.get("role") == REPEAT_ROLE and pairing.block_of(t.details) is None
                   for t in trials):  # repeats queued by an older advisor, one arm after another
            best = self._best(cell, trials)
            arms: list[pairing.Arm] = []
            if best is not None:
                arms.append(pairing.Arm(BEST, best.config, role=REPEAT_ROLE))
            if prev_best and (best is None or dict(prev_best) != best.config):
                arms.append(pairing.Arm(PREVIOUS_BEST, prev_best, role=REPEAT_ROLE))
            queued = pairing.queue_interleaved(self.driver, name, arms, self._repeats(cell),
                                               extend_budget=True)
            for label, why in queued.skipped.items():
                self.reporter.message(f"{cell.key}: cannot repeat the {label} config: {why}")
        self._report_worker_exits(cell, self.backend.run_study(name, on_trial))

    def _report_worker_exits(self, cell: CellSpec, exits: Any) -> None:
        """Say which local workers ended badly, with the last line of their stderr: a worker
        that dies at its start otherwise leaves the study to the others without a word."""
        for ended in exits or ():
            if ended.returncode not in (0, WORKER_EXIT_FAILING):
                last = (ended.stderr_tail.strip().splitlines() or ["(no output)"])[-1]
                self.reporter.message(f"{cell.key}: worker {ended.worker} exited with code "
                                      f"{ended.returncode}: {last}")

    def _best(self, cell: CellSpec, trials: Sequence[TrialRecord]) -> TrialRecord | None:
        """The search's best trial: feasible first, then by objective (repeats excluded)."""
        best = best_feasible(trials, cell.objective.direction, exclude=pairing.is_paired)
        if best is not None:
            return best
        # None met the SLO: the best infeasible one still gets repeated and reported.
        measured = [t for t in trials if t.status == TrialStatus.COMPLETE
                    and not pairing.is_paired(t) and t.objective_value is not None]
        if not measured:
            return None
        sign = -1.0 if cell.objective.direction == "maximize" else 1.0
        return min(measured, key=lambda t: sign * float(t.objective_value or 0))

    def _result(self, cell: CellSpec, name: str, status: str, error: str | None = None
                ) -> CellResult:
        study = self.store.get_study(name)
        assert study is not None
        trials = self.store.trials_of_study(study.id or 0)
        counts = {s: sum(t.status == s for t in trials) for s in TrialStatus.ALL}
        counts["meeting_slo"] = sum(bool(t.feasible) for t in trials
                                    if t.status == TrialStatus.COMPLETE)
        best = self._best(cell, trials)
        metrics = list(dict.fromkeys([cell.objective.metric, *cell.slo.metrics]))
        repeats: dict[str, dict[str, list[float]]] = {}
        for t in trials:
            if (t.details.get("role") == REPEAT_ROLE and t.status == TrialStatus.COMPLETE):
                label = pairing.arm_of(t.details) or BEST
                for m in metrics:
                    if t.metrics.get(m) is not None:
                        repeats.setdefault(label, {}).setdefault(m, []).append(
                            float(t.metrics[m]))
        paired = {}
        if pairing.latest_block(trials, [BEST, PREVIOUS_BEST]) is not None:
            paired[f"{BEST}-vs-{PREVIOUS_BEST}"] = pairing.outcome(trials, study, x=BEST,
                                                                   y=PREVIOUS_BEST)
        best_dict = None if best is None else {
            "trial_id": best.id, "number": best.number, "config": best.config,
            "feasible": best.feasible, "source": best.details.get("source"),
            "metrics": {m: best.metrics.get(m) for m in metrics}}
        return CellResult(cell.key, name, status, counts, best_dict, repeats, error,
                          workload_hash=cell.workload.spec_hash, paired=paired)

    # drift -----------------------------------------------------------------------------------

    def _drift(self, cell: CellSpec, result: CellResult, prev: Mapping[str, Any] | None
               ) -> CellDrift:
        notes = []
        if prev is None:
            return compare_cell(cell.key, config=None, previous={}, current={},
                                worse_when={}, slo_bounds=[], policy=self.spec.drift,
                                notes=["no previous finished run of this cell"])
        if prev.get("workload_hash") and prev["workload_hash"] != cell.workload.spec_hash:
            notes.append("the cell's workload spec changed since the previous run")
        prev_best = prev.get("best") or {}
        config = prev_best.get("config")
        baseline = (prev.get("repeats") or {}).get("best") or {}
        same = result.best is not None and config is not None and result.best["config"] == config
        current = result.repeats.get("best" if same else "previous-best") or {}
        if result.best is not None and config is not None and not same:
            notes.append("this run found a different best config; compared on the previous one")
        worse_when = {cell.objective.metric: "lower" if cell.objective.direction == "maximize"
                      else "higher"}
        for b in cell.slo.bounds:
            worse_when[b.metric] = "higher" if b.op == "<=" else "lower"
        return compare_cell(cell.key, config=config, previous=baseline, current=current,
                            worse_when=worse_when,
                            slo_bounds=[(b.metric, b.op, b.threshold) for b in cell.slo.bounds],
                            policy=self.spec.drift, notes=notes)

    # after the cells -------------------------------------------------------------------------

    def _after(self, run: SweepRunRecord, results: Sequence[CellResult]) -> dict[str, Any]:
        """Refit the models of the sweep's targets and rebuild the cheat-sheet from them."""
        reports: dict[str, Any] = {}
        if not self.refit:
            return reports
        from advisor.cheatsheet import build_cheatsheet

        for target in dict.fromkeys(c.target for c in self.spec.cells):
            self.reporter.message(f"refitting the {target} models on every stored trial")
            try:
                models = ModelCache(self.store, self.settings.cache_dir, target=target).refit()
            except AdvisorError as exc:
                reports[f"models_{target}"] = f"not refitted: {exc}"
                continue
            reports[f"models_{target}"] = f"{len(models.for_target(target))} context(s)"
            if self.report_dir is None:
                continue
            sheet = build_cheatsheet(self.store, target=target, models=models)
            for ext, text in (("json", json.dumps(sheet.to_dict(), indent=1)),
                              ("md", sheet.to_markdown()), ("html", sheet.to_html())):
                path = self.report_dir / f"cheatsheet-{target}.{ext}"
                path.write_text(text)
                reports[f"cheatsheet_{target}_{ext}"] = str(path)
        return reports


def _durations(store: TrialStore, cell: CellSpec, hw: str) -> tuple[list[float], str]:
    from knowledge import TrialFilter

    finished = [t for t in store.list_trials(TrialFilter(target=cell.target, hardware_key=hw))
                if t.duration_s and t.status in TrialStatus.FINISHED]
    same = [t.duration_s for t in finished if t.workload_hash == cell.workload.spec_hash]
    if same:
        return [float(d) for d in same if d], f"median of {len(same)} stored trials, same workload"
    durations = [float(t.duration_s) for t in finished if t.duration_s]
    return durations, f"median of {len(durations)} stored trials of {cell.target} on this hardware"

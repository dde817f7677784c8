"""The Target extension point: one subclass per engine (faiss, transformers, vllm, ...).

A target knows how to start its engine with a trial's knob values, drive a workload through it and
measure the result. The study driver calls ``prepare`` once in its own process and ``run`` once per
trial inside an isolated child process, so a crash, hang or OOM in ``run`` only fails that trial.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from advisor.errors import ConfigRejectedError, SearchSpaceError
from objectives.measurement import Measurement
from objectives.metrics import metrics_in_families
from objectives.slo import SLO
from objectives.workload import Workload
from search_spaces import SearchSpace, load_space

__all__ = ["ProgressFn", "Target", "checked_config"]

ProgressFn = Callable[[str], None]


class Target(ABC):
    """Base class of every target.

    Class attributes name the target and its defaults; ``search_spaces/<name>.yaml`` holds its
    knobs. Implementations must import their engine inside methods (never at module import), so
    listing targets works on machines without the engine.
    """

    #: Registry name, also the search-space file name (``search_spaces/<name>.yaml``).
    name: ClassVar[str]
    #: The engine package whose version is recorded and checked (e.g. ``faiss``).
    engine: ClassVar[str]
    #: One-line description for ``advisor targets``.
    description: ClassVar[str]
    #: The objective used when the user gives none, as ``"maximize:<metric>"``.
    default_objective: ClassVar[str]
    #: The SLO used by the quickstart when the user gives none.
    default_slo: ClassVar[str]
    #: What to install when the engine is missing (shown in the error).
    install_hint: ClassVar[str]
    #: Quality metrics that can differ between two builds of one config (a graph index filled by
    #: several threads in a different order each time). Recommendations keep a headroom on their
    #: SLO bounds, measured from rebuilds of the same config (advisor/answers/headroom.py).
    #: Empty: the
    #: target's quality is fixed by the config and the data.
    rebuild_varying_metrics: ClassVar[frozenset[str]] = frozenset()
    #: Whether :meth:`run` may reuse a build of the config it made for an earlier trial (a build
    #: cache). A trial whose build must be its own (a rebuild check) runs with this False; a
    #: target without such a cache ignores it.
    reuse_builds: bool = True
    #: The study's SLO while a trial runs (the runner sets it when the driver passes it; None for
    #: every other caller). A target may use it only to stop measuring once the trial's miss is
    #: settled (objectives/llm/early_stop.py), never to change what a measurement is.
    trial_slo: SLO | None = None
    #: The kind of workload this target runs (objectives/vocabulary.py): its features, tiers,
    #: audit SLOs and rules of thumb are what the generic layers use for this target.
    workload_kind: ClassVar[str] = "llm-serving"
    #: The metric families ``run`` reports (objectives/metrics.py).
    metric_families: ClassVar[tuple[str, ...]] = ()
    #: Seconds one trial is guessed to take before any was measured (a sweep's plan).
    trial_time_estimate_s: ClassVar[float] = 120.0
    #: Other names prose and code use for this engine (``TensorRT`` for ``tensorrt-llm``); the
    #: generic layers must not spell them either (tests/test_vocabulary.py).
    aliases: ClassVar[tuple[str, ...]] = ()
    #: Whether the engine runs on the machine's accelerators. False: it runs on the CPU only,
    #: so its trials are filed under the CPU's hardware key even on a machine with GPUs (a
    #: vector index measured on a GPU host's CPU says nothing about that GPU).
    uses_accelerator: ClassVar[bool] = True

    def reported_metrics(self) -> frozenset[str]:
        """Names of the metrics ``run`` reports (SLOs and objectives may only use these)."""
        return frozenset(spec.name for spec in metrics_in_families(self.metric_families))

    def space(self) -> SearchSpace:
        """This target's knob space (``search_spaces/<name>.yaml`` unless overridden)."""
        return load_space(self.name)

    def validate_config(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """``config`` checked against :meth:`space`, missing knobs at their defaults.

        Raises :class:`~advisor.errors.ConfigRejectedError` with the space's reason for a config
        outside the space (a trial of it is a rejected one).
        """
        return checked_config(self.space(), config)

    @abstractmethod
    def check_available(self) -> None:
        """Raise :class:`~advisor.errors.EngineUnavailableError` (with what to install) if the
        engine cannot run here. Called in the driver's process before a study starts."""

    @abstractmethod
    def engine_versions(self) -> dict[str, str]:
        """Versions of every package that shapes this target's numbers (engine, numpy, ...)."""

    @abstractmethod
    def default_workload(self) -> Workload:
        """The workload used when the user names none: small enough for a 2-core machine."""

    def named_workloads(self) -> dict[str, Workload]:
        """Presets selectable by name with ``--workload``; the default is always included."""
        default = self.default_workload()
        return {default.name: default}

    def check_workload(self, workload: Workload) -> None:
        """Raise ``WorkloadError`` naming the field when ``workload`` cannot be run, without
        building anything (no dataset, no model): every front door calls it before a study is
        created or queued, so an absurd request (a 40 PB dataset, a 400-digit count) is a 4xx /
        exit 2 at once, not a failed job later. The default checks nothing; ``prepare`` must
        accept whatever this accepts."""
        return None

    def prepare(self, workload: Workload, cache_dir: Path, progress: ProgressFn | None = None
                ) -> dict[str, Any]:
        """Build whatever every trial needs (datasets, embeddings, ground truth) once, in the
        driver's process, so trial timeouts measure the engine and not data preparation.

        Must be idempotent and cache on disk under ``cache_dir``. Returns facts to record with the
        study (e.g. the dataset's hash and provenance). Raises ``WorkloadError``/``DataError``.
        """
        return {}

    @abstractmethod
    def run(self, config: Mapping[str, Any], workload: Workload, cache_dir: Path) -> Measurement:
        """Run one trial: start the engine with ``config``, warm it up, drive ``workload`` and
        measure. Called inside an isolated child process.

        Must raise :class:`~advisor.errors.ConfigRejectedError` for a config the engine rejects,
        with the engine's own reason. Any other exception or a crash fails the trial too.
        """

    def run_series(self, config: Mapping[str, Any], workloads: Sequence[Workload],
                   cache_dir: Path) -> list[Measurement | Exception]:
        """Measure ``config`` under each of ``workloads`` in turn (one trial, several workloads).

        The first workload is the trial's own: its failure raises, exactly as in :meth:`run`. A
        later workload's failure is returned in its place, so what was measured is kept. This
        default calls :meth:`run` per workload; a target whose engine is expensive to start (a
        server) overrides it to start the engine once and measure every workload against it.
        """
        if not workloads:
            raise ValueError("run_series needs at least one workload")
        results: list[Measurement | Exception] = [self.run(config, workloads[0], cache_dir)]
        for workload in workloads[1:]:
            try:
                results.append(self.run(config, workload, cache_dir))
            except Exception as exc:  # the isolation boundary: a later workload fails alone
                results.append(exc)
        return results

    def starting_points(self, workload: Workload) -> list[dict[str, Any]]:
        """Configs worth measuring first in a study of ``workload`` when nothing better is
        known: the engine's textbook settings (the ones its own tuning guide or autotuner starts
        from). Partial configs are completed with the engine defaults. A new study queues them
        after the default and its warm start from knowledge (advisor/warm_start.py); they count
        towards its budget and the sampler's random start-up. Empty (the default): none."""
        return []

    def swept_knobs(self) -> frozenset[str]:
        """Search-time knobs this target measures in one trial, over one engine instance
        (:meth:`run_sweep`), instead of having the sampler pick them: the driver samples the
        other knobs and stores every swept setting as a trial of its own. Empty (the default):
        every knob is sampled."""
        return frozenset()

    def run_sweep(self, config: Mapping[str, Any], workload: Workload, cache_dir: Path, *,
                  knobs: frozenset[str], budget_s: float, slo: SLO | None = None,
                  include_own: bool = True) -> list[tuple[dict[str, Any], Measurement]]:
        """Measure ``config`` at several settings of ``knobs`` (some of :meth:`swept_knobs`; the
        study may fix others), building the engine once: ``config`` holds every knob, the swept
        ones at values to measure too when ``include_own``. Returns each setting's full config
        and measurement, at least one. Stops starting new settings after ``budget_s`` seconds.
        The study's ``slo`` may steer which settings are worth timing (those reaching its
        quality bounds), never how one is measured. Called inside the isolated child, like
        :meth:`run`; raises as :meth:`run` does when the engine cannot be built at all."""
        raise NotImplementedError(f"target {self.name!r} sweeps no knobs")

    def apply_slo(self, measurement: Measurement, slo: SLO) -> Measurement:
        """Adjust SLO-dependent metrics after a trial, in the driver's process (``run`` measures
        the same whatever the study's SLO). LLM targets recompute goodput for the SLO's
        per-request bounds here."""
        return measurement

    @abstractmethod
    def launch_command(self, config: Mapping[str, Any], workload: Workload | None = None) -> str:
        """The exact command or code that reproduces ``config`` on this engine, to paste."""


def checked_config(space: SearchSpace, config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` validated against ``space`` with missing knobs at their defaults; a
    :class:`~advisor.errors.SearchSpaceError` becomes :class:`~advisor.errors.ConfigRejectedError`
    (for a trial, a config outside the space is a rejected config)."""
    try:
        return space.validate_config(config, fill_defaults=True)
    except SearchSpaceError as exc:
        raise ConfigRejectedError(str(exc)) from None

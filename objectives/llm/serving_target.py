"""The base of the targets that measure an OpenAI-compatible server (vLLM, TensorRT-LLM, any
running endpoint): what they share, written once.

:class:`ServingTarget` holds what does not depend on the engine: the default objective and SLO,
the knob space (parsed once per process), validation, the ``llm-serving`` presets and the
workload-kind check; and, for a target that starts its own server per trial, availability (the
engine importable here, or a command prefix from the environment), ``prepare`` and the whole of
``run``: load the workload, validate the config, start the server on a free port, wait until it is
ready, measure it over the OpenAI API, always stop it and record the common facts. Such a target
describes its server in an :class:`EngineServer` and implements
:meth:`ServingTarget.server_argv`; the other hooks (feasibility before the start, the server's
environment and model name, the engine's refusal in its log, facts from the log) have neutral
defaults. A target that measures a server it does not start (openai) overrides
``check_available``, ``engine_versions``, ``prepare`` and ``run`` and keeps the rest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util
import json
import os
import re
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from advisor.errors import (
    ConfigRejectedError,
    EngineStartError,
    EngineUnavailableError,
    NotMeasuredError,
    WorkloadError,
)
from objectives.llm.early_stop import MissBound, miss_bounds, shortcuts_enabled
from objectives.llm.engine_cache import engine_cache_env
from objectives.llm.metrics import GoodputFromSLO
from objectives.llm.reference import ReferenceHarness
from objectives.llm.server import (
    CLIENT_PROCESSES_MAX_PARAM,
    CLIENT_PROCESSES_PARAM,
    DEFAULT_LOG_TAIL_CHARS,
    ROOT_CAUSE_LOG_CHARS,
    ManagedServer,
    ModelSource,
    ServingWorkload,
    client_processes_max_param,
    client_processes_param,
    describe_model,
    free_port,
    gpu_memory_mb,
    measure_endpoint,
    package_versions,
    process_tree,
    root_cause,
)
from objectives.llm.server_metrics import MetricVocabulary
from objectives.llm.validity import FRONTEND_DELAY, UNCHECKED, VALID
from objectives.llm.workload import KIND, PRESETS, LLMWorkloadSpec, load_preset
from objectives.measurement import Measurement
from objectives.metrics import LLM_SERVING
from objectives.target import ProgressFn, Target
from objectives.workload import Workload, canonical_json
from search_spaces import SearchSpace, load_space

__all__ = ["EngineServer", "RunningServer", "ServingTarget", "WindowPlan", "shared_space",
           "validation_errors"]

#: Validity labels of a window whose latencies are the server's (objectives/llm/validity.py).
_TRUSTED = frozenset({VALID, UNCHECKED, FRONTEND_DELAY})
_VALIDATION_ERROR = re.compile(r"^.*\d+ validation errors? for \w+.*$", re.MULTILINE)


@functools.cache
def shared_space(name: str) -> SearchSpace:
    """``load_space(name)``, parsed once per process: argv builders and every trial's validation
    consult it."""
    return load_space(name)


@functools.lru_cache(maxsize=256)
def _context_length(params_json: str, target_keys: frozenset[str], model: ModelSource) -> int:
    """The ``max_model_len`` a workload (as canonical JSON) runs with on ``model``: its requests
    are generated to find the longest, so a process computes each workload's once. ``model``
    only keys the cache: a local model directory whose config changed is a new entry."""
    return ServingWorkload.described(json.loads(params_json),
                                     target_keys=target_keys).max_model_len()


def validation_errors(log: str) -> str | None:
    """A pydantic "N validation error(s) for X" report in ``log`` (how vLLM and TensorRT-LLM refuse
    a resulting config) as one line: its header and up to five indented lines after it, joined by
    `` | ``; None when the log has none."""
    match = _VALIDATION_ERROR.search(log)
    if match:
        lines = log[match.start():].splitlines()
        detail = [lines[0].strip()] + [ln.strip() for ln in lines[1:6]
                                       if ln.startswith((" ", "\t")) and ln.strip()]
        return " | ".join(detail)
    return None


@dataclass(frozen=True)
class EngineServer:
    """How a :class:`ServingTarget` starts its engine's server, one per trial."""

    #: The engine as messages name it (e.g. ``vLLM``).
    label: str
    #: The server as messages name it (e.g. ``vllm serve``).
    process_name: str
    #: Names the trial's scratch directory (``advisor-<scratch_name>-``) and the server log.
    scratch_name: str
    #: The environment variable whose JSON list replaces ``default_command``.
    command_env: str
    #: The argv prefix that starts the server; :meth:`ServingTarget.server_argv` gives the rest.
    default_command: tuple[str, ...]
    #: Seconds to wait for the health endpoint (the workload param ``startup_timeout_s`` wins).
    startup_timeout_s: float
    #: How many characters of the server log a trial reads once it is over.
    log_read_chars: int = DEFAULT_LOG_TAIL_CHARS
    #: The engine's compile/kernel cache variables, each with its subdirectory of the engine
    #: cache every trial shares (objectives/llm/engine_cache.py); empty: none set.
    cache_env: tuple[tuple[str, str], ...] = ()

    def command(self, env: Mapping[str, str] | None = None) -> list[str]:
        """The argv prefix: the JSON list in ``env[command_env]`` (``os.environ`` by default) or
        ``default_command``. Raises :class:`EngineUnavailableError` for anything but a non-empty
        JSON list of non-empty strings."""
        raw = (os.environ if env is None else env).get(self.command_env)
        if not raw:
            return list(self.default_command)
        try:
            command = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise EngineUnavailableError(f"{self.command_env} must be a JSON list of strings: "
                                         f"{exc}") from None
        if (not isinstance(command, list) or not command
                or not all(isinstance(part, str) and part for part in command)):
            raise EngineUnavailableError(
                f"{self.command_env} must be a non-empty JSON list of strings, got {raw!r}")
        return command


@dataclass(frozen=True)
class WindowPlan:
    """How :meth:`ServingTarget.measure` runs the next window on a :class:`RunningServer`:
    :meth:`ServingTarget.run_series` sets one per workload; any other caller keeps the default
    (warm-up first, the client processes the load needs, no early stop)."""

    #: Send the workload's warm-up requests first (only the first window of a server start
    #: needs them while trial shortcuts are on).
    warmup: bool = True
    #: The fewest client processes to start with (an earlier window found fewer client-bound).
    min_client_processes: int | None = None
    #: The study's SLO bounds the window may settle as missed (objectives/llm/early_stop.py).
    miss_bounds: tuple[MissBound, ...] = ()


@dataclass
class RunningServer:
    """A server :meth:`ServingTarget.serve` started and keeps up: where it listens, its process,
    the validated config; ``facts`` holds the launch facts (argv, start-up time) while it runs
    and gains the engine's own start-up facts and log tail, and ``versions``, when it stops."""

    base_url: str
    server: ManagedServer
    config: dict[str, Any]
    label: str
    facts: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    plan: WindowPlan = field(default_factory=WindowPlan)

    def check_alive(self, what: str) -> None:
        """Raise :class:`EngineStartError` when the server has exited before ``what`` ran."""
        if (error := self._exit_error(what, "before")) is not None:
            raise error

    def failure_of(self, what: str, exc: Exception, *, grace_s: float = 5.0) -> Exception:
        """``exc`` (a window that failed) blamed on the engine where the server exited while
        ``what`` was measured: an :class:`EngineStartError` naming the exit code and the root
        cause its log gives, so the trial is stored as the config's own failure
        (``engine_start``, which the failure model learns from) with the engine's reason, not
        as the client's connection errors. A server dying when the window failed may still be
        exiting: it gets ``grace_s`` to do so. ``exc`` itself otherwise."""
        if isinstance(exc, EngineStartError | NotMeasuredError):
            return exc
        if self.server.returncode is None and self.server.answers():
            return exc  # the server is up: the window failed for a reason of its own
        deadline = time.monotonic() + grace_s
        while self.server.returncode is None and time.monotonic() < deadline:
            time.sleep(0.2)
        error = self._exit_error(what, "while", f"; the client saw: {exc}")
        return exc if error is None else error

    def _exit_error(self, what: str, when: str, detail: str = "") -> EngineStartError | None:
        """The server's exit as the engine's failure, ``when`` (``before`` / ``while``) ``what``
        was measured: its exit code and the root cause its log gives; None while it runs."""
        code = self.server.returncode
        if code is None:
            return None
        cause = root_cause(self.server.log_tail(ROOT_CAUSE_LOG_CHARS))
        return EngineStartError(f"{self.label} exited (code {code}) {when} workload {what!r} was "
                                "measured" + (f": {cause}" if cause else "") + detail)


class ServingTarget(GoodputFromSLO, Target):
    """An ``llm-serving`` target measured over an OpenAI-compatible API; by default one server
    that the target starts per trial (see the module docstring for the hooks)."""

    default_objective: ClassVar[str] = "maximize:output_tokens_per_s"
    default_slo: ClassVar[str] = "ttft_p95_ms<=300,tpot_p95_ms<=40"
    metric_families: ClassVar[tuple[str, ...]] = (LLM_SERVING,)
    #: Workload parameters the target reads itself (not part of the llm-serving spec): by default
    #: the server's start-up timeout and context length.
    target_params: ClassVar[frozenset[str]] = frozenset({"startup_timeout_s", "max_model_len",
                                                         CLIENT_PROCESSES_PARAM,
                                                         CLIENT_PROCESSES_MAX_PARAM})
    #: How the server is started (a target that starts none leaves it out).
    engine_server: ClassVar[EngineServer]
    #: The Prometheus series the engine exposes: every measurement is checked against them (the
    #: validity gate, docs/metrics.md). None: the engine exposes none; trials are "unchecked".
    server_metrics: ClassVar[MetricVocabulary | None] = None

    def space(self) -> SearchSpace:
        return shared_space(self.name)

    # -- availability and versions --------------------------------------------------------------

    def check_available(self) -> None:
        spec = self.engine_server
        if os.environ.get(spec.command_env):
            spec.command()  # a wrapper runs the engine elsewhere; only its syntax is checked here
            return
        if importlib.util.find_spec(self.engine) is None:
            raise EngineUnavailableError(
                f"the {self.name} target needs {spec.label}, which this Python cannot import; "
                f"install it with: {self.install_hint}")

    def engine_versions(self) -> dict[str, str]:
        return package_versions(self.engine, "torch", "transformers")

    def installed_version(self) -> str | None:
        """The engine's version from its package metadata (None when not installed here)."""
        return package_versions(self.engine).get(self.engine)

    # -- workloads ------------------------------------------------------------------------------

    def default_workload(self) -> Workload:
        return load_preset("chat")

    def named_workloads(self) -> dict[str, Workload]:
        return {name: load_preset(name) for name in PRESETS}

    def check_workload(self, workload: Workload) -> None:
        self._check_kind(workload)
        ServingWorkload.check(workload.params, target_keys=self.target_params)

    def prepare(self, workload: Workload, cache_dir: Path, progress: ProgressFn | None = None
                ) -> dict[str, Any]:
        self._check_kind(workload)
        served = self.load_served(workload, cache_dir)
        return {"model": served.model.label, "dummy_weights": served.model.dummy_weights,
                "max_model_len": served.max_model_len()}

    def load_served(self, workload: Workload, cache_dir: Path) -> ServingWorkload:
        """``workload`` as requests and a model directory (written under ``cache_dir``), with
        :attr:`target_params` set apart."""
        return ServingWorkload.load(workload.params, cache_dir, target_keys=self.target_params)

    def _check_kind(self, workload: Workload) -> None:
        if workload.kind != KIND:
            raise WorkloadError(
                f"the {self.name} target runs workloads of kind {KIND!r}, got {workload.kind!r}")

    # -- one trial ------------------------------------------------------------------------------

    def run(self, config: Mapping[str, Any], workload: Workload, cache_dir: Path) -> Measurement:
        result = self.run_series(config, [workload], cache_dir)[0]
        if isinstance(result, Exception):  # never: the first workload's failure raises
            raise result
        return result

    def run_series(self, config: Mapping[str, Any], workloads: Sequence[Workload],
                   cache_dir: Path) -> list[Measurement | Exception]:
        """Start the server once with ``config`` and measure each workload against it in turn.

        Every workload must run the first one's model within its context length (the server is
        started for the first). The start-up time is recorded with each measurement, as
        ``startup_s``, with ``series_index``.

        Trial shortcuts (on unless ``ADVISOR_TRIAL_SHORTCUTS=0``, objectives/llm/early_stop.py):
        only the first window sends warm-up requests (later ones record ``warmup_requests`` 0);
        a window the validity gate re-measured with more client processes makes the later ones
        start with at least as many; with the study's SLO (:attr:`Target.trial_slo`) a window
        stops once its miss is settled, and once a window missed a latency-percentile bound, a
        later workload that differs from it only by a higher arrival rate is not measured (on
        the same engine, latency does not improve with more load): it comes back as a
        :class:`NotMeasuredError` with the reason, and the first measurement's details list it
        under ``not_measured``.
        """
        if not workloads:
            raise ValueError("run_series needs at least one workload")
        started = time.perf_counter()
        series = self.load_series(workloads, cache_dir)
        shortcuts = shortcuts_enabled()
        bounds = miss_bounds(self.trial_slo) if shortcuts else ()
        misses: list[tuple[int, str]] = []  # (series index, metric) of windows that missed
        skipped: list[dict[str, Any]] = []
        floor: int | None = None
        measured: list[tuple[dict[str, float], dict[str, Any], float] | Exception] = []
        with self.serve(config, series[0], cache_dir) as running:
            for index, one in enumerate(series):
                began = started if index == 0 else time.perf_counter()
                reason = _implied_miss(series, index, misses) if shortcuts else None
                if reason is not None:
                    measured.append(NotMeasuredError(reason))
                    skipped.append({"workload": workloads[index].name, "series_index": index,
                                    "reason": reason})
                    continue
                running.plan = WindowPlan(warmup=index == 0 or not shortcuts,
                                          min_client_processes=floor, miss_bounds=bounds)
                try:
                    running.check_alive(workloads[index].name)
                    metrics, details = self.measure(running, one)
                except Exception as exc:
                    failure = running.failure_of(workloads[index].name, exc)
                    if index == 0:
                        if failure is exc:
                            raise
                        raise failure from exc
                    measured.append(failure)  # a later workload fails alone; keep the rest
                    continue
                measured.append((metrics, details, time.perf_counter() - began))
                if shortcuts and len(details.get("validity_attempts", ())) > 1:
                    floor = max(floor or 1, int(details["client_processes"]))
                if (missed := _missed_bound(bounds, metrics, details)) is not None:
                    misses.append((index, missed))
        common = running.facts
        if len(series) > 1:
            common["series"] = [w.name for w in workloads]
        results: list[Measurement | Exception] = []
        for index, item in enumerate(measured):
            if isinstance(item, Exception):
                results.append(item)
                continue
            metrics, details, duration_s = item
            details.update(common)
            if len(series) > 1:
                details["series_index"] = index
            if index == 0 and skipped:
                details["not_measured"] = skipped
            results.append(Measurement(metrics=metrics, engine_versions=running.versions,
                                       details=details, duration_s=duration_s))
        return results

    def load_series(self, workloads: Sequence[Workload], cache_dir: Path
                    ) -> list[ServingWorkload]:
        """``workloads`` as served workloads that can share one server: the same model, and
        contexts that fit the first one's (raises :class:`WorkloadError` otherwise)."""
        for workload in workloads:
            self._check_kind(workload)
        series = [self.load_served(workload, cache_dir) for workload in workloads]
        first = series[0]
        for other, workload in zip(series[1:], workloads[1:], strict=True):
            if (other.model.path != first.model.path
                    or other.max_model_len() > first.max_model_len()):
                raise WorkloadError(
                    f"workload {workload.name!r} cannot share the server of {workloads[0].name!r}"
                    f": it needs the same model and at most {first.max_model_len()} tokens of "
                    "context")
        return series

    def measure(self, running: RunningServer, served: ServingWorkload
                ) -> tuple[dict[str, float], dict[str, Any]]:
        """Measure ``served`` on ``running`` as its :class:`WindowPlan` says (warm-up, replay,
        server check, gate), recording the engine's peak GPU memory when it can be read."""
        plan = running.plan
        metrics, details = measure_endpoint(
            running.base_url, self.served_model_name(served), served,
            extra_body={"ignore_eos": True},
            client_processes=client_processes_param(served.target_params),
            max_client_processes=client_processes_max_param(served.target_params),
            vocabulary=self.server_metrics, warmup=plan.warmup,
            min_client_processes=plan.min_client_processes, miss_bounds=plan.miss_bounds)
        peak = gpu_memory_mb(process_tree(running.server.pid or 0))
        if peak is not None:
            metrics["peak_memory_mb"] = peak
        return metrics, details

    @contextlib.contextmanager
    def serve(self, config: Mapping[str, Any], served: ServingWorkload, cache_dir: Path,
              *, env: Mapping[str, str] | None = None) -> Iterator[RunningServer]:
        """Start this target's server with ``config`` for ``served``'s model and context, wait
        until it is healthy, yield it, and always stop it. The yielded :class:`RunningServer`'s
        ``facts`` (argv, start-up time, the engine's own start-up facts, its log tail) are
        complete once the block has exited. ``env`` adds variables to the server's environment
        (e.g. the device a co-resident server may use). The engine's cache variables
        (:attr:`EngineServer.cache_env`) point into the engine cache every trial shares."""
        spec = self.engine_server
        self.check_available()
        max_model_len = served.max_model_len()
        clean = self.validate_config(config)
        self.reject_infeasible(clean, max_model_len)
        version = self.installed_version()
        port = free_port()
        base_url = f"http://127.0.0.1:{port}"
        with tempfile.TemporaryDirectory(prefix=f"advisor-{spec.scratch_name}-") as tmp:
            args, launch_details = self.server_argv(
                clean, served, port=port, engine_version=version, max_model_len=max_model_len,
                workdir=Path(tmp))
            argv = [*spec.command(), *args]
            timeout_s = float(served.target_params.get("startup_timeout_s",
                                                       spec.startup_timeout_s))
            server_env = self.server_env(served)
            # Compile and kernel caches are shared by every trial (the second start reuses what
            # the first compiled); the rest of the scratch directory stays this trial's own.
            base_env = dict(server_env if server_env is not None else os.environ)
            cache_vars, cache_facts = engine_cache_env(
                spec.cache_env, cache_dir=cache_dir, scratch=Path(tmp), env=base_env)
            if cache_vars:
                server_env = {**base_env, **cache_vars}
            if env:
                server_env = {**(server_env if server_env is not None else os.environ), **env}
            with ManagedServer(argv, base_url=base_url,
                               log_path=Path(tmp) / f"{spec.scratch_name}.log",
                               env=server_env, name=spec.process_name,
                               stop_on_sigterm=True) as server:
                try:
                    startup_s = server.wait_ready(timeout_s)
                except EngineStartError as exc:
                    reason = self.engine_refusal(server.log_tail(), server.returncode)
                    if reason is not None:
                        raise ConfigRejectedError(
                            f"{spec.label} rejected the configuration: {reason}") from None
                    cause = root_cause(server.log_tail(ROOT_CAUSE_LOG_CHARS))
                    if cause is None:
                        raise
                    raise EngineStartError(f"{spec.label} failed to start: {cause}\n{exc}"
                                           ) from None
                launch = {"argv": argv, **launch_details, "engine_version": version,
                          "model": served.model.label, "model_path": str(served.model.path),
                          "dummy_weights": served.model.dummy_weights,
                          "max_model_len": max_model_len, "startup_s": startup_s,
                          **cache_facts}
                running = RunningServer(base_url=base_url, server=server, config=clean,
                                        label=spec.process_name, facts=dict(launch))
                try:
                    yield running
                finally:
                    log = server.log_tail(spec.log_read_chars)
                    facts = self.log_facts(log)
                    versions = self.engine_versions()
                    if self.engine not in versions and "engine_version_reported" in facts:
                        versions[self.engine] = facts["engine_version_reported"]
                    log_tail = self.log_to_store(log)
                    running.versions = versions
                    running.facts = {
                        **launch, "engine_version": version or versions.get(self.engine),
                        **facts, "engine_log_tail": log_tail,
                        "engine_log_tail_chars": len(log_tail),
                    }

    # -- hooks of a target that starts its server -----------------------------------------------

    def server_argv(self, config: Mapping[str, Any], served: ServingWorkload, *, port: int,
                    engine_version: str | None, max_model_len: int, workdir: Path
                    ) -> tuple[list[str], dict[str, Any]]:
        """The server's arguments after the command prefix for the validated ``config``, and
        launch facts to record with the trial. Files the server reads go under ``workdir``, which
        lasts until the server has stopped."""
        raise NotImplementedError(f"the {self.name} target starts no server")

    def reject_infeasible(self, config: Mapping[str, Any], max_model_len: int) -> None:
        """Raise :class:`ConfigRejectedError` for a validated ``config`` the engine would refuse,
        before paying for its start (default: none known)."""

    def server_env(self, served: ServingWorkload) -> dict[str, str] | None:
        """The server's environment (default None: this process's)."""
        return None

    def served_model_name(self, served: ServingWorkload) -> str:
        """The model name the server serves and requests ask for."""
        return served.model.label

    def engine_refusal(self, log: str, exit_code: int | None) -> str | None:
        """The engine's own reason when the log of a failed start shows it refused the
        configuration; None for any other failure (the default)."""
        return None

    def log_facts(self, log: str) -> dict[str, Any]:
        """Facts the engine logged about itself (``engine_version_reported``, ...) to record."""
        return {}

    def log_to_store(self, log: str) -> str:
        """The part of the server log to store with the trial (default: all that was read)."""
        return log

    def reference_harness(self) -> ReferenceHarness | None:
        """The independent load generator ``advisor crosscheck`` compares the client with (None:
        none fits this engine)."""
        return None

    def with_memory_share(self, config: Mapping[str, Any], share: float) -> dict[str, Any]:
        """``config`` with the engine's memory limited to ``share`` of the accelerator, so that
        several servers can be up at once (``advisor crosscheck --co-resident``). Raises
        :class:`ConfigRejectedError` when the engine has no such knob (the default)."""
        raise ConfigRejectedError(f"the {self.name} target cannot share an accelerator between "
                                  "servers")

    # -- reproduction ---------------------------------------------------------------------------

    def command_model(self, workload: Workload | None) -> tuple[ModelSource, int] | None:
        """The model and context length an ``llm-serving`` ``workload`` runs with, for
        ``launch_command`` (nothing is written; one workload's answer is computed once per
        process, as a recommender asks for many commands of few workloads); None without such a
        workload."""
        if workload is None or workload.kind != KIND:
            return None
        spec, _ = ServingWorkload.check(workload.params, target_keys=self.target_params)
        model = describe_model(spec.model)
        return model, _context_length(canonical_json(workload.params),
                                      frozenset(self.target_params), model)


def _missed_bound(bounds: Sequence[MissBound], metrics: Mapping[str, float],
                  details: Mapping[str, Any]) -> str | None:
    """The first of ``bounds`` a usable window missed (settled early, or measured whole), else
    None; a window the validity gate did not trust tells nothing about the server."""
    if not bounds or details.get("validity") not in _TRUSTED:
        return None
    if (settled := details.get("settled")) is not None:
        return str(settled["metric"])
    for bound in bounds:
        value = metrics.get(bound.metric)
        if value is not None and value > bound.threshold_s * 1e3:
            return bound.metric
    return None


def _implied_miss(series: Sequence[ServingWorkload], index: int,
                  misses: Sequence[tuple[int, str]]) -> str | None:
    """Why workload ``index`` of ``series`` need not be measured: an earlier window that missed
    a latency bound ran the same workload at a lower arrival rate (None: nothing implies it)."""
    spec = series[index].spec
    rate = spec.arrival.rate_rps
    if rate is None:
        return None
    for earlier, metric in misses:
        other = series[earlier].spec
        lower = other.arrival.rate_rps
        if lower is not None and lower < rate and _rate_free(other) == _rate_free(spec):
            return (f"not measured: {metric} missed the SLO at {lower:g} req/s on the same "
                    "engine start, and latency does not improve at a higher rate")
    return None


def _rate_free(spec: LLMWorkloadSpec) -> LLMWorkloadSpec:
    """``spec`` without what a change of arrival rate changes (the rate, the request count that
    keeps the window's length, the seed that keeps prompts apart)."""
    return dataclasses.replace(spec, n_requests=0, seed=0,
                               arrival=dataclasses.replace(spec.arrival, rate_rps=None))

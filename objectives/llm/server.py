"""Start, health-check and stop an OpenAI-compatible server subprocess (vLLM, TensorRT-LLM), and
drive a workload through any OpenAI-compatible endpoint: the parts every serving target shares.

A trial that measures a serving engine starts it from an argv list (never a shell string), waits
until its health endpoint answers 200, drives load through it and always stops it again. The
server runs in its own session under a small reaper process, so :meth:`ManagedServer.stop` can
signal its whole process group (the engine's worker processes included) without touching the
trial process, and a trial process that dies, even by SIGKILL, takes the whole group with it
(``PR_SET_PDEATHSIG`` on the reaper). Stdout and stderr go to a log file whose tail becomes the
reason of a failed start.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import json
import logging
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO, Any

import httpx
import numpy as np
import psutil

from advisor.errors import EngineStartError, WorkloadError
from objectives.llm.client import LoadResult, run_load
from objectives.llm.client_pool import auto_processes, process_ceiling, run_load_sharded
from objectives.llm.early_stop import MissBound, MissWatch
from objectives.llm.metrics import request_samples, summarize
from objectives.llm.models import (
    MODEL_SHAPES,
    config_vocab_size,
    model_config,
    tokenizer_dir,
    write_model_dir,
)
from objectives.llm.requests import RequestSpec
from objectives.llm.server_metrics import (
    GaugeSampler,
    MetricVocabulary,
    ServerMetricsError,
    Snapshot,
    reset_cache,
    scrape,
    summarize_window,
)
from objectives.llm.validity import CLIENT_BOUND, GATE_VERSION, Tolerance, Verdict, judge
from objectives.llm.workload import (
    LLMWorkloadSpec,
    drain_cutoff_s,
    generate_requests,
    generate_warmup_requests,
    max_concurrency,
)
from objectives.processes import die_with_parent, kill_process_group

__all__ = [
    "CLIENT_PROCESSES_MAX_PARAM",
    "CLIENT_PROCESSES_PARAM",
    "DEFAULT_LOG_TAIL_CHARS",
    "ManagedServer",
    "MeasuredWindow",
    "ModelSource",
    "ServingWorkload",
    "client_processes_max_param",
    "client_processes_param",
    "describe_model",
    "free_port",
    "gpu_memory_mb",
    "measure_endpoint",
    "measure_window",
    "package_versions",
    "process_peak_rss_mb",
    "process_tree",
    "resolve_model",
    "root_cause",
    "validity_details",
    "weight_metrics",
]

DEFAULT_LOG_TAIL_CHARS = 4000
log = logging.getLogger(__name__)


#: How much of a failed server's log :func:`root_cause` searches.
ROOT_CAUSE_LOG_CHARS = 400_000
_EXCEPTION_LINE = re.compile(
    r"^(?:\([\w ]+pid=\d+\)\s*)?((?:[\w.]+\.)?\w*(?:Error|Exception|Exit)\w*)(?:: (.*))?$")
#: A logger line at ERROR level or worse, e.g. vLLM's
#: ``(EngineCore_DP0 pid=7) ERROR 11-30 19:10:01 [core.py:708] EngineCore failed to start.``
_ERROR_LOG_LINE = re.compile(
    r"^(?:\([\w ]+pid=\d+\)\s*)?(?:ERROR|CRITICAL)\b[^\]]*\]\s*(.+)$")
#: Exception lines that only wrap the real cause (a multi-process engine reports its failed core).
_WRAPPERS = ("Engine core initialization failed", "See root cause above", "Worker failed",
             "EngineCore failed to start")


def root_cause(log: str) -> str | None:
    """The first exception line of ``log`` that is not a mere wrapper, without its process
    prefix: a multi-process server prints the real error in one process's traceback and a generic
    one last, so a log tail alone often misses it. A bare ``AssertionError`` counts. Without any
    exception line, the first ERROR-level log line that is not a wrapper (a process that died
    without a traceback often logs one); None when the log shows neither."""
    lines = [raw.strip() for raw in log.splitlines()]
    for line in lines:
        match = _EXCEPTION_LINE.match(line)
        if match:
            message = (match.group(2) or "").strip()
            if not any(w in message for w in _WRAPPERS):
                return f"{match.group(1)}: {message}" if message else match.group(1)
    for line in lines:
        match = _ERROR_LOG_LINE.match(line)
        if match and not any(w in match.group(1) for w in _WRAPPERS):
            return f"ERROR: {match.group(1).strip()}"
    return None


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (the OS picks it by binding port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    """Runs in the reaper before exec: SIGTERM it when its parent (the trial process) dies."""
    die_with_parent(signal.SIGTERM)


# The server's session leader, run as `python -c _REAPER SERVER_ARGV...` (an argv list, no shell).
# It starts the server with PR_SET_PDEATHSIG=SIGKILL and exits with its exit code; on SIGTERM
# (stop(), or its own PDEATHSIG when the trial process dies, even by SIGKILL) it terminates the
# server, waits up to _GRACE seconds, then SIGKILLs the whole process group, itself included.
# Without it, a SIGKILLed trial process would take the server down but not the engine processes
# the server spawned (vLLM's engine core does not watch its parent).
_REAPER = """
import ctypes, os, signal, subprocess, sys, time
def pdeathsig():
    try:
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)
    except OSError:
        pass
try:
    child = subprocess.Popen(sys.argv[2:], preexec_fn=pdeathsig)
except OSError as exc:
    sys.exit(f"cannot start {sys.argv[2]}: {exc.strerror or exc}")
stopping = []
signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
while child.poll() is None and not stopping:
    time.sleep(0.1)
if stopping:
    child.terminate()
    try:
        child.wait(timeout=float(sys.argv[1]))
    except subprocess.TimeoutExpired:
        pass
    os.killpg(0, signal.SIGKILL)
code = child.returncode
sys.exit(code if code >= 0 else 128 - code)
"""
_REAPER_GRACE_S = 10.0


class ManagedServer:
    """One server subprocess, from start to stop.

    ``argv`` is the full command line; ``base_url`` is where it will listen (e.g.
    ``http://127.0.0.1:8123``) and ``health_path`` the endpoint that answers 200 once it serves.
    :attr:`pid` is the reaper's (the process-group leader); the server is its child.
    Use as a context manager (``with ManagedServer(...) as server: server.wait_ready(600)``): the
    server is started on entry and always stopped on exit.

    With ``stop_on_sigterm`` (main thread only) a SIGTERM to this process stops the server's
    process group before the process exits, so the isolation layer's SIGTERM-then-SIGKILL of a
    timed-out trial also reaches the engine's worker processes.
    """

    def __init__(self, argv: Sequence[str], *, base_url: str, log_path: Path,
                 health_path: str = "/health", env: Mapping[str, str] | None = None,
                 cwd: Path | None = None, name: str = "server",
                 stop_on_sigterm: bool = False) -> None:
        if not argv:
            raise ValueError("`argv` must name a command, but got an empty list.")
        self.argv = [str(a) for a in argv]
        self.base_url = base_url.rstrip("/")
        self.health_path = health_path if health_path.startswith("/") else f"/{health_path}"
        self.log_path = Path(log_path)
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.name = name
        self.stop_on_sigterm = stop_on_sigterm
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._previous_sigterm: Any = None
        self._sigterm_installed = False
        self._started_at: float | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Launch the process (stdout and stderr to ``log_path``)."""
        if self._proc is not None:
            raise RuntimeError(f"{self.name} was already started (pid {self._proc.pid})")
        exe = self.argv[0]
        path = (self.env or os.environ).get("PATH")
        if shutil.which(exe, path=path) is None:
            raise EngineStartError(f"cannot start {self.name}: {exe!r} is not an executable "
                                   "file or a command on PATH")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("wb")
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _REAPER, str(_REAPER_GRACE_S), *self.argv],
                stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=_die_with_parent, env=self.env,
                cwd=self.cwd,
            )
        except OSError as exc:
            self._close_log()
            raise EngineStartError(
                f"cannot start {self.name}: {exc.strerror or exc} (command: {self.argv[0]})"
            ) from None
        self._started_at = time.monotonic()
        if self.stop_on_sigterm and threading.current_thread() is threading.main_thread():
            self._previous_sigterm = signal.signal(signal.SIGTERM, self._on_sigterm)
            self._sigterm_installed = True

    def wait_ready(self, timeout_s: float, *, poll_interval_s: float = 0.5) -> float:
        """Poll ``GET {base_url}{health_path}`` until it answers 200; returns seconds since start.

        Raises :class:`EngineStartError` with the log tail when the process exits first (with its
        exit code) or when ``timeout_s`` passes.
        """
        proc = self._require_started()
        assert self._started_at is not None
        deadline = time.monotonic() + timeout_s
        url = f"{self.base_url}{self.health_path}"
        with httpx.Client(timeout=httpx.Timeout(5.0), trust_env=False) as client:
            while True:
                code = proc.poll()
                if code is not None:
                    raise EngineStartError(
                        f"{self.name} exited with {_describe_exit(code)} before it became ready"
                        f"\n--- log tail ---\n{self.log_tail()}".rstrip()
                    )
                with contextlib.suppress(httpx.TransportError):
                    if client.get(url).status_code == 200:
                        return time.monotonic() - self._started_at
                if time.monotonic() >= deadline:
                    raise EngineStartError(
                        f"{self.name} did not answer 200 on {url} within {timeout_s:g} s"
                        f"\n--- log tail ---\n{self.log_tail()}".rstrip()
                    )
                time.sleep(poll_interval_s)

    def answers(self, timeout_s: float = 2.0) -> bool:
        """Whether the server answers 200 on its health path now (one try)."""
        try:
            with httpx.Client(timeout=httpx.Timeout(timeout_s), trust_env=False) as client:
                return client.get(f"{self.base_url}{self.health_path}").status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self, grace_s: float = 15.0) -> int | None:
        """SIGTERM the server's process group, SIGKILL it after ``grace_s``; returns the exit code.

        Idempotent. Whatever else is left in the group (engine worker processes) is killed too.
        """
        proc = self._proc
        if proc is None:
            return None
        try:
            kill_process_group(proc, grace_s)
        finally:
            self._close_log()
            self._restore_sigterm()
        return proc.returncode

    def __enter__(self) -> ManagedServer:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # -- state ----------------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def returncode(self) -> int | None:
        """The exit code once the process has exited (negative: killed by that signal)."""
        return self._proc.poll() if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self, n_chars: int = DEFAULT_LOG_TAIL_CHARS) -> str:
        """The last ``n_chars`` characters of the server's log (empty if there is none yet)."""
        if self._log is not None:
            with contextlib.suppress(OSError, ValueError):
                self._log.flush()
        try:
            size = self.log_path.stat().st_size
            with self.log_path.open("rb") as f:
                # Read a little more than asked: multi-byte characters are cut at the seek point.
                f.seek(max(0, size - 4 * n_chars))
                data = f.read()
        except OSError:
            return ""
        return data.decode(errors="replace").strip()[-n_chars:]

    # -- internals ------------------------------------------------------------------------------

    def _require_started(self) -> subprocess.Popen[bytes]:
        if self._proc is None:
            raise RuntimeError(f"{self.name} was not started; call start() or use `with`")
        return self._proc

    def _close_log(self) -> None:
        if self._log is not None:
            with contextlib.suppress(OSError):
                self._log.close()
            self._log = None

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        # The isolation layer SIGKILLs 5 s after its SIGTERM: keep the grace period short.
        self.stop(grace_s=2.0)
        previous = self._previous_sigterm
        if callable(previous):
            handler: Callable[[int, FrameType | None], Any] = previous
            handler(signum, frame)
        raise SystemExit(128 + signum)

    def _restore_sigterm(self) -> None:
        if self._sigterm_installed and threading.current_thread() is threading.main_thread():
            # None means a handler not installed from Python; the default is the best stand-in.
            previous = self._previous_sigterm
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
            self._sigterm_installed = False


def _describe_exit(code: int) -> str:
    # The reaper reports a server killed by signal N as exit code 128 + N, as a shell does.
    signum = -code if code < 0 else code - 128 if code > 128 else None
    if signum is not None:
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        return f"signal {name}" if code < 0 else f"exit code {code} ({name})"
    return f"exit code {code}"


# -- what a serving trial loads and sends ------------------------------------------------------

#: ``max_model_len`` derived from a workload is rounded up to a multiple of this, so that small
#: changes in the sampled lengths do not change the engine's configuration.
MODEL_LEN_QUANTUM = 256


@dataclass(frozen=True)
class ModelSource:
    """The model directory an engine loads: a named shape with random weights, or a real model.

    ``shape`` is None for a local model path (real weights: no ``--load-format dummy``).
    """

    path: Path
    shape: str | None
    vocab_size: int
    max_position_embeddings: int | None

    @property
    def dummy_weights(self) -> bool:
        return self.shape is not None

    @property
    def label(self) -> str:
        """The name the server is asked to serve the model under."""
        return self.shape or self.path.name

    @property
    def tokenizer_path(self) -> Path:
        """Where an engine or a harness loads the tokenizer: a written shape's tokenizer-only
        directory (:func:`objectives.llm.models.tokenizer_dir` says why), a local model's own
        directory."""
        return tokenizer_dir(self.path) if self.dummy_weights else self.path


def resolve_model(model: str, cache_dir: Path) -> ModelSource:
    """A named shape's model directory under ``cache_dir/models/<shape>`` (written once), or a
    local model directory as it is. Raises :class:`WorkloadError` for anything else."""
    if model in MODEL_SHAPES:
        path = Path(cache_dir) / "models" / model
        # Rewrite only when missing or changed: a running engine of a parallel trial may read it.
        if (_read_json(path / "config.json") != model_config(model)
                or not (tokenizer_dir(path) / "tokenizer.json").exists()):
            write_model_dir(model, path)
        return dataclasses.replace(describe_model(model), path=path)
    return describe_model(model)


def describe_model(model: str) -> ModelSource:
    """What :func:`resolve_model` returns, without writing anything: a named shape's source has
    the relative path ``models/<shape>`` (where a launch command expects it), a local model
    directory is read. Raises :class:`WorkloadError` like it."""
    if model in MODEL_SHAPES:
        config = model_config(model)
        return ModelSource(Path("models") / model, model, int(config["vocab_size"]),
                           config.get("max_position_embeddings"))
    path = Path(model).expanduser()
    if not path.is_dir():
        raise WorkloadError(f"model {model!r} is neither a known shape "
                            f"({', '.join(sorted(MODEL_SHAPES))}) nor a local model directory")
    config = _read_json(path / "config.json")
    if not isinstance(config, dict):
        raise WorkloadError(f"model directory {path} has no readable config.json")
    text_config = config.get("text_config") or {}
    vocab = config_vocab_size(config)
    if vocab is None:
        raise WorkloadError(f"{path / 'config.json'} has no integer vocab_size")
    max_pos = config.get("max_position_embeddings") or text_config.get("max_position_embeddings")
    return ModelSource(path.resolve(), None, vocab, max_pos if isinstance(max_pos, int) else None)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class ServingWorkload:
    """A workload split into the ``llm-serving`` spec and the target's own parameters.

    ``target_params`` are the keys a target reads itself (e.g. ``startup_timeout_s``); they are
    removed before the rest is validated as an :class:`LLMWorkloadSpec`, which rejects unknown
    keys. ``requests`` and ``warmup`` are generated for ``model``'s vocabulary.
    """

    spec: LLMWorkloadSpec
    target_params: dict[str, Any]
    model: ModelSource
    requests: list[RequestSpec]
    warmup: list[RequestSpec]

    @classmethod
    def check(cls, params: Mapping[str, Any], *, target_keys: Iterable[str] = ()
              ) -> tuple[LLMWorkloadSpec, dict[str, Any]]:
        """Validate ``params`` without resolving the model or generating requests: the workload
        spec and the target's own params."""
        keys = set(target_keys)
        target_params = {k: v for k, v in params.items() if k in keys}
        client_processes_param(target_params)  # a bad value fails the study, not each trial
        client_processes_max_param(target_params)
        return (LLMWorkloadSpec.from_params({k: v for k, v in params.items() if k not in keys}),
                target_params)

    @classmethod
    def load(cls, params: Mapping[str, Any], cache_dir: Path, *,
             target_keys: Iterable[str] = ()) -> ServingWorkload:
        spec, target_params = cls.check(params, target_keys=target_keys)
        return cls._generated(spec, target_params, resolve_model(spec.model, cache_dir))

    @classmethod
    def described(cls, params: Mapping[str, Any], *, target_keys: Iterable[str] = ()
                  ) -> ServingWorkload:
        """:meth:`load` without writing the model directory (:func:`describe_model`): what a
        launch command or a context length needs, for a workload that is not run."""
        spec, target_params = cls.check(params, target_keys=target_keys)
        return cls._generated(spec, target_params, describe_model(spec.model))

    @classmethod
    def _generated(cls, spec: LLMWorkloadSpec, target_params: dict[str, Any],
                   model: ModelSource) -> ServingWorkload:
        return cls(spec, target_params, model,
                   generate_requests(spec, model.vocab_size),
                   generate_warmup_requests(spec, model.vocab_size))

    def max_model_len(self) -> int:
        """The context length the engine needs: ``target_params["max_model_len"]`` if given, else
        the longest prompt + output the workload can produce (the length distributions' upper
        bounds; a trace's longest request) rounded up to :data:`MODEL_LEN_QUANTUM`, never above
        the model's ``max_position_embeddings``."""
        given = self.target_params.get("max_model_len")
        spec = self.spec
        needed = max(r.prompt_len + r.output_len for r in [*self.requests, *self.warmup])
        if spec.prompt_len is not None and spec.output_len is not None:
            needed = max(needed, spec.prompt_len.upper + spec.output_len.upper)
        limit = self.model.max_position_embeddings
        if given is not None:
            if isinstance(given, bool) or not isinstance(given, int) or given < needed:
                raise WorkloadError(f"`max_model_len` must be an integer >= {needed} (the "
                                    f"longest prompt + output of the workload), got {given!r}")
            return given
        length = math.ceil(needed / MODEL_LEN_QUANTUM) * MODEL_LEN_QUANTUM
        if limit is not None:
            if needed > limit:
                raise WorkloadError(f"the workload needs {needed} tokens of context, but model "
                                    f"{self.model.label} has max_position_embeddings={limit}")
            length = min(length, limit)
        return length


#: Workload param (a target param: the workload's requests do not change) that fixes how many
#: client processes replay the workload: an integer >= 1, or "auto" (the default).
CLIENT_PROCESSES_PARAM = "client_processes"
#: Workload param: the most client processes the validity gate may escalate to (default: the
#: cores the client may use, :func:`objectives.llm.client_pool.process_ceiling`).
CLIENT_PROCESSES_MAX_PARAM = "client_processes_max"
#: Seconds between the end of the measured load and the closing scrape: the server records a
#: request's histograms after it has streamed the request's last chunk.
SETTLE_S = 0.5


def client_processes_param(target_params: Mapping[str, Any]) -> int | None:
    """The ``client_processes`` target param: None for "auto" or absent, else an integer >= 1."""
    value = target_params.get(CLIENT_PROCESSES_PARAM, "auto")
    if value == "auto":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WorkloadError(f"`{CLIENT_PROCESSES_PARAM}` must be an integer >= 1 or \"auto\", "
                            f"got {value!r}")
    return value


def client_processes_max_param(target_params: Mapping[str, Any]) -> int | None:
    """The ``client_processes_max`` target param: None when absent, else an integer >= 1."""
    value = target_params.get(CLIENT_PROCESSES_MAX_PARAM)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WorkloadError(f"`{CLIENT_PROCESSES_MAX_PARAM}` must be an integer >= 1, "
                            f"got {value!r}")
    return value


@dataclass(frozen=True)
class MeasuredWindow:
    """One replay of the workload: the client's result, the server's summary of the same window
    (``{"available": False, "reason": ...}`` when it could not be read) and the gate's verdict."""

    load: LoadResult
    server: dict[str, Any]
    verdict: Verdict
    cache_reset: bool


def measure_window(base_url: str, served_model: str, requests: Sequence[RequestSpec], *,
                   processes: int, cap: int | None, cutoff_s: float | None,
                   vocabulary: MetricVocabulary | None, api_key: str | None = None,
                   extra_body: Mapping[str, Any] | None = None, timeout_s: float = 600.0,
                   tolerance: Tolerance | None = None,
                   miss_bounds: Sequence[MissBound] = ()) -> MeasuredWindow:
    """Replay ``requests`` once in ``processes`` client processes and check it against the
    server: empty its prefix cache (the same prompts must not be served from an earlier replay),
    scrape its metrics, sample its queue gauges during the run, scrape again, judge. The replay
    stops early once it settles a miss of one of ``miss_bounds``
    (:mod:`objectives.llm.early_stop`)."""
    cache_reset = False
    before: Snapshot | None = None
    why_not = "the target declares no server metrics"
    if vocabulary is not None:
        cache_reset = reset_cache(base_url, vocabulary, api_key=api_key)
        try:
            before = scrape(base_url, vocabulary)
        except ServerMetricsError as exc:
            why_not = str(exc)
    sampler = (GaugeSampler(base_url, vocabulary) if vocabulary is not None and before
               else contextlib.nullcontext())
    with sampler:
        load = run_load_sharded(base_url, served_model, requests, processes=processes,
                                max_concurrency=cap, api_key=api_key, extra_body=extra_body,
                                timeout_s=timeout_s, cutoff_s=cutoff_s,
                                watch=MissWatch(miss_bounds, requests) if miss_bounds else None)
    server: dict[str, Any] = {"available": False, "reason": why_not}
    if vocabulary is not None and before is not None:
        time.sleep(SETTLE_S)
        try:
            after = scrape(base_url, vocabulary)
            server = {"available": True, **summarize_window(
                before, after, vocabulary, window_s=max(load.duration_s, 1e-9),
                gauges=sampler.trace if isinstance(sampler, GaugeSampler) else None)}
        except ServerMetricsError as exc:
            server = {"available": False, "reason": str(exc)}
    verdict = judge(load.records, server if server["available"] else None,
                    loop_lag_s=load.loop_lag_s, capped=cap is not None, tolerance=tolerance,
                    stopped_early=load.settled is not None)
    return MeasuredWindow(load, server, verdict, cache_reset)


def measure_endpoint(base_url: str, served_model: str, workload: ServingWorkload, *,
                     extra_body: Mapping[str, Any] | None = None, api_key: str | None = None,
                     concurrency: int | None = None, rate_scale: float = 1.0,
                     timeout_s: float = 600.0, client_processes: int | None = None,
                     vocabulary: MetricVocabulary | None = None,
                     max_client_processes: int | None = None,
                     tolerance: Tolerance | None = None, warmup: bool = True,
                     min_client_processes: int | None = None,
                     miss_bounds: Sequence[MissBound] = ()
                     ) -> tuple[dict[str, float], dict[str, Any]]:
    """Send the warm-up requests (not measured; none with ``warmup`` False, when an earlier
    window already warmed this server up), then replay the workload, check it against the
    server's own metrics and summarize it.

    The measured replay runs in ``client_processes`` client processes (None: as many as the
    streamed tokens/s need, :func:`objectives.llm.client_pool.auto_processes`). With a
    ``vocabulary`` the server's metrics are scraped around the replay and the validity gate
    (:mod:`objectives.llm.validity`) compares them with the client's; when it finds the client
    bound, the replay is repeated with twice the processes, up to ``max_client_processes``
    (default :func:`objectives.llm.client_pool.process_ceiling`). The details record every
    attempt, the final ``validity`` with its reasons and checks, the server's summary
    (``server_metrics``), how many client processes ran and how late their event loops woke.

    ``concurrency`` caps requests in flight (default: the workload's own cap); ``rate_scale``
    multiplies the arrival rate (arrival times are divided by it). Goodput is summarized without
    per-request bounds (it then equals ``requests_per_s``): the per-request samples go into the
    details and the driver recomputes goodput for the study's SLO through ``Target.apply_slo``.
    ``min_client_processes`` is the fewest processes the replay starts with (an earlier window of
    the same series found fewer client-bound). With ``miss_bounds`` (the study's SLO bounds the
    window can settle) a replay stops once their miss is settled; ``settled`` in the details
    says which bound, when and over how many requests, and the metrics cover what was measured.
    Returns the metrics and the facts worth recording with them.
    """
    if not rate_scale > 0:
        raise ValueError(f"`rate_scale > 0` must hold, but got {rate_scale=}")
    cap = concurrency if concurrency is not None else max_concurrency(workload.spec)
    requests = workload.requests
    if rate_scale != 1.0:
        requests = [_rescaled(r, rate_scale) for r in requests]
    warmup_failed = 0
    warmup_sent = len(workload.warmup) if warmup else 0
    if warmup and workload.warmup:
        warm = run_load(base_url, served_model, workload.warmup, max_concurrency=cap,
                        api_key=api_key, extra_body=extra_body, timeout_s=timeout_s)
        warmup_failed = sum(1 for r in warm.records if not r.ok)
    processes = client_processes if client_processes is not None else auto_processes(requests)
    ceiling = max(processes, max_client_processes if max_client_processes is not None
                  else process_ceiling())
    if min_client_processes is not None:
        processes = max(processes, min(min_client_processes, ceiling))
    cutoff = drain_cutoff_s(workload.spec, requests)
    attempts: list[MeasuredWindow] = []
    while True:
        window = measure_window(base_url, served_model, requests, processes=processes, cap=cap,
                                cutoff_s=cutoff, vocabulary=vocabulary, api_key=api_key,
                                extra_body=extra_body, timeout_s=timeout_s, tolerance=tolerance,
                                miss_bounds=miss_bounds)
        attempts.append(window)
        if window.verdict.validity != CLIENT_BOUND or processes >= ceiling:
            break
        log.warning("the client was bound with %d process(es) (%s); measuring again with %d",
                    processes, "; ".join(window.verdict.reasons[:2]),
                    min(ceiling, processes * 2))
        processes = min(ceiling, processes * 2)
    final = attempts[-1]
    load = final.load
    metrics = summarize(load.records, duration_s=load.duration_s)
    failures = [r.error for r in load.records if r.error is not None and r.cut_s is None]
    details: dict[str, Any] = {
        "requests": request_samples(load.records),
        "n_requests": len(requests), "warmup_requests": warmup_sent,
        "warmup_failed": warmup_failed, "max_concurrency": cap, "rate_scale": rate_scale,
        "load_duration_s": load.duration_s, "drain_limit_s": workload.spec.drain_limit_s,
        "client_processes": load.processes, **_loop_lag_details(load.loop_lag_s),
        "max_queue_delay_s": max((r.sent_s - r.scheduled_s for r in load.records
                                  if r.sent_s is not None), default=0.0),
        "server_metrics": final.server, "prefix_cache_reset": final.cache_reset,
        **validity_details(final.verdict),
        "validity_attempts": [
            {"client_processes": a.load.processes, "validity": a.verdict.validity,
             "reasons": list(a.verdict.reasons)} for a in attempts],
    }
    if failures:
        details["first_request_errors"] = failures[:3]
    if load.settled is not None:
        details["settled"] = load.settled.to_dict()
    return metrics, details


def validity_details(verdict: Verdict) -> dict[str, Any]:
    """The gate's verdict as the trial details store it."""
    return {"validity": verdict.validity, "validity_reasons": list(verdict.reasons),
            "validity_checks": [dataclasses.asdict(c) for c in verdict.checks],
            "validity_gate": GATE_VERSION,
            "client_send_late_p99_ms": verdict.send_late_p99_ms,
            "frontend_delay_ms": verdict.frontend_delay_ms}


def _loop_lag_details(lag_s: Sequence[float]) -> dict[str, float]:
    if not lag_s:
        return {}
    ms = np.asarray(lag_s) * 1e3
    return {"client_loop_lag_p99_ms": float(np.percentile(ms, 99)),
            "client_loop_lag_max_ms": float(ms.max())}


def _rescaled(request: RequestSpec, rate_scale: float) -> RequestSpec:
    return RequestSpec(index=request.index, arrival_s=request.arrival_s / rate_scale,
                       prompt_token_ids=request.prompt_token_ids, output_len=request.output_len,
                       prefix_group=request.prefix_group,
                       shared_prefix_len=request.shared_prefix_len)


# -- facts about the running engine ----------------------------------------------------------------

def process_tree(pid: int) -> set[int]:
    """``pid`` and all its living descendants (empty if ``pid`` is gone)."""
    try:
        root = psutil.Process(pid)
        return {pid, *(child.pid for child in root.children(recursive=True))}
    except psutil.Error:
        return set()


def gpu_memory_mb(pids: set[int]) -> float | None:
    """GPU memory (MiB) that ``nvidia-smi`` attributes to ``pids``; None when it cannot tell
    (no nvidia-smi, no GPU, or a PID namespace that hides the processes)."""
    exe = shutil.which("nvidia-smi")
    if exe is None or not pids:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    total, seen = 0.0, False
    for line in out.splitlines():
        pid_text, _, used = line.partition(",")
        with contextlib.suppress(ValueError):
            if int(pid_text) in pids:
                total += float(used)
                seen = True
    return total if seen else None


def process_peak_rss_mb(pids: set[int]) -> float | None:
    """The peak resident memory (MiB, ``VmHWM``) of ``pids`` summed: what a CPU engine held at
    most, its memory-mapped weights included once touched. None when none can be read."""
    total, seen = 0.0, False
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                total += float(line.split()[1]) / 1024  # kB
                seen = True
                break
    return total if seen else None


def weight_metrics(weights_bytes: float | None, parameters: int | None) -> dict[str, float]:
    """``weights_mb`` and ``bits_per_weight`` (the stated quality proxy of a quantization) from
    the bytes the engine loaded and the model's parameter count; what cannot be known is left
    out."""
    out: dict[str, float] = {}
    if weights_bytes is not None and weights_bytes > 0:
        out["weights_mb"] = weights_bytes / 2**20
        if parameters:
            out["bits_per_weight"] = weights_bytes * 8 / parameters
    return out


def package_versions(*names: str) -> dict[str, str]:
    """Installed versions of ``names`` (distribution names), without importing them."""
    versions: dict[str, str] = {}
    for name in names:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[name] = importlib.metadata.version(name)
    return versions

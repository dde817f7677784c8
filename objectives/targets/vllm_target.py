"""The vLLM target: one ``vllm serve`` process per trial, driven over its OpenAI-compatible API.

A trial maps the knobs to vLLM's own flags (``search_spaces/vllm.yaml``, per vLLM version),
starts ``python -m vllm.entrypoints.cli.main serve`` on a random-weight model directory of the
workload's shape (``--load-format dummy``) or on a local model, waits for ``/health``, sends the
warm-up requests, replays the workload with EOS ignored (fixed output lengths) and always stops
the server. vLLM is never imported here: the driver only needs to know it is installed, and the
server runs in its own process.

``ADVISOR_VLLM_COMMAND`` (a JSON list) replaces the command prefix
``[sys.executable, "-m", "vllm.entrypoints.cli.main", "serve"]``, for wrappers and containers
(e.g. ``["docker", "run", "--gpus", "all", "--network", "host", "vllm/vllm-openai"]``); the model
directory, flags and port are appended to it.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import shlex
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from advisor.errors import (
    ConfigRejectedError,
    EngineStartError,
    EngineUnavailableError,
    SearchSpaceError,
    WorkloadError,
)
from objectives.llm.metrics import GoodputFromSLO
from objectives.llm.server import (
    ManagedServer,
    ServingWorkload,
    free_port,
    gpu_memory_mb,
    measure_endpoint,
    package_versions,
    process_tree,
)
from objectives.llm.workload import KIND, PRESETS, load_preset
from objectives.measurement import Measurement
from objectives.target import ProgressFn, Target
from objectives.workload import Workload
from search_spaces import SearchSpace, load_space
from search_spaces.knobs import Knob

__all__ = [
    "COMMAND_ENV",
    "DEFAULT_COMMAND",
    "VllmTarget",
    "build_argv",
    "check_feasible",
    "engine_facts",
    "installed_version",
    "knob_argv",
    "log_excerpt",
    "rejection_reason",
    "server_command",
]

COMMAND_ENV = "ADVISOR_VLLM_COMMAND"
DEFAULT_COMMAND: tuple[str, ...] = (sys.executable, "-m", "vllm.entrypoints.cli.main", "serve")
#: Workload parameters the target reads itself (not part of the llm-serving spec).
TARGET_PARAMS = frozenset({"startup_timeout_s", "max_model_len"})
DEFAULT_STARTUP_TIMEOUT_S = 600.0
LOG_TAIL_CHARS = 4000
#: How much of the engine log is searched for start-up facts (a start-up log is ~50 kB).
FULL_LOG_CHARS = 2_000_000
#: A categorical value that means "leave the flag out" (vLLM's own default).
NONE_CHOICE = "none"
#: Real checkpoints of the named shapes, for commands users paste to deploy the tuned config.
HF_MODELS: dict[str, str] = {
    "llama-3-8b": "meta-llama/Meta-Llama-3-8B",
    "llama-3.2-1b": "meta-llama/Llama-3.2-1B",
}
_ARGPARSE_ERROR = re.compile(r"^\S[^\n]*: error: (?P<msg>.+)$", re.MULTILINE)
_VALIDATION_ERROR = re.compile(r"^.*\d+ validation errors? for \w+.*$", re.MULTILINE)
# "vLLM server version X, serving model M", or the logo form "█ ... █  version X" (with colours).
_SERVER_VERSION = re.compile(r"(?:vLLM server version |█(?:\x1b\[[0-9;]*m)?\s+version\s+"
                             r"(?:\x1b\[[0-9;]*m)?)(?P<v>\d[\w.+-]*?)(?=,|\x1b|\s|$)",
                             re.MULTILINE)
#: Facts vLLM logs at start-up (vllm/v1/core/kv_cache_utils.py, v1/worker/gpu_worker.py in 0.26).
_LOG_FACTS: dict[str, tuple[re.Pattern[str], type]] = {
    "kv_cache_tokens": (re.compile(r"GPU KV cache size: (?P<v>[\d,]+) tokens"), int),
    "kv_cache_max_concurrency": (
        re.compile(r"Maximum concurrency for [\d,]+ tokens per request: (?P<v>[\d.]+)x"), float),
    "kv_cache_memory_gib": (re.compile(r"Available KV cache memory: (?P<v>[\d.]+) GiB"), float),
}
#: Start-up lines that only list the server's routes: left out of the stored log tail.
_ROUTE_LINE = re.compile(r"\[launcher\.py:\d+\] Route: ")


def server_command(env: Mapping[str, str] | None = None) -> list[str]:
    """The argv prefix that starts ``vllm serve``: ``$ADVISOR_VLLM_COMMAND`` or the default."""
    raw = (os.environ if env is None else env).get(COMMAND_ENV)
    if not raw:
        return list(DEFAULT_COMMAND)
    try:
        command = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise EngineUnavailableError(f"{COMMAND_ENV} must be a JSON list of strings: {exc}"
                                     ) from None
    if (not isinstance(command, list) or not command
            or not all(isinstance(part, str) and part for part in command)):
        raise EngineUnavailableError(
            f"{COMMAND_ENV} must be a non-empty JSON list of strings, got {raw!r}")
    return command


def knob_argv(knob: Knob, value: Any, engine_version: str | None) -> list[str]:
    """The vLLM arguments for one active knob (empty for a gate knob or a "none" value).

    Raises :class:`ConfigRejectedError` when the knob has no flag in ``engine_version``.
    """
    if not knob.flags:
        return []  # a gate: it only switches the knobs after it on or off
    flag = knob.flag_for(engine_version)
    if flag is None:
        ranges = ", ".join(f"{m.flag} ({m.versions or 'any'})" for m in knob.flags)
        raise ConfigRejectedError(
            f"knob {knob.name} has no vLLM flag in vLLM {engine_version}; it maps to: {ranges}")
    if knob.type == "bool":
        if not flag.startswith("--"):
            raise SearchSpaceError(f"bool knob {knob.name} needs a --flag, got {flag!r}")
        return [flag if value else f"--no-{flag[2:]}"]
    if value is None or value == NONE_CHOICE:
        return []
    if knob.type == "int":
        return [flag, str(int(value))]
    return [flag, str(value)]


def build_argv(config: Mapping[str, Any], *, model_dir: Path | str, port: int,
               engine_version: str | None, max_model_len: int, seed: int,
               dummy_weights: bool = True, served_model_name: str | None = None,
               host: str = "127.0.0.1", space: SearchSpace | None = None) -> list[str]:
    """The ``vllm serve`` arguments for ``config`` (everything after the command prefix).

    Every active knob is mapped through its flag for ``engine_version`` (``None``: the unversioned
    or first mapping), defaults included, so the argv is the whole configuration. ``config`` is
    validated against the space first (missing knobs take their defaults); an invalid config or a
    knob without a flag in that version raises :class:`ConfigRejectedError`.
    """
    space = space or _load_space()
    try:
        clean = space.validate_config(config, fill_defaults=True)
    except SearchSpaceError as exc:
        raise ConfigRejectedError(str(exc)) from None
    argv = [str(model_dir), "--host", host, "--port", str(port),
            "--max-model-len", str(max_model_len), "--seed", str(seed)]
    if served_model_name:
        argv += ["--served-model-name", served_model_name]
    if dummy_weights:
        argv += ["--load-format", "dummy"]
    # Request logging is off by default since vLLM 0.11; access lines per request are noise.
    argv.append("--disable-uvicorn-access-log")
    for knob in space.active_knobs(clean):
        argv += knob_argv(knob, clean[knob.name], engine_version)
    return argv


def check_feasible(config: Mapping[str, Any], max_model_len: int) -> None:
    """Reject, before paying for an engine start, what vLLM's SchedulerConfig would reject."""
    seqs, tokens = config.get("max_num_seqs"), config.get("max_num_batched_tokens")
    if seqs is not None and tokens is not None and tokens < seqs:
        raise ConfigRejectedError(
            f"max_num_batched_tokens ({tokens}) must be greater than or equal to max_num_seqs "
            f"({seqs}) (vLLM SchedulerConfig)")
    if tokens is not None and config.get("enable_chunked_prefill") is False \
            and tokens < max_model_len:
        raise ConfigRejectedError(
            f"max_num_batched_tokens ({tokens}) is smaller than max_model_len ({max_model_len}) "
            "with chunked prefill off: a prompt longer than one step's budget could never be "
            "scheduled (vLLM SchedulerConfig)")


@functools.cache
def _load_space() -> SearchSpace:
    # Parsed once per process: build_argv and every trial's validation consult it.
    return load_space("vllm")


def installed_version() -> str | None:
    """vLLM's version from its package metadata (None when not installed here)."""
    return package_versions("vllm").get("vllm")


def engine_facts(log: str) -> dict[str, Any]:
    """What vLLM reported about itself at start-up: its version and KV-cache capacity."""
    facts: dict[str, Any] = {}
    if match := _SERVER_VERSION.search(log):
        facts["engine_version_reported"] = match.group("v")
    for key, (pattern, kind) in _LOG_FACTS.items():
        if match := pattern.search(log):
            facts[key] = kind(match.group("v").replace(",", ""))
    return facts


def log_excerpt(log: str, n_chars: int = LOG_TAIL_CHARS) -> str:
    """The end of the log without the route listing, at most ``n_chars`` characters."""
    kept = [line for line in log.splitlines() if not _ROUTE_LINE.search(line)]
    return "\n".join(kept)[-n_chars:]


def rejection_reason(log: str, exit_code: int | None) -> str | None:
    """vLLM's own message when it refused the arguments (argparse) or the resulting config
    (pydantic validation) rather than failing later; None for any other failure."""
    match = _ARGPARSE_ERROR.search(log)
    if match and (exit_code == 2 or "usage:" in log):
        return match.group("msg").strip()
    match = _VALIDATION_ERROR.search(log)
    if match:
        lines = log[match.start():].splitlines()
        detail = [lines[0].strip()] + [ln.strip() for ln in lines[1:6]
                                       if ln.startswith((" ", "\t")) and ln.strip()]
        return " | ".join(detail)
    return None


class VllmTarget(GoodputFromSLO, Target):
    """vLLM's OpenAI-compatible server on a random-weight (or local) model."""

    name: ClassVar[str] = "vllm"
    engine: ClassVar[str] = "vllm"
    description: ClassVar[str] = (
        "vLLM OpenAI-compatible server (vllm serve), one server per trial, random-weight models"
    )
    default_objective: ClassVar[str] = "maximize:output_tokens_per_s"
    default_slo: ClassVar[str] = "ttft_p95_ms<=300,tpot_p95_ms<=40"
    install_hint: ClassVar[str] = (
        "pip install vllm (on the project's H200 device machine: the vLLM 0.26 payload, see "
        "docs/engines.md)"
    )

    def space(self) -> SearchSpace:
        return _load_space()

    # -- availability and versions --------------------------------------------------------------

    def check_available(self) -> None:
        if os.environ.get(COMMAND_ENV):
            server_command()  # a wrapper runs vLLM elsewhere; only its syntax is checked here
            return
        if importlib.util.find_spec("vllm") is None:
            raise EngineUnavailableError(
                f"the vllm target needs vLLM, which this Python cannot import; install it with: "
                f"{self.install_hint}")

    def engine_versions(self) -> dict[str, str]:
        return package_versions("vllm", "torch", "transformers")

    # -- workloads ------------------------------------------------------------------------------

    def default_workload(self) -> Workload:
        return load_preset("chat")

    def named_workloads(self) -> dict[str, Workload]:
        return {name: load_preset(name) for name in PRESETS}

    def prepare(self, workload: Workload, cache_dir: Path, progress: ProgressFn | None = None
                ) -> dict[str, Any]:
        _check_kind(workload)
        served = ServingWorkload.load(workload.params, cache_dir, target_keys=TARGET_PARAMS)
        return {"model": served.model.label, "dummy_weights": served.model.dummy_weights,
                "max_model_len": served.max_model_len()}

    # -- one trial ------------------------------------------------------------------------------

    def run(self, config: Mapping[str, Any], workload: Workload, cache_dir: Path) -> Measurement:
        started = time.perf_counter()
        self.check_available()
        _check_kind(workload)
        served = ServingWorkload.load(workload.params, cache_dir, target_keys=TARGET_PARAMS)
        max_model_len = served.max_model_len()
        clean = self._validate(config)
        check_feasible(clean, max_model_len)
        version = installed_version()
        port = free_port()
        argv = [*server_command(), *build_argv(
            clean, model_dir=served.model.path, port=port, engine_version=version,
            max_model_len=max_model_len, seed=served.spec.seed,
            dummy_weights=served.model.dummy_weights, served_model_name=served.model.label)]
        timeout_s = float(served.target_params.get("startup_timeout_s",
                                                   DEFAULT_STARTUP_TIMEOUT_S))
        env = {**os.environ, "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
        if served.model.dummy_weights:
            env.setdefault("HF_HUB_OFFLINE", "1")  # everything it needs is in the model dir
        base_url = f"http://127.0.0.1:{port}"
        with tempfile.TemporaryDirectory(prefix="advisor-vllm-") as tmp, ManagedServer(
                argv, base_url=base_url, log_path=Path(tmp) / "vllm.log", env=env,
                name="vllm serve", stop_on_sigterm=True) as server:
            try:
                startup_s = server.wait_ready(timeout_s)
            except EngineStartError:
                reason = rejection_reason(server.log_tail(), server.returncode)
                if reason is not None:
                    raise ConfigRejectedError(f"vLLM rejected the configuration: {reason}"
                                              ) from None
                raise
            metrics, details = measure_endpoint(
                base_url, served.model.label, served, extra_body={"ignore_eos": True})
            peak = gpu_memory_mb(process_tree(server.pid or 0))
            log = server.log_tail(FULL_LOG_CHARS)
        if peak is not None:
            metrics["peak_memory_mb"] = peak
        facts = engine_facts(log)
        versions = self.engine_versions()
        if "vllm" not in versions and "engine_version_reported" in facts:
            versions["vllm"] = facts["engine_version_reported"]  # e.g. a container's vLLM
        log_tail = log_excerpt(log)
        details.update({
            "argv": argv, "engine_version": version or versions.get("vllm"),
            "model": served.model.label, "model_path": str(served.model.path),
            "dummy_weights": served.model.dummy_weights, "max_model_len": max_model_len,
            "startup_s": startup_s, **facts, "engine_log_tail": log_tail,
            "engine_log_tail_chars": len(log_tail),
        })
        return Measurement(metrics=metrics, engine_versions=versions, details=details,
                           duration_s=time.perf_counter() - started)

    def _validate(self, config: Mapping[str, Any]) -> dict[str, Any]:
        try:
            return self.space().validate_config(config, fill_defaults=True)
        except SearchSpaceError as exc:
            raise ConfigRejectedError(str(exc)) from None

    # -- reproduction ---------------------------------------------------------------------------

    def launch_command(self, config: Mapping[str, Any], workload: Workload | None = None) -> str:
        """``vllm serve MODEL --max-model-len N --flag value ...`` for ``config``.

        A named shape becomes its real checkpoint (``meta-llama/...``) so the command deploys the
        tuned configuration; a shape without one keeps its random-weight model directory
        (``--load-format dummy``). ``--max-model-len`` is the one the trials used.
        """
        clean = self._validate(config)
        args = ["vllm", "serve", "MODEL"]
        if workload is not None and workload.kind == KIND:
            with tempfile.TemporaryDirectory(prefix="advisor-vllm-cmd-") as tmp:
                served = ServingWorkload.load(workload.params, Path(tmp),
                                              target_keys=TARGET_PARAMS)
                max_model_len = served.max_model_len()
            model = served.model
            if model.shape in HF_MODELS:
                args = ["vllm", "serve", HF_MODELS[model.shape]]
            elif model.shape is not None:
                args = ["vllm", "serve", f"models/{model.shape}", "--load-format", "dummy"]
            else:
                args = ["vllm", "serve", str(model.path)]
            args += ["--max-model-len", str(max_model_len)]
        for knob in self.space().active_knobs(clean):
            args += knob_argv(knob, clean[knob.name], installed_version())
        return shlex.join(args)


def _check_kind(workload: Workload) -> None:
    if workload.kind != KIND:
        raise WorkloadError(
            f"the vllm target runs workloads of kind {KIND!r}, got {workload.kind!r}")

"""The TensorRT-LLM target: one ``trtllm-serve`` process (PyTorch backend) per trial, driven over
its OpenAI-compatible API.

Knobs map to ``trtllm-serve`` options or to fields of the ``--extra_llm_api_options`` YAML file
(``search_spaces/tensorrt-llm.yaml`` says which), written to a temporary file per trial. Named
model shapes load random weights (``load_format: dummy``). TensorRT-LLM is never imported here.

``ADVISOR_TRTLLM_COMMAND`` (a JSON list) replaces the command prefix
``[sys.executable, "-m", "tensorrt_llm.commands.serve", "serve"]`` for wrappers and containers.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml

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
    "TensorRTLLMTarget",
    "TrtllmLaunch",
    "build_argv",
    "build_launch",
    "check_feasible",
    "rejection_reason",
    "server_command",
]

COMMAND_ENV = "ADVISOR_TRTLLM_COMMAND"
DEFAULT_COMMAND: tuple[str, ...] = (sys.executable, "-m", "tensorrt_llm.commands.serve", "serve")
TARGET_PARAMS = frozenset({"startup_timeout_s", "max_model_len"})
DEFAULT_STARTUP_TIMEOUT_S = 900.0
LOG_TAIL_CHARS = 4000
OPTIONS_FLAG = "--extra_llm_api_options"
#: Knobs whose YAML field is in other units than the knob: value * factor is written.
FIELD_SCALE: dict[str, int] = {"host_cache_size": 2**30}  # GiB -> bytes
_CLICK_ERROR = re.compile(r"^Error: (?P<msg>.+)$", re.MULTILINE)
_VALIDATION_ERROR = re.compile(r"^.*\d+ validation errors? for \w+.*$", re.MULTILINE)


@dataclass
class TrtllmLaunch:
    """``trtllm-serve`` arguments (after the command prefix) and the extra-options YAML data."""

    argv: list[str]
    extra_options: dict[str, Any] = field(default_factory=dict)

    def options_yaml(self) -> str:
        return yaml.safe_dump(self.extra_options, sort_keys=True)


def server_command(env: Mapping[str, str] | None = None) -> list[str]:
    """The argv prefix that starts ``trtllm-serve``: ``$ADVISOR_TRTLLM_COMMAND`` or the default."""
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


@functools.cache
def _load_space() -> SearchSpace:
    return load_space("tensorrt-llm")


def _apply_knob(launch: TrtllmLaunch, knob: Knob, value: Any, engine_version: str | None) -> None:
    if not knob.flags:
        return  # a gate knob
    flag = knob.flag_for(engine_version)
    if flag is None:
        ranges = ", ".join(f"{m.flag} ({m.versions or 'any'})" for m in knob.flags)
        raise ConfigRejectedError(f"knob {knob.name} has no TensorRT-LLM option in version "
                                  f"{engine_version}; it maps to: {ranges}")
    if flag.startswith("--"):
        if knob.type == "bool":
            # click `is_flag` options have no negative form: false is their default, left out.
            if value:
                launch.argv.append(flag)
            return
        launch.argv += [flag, str(int(value)) if knob.type == "int" else str(value)]
        return
    if knob.name in FIELD_SCALE:
        value = round(float(value) * FIELD_SCALE[knob.name])
    elif knob.type == "int":
        value = int(value)
    node = launch.extra_options
    *parents, leaf = flag.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value


def build_launch(config: Mapping[str, Any], *, model_dir: Path | str, port: int,
                 engine_version: str | None, max_model_len: int, dummy_weights: bool = True,
                 host: str = "127.0.0.1") -> TrtllmLaunch:
    """The ``trtllm-serve`` arguments and extra-options data for ``config`` (validated; missing
    knobs take their defaults). Raises :class:`ConfigRejectedError` for an invalid config."""
    space = _load_space()
    try:
        clean = space.validate_config(config, fill_defaults=True)
    except SearchSpaceError as exc:
        raise ConfigRejectedError(str(exc)) from None
    launch = TrtllmLaunch([str(model_dir), "--host", host, "--port", str(port),
                           "--backend", "pytorch", "--max_seq_len", str(max_model_len)])
    if dummy_weights:
        launch.extra_options["load_format"] = "dummy"
    for knob in space.active_knobs(clean):
        _apply_knob(launch, knob, clean[knob.name], engine_version)
    return launch


def build_argv(config: Mapping[str, Any], *, model_dir: Path | str, port: int,
               engine_version: str | None, max_model_len: int, options_path: Path | str,
               dummy_weights: bool = True, host: str = "127.0.0.1") -> list[str]:
    """:func:`build_launch`'s arguments plus ``--extra_llm_api_options options_path`` (the caller
    writes :meth:`TrtllmLaunch.options_yaml` there) when the config needs the file."""
    launch = build_launch(config, model_dir=model_dir, port=port, engine_version=engine_version,
                          max_model_len=max_model_len, dummy_weights=dummy_weights, host=host)
    if launch.extra_options:
        return [*launch.argv, OPTIONS_FLAG, str(options_path)]
    return launch.argv


def check_feasible(config: Mapping[str, Any]) -> None:
    """Reject, before an engine start, what cannot schedule even one full batch."""
    batch, tokens = config.get("max_batch_size"), config.get("max_num_tokens")
    if batch is not None and tokens is not None and tokens < batch:
        raise ConfigRejectedError(
            f"max_num_tokens ({tokens}) must be at least max_batch_size ({batch}): every "
            "scheduled request needs at least one token of the iteration's budget")


def rejection_reason(log: str, exit_code: int | None) -> str | None:
    """TensorRT-LLM's message when click refused an option or pydantic refused the LLM args."""
    match = _CLICK_ERROR.search(log)
    if match and exit_code == 2:
        return match.group("msg").strip()
    match = _VALIDATION_ERROR.search(log)
    if match:
        lines = log[match.start():].splitlines()
        detail = [lines[0].strip()] + [ln.strip() for ln in lines[1:6]
                                       if ln.startswith((" ", "\t")) and ln.strip()]
        return " | ".join(detail)
    return None


class TensorRTLLMTarget(GoodputFromSLO, Target):
    """TensorRT-LLM's ``trtllm-serve`` (PyTorch backend) on a random-weight (or local) model."""

    name: ClassVar[str] = "tensorrt-llm"
    engine: ClassVar[str] = "tensorrt_llm"
    description: ClassVar[str] = (
        "TensorRT-LLM OpenAI-compatible server (trtllm-serve, PyTorch backend), one per trial"
    )
    default_objective: ClassVar[str] = "maximize:output_tokens_per_s"
    default_slo: ClassVar[str] = "ttft_p95_ms<=300,tpot_p95_ms<=40"
    install_hint: ClassVar[str] = (
        "pip install tensorrt-llm (NVIDIA's CUDA wheels; see docs/engines.md)"
    )

    def space(self) -> SearchSpace:
        return _load_space()

    def check_available(self) -> None:
        if os.environ.get(COMMAND_ENV):
            server_command()
            return
        if importlib.util.find_spec("tensorrt_llm") is None:
            raise EngineUnavailableError(
                f"the tensorrt-llm target needs TensorRT-LLM, which this Python cannot import; "
                f"install it with: {self.install_hint}")

    def engine_versions(self) -> dict[str, str]:
        return package_versions("tensorrt_llm", "torch", "transformers")

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

    def run(self, config: Mapping[str, Any], workload: Workload, cache_dir: Path) -> Measurement:
        started = time.perf_counter()
        self.check_available()
        _check_kind(workload)
        served = ServingWorkload.load(workload.params, cache_dir, target_keys=TARGET_PARAMS)
        max_model_len = served.max_model_len()
        clean = self._validate(config)
        check_feasible(clean)
        version = package_versions("tensorrt_llm").get("tensorrt_llm")
        port = free_port()
        launch = build_launch(clean, model_dir=served.model.path, port=port,
                              engine_version=version, max_model_len=max_model_len,
                              dummy_weights=served.model.dummy_weights)
        timeout_s = float(served.target_params.get("startup_timeout_s",
                                                   DEFAULT_STARTUP_TIMEOUT_S))
        base_url = f"http://127.0.0.1:{port}"
        with tempfile.TemporaryDirectory(prefix="advisor-trtllm-") as tmp:
            options = Path(tmp) / "extra_llm_api_options.yaml"
            options.write_text(launch.options_yaml())
            argv = [*server_command(), *launch.argv]
            if launch.extra_options:
                argv += [OPTIONS_FLAG, str(options)]
            with ManagedServer(argv, base_url=base_url, log_path=Path(tmp) / "trtllm.log",
                               name="trtllm-serve", stop_on_sigterm=True) as server:
                try:
                    startup_s = server.wait_ready(timeout_s)
                except EngineStartError:
                    reason = rejection_reason(server.log_tail(), server.returncode)
                    if reason is not None:
                        raise ConfigRejectedError(
                            f"TensorRT-LLM rejected the configuration: {reason}") from None
                    raise
                # trtllm-serve serves the model under the path it was given.
                metrics, details = measure_endpoint(
                    base_url, str(served.model.path), served, extra_body={"ignore_eos": True})
                peak = gpu_memory_mb(process_tree(server.pid or 0))
                log_tail = server.log_tail(LOG_TAIL_CHARS)
        if peak is not None:
            metrics["peak_memory_mb"] = peak
        details.update({
            "argv": argv, "extra_llm_api_options": launch.extra_options,
            "engine_version": version, "model": served.model.label,
            "model_path": str(served.model.path), "dummy_weights": served.model.dummy_weights,
            "max_model_len": max_model_len, "startup_s": startup_s,
            "engine_log_tail": log_tail, "engine_log_tail_chars": len(log_tail),
        })
        return Measurement(metrics=metrics, engine_versions=self.engine_versions(),
                           details=details, duration_s=time.perf_counter() - started)

    def _validate(self, config: Mapping[str, Any]) -> dict[str, Any]:
        try:
            return self.space().validate_config(config, fill_defaults=True)
        except SearchSpaceError as exc:
            raise ConfigRejectedError(str(exc)) from None

    def launch_command(self, config: Mapping[str, Any], workload: Workload | None = None) -> str:
        """The extra-options file (as a shell here-document) and the ``trtllm-serve`` line."""
        clean = self._validate(config)
        model, max_model_len, dummy = "MODEL", 4096, False
        if workload is not None and workload.kind == KIND:
            with tempfile.TemporaryDirectory(prefix="advisor-trtllm-cmd-") as tmp:
                served = ServingWorkload.load(workload.params, Path(tmp),
                                              target_keys=TARGET_PARAMS)
                max_model_len = served.max_model_len()
            model = str(served.model.path) if served.model.shape is None \
                else f"models/{served.model.shape}"
            dummy = served.model.dummy_weights
        launch = build_launch(clean, model_dir=model, port=8000,
                              engine_version=package_versions("tensorrt_llm").get("tensorrt_llm"),
                              max_model_len=max_model_len, dummy_weights=dummy, host="0.0.0.0")
        args = ["trtllm-serve", *launch.argv]
        if not launch.extra_options:
            return shlex.join(args)
        args += [OPTIONS_FLAG, "extra_llm_api_options.yaml"]
        return (f"cat > extra_llm_api_options.yaml <<'EOF'\n{launch.options_yaml()}EOF\n"
                f"{shlex.join(args)}")


def _check_kind(workload: Workload) -> None:
    if workload.kind != KIND:
        raise WorkloadError(
            f"the tensorrt-llm target runs workloads of kind {KIND!r}, got {workload.kind!r}")

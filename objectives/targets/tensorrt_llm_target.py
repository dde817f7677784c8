"""The TensorRT-LLM target: one ``trtllm-serve`` process (PyTorch backend) per trial, driven over
its OpenAI-compatible API.

Knobs map to ``trtllm-serve`` options or to fields of the ``--extra_llm_api_options`` YAML file
(``search_spaces/tensorrt-llm.yaml`` says which), written to a temporary file per trial. Named
model shapes load random weights (``load_format: dummy``). TensorRT-LLM is never imported here.
The trial (start, readiness, measurement, stop) is
:class:`~objectives.llm.serving_target.ServingTarget`'s ``run``; this module supplies the options.

``ADVISOR_TRTLLM_COMMAND`` (a JSON list) replaces the command prefix
``[sys.executable, "-m", "tensorrt_llm.commands.serve", "serve"]`` for wrappers and containers.
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml

from advisor.errors import ConfigRejectedError
from objectives.llm.server import ServingWorkload
from objectives.llm.server_metrics import MetricVocabulary
from objectives.llm.serving_target import (
    EngineServer,
    ServingTarget,
    shared_space,
    validation_errors,
)
from objectives.target import checked_config
from objectives.workload import Workload
from search_spaces.knobs import Knob

__all__ = [
    "COMMAND_ENV",
    "DEFAULT_COMMAND",
    "TRTLLM_METRICS",
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
#: Workload parameters the target reads itself (not part of the llm-serving spec).
TARGET_PARAMS = ServingTarget.target_params
DEFAULT_STARTUP_TIMEOUT_S = 900.0
LOG_TAIL_CHARS = 4000
#: How a trial starts ``trtllm-serve``.
ENGINE_SERVER = EngineServer(
    label="TensorRT-LLM", process_name="trtllm-serve", scratch_name="trtllm",
    command_env=COMMAND_ENV, default_command=DEFAULT_COMMAND,
    startup_timeout_s=DEFAULT_STARTUP_TIMEOUT_S, log_read_chars=LOG_TAIL_CHARS)
OPTIONS_FLAG = "--extra_llm_api_options"
#: Knobs whose YAML field is in other units than the knob: value * factor is written.
FIELD_SCALE: dict[str, int] = {"host_cache_size": 2**30}  # GiB -> bytes
_CLICK_ERROR = re.compile(r"^Error: (?P<msg>.+)$", re.MULTILINE)


@dataclass
class TrtllmLaunch:
    """``trtllm-serve`` arguments (after the command prefix) and the extra-options YAML data."""

    argv: list[str]
    extra_options: dict[str, Any] = field(default_factory=dict)

    def options_yaml(self) -> str:
        return yaml.safe_dump(self.extra_options, sort_keys=True)


#: The Prometheus series ``trtllm-serve`` exposes on ``/prometheus/metrics`` when the LLM API's
#: ``return_perf_metrics`` is on (from TensorRT-LLM's tensorrt_llm/metrics/collector.py and
#: serve/openai_server.py ``mount_metrics``; read from the source, never run here). It has no
#: prefix-cache reset endpoint.
TRTLLM_METRICS = MetricVocabulary(
    source="tensorrt-llm", path="/prometheus/metrics",
    ttft="trtllm_time_to_first_token_seconds",
    tpot="trtllm_time_per_output_token_seconds",
    e2e="trtllm_e2e_request_latency_seconds",
    queue="trtllm_request_queue_time_seconds",
    generation_tokens="trtllm_generation_tokens_total",
    finished_requests="trtllm_request_success_total",
    running="trtllm_num_requests_running",
    waiting="trtllm_num_requests_waiting",
    kv_cache_usage="trtllm_kv_cache_utilization",
)


def server_command(env: Mapping[str, str] | None = None) -> list[str]:
    """The argv prefix that starts ``trtllm-serve``: ``$ADVISOR_TRTLLM_COMMAND`` or the default."""
    return ENGINE_SERVER.command(env)


def _apply_knob(launch: TrtllmLaunch, knob: Knob, value: Any, engine_version: str | None) -> None:
    if not knob.flags:
        return  # a gate knob
    flag = knob.required_flag(engine_version, flag_kind="TensorRT-LLM option",
                              release="version")
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
                 host: str = "127.0.0.1", tokenizer: Path | str | None = None) -> TrtllmLaunch:
    """The ``trtllm-serve`` arguments and extra-options data for ``config`` (validated; missing
    knobs take their defaults). Raises :class:`ConfigRejectedError` for an invalid config.
    ``tokenizer``: a tokenizer directory other than the model's (``--tokenizer``; a written
    shape's, see :func:`objectives.llm.models.tokenizer_dir`)."""
    space = shared_space("tensorrt-llm")
    clean = checked_config(space, config)
    launch = TrtllmLaunch([str(model_dir), "--host", host, "--port", str(port),
                           "--backend", "pytorch", "--max_seq_len", str(max_model_len)])
    if tokenizer is not None and str(tokenizer) != str(model_dir):
        launch.argv += ["--tokenizer", str(tokenizer)]
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
    return validation_errors(log)


class TensorRTLLMTarget(ServingTarget):
    """TensorRT-LLM's ``trtllm-serve`` (PyTorch backend) on a random-weight (or local) model."""

    name: ClassVar[str] = "tensorrt-llm"
    engine: ClassVar[str] = "tensorrt_llm"
    trial_time_estimate_s: ClassVar[float] = 300.0
    aliases: ClassVar[tuple[str, ...]] = ("TensorRT", "trtllm")
    description: ClassVar[str] = (
        "TensorRT-LLM OpenAI-compatible server (trtllm-serve, PyTorch backend), one per trial"
    )
    install_hint: ClassVar[str] = (
        "pip install tensorrt-llm (NVIDIA's CUDA wheels; see docs/engines.md)"
    )
    engine_server: ClassVar[EngineServer] = ENGINE_SERVER
    server_metrics: ClassVar[MetricVocabulary | None] = TRTLLM_METRICS

    # -- one trial: the hooks of ServingTarget.run -----------------------------------------------

    def server_argv(self, config: Mapping[str, Any], served: ServingWorkload, *, port: int,
                    engine_version: str | None, max_model_len: int, workdir: Path
                    ) -> tuple[list[str], dict[str, Any]]:
        launch = build_launch(config, model_dir=served.model.path, port=port,
                              engine_version=engine_version, max_model_len=max_model_len,
                              dummy_weights=served.model.dummy_weights,
                              tokenizer=served.model.tokenizer_path)
        # Measured trials ask for the per-request metrics (/prometheus/metrics); a deployment's
        # launch_command leaves them off.
        launch.extra_options["return_perf_metrics"] = True
        options = workdir / "extra_llm_api_options.yaml"
        options.write_text(launch.options_yaml())
        argv = [*launch.argv, OPTIONS_FLAG, str(options)] if launch.extra_options else launch.argv
        return argv, {"extra_llm_api_options": launch.extra_options}

    def reject_infeasible(self, config: Mapping[str, Any], max_model_len: int) -> None:
        check_feasible(config)

    def served_model_name(self, served: ServingWorkload) -> str:
        # trtllm-serve serves the model under the path it was given.
        return str(served.model.path)

    def engine_refusal(self, log: str, exit_code: int | None) -> str | None:
        return rejection_reason(log, exit_code)

    # -- reproduction ---------------------------------------------------------------------------

    def launch_command(self, config: Mapping[str, Any], workload: Workload | None = None) -> str:
        """The extra-options file (as a shell here-document) and the ``trtllm-serve`` line."""
        clean = self.validate_config(config)
        model, max_model_len, dummy, tokenizer = "MODEL", 4096, False, None
        if (shaped := self.command_model(workload)) is not None:
            source, max_model_len = shaped
            model = str(source.path) if source.shape is None else f"models/{source.shape}"
            dummy, tokenizer = source.dummy_weights, source.tokenizer_path
        launch = build_launch(clean, model_dir=model, port=8000,
                              engine_version=self.installed_version(),
                              max_model_len=max_model_len, dummy_weights=dummy, host="0.0.0.0",
                              tokenizer=tokenizer)
        args = ["trtllm-serve", *launch.argv]
        if not launch.extra_options:
            return shlex.join(args)
        args += [OPTIONS_FLAG, "extra_llm_api_options.yaml"]
        return (f"cat > extra_llm_api_options.yaml <<'EOF'\n{launch.options_yaml()}EOF\n"
                f"{shlex.join(args)}")

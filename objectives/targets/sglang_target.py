"""The SGLang target: one ``python -m sglang.launch_server`` process per trial, driven over its
OpenAI-compatible API. Mapped from SGLang 0.5.23 (the release's ``ServerArgs`` parser and
metrics collector) and not yet run on hardware: the fake-server tests run it on CPU.

Knobs map to SGLang's own flags (``search_spaces/sglang.yaml``); the knobs SGLang sizes itself at
start-up (running-batch cap, prefill chunk, memory share, KV pool, CUDA-graph batch) have an
``_auto`` gate, and the trial records what SGLang picked (its start-up log and ``GET
/server_info``). Named model shapes load random weights (``--load-format dummy``). SGLang is never
imported here: the driver only needs to know it is installed, and the server runs in its own
process. The trial (start, ``/health``, measurement, stop) is
:class:`~objectives.llm.serving_target.ServingTarget`'s ``run``; this module supplies the flags,
SGLang's Prometheus vocabulary (``--enable-metrics``), its refusals and its start-up facts.

``ADVISOR_SGLANG_COMMAND`` (a JSON list) replaces the command prefix
``[sys.executable, "-m", "sglang.launch_server"]``, for wrappers and containers (e.g. ``["docker",
"run", "--gpus", "all", "--network", "host", "lmsysorg/sglang", "python3", "-m",
"sglang.launch_server"]``); the flags are appended to it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import httpx

from advisor.errors import ConfigRejectedError, SearchSpaceError
from objectives.hardware import fingerprint
from objectives.llm.models import model_dir_parameters
from objectives.llm.server import ServingWorkload, weight_metrics
from objectives.llm.server_metrics import MetricVocabulary
from objectives.llm.serving_target import (
    EngineServer,
    RunningServer,
    ServingTarget,
    shared_space,
)
from objectives.metrics import LLM_SERVING, WEIGHTS
from objectives.target import checked_config
from objectives.targets.vllm_target import HF_MODELS
from objectives.workload import Workload
from search_spaces import SearchSpace
from search_spaces.knobs import Knob

__all__ = [
    "COMMAND_ENV",
    "DEFAULT_COMMAND",
    "SGLANG_METRICS",
    "SOURCE_RELEASE",
    "SglangTarget",
    "build_argv",
    "check_feasible",
    "check_parallel",
    "engine_facts",
    "knob_argv",
    "rejection_reason",
    "server_command",
    "server_info",
]

COMMAND_ENV = "ADVISOR_SGLANG_COMMAND"
DEFAULT_COMMAND: tuple[str, ...] = (sys.executable, "-m", "sglang.launch_server")
#: The release whose flags and metric names were read from its wheel (the server never ran here).
SOURCE_RELEASE = "0.5.23"
#: Loading weights, sizing the KV pool, capturing the CUDA graphs and SGLang's warm-up request.
DEFAULT_STARTUP_TIMEOUT_S = 900.0
LOG_TAIL_CHARS = 4000
#: How much of the server log is read once a trial is over: the start-up facts are at its head,
#: and SGLang logs a line per prefill batch and every 40 decode steps after it.
FULL_LOG_CHARS = 2_000_000
#: A categorical value that means "leave the flag out" (SGLang's own default).
NONE_CHOICE = "none"
#: How a trial starts the server.
ENGINE_SERVER = EngineServer(
    label="SGLang", process_name="sglang.launch_server", scratch_name="sglang",
    command_env=COMMAND_ENV, default_command=DEFAULT_COMMAND,
    startup_timeout_s=DEFAULT_STARTUP_TIMEOUT_S, log_read_chars=FULL_LOG_CHARS)
#: Asked once the server is up: the version and the settings SGLang resolved.
SERVER_INFO_PATH = "/server_info"
#: Keys of ``/server_info`` besides the knobs' own field names worth keeping with a trial.
_INFO_FACTS = ("max_total_num_tokens", "max_req_input_len")

#: The Prometheus series SGLang exposes on ``/metrics`` with ``--enable-metrics`` (checked against
#: 0.5.23's sglang/srt/observability/metrics_collector.py: TTFT, TPOT and E2E are observed per
#: finished request in the tokenizer manager, TPOT as (finish - first token) / (tokens - 1); the
#: gauges come from the scheduler; a retraction is SGLang's preemption). ``/flush_cache`` empties
#: the radix cache when no request is running.
SGLANG_METRICS = MetricVocabulary(
    source="sglang", path="/metrics",
    ttft="sglang:time_to_first_token_seconds",
    tpot="sglang:request_time_per_output_token_seconds",
    itl="sglang:inter_token_latency_seconds",
    e2e="sglang:e2e_request_latency_seconds",
    queue="sglang:queue_time_seconds",
    generation_tokens="sglang:generation_tokens_total",
    finished_requests="sglang:num_requests_total",
    running="sglang:num_running_reqs",
    waiting="sglang:num_queue_reqs",
    kv_cache_usage="sglang:token_usage",
    preemptions="sglang:num_retracted_requests_total",
    reset_cache_path="/flush_cache",
)

_ARGPARSE_ERROR = re.compile(r"^\S[^\n]*: error: (?P<msg>.+)$", re.MULTILINE)
#: Facts SGLang logs at start-up (0.5.23: model_executor/model_runner.py "Load weight end. ...
#: mem usage=X GB." in GiB; managers/scheduler.py "max_total_num_tokens=N, chunked_prefill_size=C,
#: max_prefill_tokens=P, max_running_requests=R, context_len=L, ...", once the pool is sized).
_WEIGHTS_LINE = re.compile(r"Load weight end\..*?mem usage=(?P<weights_gib>[\d.]+) GB")
_POOL_LINE = re.compile(
    r"max_total_num_tokens=(?P<kv_cache_tokens>\d+), "
    r"chunked_prefill_size=(?P<chunked_prefill_size_resolved>-?\d+), "
    r"max_prefill_tokens=(?P<max_prefill_tokens_resolved>\d+), "
    r"max_running_requests=(?P<max_running_requests_resolved>\d+)")


def server_command(env: Mapping[str, str] | None = None) -> list[str]:
    """The argv prefix that starts the server: ``$ADVISOR_SGLANG_COMMAND`` or the default."""
    return ENGINE_SERVER.command(env)


def knob_argv(knob: Knob, value: Any, engine_version: str | None) -> list[str]:
    """SGLang's arguments for one active knob (empty for a gate knob, a false bool or "none").

    Raises :class:`ConfigRejectedError` when the knob has no flag in ``engine_version``.
    """
    if not knob.flags:
        return []  # a gate: it only switches the knobs after it on or off
    flag = knob.required_flag(engine_version, flag_kind="SGLang flag", release="SGLang")
    if knob.type == "bool":
        if not flag.startswith("--"):
            raise SearchSpaceError(f"bool knob {knob.name} needs a --flag, got {flag!r}")
        return [flag] if value else []  # store_true flags: false is their default
    if value is None or value == NONE_CHOICE:
        return []
    if knob.type == "int":
        return [flag, str(int(value))]
    return [flag, str(value)]


def build_argv(config: Mapping[str, Any], *, model_dir: Path | str, port: int,
               engine_version: str | None, max_model_len: int, seed: int,
               dummy_weights: bool = True, served_model_name: str | None = None,
               host: str = "127.0.0.1", space: SearchSpace | None = None,
               tokenizer: Path | str | None = None) -> list[str]:
    """The ``sglang.launch_server`` arguments for ``config`` (everything after the prefix).

    Every active knob is mapped through its flag for ``engine_version`` (``None``: the unversioned
    or first mapping); ``config`` is validated against the space first (missing knobs take their
    defaults). An invalid config or a knob without a flag in that version raises
    :class:`ConfigRejectedError`. ``tokenizer``: a tokenizer directory other than the model's.
    """
    space = space or shared_space("sglang")
    clean = checked_config(space, config)
    argv = ["--model-path", str(model_dir), "--host", host, "--port", str(port),
            "--context-length", str(max_model_len), "--random-seed", str(seed)]
    if served_model_name:
        argv += ["--served-model-name", served_model_name]
    if dummy_weights:
        argv += ["--load-format", "dummy"]
    if tokenizer is not None and str(tokenizer) != str(model_dir):
        argv += ["--tokenizer-path", str(tokenizer)]
    for knob in space.active_knobs(clean):
        argv += knob_argv(knob, clean[knob.name], engine_version)
    return argv


def check_feasible(config: Mapping[str, Any], max_model_len: int) -> None:
    """Reject, before paying for a start, what SGLang would refuse or silently override.
    ``config`` is a validated config; the workload's context ``max_model_len`` is passed as
    ``--context-length``."""
    size, page = config.get("chunked_prefill_size"), config.get("page_size")
    if size is not None and page is not None and size > 0 and size % page:
        raise ConfigRejectedError(
            f"chunked_prefill_size ({size}) must be divisible by page_size ({page}) (SGLang's "
            "server-argument validation)")
    if config.get("disable_radix_cache") and config.get("schedule_policy") in ("lpm",
                                                                              "dfs-weight"):
        raise ConfigRejectedError(
            f"schedule_policy {config['schedule_policy']} reads the radix cache: with "
            "disable_radix_cache SGLang runs fcfs instead (managers/schedule_policy.py), so the "
            "trial would not run the recorded config")
    pool = config.get("max_total_tokens")
    if pool is not None and pool < max_model_len:
        raise ConfigRejectedError(
            f"max_total_tokens ({pool}) must hold the workload's context ({max_model_len} "
            "tokens): SGLang caps each request at the KV pool (managers/tp_worker.py), so its "
            "longest requests would be refused")


def check_parallel(config: Mapping[str, Any], *, gpus: int | None,
                   model_config: Mapping[str, Any] | None) -> None:
    """Reject, before a start, a parallel layout this machine or this model cannot run: more GPUs
    than the process may use (``gpus``; None when unknown), or a tensor-parallel size that does
    not divide the attention heads."""
    tp, dp = int(config.get("tensor_parallel_size", 1)), int(config.get("data_parallel_size", 1))
    if gpus is not None and tp * dp > gpus:
        raise ConfigRejectedError(
            f"tensor_parallel_size {tp} x data_parallel_size {dp} needs {tp * dp} GPUs, but this "
            f"process may use {gpus}")
    heads = (model_config or {}).get("num_attention_heads")
    if isinstance(heads, int) and heads % tp:
        raise ConfigRejectedError(
            f"tensor_parallel_size {tp} does not divide the model's {heads} attention heads")


def _model_dir_config(model_dir: Path) -> dict[str, Any] | None:
    try:
        loaded = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


def engine_facts(log: str) -> dict[str, Any]:
    """What SGLang logged about itself at start-up: weights' memory and the sizes it resolved."""
    facts: dict[str, Any] = {}
    if match := _WEIGHTS_LINE.search(log):
        facts["weights_gib"] = float(match["weights_gib"])
    if match := _POOL_LINE.search(log):
        facts.update({key: int(value) for key, value in match.groupdict().items()})
    return facts


def rejection_reason(log: str, exit_code: int | None) -> str | None:
    """SGLang's own message when argparse refused the arguments (exit code 2); None for any other
    failure (an AssertionError of its argument checks is found by the shared root-cause search
    and fails the start with that message)."""
    match = _ARGPARSE_ERROR.search(log)
    if match and (exit_code == 2 or "usage:" in log):
        return match.group("msg").strip()
    return None


def server_info(base_url: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """SGLang's ``GET /server_info`` (version, resolved server arguments); {} when unreadable."""
    try:
        with httpx.Client(timeout=httpx.Timeout(timeout_s), trust_env=False) as client:
            response = client.get(f"{base_url.rstrip('/')}{SERVER_INFO_PATH}")
        data = response.json() if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return {}
    return dict(data) if isinstance(data, Mapping) else {}


def _resolved(info: Mapping[str, Any], space: SearchSpace) -> dict[str, Any]:
    """The values SGLang settled on for the knobs named like its own fields, and the pool size."""
    names = [knob.name for knob in space if knob.flags] + list(_INFO_FACTS)
    return {name: info[name] for name in names
            if name in info and isinstance(info[name], str | int | float | bool)}


class SglangTarget(ServingTarget):
    """SGLang's OpenAI-compatible server on a random-weight (or local) model."""

    name: ClassVar[str] = "sglang"
    engine: ClassVar[str] = "sglang"
    description: ClassVar[str] = (
        "SGLang OpenAI-compatible server (python -m sglang.launch_server), one per trial, "
        "random-weight models"
    )
    install_hint: ClassVar[str] = (
        f"pip install sglang (checked against SGLang {SOURCE_RELEASE}; not yet run on the "
        f"project's hardware), or set {COMMAND_ENV} to a JSON command list that starts it "
        "(docs/engines.md)"
    )
    engine_server: ClassVar[EngineServer] = ENGINE_SERVER
    server_metrics: ClassVar[MetricVocabulary | None] = SGLANG_METRICS
    #: Its start-up log states the weights it loaded, as vLLM's does (:func:`weight_metrics`).
    metric_families: ClassVar[tuple[str, ...]] = (LLM_SERVING, WEIGHTS)
    #: A server start with CUDA graphs and a few rates, as long as vLLM's (no SGLang trial
    #: has been timed on the project's hardware yet).
    trial_time_estimate_s: ClassVar[float] = 150.0

    # -- one trial: the hooks of ServingTarget.run -----------------------------------------------

    @contextlib.contextmanager
    def serve(self, config: Mapping[str, Any], served: ServingWorkload, cache_dir: Path,
              *, env: Mapping[str, str] | None = None) -> Iterator[RunningServer]:
        """:meth:`ServingTarget.serve`, and once SGLang is up the version it reports and the
        settings it resolved (``/server_info``) recorded with the trial."""
        with super().serve(config, served, cache_dir, env=env) as running:
            info = server_info(running.base_url)
            yield running
        resolved = _resolved(info, self.space())
        if resolved:
            running.facts["engine_resolved"] = resolved
        version = info.get("version")
        if isinstance(version, str) and version:
            running.facts["engine_version_reported"] = version
            running.versions.setdefault(self.engine, version)

    def server_argv(self, config: Mapping[str, Any], served: ServingWorkload, *, port: int,
                    engine_version: str | None, max_model_len: int, workdir: Path
                    ) -> tuple[list[str], dict[str, Any]]:
        check_parallel(config, gpus=len(fingerprint()["gpus"]) or None,
                       model_config=_model_dir_config(served.model.path))
        argv = build_argv(
            config, model_dir=served.model.path, port=port, engine_version=engine_version,
            max_model_len=max_model_len, seed=served.spec.seed,
            dummy_weights=served.model.dummy_weights, served_model_name=served.model.label,
            tokenizer=served.model.tokenizer_path)
        # Measured trials expose the per-request histograms the validity gate reads; a
        # deployment's launch_command leaves them to the user.
        return [*argv, "--enable-metrics"], {}

    def reject_infeasible(self, config: Mapping[str, Any], max_model_len: int) -> None:
        check_feasible(config, max_model_len)

    def measure(self, running: RunningServer, served: ServingWorkload
                ) -> tuple[dict[str, float], dict[str, Any]]:
        """The shared measurement, plus the weights' memory as SGLang logged it after loading and
        bits per weight over the model's parameter count (what a ``quantization`` did)."""
        metrics, details = super().measure(running, served)
        facts = engine_facts(running.server.log_tail(ENGINE_SERVER.log_read_chars))
        if "weights_gib" in facts:
            metrics.update(weight_metrics(facts["weights_gib"] * 2**30,
                                          model_dir_parameters(served.model.path)))
        return metrics, details

    def server_env(self, served: ServingWorkload) -> dict[str, str] | None:
        env = dict(os.environ)
        if served.model.dummy_weights:
            env.setdefault("HF_HUB_OFFLINE", "1")  # everything it needs is in the model dir
        return env

    def engine_refusal(self, log: str, exit_code: int | None) -> str | None:
        return rejection_reason(log, exit_code)

    def log_facts(self, log: str) -> dict[str, Any]:
        return engine_facts(log)

    def log_to_store(self, log: str) -> str:
        return log[-LOG_TAIL_CHARS:]

    def with_memory_share(self, config: Mapping[str, Any], share: float) -> dict[str, Any]:
        """``mem_fraction_static`` set to ``share``: SGLang's weights and KV pool then take at
        most that share of the GPU, so co-resident servers each take at most 1 / n."""
        if not 0 < share < 1:
            raise ConfigRejectedError(f"`0 < memory share < 1` must hold, got {share}")
        return {**self.validate_config(config), "mem_fraction_static_auto": False,
                "mem_fraction_static": share}

    # -- reproduction ---------------------------------------------------------------------------

    def launch_command(self, config: Mapping[str, Any], workload: Workload | None = None) -> str:
        """``python -m sglang.launch_server --model-path M --context-length N --flag ...``.

        A named shape becomes its real checkpoint (``meta-llama/...``) so the command deploys the
        tuned configuration; a shape without one keeps its random-weight model directory
        (``--load-format dummy``). ``--context-length`` is the one the trials used.
        """
        clean = self.validate_config(config)
        args = ["python", "-m", "sglang.launch_server", "--model-path", "MODEL"]
        if (shaped := self.command_model(workload)) is not None:
            model, max_model_len = shaped
            if model.shape in HF_MODELS:
                args[-1] = HF_MODELS[model.shape]
            elif model.shape is not None:
                args[-1] = f"models/{model.shape}"
                args += ["--load-format", "dummy", "--tokenizer-path", str(model.tokenizer_path)]
            else:
                args[-1] = str(model.path)
            args += ["--context-length", str(max_model_len)]
        version = self.installed_version()
        for knob in self.space().active_knobs(clean):
            args += knob_argv(knob, clean[knob.name], version)
        return shlex.join(args)

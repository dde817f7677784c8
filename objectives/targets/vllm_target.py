"""The vLLM target: one ``vllm serve`` process per trial, driven over its OpenAI-compatible API.

A trial maps the knobs to vLLM's own flags (``search_spaces/vllm.yaml``, per vLLM version),
starts ``python -m vllm.entrypoints.cli.main serve`` on a random-weight model directory of the
workload's shape (``--load-format dummy``) or on a local model, waits for ``/health``, sends the
warm-up requests, replays the workload with EOS ignored (fixed output lengths) and always stops
the server. vLLM is never imported here: the driver only needs to know it is installed, and the
server runs in its own process. That trial is
:class:`~objectives.llm.serving_target.ServingTarget`'s ``run``; this module supplies vLLM's
flags, environment, refusals and start-up facts.

``ADVISOR_VLLM_COMMAND`` (a JSON list) replaces the command prefix
``[sys.executable, "-m", "vllm.entrypoints.cli.main", "serve"]``, for wrappers and containers
(e.g. ``["docker", "run", "--gpus", "all", "--network", "host", "vllm/vllm-openai"]``); the model
directory, flags and port are appended to it.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from advisor.errors import ConfigRejectedError, SearchSpaceError
from objectives.hardware import fingerprint
from objectives.llm.models import model_dir_parameters
from objectives.llm.reference import ReferenceHarness
from objectives.llm.server import ServingWorkload, package_versions, weight_metrics
from objectives.llm.server_metrics import MetricVocabulary
from objectives.llm.serving_target import (
    EngineServer,
    RunningServer,
    ServingTarget,
    shared_space,
    validation_errors,
)
from objectives.llm.shapes import checkpoint_id
from objectives.metrics import LLM_SERVING, WEIGHTS
from objectives.target import checked_config
from objectives.targets.vllm_bench import VllmBenchServe
from objectives.workload import Workload
from search_spaces import SearchSpace
from search_spaces.knobs import Knob

__all__ = [
    "CACHE_ENV",
    "COMMAND_ENV",
    "DEFAULT_COMMAND",
    "VLLM_METRICS",
    "VllmTarget",
    "build_argv",
    "check_feasible",
    "check_parallel",
    "engine_facts",
    "gpus_needed",
    "installed_version",
    "knob_argv",
    "log_excerpt",
    "rejection_reason",
    "server_command",
]

COMMAND_ENV = "ADVISOR_VLLM_COMMAND"
DEFAULT_COMMAND: tuple[str, ...] = (sys.executable, "-m", "vllm.entrypoints.cli.main", "serve")
#: Workload parameters the target reads itself (not part of the llm-serving spec).
TARGET_PARAMS = ServingTarget.target_params
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
    # gpu_model_runner.py: "Model loading took %.4f GiB [memory ]and %.6f seconds".
    "weights_gib": (re.compile(r"Model loading took (?P<v>[\d.]+) GiB"), float),
    # Where the engine's start-up went (issue 44's trial-time breakdown), from the same log:
    "weights_load_s": (re.compile(r"Model loading took [\d.]+ GiB (?:memory )?and "
                                  r"(?P<v>[\d.]+) seconds"), float),
    # compilation/monitor.py: "torch.compile took %.2f s in total" (a warm cache: a few s).
    "torch_compile_s": (re.compile(r"torch\.compile took (?P<v>[\d.]+) s in total"), float),
    # model_runner.py: "Graph capturing finished in %.0f secs, took %.2f GiB".
    "cuda_graphs_s": (re.compile(r"Graph capturing finished in (?P<v>[\d.]+) secs"), float),
    # v1/engine/core.py: "init engine (profile, create kv cache, warmup model) took %.2f s".
    "engine_init_s": (re.compile(r"init engine \(profile, create kv cache, warmup model\) "
                                 r"took (?P<v>[\d.]+) s"), float),
}
#: Start-up lines that only list the server's routes: left out of the stored log tail.
_ROUTE_LINE = re.compile(r"\[launcher\.py:\d+\] Route: ")
#: Where vLLM keeps what it compiles (vllm/envs.py in 0.26.0: VLLM_CACHE_ROOT holds the
#: torch.compile cache, AOT-compiled functions and, while it compiles, the Inductor and Triton
#: caches it points TORCHINDUCTOR_CACHE_DIR / TRITON_CACHE_DIR at; the last two also catch the
#: kernels built outside torch.compile, e.g. an eager trial's Triton kernels and autotuning).
#: Shared by every trial (objectives/llm/engine_cache.py).
CACHE_ENV: tuple[tuple[str, str], ...] = (
    ("VLLM_CACHE_ROOT", "vllm"), ("TORCHINDUCTOR_CACHE_DIR", "torchinductor"),
    ("TRITON_CACHE_DIR", "triton"))
#: How a trial starts ``vllm serve`` (the whole log is read: start-up facts are searched in it).
ENGINE_SERVER = EngineServer(
    label="vLLM", process_name="vllm serve", scratch_name="vllm", command_env=COMMAND_ENV,
    default_command=DEFAULT_COMMAND, startup_timeout_s=DEFAULT_STARTUP_TIMEOUT_S,
    log_read_chars=FULL_LOG_CHARS, cache_env=CACHE_ENV)


#: The Prometheus series ``vllm serve`` exposes on ``/metrics`` (checked against vLLM 0.26.0's
#: vllm/v1/metrics/loggers.py: histograms are observed in the API server's output processor,
#: TTFT and E2E from the request's arrival, TPOT as decode time / (tokens - 1) per request).
#: ``/reset_prefix_cache`` exists when the server runs with ``VLLM_SERVER_DEV_MODE=1``.
VLLM_METRICS = MetricVocabulary(
    source="vllm", path="/metrics",
    ttft="vllm:time_to_first_token_seconds",
    tpot="vllm:request_time_per_output_token_seconds",
    itl="vllm:inter_token_latency_seconds",
    e2e="vllm:e2e_request_latency_seconds",
    queue="vllm:request_queue_time_seconds",
    generation_tokens="vllm:generation_tokens_total",
    finished_requests="vllm:request_success_total",
    running="vllm:num_requests_running",
    waiting="vllm:num_requests_waiting",
    kv_cache_usage="vllm:kv_cache_usage_perc",
    preemptions="vllm:num_preemptions_total",
    reset_cache_path="/reset_prefix_cache",
)


def server_command(env: Mapping[str, str] | None = None) -> list[str]:
    """The argv prefix that starts ``vllm serve``: ``$ADVISOR_VLLM_COMMAND`` or the default."""
    return ENGINE_SERVER.command(env)


def knob_argv(knob: Knob, value: Any, engine_version: str | None) -> list[str]:
    """The vLLM arguments for one active knob (empty for a gate knob, a "none" value, or the
    default of a ``default_without_flag`` knob on a release without its flag).

    Raises :class:`ConfigRejectedError` when ``engine_version`` cannot express ``value``: the
    knob has no flag there and ``value`` is not a default the release runs without one.
    """
    if not knob.flags:
        return []  # a gate: it only switches the knobs after it on or off
    flag = knob.flag_for_value(value, engine_version, flag_kind="vLLM flag", release="vLLM")
    if flag is None:
        return []  # this release runs the knob's default without the flag
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
               host: str = "127.0.0.1", space: SearchSpace | None = None,
               tokenizer: Path | str | None = None) -> list[str]:
    """The ``vllm serve`` arguments for ``config`` (everything after the command prefix).

    Every active knob is mapped through its flag for ``engine_version`` (``None``: the unversioned
    or first mapping), defaults included, so the argv is the whole configuration; only a
    ``default_without_flag`` knob at its default is left out where the release lacks its flag
    or is unknown (:meth:`~search_spaces.knobs.Knob.flag_for_value`). ``config`` is
    validated against the space first (missing knobs take their defaults); an invalid config or a
    knob without a flag in that version raises :class:`ConfigRejectedError`. ``tokenizer``: a
    tokenizer directory other than the model's (``--tokenizer``).
    """
    space = space or shared_space("vllm")
    clean = checked_config(space, config)
    argv = [str(model_dir), "--host", host, "--port", str(port),
            "--max-model-len", str(max_model_len), "--seed", str(seed)]
    if served_model_name:
        argv += ["--served-model-name", served_model_name]
    if dummy_weights:
        argv += ["--load-format", "dummy"]
    if tokenizer is not None and str(tokenizer) != str(model_dir):
        argv += ["--tokenizer", str(tokenizer)]
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
    if config.get("quantization") == "fp8" and config.get("kv_cache_dtype") == "fp8_e5m2":
        # vLLM refuses this pair at model load (attention layer _init_kv_cache_quant), after
        # ~80 s of start-up (seen with vLLM 0.26 on the H200: "fp8_e5m2 kv-cache is not
        # supported with fp8 checkpoints."); fp8 / fp8_e4m3 KV caches work with fp8 weights.
        raise ConfigRejectedError(
            "kv_cache_dtype fp8_e5m2 is not supported with fp8 weights (quantization=fp8); use "
            "kv_cache_dtype fp8 (e4m3) or auto")


def _read_config(model_dir: Path) -> dict[str, Any] | None:
    try:
        loaded = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


def gpus_needed(config: Mapping[str, Any]) -> int:
    """GPUs one server of ``config`` takes: tensor-parallel size x data-parallel size."""
    return int(config.get("tensor_parallel_size", 1)) * int(config.get("data_parallel_size", 1))


def check_parallel(config: Mapping[str, Any], *, gpus: int | None,
                   model_config: Mapping[str, Any] | None) -> None:
    """Reject, before a start, a parallel layout this machine or this model cannot run: more GPUs
    than the process may use (``gpus``; None when unknown, e.g. no nvidia-smi), or a
    tensor-parallel size that does not divide the attention heads (vLLM's ModelConfig
    verify_with_parallel_config refuses it after loading the engine)."""
    need = gpus_needed(config)
    if gpus is not None and need > gpus:
        raise ConfigRejectedError(
            f"tensor_parallel_size {config.get('tensor_parallel_size', 1)} x data_parallel_size "
            f"{config.get('data_parallel_size', 1)} needs {need} GPUs, but this process may use "
            f"{gpus}")
    tp = int(config.get("tensor_parallel_size", 1))
    heads = (model_config or {}).get("num_attention_heads")
    if isinstance(heads, int) and heads % tp:
        raise ConfigRejectedError(
            f"tensor_parallel_size {tp} does not divide the model's {heads} attention heads "
            "(vLLM requires it to)")


def installed_version() -> str | None:
    """vLLM's version from its package metadata (None when not installed here)."""
    return package_versions("vllm").get("vllm")


def engine_facts(log: str) -> dict[str, Any]:
    """What vLLM reported about itself at start-up: its version, KV-cache capacity and where its
    start-up time went (:data:`_LOG_FACTS`, :func:`startup_phases`)."""
    facts: dict[str, Any] = {}
    if match := _SERVER_VERSION.search(log):
        facts["engine_version_reported"] = match.group("v")
    for key, (pattern, kind) in _LOG_FACTS.items():
        if match := pattern.search(log):
            facts[key] = kind(match.group("v").replace(",", ""))
    if phases := startup_phases(log):
        facts["startup_phases_s"] = phases
    return facts


#: A vLLM log line's time stamp ("INFO 12-06 15:21:00 [file.py:12] ..."): to the second.
_LOG_STAMP = re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR) (?P<t>\d\d-\d\d \d\d:\d\d:\d\d) \[")
#: The start-up's landmarks, in order: the API server's first line (its imports done), the
#: engine core's first (config resolved, engine-core process spawned and imported), the engine's
#: init done (weights, compile, KV cache, CUDA graphs, warm-up), the server listening.
_PHASE_MARKS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("api_first_line", re.compile(r"")),
    ("engine_core_first_line", re.compile(r"Initializing a V1 LLM engine")),
    ("engine_init_done", re.compile(r"init engine \(profile")),
    ("serving", re.compile(r"Starting vLLM server on")),
)


def startup_phases(log: str) -> dict[str, float]:
    """Seconds between the start-up landmarks of :data:`_PHASE_MARKS`, from the log's own time
    stamps (whole seconds): ``api_to_engine_core`` (the API server resolving the config, then
    spawning the engine-core process and its imports), ``engine_core_init`` (engine core up to
    its init done), ``init_to_serving`` (the API server's own start after it). Empty when the
    landmarks are not all there (an older or failed start)."""
    lines = iter(log.splitlines())  # each landmark is looked for after the one before
    stamps: list[datetime.datetime] = []
    for _, pattern in _PHASE_MARKS:
        for line in lines:
            if (stamp := _LOG_STAMP.search(line)) and pattern.search(line):
                stamps.append(datetime.datetime.strptime(stamp.group("t"), "%m-%d %H:%M:%S"))
                break
        else:
            return {}
    labels = ("api_to_engine_core", "engine_core_init", "init_to_serving")
    return {label: (later - earlier).total_seconds()
            for label, earlier, later in zip(labels, stamps[:-1], stamps[1:], strict=True)}


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
    return validation_errors(log)


class VllmTarget(ServingTarget):
    """vLLM's OpenAI-compatible server on a random-weight (or local) model."""

    name: ClassVar[str] = "vllm"
    engine: ClassVar[str] = "vllm"
    metric_families: ClassVar[tuple[str, ...]] = (LLM_SERVING, WEIGHTS)
    trial_time_estimate_s: ClassVar[float] = 150.0
    description: ClassVar[str] = (
        "vLLM OpenAI-compatible server (vllm serve), one server per trial, random-weight models"
    )
    install_hint: ClassVar[str] = (
        "pip install vllm (on the project's H200 device machine: the vLLM 0.26 payload, see "
        "docs/engines.md)"
    )
    engine_server: ClassVar[EngineServer] = ENGINE_SERVER
    server_metrics: ClassVar[MetricVocabulary | None] = VLLM_METRICS
    #: Knobs whose effect a calibrated GPU borrows from a measured one, as the ratio against
    #: the defaults there (advisor/answers/calibration.py; docs/new-gpu.md says why these and
    #: not the memory share, CUDA graphs or prefix caching).
    calibration_carried_knobs: ClassVar[tuple[str, ...]] = ("quantization", "kv_cache_dtype")

    # -- one trial: the hooks of ServingTarget.run -----------------------------------------------

    def server_argv(self, config: Mapping[str, Any], served: ServingWorkload, *, port: int,
                    engine_version: str | None, max_model_len: int, workdir: Path
                    ) -> tuple[list[str], dict[str, Any]]:
        check_parallel(config, gpus=len(fingerprint()["gpus"]) or None,
                       model_config=_read_config(served.model.path))
        return build_argv(
            config, model_dir=served.model.path, port=port, engine_version=engine_version,
            max_model_len=max_model_len, seed=served.spec.seed,
            dummy_weights=served.model.dummy_weights, served_model_name=served.model.label,
            tokenizer=served.model.tokenizer_path), {}

    def reject_infeasible(self, config: Mapping[str, Any], max_model_len: int) -> None:
        check_feasible(config, max_model_len)

    def measure(self, running: RunningServer, served: ServingWorkload
                ) -> tuple[dict[str, float], dict[str, Any]]:
        """The shared measurement, plus the weights' memory as vLLM logged it after loading and
        bits per weight over the model's parameter count (what a ``quantization`` did)."""
        metrics, details = super().measure(running, served)
        facts = engine_facts(running.server.log_tail(ENGINE_SERVER.log_read_chars))
        if "weights_gib" in facts:
            metrics.update(weight_metrics(facts["weights_gib"] * 2**30,
                                          model_dir_parameters(served.model.path)))
        return metrics, details

    def server_env(self, served: ServingWorkload) -> dict[str, str] | None:
        # Dev mode only adds endpoints; the trial uses /reset_prefix_cache so that replaying the
        # same prompts (several rates, a re-measure, the reference harness) is never a cache hit.
        env = {**os.environ, "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
               "VLLM_SERVER_DEV_MODE": "1"}
        if served.model.dummy_weights:
            env.setdefault("HF_HUB_OFFLINE", "1")  # everything it needs is in the model dir
        return env

    def engine_refusal(self, log: str, exit_code: int | None) -> str | None:
        return rejection_reason(log, exit_code)

    def log_facts(self, log: str) -> dict[str, Any]:
        return engine_facts(log)

    def log_to_store(self, log: str) -> str:
        return log_excerpt(log)

    def reference_harness(self) -> ReferenceHarness | None:
        return VllmBenchServe()

    def with_memory_share(self, config: Mapping[str, Any], share: float) -> dict[str, Any]:
        """``gpu_memory_utilization`` set to ``share``: vLLM refuses to start when less than that
        fraction of the GPU is free, so co-resident servers each take at most 1 / n."""
        if not 0 < share < 1:
            raise ConfigRejectedError(f"`0 < memory share < 1` must hold, got {share}")
        return {**self.validate_config(config), "gpu_memory_utilization": share}

    # -- reproduction ---------------------------------------------------------------------------

    def launch_command(self, config: Mapping[str, Any], workload: Workload | None = None) -> str:
        """``vllm serve MODEL --max-model-len N --flag value ...`` for ``config``.

        A named shape becomes its real checkpoint (``meta-llama/...``) so the command deploys the
        tuned configuration; a shape without one keeps its random-weight model directory
        (``--load-format dummy``). ``--max-model-len`` is the one the trials used.
        """
        clean = self.validate_config(config)
        args = ["vllm", "serve", "MODEL"]
        if (shaped := self.command_model(workload)) is not None:
            model, max_model_len = shaped
            if model.shape is not None and checkpoint_id(model.shape) is not None:
                args = ["vllm", "serve", str(checkpoint_id(model.shape))]
            elif model.shape is not None:
                args = ["vllm", "serve", f"models/{model.shape}", "--load-format", "dummy",
                        "--tokenizer", str(model.tokenizer_path)]
            else:
                args = ["vllm", "serve", str(model.path)]
            args += ["--max-model-len", str(max_model_len)]
        for knob in self.space().active_knobs(clean):
            args += knob_argv(knob, clean[knob.name], installed_version())
        return shlex.join(args)

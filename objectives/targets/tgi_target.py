"""The text-generation-inference target: one ``text-generation-launcher`` (Hugging Face TGI,
backend v3) per trial, driven over its OpenAI-compatible API. Mapped from TGI 3.3.7's source and
never run here: TGI is a container image or a Rust + Python source build, on no package registry
this project reaches.

Knobs map to launcher options or to the environment variables TGI reads
(``search_spaces/tgi.yaml`` says which, and where in the source each was read). TGI has no dummy
weight loader, so a named model shape gets a seeded random-weight ``model.safetensors`` next to
its config and tokenizer (:mod:`objectives.llm.safetensors_model`). The trial (start,
``/health``, measurement, stop) is :class:`~objectives.llm.serving_target.ServingTarget`'s
``run``; this module supplies the launch, TGI's Prometheus vocabulary, the refusals it prints
and the facts it reports (``GET /info``, the start-up log).

``ADVISOR_TGI_COMMAND`` (a JSON list) replaces the command ``["text-generation-launcher"]``, e.g.
with a ``docker run ... ghcr.io/huggingface/text-generation-inference:3.3.7`` wrapper.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import shlex
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import httpx

from advisor.errors import ConfigRejectedError, EngineUnavailableError
from objectives.llm.models import model_config, write_model_dir
from objectives.llm.safetensors_model import write_random_safetensors
from objectives.llm.server import ModelSource, ServingWorkload, free_port
from objectives.llm.server_metrics import MetricVocabulary
from objectives.llm.serving_target import (
    EngineServer,
    RunningServer,
    ServingTarget,
    shared_space,
)
from objectives.target import ProgressFn, checked_config
from objectives.targets.vllm_target import HF_MODELS
from objectives.workload import Workload
from search_spaces.knobs import Knob

__all__ = [
    "COMMAND_ENV",
    "DEFAULT_COMMAND",
    "LAUNCHER",
    "SOURCE_RELEASE",
    "TGI_METRICS",
    "TGITarget",
    "TgiLaunch",
    "build_launch",
    "check_feasible",
    "engine_env_names",
    "launch_env",
    "rejection_reason",
    "startup_facts",
    "tgi_model_dir",
]

LAUNCHER = "text-generation-launcher"
COMMAND_ENV = "ADVISOR_TGI_COMMAND"
DEFAULT_COMMAND: tuple[str, ...] = (LAUNCHER,)
#: The release whose source the mapping was read from (commit dfb3fbe7, 2025-12-18).
SOURCE_RELEASE = "3.3.7"
#: Loading weights, warming up every CUDA-graph batch size and the router's own warm-up.
DEFAULT_STARTUP_TIMEOUT_S = 900.0
ENGINE_SERVER = EngineServer(
    label="TGI", process_name=LAUNCHER, scratch_name="tgi", command_env=COMMAND_ENV,
    default_command=DEFAULT_COMMAND, startup_timeout_s=DEFAULT_STARTUP_TIMEOUT_S)
#: The version the target records before (or without) the server reporting its own.
UNKNOWN_VERSION = "unknown"
#: Categorical values that leave the option out (TGI decides).
LEFT_OUT = frozenset({"auto", "none"})
#: on/off knobs written to a variable TGI tests against {"1", "true"}.
_SWITCH = {"on": "1", "off": "0"}
#: How much of the log's start is read for the start-up facts (TGI logs every request after).
_LOG_HEAD_BYTES = 256 * 1024

#: TGI's series on ``/metrics`` (router/src/server.rs, backends/v3/src/{backend,queue}.rs at
#: 3.3.7; all histograms get buckets, so none is rendered as a summary). TGI has no first-token
#: histogram, and ``tgi_request_mean_time_per_token_duration`` is the request's inference time
#: (prefill included) over its generated tokens, not TPOT, so neither is named: the gate checks
#: E2E and the generated-token count, which is read from the ``_sum`` of the
#: ``tgi_request_generated_tokens`` histogram (it only grows, like a counter). Counters carry no
#: ``_total`` suffix (metrics-exporter-prometheus 0.15). No prefix-cache reset endpoint.
TGI_METRICS = MetricVocabulary(
    source="tgi", path="/metrics",
    e2e="tgi_request_duration",
    queue="tgi_request_queue_duration",
    generation_tokens="tgi_request_generated_tokens_sum",
    finished_requests="tgi_request_success",
    running="tgi_batch_current_size",
    waiting="tgi_queue_size",
)

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: clap 4's usage errors ("error: invalid value 'x' for '--port <PORT>': ..."), exit code 2.
_CLAP_ERROR = re.compile(r"^error: (?P<msg>.+)$", re.MULTILINE)
#: The launcher's and the router's own checks: `main` returns Err, printed with Debug.
_ARGUMENT_VALIDATION = re.compile(r'ArgumentValidation\("(?P<msg>(?:[^"\\]|\\.)*)"\)')
#: The shards' refusals of a combination (server/text_generation_server/cli.py, globals.py,
#: models/__init__.py).
_SHARD_REFUSAL = re.compile(
    r"RuntimeError: (?P<msg>(?:Only 1 can be set between|Prefix caching is only supported"
    r"|Unknown kv_cache_dtype)[^\n]*)")
#: Start-up lines that tell what TGI picked for the knobs left to it.
_FACTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("attention_resolved", re.compile(r"Using attention (?P<v>\S+) - Prefix caching \S+")),
    ("prefix_caching_resolved", re.compile(r"Using attention \S+ - Prefix caching (?P<v>\S+)")),
    ("prefill_chunking_resolved", re.compile(r"Using prefill chunking = (?P<v>True|False)")),
    ("max_batch_prefill_tokens_resolved",
     re.compile(r"Default `max_batch_prefill_tokens` to (?P<v>\d+)")),
    ("max_batch_total_tokens_resolved",
     re.compile(r"Setting max batch total tokens to (?P<v>\d+)")),
)


@dataclass
class TgiLaunch:
    """Launcher arguments (after the command prefix) and the variables of its environment."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)

    def shell(self, command: str = LAUNCHER) -> str:
        """One paste-ready line: ``VAR=value ... text-generation-launcher ARGS``."""
        assignments = [f"{name}={shlex.quote(value)}" for name, value in sorted(self.env.items())]
        return " ".join([*assignments, shlex.join([command, *self.argv])])


def _value_text(knob: Knob, value: Any) -> str:
    if knob.type == "bool":
        return "1" if value else "0"
    if knob.type == "int":
        return str(int(value))
    if knob.type == "float":
        return str(float(value))
    return _SWITCH.get(value, str(value)) if isinstance(value, str) else str(value)


def _apply_knob(launch: TgiLaunch, knob: Knob, value: Any) -> None:
    flag = knob.flag_for(None)
    if flag is None:
        return  # a gate knob
    if knob.type == "categorical" and value in LEFT_OUT:
        return
    if flag.startswith("--"):
        launch.argv += [flag, _value_text(knob, value)]
    else:
        launch.env[flag] = _value_text(knob, value)


def build_launch(config: Mapping[str, Any], *, model_id: Path | str, port: int,
                 max_model_len: int, host: str = "127.0.0.1") -> TgiLaunch:
    """The launcher arguments and environment for ``config`` (validated; missing knobs take
    their defaults) serving ``model_id`` with ``max_model_len`` tokens of context per request.
    Raises :class:`ConfigRejectedError` for a config outside the space."""
    space = shared_space("tgi")
    clean = checked_config(space, config)
    launch = TgiLaunch(["--model-id", str(model_id), "--hostname", host, "--port", str(port),
                        "--max-input-tokens", str(max_model_len - 1),
                        "--max-total-tokens", str(max_model_len)])
    for knob in space.active_knobs(clean):
        _apply_knob(launch, knob, clean[knob.name])
    return launch


def launch_env(config: Mapping[str, Any]) -> dict[str, str]:
    """Only the environment part of :func:`build_launch` for ``config``."""
    return build_launch(config, model_id="MODEL", port=0, max_model_len=2).env


@functools.cache
def engine_env_names() -> frozenset[str]:
    """Every variable through which TGI could read a knob: the mapped variables, and for each
    mapped option the variable clap reads it from (``--max-batch-total-tokens`` ->
    ``MAX_BATCH_TOTAL_TOKENS``). A trial's server gets none of them from this process, so a knob
    left to TGI is TGI's choice and not an inherited setting."""
    names = set()
    for knob in shared_space("tgi"):
        flag = knob.flag_for(None)
        if flag is not None:
            names.add(flag[2:].replace("-", "_").upper() if flag.startswith("--") else flag)
    return frozenset(names)


def check_feasible(config: Mapping[str, Any], max_model_len: int) -> None:
    """Reject, before a start, what TGI 3.3.7 refuses or silently overrides. ``config`` is a
    validated config; the workload's context ``max_model_len`` is passed as
    ``--max-total-tokens`` (and ``max_model_len - 1`` as ``--max-input-tokens``)."""
    attention = config.get("attention", "auto")
    chunking = bool(config.get("prefill_chunking", True))
    if config.get("prefix_caching") == "on" and attention == "paged":
        raise ConfigRejectedError(
            "prefix_caching on needs flashinfer or flashdecoding attention: TGI's shards refuse "
            "it with paged attention (\"Prefix caching is only supported with flashinfer\")")
    if attention == "paged" and chunking:
        raise ConfigRejectedError(
            "prefill_chunking needs flashinfer or flashdecoding attention: with paged attention "
            "TGI turns it off (models/model.py), so the trial would not run the recorded "
            "config; use prefill_chunking false")
    dtype, quantize = config.get("dtype", "auto"), config.get("quantize", "none")
    if dtype != "auto" and quantize not in ("none", "bitsandbytes-nf4", "bitsandbytes-fp4"):
        raise ConfigRejectedError(
            f"dtype {dtype} cannot be combined with quantize {quantize}: TGI's server refuses "
            "it (\"Only 1 can be set between `dtype` and `quantize`\"; bitsandbytes excepted)")
    total = config.get("max_batch_total_tokens")
    prefill = config.get("max_batch_prefill_tokens")
    if total is not None and max_model_len > total:
        raise ConfigRejectedError(
            f"max_batch_total_tokens ({total}) must be at least the workload's max_total_tokens "
            f"({max_model_len}): TGI refuses `max_total_tokens` > `max_batch_total_tokens`")
    if total is not None and prefill is not None and prefill > total:
        raise ConfigRejectedError(
            f"max_batch_prefill_tokens ({prefill}) must be at most max_batch_total_tokens "
            f"({total}): TGI's router refuses it")
    if prefill is not None and prefill < max_model_len - 1 and not chunking:
        raise ConfigRejectedError(
            f"max_batch_prefill_tokens ({prefill}) must be at least max_input_tokens "
            f"({max_model_len - 1}) without prefill chunking: TGI's router refuses it")


def _unescape_debug(text: str) -> str:
    """A Rust ``{:?}`` string body back to its text (the escapes TGI's messages can hold)."""
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m[1], m[1]), text)


def rejection_reason(log: str, exit_code: int | None) -> str | None:
    """TGI's own words when it refused the configuration: clap's usage error (exit code 2), the
    launcher's or router's ``ArgumentValidation``, or a shard's refusal of a combination; None
    for any other failure."""
    text = _ANSI.sub("", log)
    match = _CLAP_ERROR.search(text)
    if match and exit_code == 2:
        return match.group("msg").strip()
    match = _ARGUMENT_VALIDATION.search(text)
    if match:
        return _unescape_debug(match.group("msg"))
    match = _SHARD_REFUSAL.search(text)
    if match:
        return match.group("msg").strip()
    return None


def startup_facts(log: str) -> dict[str, Any]:
    """What TGI logged at start-up about the values it chose itself (attention, prefix caching,
    chunking, the batch token budgets)."""
    text = _ANSI.sub("", log)
    facts: dict[str, Any] = {}
    for key, pattern in _FACTS:
        match = pattern.search(text)
        if match:
            value = match.group("v")
            facts[key] = int(value) if value.isdigit() else value
    return facts


def engine_info(base_url: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """TGI's ``GET /info`` (version, model, the limits it settled on); {} when unreadable."""
    try:
        with httpx.Client(timeout=httpx.Timeout(timeout_s), trust_env=False) as client:
            response = client.get(f"{base_url.rstrip('/')}/info")
        data = response.json() if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return {}
    return dict(data) if isinstance(data, Mapping) else {}


def _log_head(path: Path) -> str:
    try:
        with path.open("rb") as f:
            return f.read(_LOG_HEAD_BYTES).decode(errors="replace")
    except OSError:
        return ""


def tgi_model_dir(model: ModelSource) -> Path:
    """The directory TGI loads: a local model as it is; for a named shape a sibling of its model
    directory, ``<shape>-safetensors-<hash of the config>``, holding the config, the tokenizer and
    random weights (written once)."""
    if model.shape is None:
        return model.path
    config = model_config(model.shape)
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:10]
    directory = model.path.parent / f"{model.shape}-safetensors-{digest}"
    write_model_dir(model.shape, directory)
    write_random_safetensors(directory / "model.safetensors", config)
    return directory


class TGITarget(ServingTarget):
    """Hugging Face text-generation-inference on a random-weight (or local) model."""

    name: ClassVar[str] = "tgi"
    #: The key of the version TGI reports (``GET /info``). PyPI's ``tgi`` is an unrelated client
    #: library, so no package metadata is read under this name.
    engine: ClassVar[str] = "tgi"
    trial_time_estimate_s: ClassVar[float] = 300.0
    description: ClassVar[str] = (
        "Hugging Face text-generation-inference (text-generation-launcher), one per trial"
    )
    install_hint: ClassVar[str] = (
        f"run TGI {SOURCE_RELEASE} from its container image or build it from source "
        f"(`make install`), then put {LAUNCHER} on PATH or set {COMMAND_ENV} to a JSON command "
        "list that starts it (docs/engines.md)"
    )
    engine_server: ClassVar[EngineServer] = ENGINE_SERVER
    server_metrics: ClassVar[MetricVocabulary | None] = TGI_METRICS

    # -- availability and versions --------------------------------------------------------------

    def check_available(self) -> None:
        spec = self.engine_server
        if os.environ.get(spec.command_env):
            spec.command()  # a wrapper runs TGI elsewhere; only its syntax is checked here
            return
        if shutil.which(LAUNCHER) is None:
            raise EngineUnavailableError(
                f"the tgi target needs {LAUNCHER} (Hugging Face text-generation-inference) on "
                "PATH, which is not installable from the package registries this project "
                f"reaches: {self.install_hint}")

    def engine_versions(self) -> dict[str, str]:
        # TGI runs in its own environment (a container, as a rule): nothing installed here says
        # which TGI it is. A trial replaces this with the version the server reports.
        return {self.engine: UNKNOWN_VERSION}

    def installed_version(self) -> str | None:
        return None  # the flags do not drift within what the YAML maps

    # -- workloads ------------------------------------------------------------------------------

    def prepare(self, workload: Workload, cache_dir: Path, progress: ProgressFn | None = None
                ) -> dict[str, Any]:
        self._check_kind(workload)
        served = self.load_served(workload, cache_dir)
        return {"model": served.model.label, "dummy_weights": served.model.dummy_weights,
                "max_model_len": served.max_model_len(),
                "model_dir": str(tgi_model_dir(served.model))}

    # -- one trial: the hooks of ServingTarget.run -----------------------------------------------

    @contextlib.contextmanager
    def serve(self, config: Mapping[str, Any], served: ServingWorkload, cache_dir: Path,
              *, env: Mapping[str, str] | None = None) -> Iterator[RunningServer]:
        """:meth:`ServingTarget.serve` with the knobs' environment variables, and once TGI is
        up its ``/info`` and the choices its start-up log reports recorded with the trial."""
        clean = self.validate_config(config)
        with super().serve(clean, served, cache_dir,
                           env={**launch_env(clean), **(env or {})}) as running:
            info = engine_info(running.base_url)
            facts = startup_facts(_log_head(running.server.log_path))
            yield running
        running.facts.update(facts)
        if info:
            running.facts["engine_info"] = info
        version = info.get("version")
        if isinstance(version, str) and version:
            running.versions[self.engine] = version
            running.facts["engine_version"] = version

    def server_argv(self, config: Mapping[str, Any], served: ServingWorkload, *, port: int,
                    engine_version: str | None, max_model_len: int, workdir: Path
                    ) -> tuple[list[str], dict[str, Any]]:
        model_dir = tgi_model_dir(served.model)
        launch = build_launch(config, model_id=model_dir, port=port, max_model_len=max_model_len)
        # Parallel trials on one host must not share the shards' socket, torch.distributed's
        # port or the router's Prometheus listener; usage statistics would leave the host.
        argv = [*launch.argv, "--shard-uds-path", str(workdir / "tgi-shard"),
                "--master-port", str(free_port()), "--prometheus-port", str(free_port()),
                "--usage-stats", "off"]
        return argv, {"environment": launch.env, "model_dir": str(model_dir)}

    def server_env(self, served: ServingWorkload) -> dict[str, str] | None:
        env = {k: v for k, v in os.environ.items() if k not in engine_env_names()}
        if served.model.dummy_weights:
            env.setdefault("HF_HUB_OFFLINE", "1")  # everything it needs is in the model dir
        return env

    def reject_infeasible(self, config: Mapping[str, Any], max_model_len: int) -> None:
        check_feasible(config, max_model_len)

    def served_model_name(self, served: ServingWorkload) -> str:
        # TGI serves one model and ignores the request's `model`; its docs send "tgi".
        return "tgi"

    def engine_refusal(self, log: str, exit_code: int | None) -> str | None:
        return rejection_reason(log, exit_code)

    def with_memory_share(self, config: Mapping[str, Any], share: float) -> dict[str, Any]:
        """``cuda_memory_fraction`` set to ``share``: TGI limits its CUDA memory to that share of
        the device, so co-resident servers each take at most 1 / n."""
        if not 0 < share <= 1:
            raise ConfigRejectedError(f"`0 < memory share <= 1` must hold, got {share}")
        return {**self.validate_config(config), "cuda_memory_fraction": share}

    # -- reproduction ---------------------------------------------------------------------------

    def launch_command(self, config: Mapping[str, Any], workload: Workload | None = None) -> str:
        """``VAR=value ... text-generation-launcher --model-id M ...`` for ``config``: a named
        shape becomes its Hugging Face checkpoint where it has one; the context is the trials'."""
        clean = self.validate_config(config)
        model, max_model_len = "MODEL", 4096
        if (shaped := self.command_model(workload)) is not None:
            source, max_model_len = shaped
            if source.shape in HF_MODELS:
                model = HF_MODELS[source.shape]
            elif source.shape is not None:
                model = f"models/{source.shape}"
            else:
                model = str(source.path)
        launch = build_launch(clean, model_id=model, port=3000, max_model_len=max_model_len,
                              host="0.0.0.0")
        return launch.shell()

"""The llama.cpp target: one ``llama-server`` process per trial on the CPU, driven over its
OpenAI-compatible API.

``llama-server`` is llama.cpp's C++ server: parallel slots decoded together by continuous
batching, so concurrency, batch sizes and KV-cache types change what it does (llama-cpp-python's
own ``python -m llama_cpp.server`` holds one lock around each whole request and, by default,
interrupts a streaming request when the next arrives: docs/engines.md). One ``pip install`` of
llama-cpp-python with its tools built (``CMAKE_ARGS``, see :data:`CMAKE_ARGS`) gives the server
binary and the bindings whose quantizer makes the GGUF files.

A trial takes the shape's random-weight GGUF (:mod:`objectives.llm.gguf_model`) in the trial's
``quant`` type (quantized once per shape and type, :mod:`objectives.llm.gguf_quant`), maps the
other knobs to the server's flags (``search_spaces/llamacpp.yaml``), starts the server with them,
waits for ``/health``, warms up, replays the workload with EOS ignored and always stops the
server's process group: :class:`~objectives.llm.serving_target.ServingTarget`'s ``run``.

``ADVISOR_LLAMACPP_COMMAND`` (a JSON list) replaces the server command (the ``llama-server``
installed with llama-cpp-python) for wrappers and other builds; the flags are appended to it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shlex
import shutil
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import httpx

from advisor.errors import (
    ConfigRejectedError,
    EngineStartError,
    EngineUnavailableError,
    WorkloadError,
)
from objectives.llm.gguf_model import write_source_gguf
from objectives.llm.gguf_quant import quantized_gguf, tensor_types
from objectives.llm.models import MODEL_SHAPES, model_config
from objectives.llm.server import (
    ServingWorkload,
    package_versions,
    process_peak_rss_mb,
    process_tree,
    resolve_model,
    weight_metrics,
)
from objectives.llm.server_metrics import MetricVocabulary
from objectives.llm.serving_target import (
    EngineServer,
    RunningServer,
    ServingTarget,
    shared_space,
)
from objectives.llm.workload import CPU_PRESETS, PRESETS, cpu_scaled, load_preset
from objectives.metrics import LLM_SERVING, WEIGHTS
from objectives.target import ProgressFn, checked_config
from objectives.workload import Workload
from search_spaces import SearchSpace
from search_spaces.knobs import Knob

__all__ = [
    "CMAKE_ARGS",
    "COMMAND_ENV",
    "LLAMACPP_METRICS",
    "LlamaCppTarget",
    "build_argv",
    "check_feasible",
    "check_kv_types",
    "engine_facts",
    "fixed_argv",
    "knob_argv",
    "read_server_facts",
    "rejection_reason",
    "server_binary",
    "server_environment",
    "server_facts",
]

COMMAND_ENV = "ADVISOR_LLAMACPP_COMMAND"
#: The distribution that builds llama.cpp; its version names the llama.cpp it vendors.
DISTRIBUTION = "llama_cpp_python"
#: What llama-cpp-python's build needs so that one install also gives ``llama-server``: the
#: tools on and installed, its own copy of the multimodal library off (the tools build it), no
#: web UI assets (they would be downloaded) and no TLS.
CMAKE_ARGS = ("-DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_TOOLS_INSTALL=ON "
              "-DLLAVA_BUILD=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF "
              "-DLLAMA_OPENSSL=OFF")
INSTALL_HINT = (f"CMAKE_ARGS=\"{CMAKE_ARGS}\" pip install --no-cache-dir 'slo-advisor[llamacpp]' "
                "(builds llama.cpp from source, ~10 min on 2 cores)")
SERVER_NAME = "llama-server"
DEFAULT_WORKLOAD = "chat-1b-cpu"
DEFAULT_STARTUP_TIMEOUT_S = 120.0
#: The start-up log holds the model's facts (tensor types, KV-cache size) before any request.
FULL_LOG_CHARS = 2_000_000
LOG_TAIL_CHARS = 4000
#: The knob that picks the model file instead of mapping to a flag value.
QUANT_KNOB = "quant"
#: ``quant`` values whose weights are not quantized (nothing to repack).
UNQUANTIZED = frozenset({"F32", "F16", "BF16"})
#: Environment variables llama.cpp reads as arguments: cleared so the argv is the whole config.
_ARG_ENV_PREFIX = "LLAMA_ARG_"

_PARSE_ERROR = re.compile(r"^error(?: while handling argument \"[^\"]*\")?: (?P<msg>.+)$",
                          re.MULTILINE)
#: Logged once the arguments have parsed and the model file is being read.
_MODEL_LOADING = "llama_model_loader"
_CONTEXT_REFUSAL = re.compile(
    r"(?P<msg>[KV] cache type \S+ with block size \d+ does not divide n_embd_head_[kv]=\d+"
    r"|quantized V cache requires flash_attn to be enabled)")
#: The one start-up fact llama-server logs at its default verbosity (tools/server).
_SLOTS = re.compile(r"n_slots = (?P<slots>\d+), n_ctx_slot = (?P<ctx>\d+), "
                    r"kv_unified = '(?P<unified>\w+)'")
#: How long a request to the server's own description (``/props``, ``/v1/models``) may take.
_PROPS_TIMEOUT_S = 10.0


#: llama-server's ``/metrics`` (with ``--metrics``; tools/server/server-task.cpp): counters and
#: gauges only, no latency histograms. ``tokens_predicted_seconds_total`` sums each finished
#: request's first-to-last-token time (``metrics_on_prediction``, server-context.cpp), which the
#: client's spans must add up to; with the timings the server streams back per request
#: (:attr:`objectives.llm.requests.RequestRecord.server_timings`) the validity gate checks TPOT
#: exactly and TTFT against its floor. (``prompt_seconds_total`` is not per request: it times
#: whole decode batches that held prompt tokens.) It has no prefix-cache reset endpoint.
LLAMACPP_METRICS = MetricVocabulary(
    source="llamacpp", path="/metrics",
    generation_tokens="llamacpp:tokens_predicted_total",
    decode_seconds="llamacpp:tokens_predicted_seconds_total",
    running="llamacpp:requests_processing",
    waiting="llamacpp:requests_deferred",
)


def _package_dir() -> Path | None:
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent


def server_binary() -> Path:
    """The ``llama-server`` that llama-cpp-python installed (its build's ``bin/`` next to the
    package), else one on ``PATH``. Raises :class:`EngineUnavailableError` with the install
    command when there is none."""
    candidates: list[Path] = []
    if (package := _package_dir()) is not None:
        candidates += [package.parent / "bin" / SERVER_NAME, package / "bin" / SERVER_NAME]
    candidates.append(Path(sys.executable).parent / SERVER_NAME)
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    if (found := shutil.which(SERVER_NAME)) is not None:
        return Path(found)
    where = "is not installed" if package is None else "was built without its tools"
    raise EngineUnavailableError(f"the llamacpp target needs {SERVER_NAME}, but llama-cpp-python "
                                 f"{where}; install it with: {INSTALL_HINT}")


def library_path() -> str:
    """Where llama-cpp-python installed llama.cpp's shared libraries (``LD_LIBRARY_PATH`` for
    the server binary, which is linked against them but carries no run path)."""
    package = _package_dir()
    if package is None:
        return ""
    dirs = [package / "lib", package.parent / "lib"]
    return os.pathsep.join(str(d) for d in dirs if d.is_dir())


def server_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The server's environment: ``base`` (``os.environ``) without llama.cpp's ``LLAMA_ARG_*``
    variables (each would set an argument the argv does not show) and with the libraries'
    directory on ``LD_LIBRARY_PATH``."""
    env = {k: v for k, v in (os.environ if base is None else base).items()
           if not k.startswith(_ARG_ENV_PREFIX)}
    if libs := library_path():
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [libs, env.get("LD_LIBRARY_PATH")]))
    return env


@dataclass(frozen=True)
class LlamaServer(EngineServer):
    """:class:`EngineServer` whose default command is found at run time (the server binary lives
    wherever pip installed llama-cpp-python)."""

    def command(self, env: Mapping[str, str] | None = None) -> list[str]:
        if (os.environ if env is None else env).get(self.command_env):
            return super().command(env)
        return [str(server_binary())]


ENGINE_SERVER = LlamaServer(
    label="llama.cpp", process_name=SERVER_NAME, scratch_name="llamacpp", command_env=COMMAND_ENV,
    default_command=(SERVER_NAME,), startup_timeout_s=DEFAULT_STARTUP_TIMEOUT_S,
    log_read_chars=FULL_LOG_CHARS)


def knob_argv(knob: Knob, value: Any, engine_version: str | None) -> list[str]:
    """The server arguments of one knob other than ``quant`` (which picks the model file).

    Raises :class:`ConfigRejectedError` when the knob has no flag in ``engine_version``.
    """
    flag = knob.required_flag(engine_version, flag_kind="llama-server flag",
                              release="llama-cpp-python")
    if knob.type == "bool":
        return [flag if value else f"--no-{flag[2:]}"]
    if knob.type == "int":
        return [flag, str(int(value))]
    return [flag, str(value)]


def fixed_argv(*, model_path: Path | str, port: int, served_model_name: str, seed: int,
               host: str = "127.0.0.1") -> list[str]:
    """The arguments every trial passes: the model file, where to listen, the served name, the
    Prometheus endpoint, no web UI, no fitting of unset arguments to free memory, a seed."""
    return ["--model", str(model_path), "--host", host, "--port", str(port),
            "--alias", served_model_name, "--metrics", "--no-webui", "--fit", "off",
            "--seed", str(seed)]


def build_argv(config: Mapping[str, Any], *, model_path: Path | str, port: int,
               engine_version: str | None, served_model_name: str, seed: int = 0,
               host: str = "127.0.0.1", space: SearchSpace | None = None) -> list[str]:
    """The ``llama-server`` arguments for ``config`` with the model file ``model_path`` (the
    GGUF of the config's ``quant``).

    ``config`` is validated against the space first (missing knobs take their defaults) and
    every knob but ``quant`` is passed as its flag, defaults included; an invalid config raises
    :class:`ConfigRejectedError`.
    """
    space = space or shared_space("llamacpp")
    clean = checked_config(space, config)
    argv = fixed_argv(model_path=model_path, port=port, served_model_name=served_model_name,
                      seed=seed, host=host)
    for knob in space.active_knobs(clean):
        if knob.name != QUANT_KNOB:
            argv += knob_argv(knob, clean[knob.name], engine_version)
    return argv


def check_feasible(config: Mapping[str, Any], max_model_len: int) -> None:
    """Reject, before a start, what llama.cpp would refuse or could never serve: a slot smaller
    than the workload's longest request, or a quantized V cache without flash attention."""
    ctx, slots = config.get("ctx_size"), config.get("parallel")
    if ctx is not None and slots is not None:
        unified = bool(config.get("kv_unified", True))
        per_slot = ctx if unified else ctx // slots
        if per_slot < max_model_len:
            how = "" if unified else f" split over {slots} slots (kv_unified off)"
            raise ConfigRejectedError(
                f"ctx_size {ctx}{how} gives each request at most {per_slot} tokens, fewer than "
                f"the {max_model_len} the workload needs")
    v_type = str(config.get("cache_type_v", "f16"))
    if not v_type.startswith(("f", "bf")) and config.get("flash_attn") == "off":
        raise ConfigRejectedError(
            f"cache_type_v {v_type} needs flash attention, but flash_attn is off (llama.cpp: "
            "quantized V cache requires flash_attn to be enabled)")


#: Elements per block of llama.cpp's quantized KV-cache types (ggml's blck_size).
_KV_BLOCK = {"q8_0": 32, "q5_1": 32, "q5_0": 32, "q4_1": 32, "q4_0": 32, "iq4_nl": 32}


def check_kv_types(config: Mapping[str, Any], shape: str) -> None:
    """Reject a quantized KV type whose block does not divide the shape's head dimension
    (llama.cpp refuses it when it creates the context)."""
    c = model_config(shape)
    head_dim = int(c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"])
    for knob in ("cache_type_k", "cache_type_v"):
        kind = str(config.get(knob, "f16"))
        block = _KV_BLOCK.get(kind, 1)
        if head_dim % block:
            raise ConfigRejectedError(
                f"{knob} {kind} has blocks of {block}, which do not divide {shape}'s head "
                f"dimension {head_dim} (llama.cpp refuses it)")


def rejection_reason(log: str, exit_code: int | None) -> str | None:
    """llama.cpp's own message when it refused the arguments (its parser) or the context it was
    asked for (KV types, flash attention); None for any other failure."""
    if (match := _CONTEXT_REFUSAL.search(log)) is not None:
        return match.group("msg")
    if exit_code in (None, 0) or _MODEL_LOADING in log:
        return None  # the arguments parsed: a later failure is not the config's
    if (match := _PARSE_ERROR.search(log)) is not None:
        return match.group("msg").strip()
    return None


def engine_facts(log: str) -> dict[str, Any]:
    """What llama-server logged about itself at start-up (its default verbosity logs little
    more): the slots, each one's context and whether they share one KV buffer."""
    if match := _SLOTS.search(log):
        return {"slots": int(match["slots"]), "ctx_per_slot": int(match["ctx"]),
                "kv_unified_reported": match["unified"] == "true"}
    return {}


def server_facts(props: Mapping[str, Any], models: Mapping[str, Any]) -> dict[str, Any]:
    """What the running server says about itself: ``GET /props`` (its build, the model file's
    type) and ``GET /v1/models`` (parameters, bytes and training context of the model)."""
    facts: dict[str, Any] = {}
    if isinstance(build := props.get("build_info"), str):
        facts["llama_cpp_build"] = build
    if isinstance(ftype := props.get("model_ftype"), str):
        facts["gguf_file_type"] = ftype
    data = models.get("data")
    meta = data[0].get("meta") if isinstance(data, list) and data else None
    if isinstance(meta, Mapping):
        for key, name in (("n_params", "model_params"), ("size", "model_bytes"),
                          ("n_ctx_train", "model_ctx_train")):
            if isinstance(meta.get(key), int):
                facts[name] = meta[key]
    return facts


def read_server_facts(base_url: str) -> dict[str, Any]:
    """:func:`server_facts` of the server at ``base_url`` (empty when it does not answer)."""
    try:
        with httpx.Client(base_url=base_url, timeout=_PROPS_TIMEOUT_S, trust_env=False) as c:
            props, models = c.get("/props"), c.get("/v1/models")
            if props.status_code != 200 or models.status_code != 200:
                return {}
            return server_facts(props.json(), models.json())
    except (httpx.HTTPError, ValueError):
        return {}


class LlamaCppTarget(ServingTarget):
    """llama.cpp's ``llama-server`` on the CPU, on a random-weight GGUF of a named shape."""

    name: ClassVar[str] = "llamacpp"
    engine: ClassVar[str] = "llama_cpp"
    metric_families: ClassVar[tuple[str, ...]] = (LLM_SERVING, WEIGHTS)
    description: ClassVar[str] = (
        "llama.cpp server (llama-server) on the CPU, one per trial, random-weight GGUF models"
    )
    install_hint: ClassVar[str] = INSTALL_HINT
    engine_server: ClassVar[EngineServer] = ENGINE_SERVER
    server_metrics: ClassVar[MetricVocabulary | None] = LLAMACPP_METRICS
    #: The default workload arrives open-loop at a fixed rate, so every config that keeps up
    #: serves the same tokens/s: what differs is latency. The SLO sits between llama.cpp's
    #: defaults on the 1B shape and what tuning reaches on 2 cores (docs/engines.md); no quality
    #: floor by default (add ``bits_per_weight>=N`` to keep a quantization out).
    default_objective: ClassVar[str] = "minimize:e2e_p95_ms"
    default_slo: ClassVar[str] = "ttft_p95_ms<=1500,tpot_p95_ms<=100"

    # -- availability and versions --------------------------------------------------------------

    def check_available(self) -> None:
        if os.environ.get(COMMAND_ENV):
            ENGINE_SERVER.command()  # a wrapper runs the server; only its syntax is checked
        else:
            server_binary()
        for module, what in (("llama_cpp", "llama-cpp-python (its quantizer)"),
                             ("gguf", "gguf (writes the model files)")):
            if importlib.util.find_spec(module) is None:
                raise EngineUnavailableError(f"the llamacpp target needs {what}; install it "
                                             f"with: {INSTALL_HINT}")

    def engine_versions(self) -> dict[str, str]:
        versions = package_versions(DISTRIBUTION, "gguf", "numpy")
        if DISTRIBUTION in versions:  # the name the knowledge base groups trials by
            versions[self.name] = versions[DISTRIBUTION]
        return versions

    def installed_version(self) -> str | None:
        """llama-cpp-python's version: it pins the llama.cpp it builds (flag ranges use it)."""
        return package_versions(DISTRIBUTION).get(DISTRIBUTION)

    # -- workloads ------------------------------------------------------------------------------

    def default_workload(self) -> Workload:
        """``chat-1b-cpu``: llama-3.2-1b at a rate a 2-core machine carries near its knee
        (``--model tiny-llama`` makes it a seconds-long smoke run)."""
        return load_preset(DEFAULT_WORKLOAD)

    def named_workloads(self) -> dict[str, Workload]:
        """The CPU presets as they are, and the GPU presets sized for the CPU (tiny-llama) under
        their own names and as ``<preset>-cpu``: a CPU server cannot run the 8B presets' rates."""
        scaled = {name: cpu_scaled(load_preset(name)) for name in PRESETS}
        return {**scaled, **{f"{name}-cpu": wl for name, wl in scaled.items()},
                **{name: load_preset(name) for name in CPU_PRESETS}}

    def check_workload(self, workload: Workload) -> None:
        super().check_workload(workload)
        spec, _ = ServingWorkload.check(workload.params, target_keys=self.target_params)
        if spec.model not in MODEL_SHAPES:
            raise WorkloadError(f"the llamacpp target runs the named shapes "
                                f"({', '.join(sorted(MODEL_SHAPES))}), got model {spec.model!r}")

    def prepare(self, workload: Workload, cache_dir: Path, progress: ProgressFn | None = None
                ) -> dict[str, Any]:
        self.check_workload(workload)
        facts = super().prepare(workload, cache_dir, progress)
        spec, _ = ServingWorkload.check(workload.params, target_keys=self.target_params)
        model = resolve_model(spec.model, cache_dir)
        assert model.shape is not None
        if progress is not None:
            progress(f"writing the F16 GGUF of {model.shape} (once per shape)")
        facts["gguf_source"] = write_source_gguf(model.path, model.shape).name
        return facts

    # -- one trial: the hooks of ServingTarget.run -----------------------------------------------

    def server_argv(self, config: Mapping[str, Any], served: ServingWorkload, *, port: int,
                    engine_version: str | None, max_model_len: int, workdir: Path
                    ) -> tuple[list[str], dict[str, Any]]:
        shape = served.model.shape
        if shape is None:
            raise WorkloadError("the llamacpp target runs named shapes, not a local model path")
        check_kv_types(config, shape)
        model = quantized_gguf(served.model.path, shape, str(config[QUANT_KNOB]))
        argv = build_argv(config, model_path=model.path, port=port,
                          engine_version=engine_version,
                          served_model_name=self.served_model_name(served), seed=served.spec.seed)
        facts: dict[str, Any] = {"gguf": model.path.name, "gguf_cached": model.cached,
                                 "quantize_s": model.quantize_s}
        try:
            facts["gguf_tensor_types"] = tensor_types(model.path)
        except EngineStartError as exc:  # let the server report the damage in its own words
            facts["gguf_unreadable"] = str(exc)
        return argv, facts

    def measure(self, running: RunningServer, served: ServingWorkload
                ) -> tuple[dict[str, float], dict[str, Any]]:
        """The shared measurement, plus what the quantization did: the weights' bytes and bits
        per weight as the server reports its model, and the server's peak resident memory."""
        facts = read_server_facts(running.base_url)  # before the load: nothing else is running
        metrics, details = super().measure(running, served)
        metrics.update(weight_metrics(facts.get("model_bytes"), facts.get("model_params")))
        if (rss := process_peak_rss_mb(process_tree(running.server.pid or 0))) is not None:
            metrics["peak_memory_mb"] = rss
        return metrics, {**details, **facts}

    def reject_infeasible(self, config: Mapping[str, Any], max_model_len: int) -> None:
        check_feasible(config, max_model_len)

    @contextlib.contextmanager
    def serve(self, config: Mapping[str, Any], served: ServingWorkload, cache_dir: Path,
              *, env: Mapping[str, str] | None = None) -> Iterator[RunningServer]:
        """The shared start (:meth:`ServingTarget.serve`), with one llama.cpp-specific check
        when the server crashes at load: see :meth:`repack_crash_reason`."""
        with contextlib.ExitStack() as stack:
            try:
                running = stack.enter_context(super().serve(config, served, cache_dir, env=env))
            except EngineStartError as exc:
                reason = self.repack_crash_reason(config, served, cache_dir, str(exc))
                if reason is None:
                    raise
                raise ConfigRejectedError(reason) from None
            yield running

    def repack_crash_reason(self, config: Mapping[str, Any], served: ServingWorkload,
                            cache_dir: Path, failure: str) -> str | None:
        """Why a config was rejected when its server crashed (SIGILL or SIGSEGV) loading
        quantized weights with ``repack`` on and the same config with ``repack`` off starts on
        this host; None for any other failure.

        llama.cpp repacks quantized weights into the CPU's fastest layout, AMX tiles where the
        CPU reports AMX; some VMs report AMX and fault on its instructions, so every quantized
        type crashes there at load. The second start is the evidence: the config cannot run
        on this host, while the same weights run without repacking.
        """
        clean = self.validate_config(config)
        if not clean.get("repack") or str(clean[QUANT_KNOB]) in UNQUANTIZED:
            return None
        crash = re.search(r"\b(SIGILL|SIGSEGV)\b", failure)
        if crash is None:
            return None
        try:
            with super().serve({**clean, "repack": False}, served, cache_dir):
                pass  # it started: repacking was the crash
        except (EngineStartError, ConfigRejectedError):
            return None  # it fails without repacking too: not repacking's doing
        return (f"llama-server crashed ({crash.group(1)}) loading {clean[QUANT_KNOB]} weights "
                "with repack on, and the same config with repack off started: llama.cpp's "
                "repacked-weight path (AMX where the CPU reports it) does not run on this host; "
                "use repack false")

    def server_env(self, served: ServingWorkload) -> dict[str, str] | None:
        return server_environment()

    def engine_refusal(self, log: str, exit_code: int | None) -> str | None:
        return rejection_reason(log, exit_code)

    def log_facts(self, log: str) -> dict[str, Any]:
        return engine_facts(log)

    def log_to_store(self, log: str) -> str:
        return log[-LOG_TAIL_CHARS:]

    # -- reproduction ---------------------------------------------------------------------------

    def launch_command(self, config: Mapping[str, Any], workload: Workload | None = None) -> str:
        """``llama-server --model MODEL-<QUANT>.gguf --flag value ...`` for ``config``; for a
        named shape the file is the shape's (``models/<shape>-<QUANT>.gguf``)."""
        clean = self.validate_config(config)
        model = f"MODEL-{clean[QUANT_KNOB]}.gguf"
        if (shaped := self.command_model(workload)) is not None and shaped[0].shape is not None:
            model = f"models/{shaped[0].shape}-{clean[QUANT_KNOB]}.gguf"
        argv = build_argv(clean, model_path=model, port=8080,
                          engine_version=self.installed_version(), served_model_name="model",
                          host="0.0.0.0")
        return shlex.join([SERVER_NAME, *argv])

"""The Ollama target: one ``ollama serve`` per trial, configured by its environment, serving a
model that ``ollama create`` builds from a Modelfile, driven over its OpenAI-compatible API.
Mapped from Ollama 0.32.15's source and never run here: Ollama is a Go binary and an installer
script, on no package registry this project reaches (PyPI's ``ollama`` is its client library).

A trial's "argv" is three things, each built by a pure function and recorded with the trial:
the ``OLLAMA_*`` environment of ``ollama serve`` (inherited ``OLLAMA_*`` variables are cleared),
a Modelfile (``FROM`` the model's GGUF, one ``PARAMETER name value`` line per model knob) and
the commands ``ollama serve`` then ``ollama create NAME -f Modelfile [--quantize TYPE]``. A named
shape is served from the random-weight F16 GGUF that :func:`objectives.llm.gguf_model.
write_source_gguf` writes once per shape. The trial then loads the model
(``POST /api/generate`` without a prompt, Ollama's documented preload), so a model Ollama cannot
load fails the start, not the measurement.

Ollama exposes no Prometheus metrics, so its trials are ``unchecked`` by the validity gate (the
client's own health is still checked), and it has no ``ignore_eos``: a request may stop at EOS
before ``max_tokens`` (the client counts what was streamed).

``ADVISOR_OLLAMA_COMMAND`` (a JSON list) replaces the command prefix ``["ollama"]``; the
subcommands ``serve`` and ``create ...`` are appended to it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import httpx

from advisor.errors import ConfigRejectedError, EngineStartError, EngineUnavailableError
from objectives.llm.gguf_model import write_source_gguf
from objectives.llm.server import (
    ROOT_CAUSE_LOG_CHARS,
    ManagedServer,
    ModelSource,
    ServingWorkload,
    free_port,
    root_cause,
)
from objectives.llm.serving_target import (
    EngineServer,
    RunningServer,
    ServingTarget,
    shared_space,
)
from objectives.target import ProgressFn, checked_config
from objectives.workload import Workload
from search_spaces.knobs import Knob

__all__ = [
    "COMMAND_ENV",
    "DEFAULT_COMMAND",
    "FIXED_ENV",
    "HEALTH_PATH",
    "SOURCE_RELEASE",
    "OllamaLaunch",
    "OllamaTarget",
    "build_launch",
    "check_feasible",
    "model_name_for",
    "rejection_reason",
    "server_environment",
]

BINARY = "ollama"
COMMAND_ENV = "ADVISOR_OLLAMA_COMMAND"
DEFAULT_COMMAND: tuple[str, ...] = (BINARY,)
#: The release whose source the mapping was read from (commit b7871fc0, 2026-08-19).
SOURCE_RELEASE = "0.32.15"
#: Answers 200 with the version once the server listens (server/routes.go); Ollama has no
#: /health.
HEALTH_PATH = "/api/version"
SERVE_ARGS: tuple[str, ...] = ("serve",)
DEFAULT_STARTUP_TIMEOUT_S = 600.0
ENGINE_SERVER = EngineServer(
    label="Ollama", process_name="ollama serve", scratch_name="ollama", command_env=COMMAND_ENV,
    default_command=DEFAULT_COMMAND, startup_timeout_s=DEFAULT_STARTUP_TIMEOUT_S)
ENV_PREFIX = "OLLAMA_"
PARAMETER_PREFIX = "PARAMETER "
#: Set for every trial, whatever the config: the model never unloads between warm-up and
#: measurement (a negative keep-alive is infinite), one model per server, the trial's model
#: store is never pruned, and nothing is sent to ollama.com.
FIXED_ENV: dict[str, str] = {"OLLAMA_KEEP_ALIVE": "-1", "OLLAMA_MAX_LOADED_MODELS": "1",
                             "OLLAMA_NOPRUNE": "1", "OLLAMA_NO_CLOUD": "1"}
#: What a deployment keeps of FIXED_ENV (the rest is the trial's plumbing).
DEPLOY_ENV: dict[str, str] = {"OLLAMA_KEEP_ALIVE": "-1"}
UNKNOWN_VERSION = "unknown"
#: Categorical values that leave the setting out (Ollama decides).
LEFT_OUT = frozenset({"auto", "none"})
#: on/off knobs of Go strconv.ParseBool variables: "1" and "0" parse; "on"/"off" would not, and
#: envconfig counts an unparsable value as true.
_SWITCH = {"on": "1", "off": "0"}
#: KV-cache types llama.cpp only accepts for the V cache with flash attention.
QUANTIZED_KV = frozenset({"q8_0", "q4_0"})

#: How cobra reports a failed command (``ollama create``), exit code 1.
_COBRA_ERROR = re.compile(r"^Error: (?P<msg>.+)$", re.MULTILINE)
#: Messages of a Modelfile or quantization Ollama refuses (api/types.go FormatParams,
#: fs/ggml/type.go ParseFileType, server/create.go).
_CREATE_REFUSALS = ("unknown parameter", "invalid float value", "invalid int value",
                    "invalid bool value", "unsupported quantization type",
                    "quantization is only supported")
#: llama.cpp (src/llama-context.cpp) refusing a quantized V cache without flash attention, in
#: the wordings it has used.
_LOAD_REFUSAL = re.compile(r"V cache quantization requires flash_attn[^\n\"]*"
                           r"|quantized V cache (?:was requested|requires)[^\n\"]*")


@dataclass
class OllamaLaunch:
    """What starts a trial's Ollama: the server's ``OLLAMA_*`` variables (knobs only), the
    Modelfile's source and parameters, and the model's name and ``ollama create`` options."""

    source: str
    model_name: str
    env: dict[str, str] = field(default_factory=dict)
    parameters: dict[str, str] = field(default_factory=dict)
    create_options: list[str] = field(default_factory=list)

    def modelfile(self) -> str:
        """``FROM <source>`` and a ``PARAMETER`` line per model knob."""
        lines = [f"FROM {self.source}"]
        lines += [f"PARAMETER {name} {value}" for name, value in self.parameters.items()]
        return "\n".join(lines) + "\n"

    def create_args(self, modelfile: Path | str) -> list[str]:
        """The arguments of ``ollama create`` (after the command prefix)."""
        return ["create", self.model_name, "-f", str(modelfile), *self.create_options]


def model_name_for(label: str) -> str:
    """The name a trial's model is created under: ``advisor-<label>`` with only the characters
    Ollama allows in a model name."""
    cleaned = re.sub(r"[^a-z0-9._-]+", "-", label.lower()).strip("-._")
    return f"advisor-{cleaned or 'model'}"


def _value_text(knob: Knob, value: Any) -> str:
    if knob.type == "bool":
        return "1" if value else "0"
    if knob.type == "int":
        return str(int(value))
    if knob.type == "float":
        return str(float(value))
    return _SWITCH.get(value, str(value)) if isinstance(value, str) else str(value)


def _apply_knob(launch: OllamaLaunch, knob: Knob, value: Any) -> None:
    flag = knob.flag_for(None)
    if flag is None:
        return  # a gate knob
    if knob.type == "categorical" and value in LEFT_OUT:
        return
    text = _value_text(knob, value)
    if flag.startswith(ENV_PREFIX):
        launch.env[flag] = text
    elif flag.startswith(PARAMETER_PREFIX):
        launch.parameters[flag[len(PARAMETER_PREFIX):]] = text
    elif flag.startswith("--"):
        launch.create_options += [flag, text]
    else:
        raise ValueError(f"knob {knob.name} maps to {flag!r}, which is neither an OLLAMA_* "
                         "variable, a `PARAMETER name` nor an `ollama create` option")


def build_launch(config: Mapping[str, Any], *, source: Path | str, model_name: str
                 ) -> OllamaLaunch:
    """The environment, Modelfile and ``ollama create`` options for ``config`` (validated;
    missing knobs take their defaults), serving ``source`` (a GGUF file or a model directory)
    as ``model_name``. Raises :class:`ConfigRejectedError` for a config outside the space."""
    space = shared_space("ollama")
    clean = checked_config(space, config)
    launch = OllamaLaunch(source=str(source), model_name=model_name)
    for knob in space.active_knobs(clean):
        _apply_knob(launch, knob, clean[knob.name])
    return launch


def server_environment(launch: OllamaLaunch, *, host: str, models_dir: Path | str,
                       base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a trial's ``ollama serve``: ``base`` (``os.environ`` by default)
    without its ``OLLAMA_*`` variables, then the knobs', :data:`FIXED_ENV`, the address and the
    trial's model store."""
    inherited = os.environ if base is None else base
    env = {k: v for k, v in inherited.items() if not k.startswith(ENV_PREFIX)}
    return {**env, **launch.env, **FIXED_ENV, "OLLAMA_HOST": host,
            "OLLAMA_MODELS": str(models_dir)}


def check_feasible(config: Mapping[str, Any], max_model_len: int, *,
                   model_context: int | None = None) -> None:
    """Reject, before a start, what Ollama 0.32.15 (with its llama.cpp) refuses or silently
    changes: a context that cannot hold the workload's longest request (``max_model_len``), one
    beyond the model's training context ``model_context`` (Ollama lowers it), and a quantized KV
    cache with flash attention off."""
    num_ctx = config.get("num_ctx")
    if num_ctx is not None and num_ctx < max_model_len:
        raise ConfigRejectedError(
            f"num_ctx ({num_ctx}) must hold the workload's longest request ({max_model_len} "
            "tokens): Ollama would truncate longer prompts")
    if num_ctx is not None and model_context is not None and num_ctx > model_context:
        raise ConfigRejectedError(
            f"num_ctx ({num_ctx}) exceeds the model's training context ({model_context}): Ollama "
            "lowers it to that (llm/server.go), so the trial would not run the recorded config")
    kv, flash = config.get("kv_cache_type"), config.get("flash_attention")
    if kv in QUANTIZED_KV and flash == "off":
        raise ConfigRejectedError(
            f"kv_cache_type {kv} needs flash attention: llama.cpp refuses a quantized V cache "
            "with flash_attention off (use auto or on)")


def rejection_reason(output: str, exit_code: int | None) -> str | None:
    """Ollama's own words when it refused the configuration: ``ollama create``'s error about a
    Modelfile parameter or a quantization type, or llama.cpp's refusal of a quantized V cache
    without flash attention; None for any other failure."""
    match = _COBRA_ERROR.search(output)
    if match and exit_code not in (None, 0):
        message = match.group("msg").strip()
        if any(refusal in message for refusal in _CREATE_REFUSALS):
            return message
    load = _LOAD_REFUSAL.search(output)
    return load.group(0).strip() if load else None


def model_source(model: ModelSource) -> Path:
    """What the Modelfile's ``FROM`` names: a named shape's random-weight F16 GGUF (written once
    into its model directory); for a local model its only ``.gguf`` file, else the directory
    (Ollama imports safetensors directories)."""
    if model.shape is not None:
        return write_source_gguf(model.path, model.shape)
    ggufs = sorted(model.path.glob("*.gguf"))
    return ggufs[0] if len(ggufs) == 1 else model.path


def _remaining_s(deadline: float) -> float:
    return max(1.0, deadline - time.monotonic())


def _create_model(argv: list[str], env: Mapping[str, str], deadline: float) -> float:
    """Run ``ollama create``; returns its seconds. Raises :class:`ConfigRejectedError` when
    Ollama refused the Modelfile, :class:`EngineStartError` for any other failure."""
    started = time.monotonic()
    try:
        done = subprocess.run(argv, env=dict(env), stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=_remaining_s(deadline), check=False)
    except subprocess.TimeoutExpired:
        raise EngineStartError(f"ollama create did not finish within the start-up timeout: "
                               f"{shlex.join(argv)}") from None
    except OSError as exc:
        raise EngineStartError(f"cannot run ollama create: {exc.strerror or exc}") from None
    output = f"{done.stdout or ''}{done.stderr or ''}"
    if done.returncode != 0:
        reason = rejection_reason(output, done.returncode)
        if reason is not None:
            raise ConfigRejectedError(f"Ollama rejected the configuration: {reason}")
        raise EngineStartError(f"ollama create exited with code {done.returncode}: "
                               f"{output.strip()[-2000:]}")
    return time.monotonic() - started


def _error_text(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.text.strip()[:2000]
    if isinstance(data, Mapping) and isinstance(data.get("error"), str):
        return str(data["error"])
    return response.text.strip()[:2000]


def _load_model(base_url: str, name: str, deadline: float) -> float:
    """Load ``name`` into memory (``POST /api/generate`` without a prompt); returns the seconds
    it took. Raises :class:`ConfigRejectedError` for llama.cpp's refusal of the settings,
    :class:`EngineStartError` when Ollama cannot load the model otherwise."""
    started = time.monotonic()
    body = {"model": name, "keep_alive": -1, "stream": False}
    try:
        with httpx.Client(timeout=httpx.Timeout(_remaining_s(deadline)),
                          trust_env=False) as client:
            response = client.post(f"{base_url}/api/generate", json=body)
    except httpx.HTTPError as exc:
        raise EngineStartError(f"Ollama did not load model {name}: {type(exc).__name__}: "
                               f"{exc}") from None
    if response.status_code != 200:
        message = _error_text(response)
        reason = rejection_reason(message, None)
        if reason is not None:
            raise ConfigRejectedError(f"Ollama rejected the configuration: {reason}")
        raise EngineStartError(f"Ollama could not load model {name} (HTTP "
                               f"{response.status_code}): {message}")
    return time.monotonic() - started


def server_version(base_url: str, timeout_s: float = 10.0) -> str | None:
    """The version ``GET /api/version`` reports; None when it cannot be read."""
    try:
        with httpx.Client(timeout=httpx.Timeout(timeout_s), trust_env=False) as client:
            data = client.get(f"{base_url}{HEALTH_PATH}").json()
    except (httpx.HTTPError, ValueError):
        return None
    version = data.get("version") if isinstance(data, Mapping) else None
    return version if isinstance(version, str) and version else None


class OllamaTarget(ServingTarget):
    """Ollama serving a random-weight (or local) GGUF model made with ``ollama create``."""

    name: ClassVar[str] = "ollama"
    #: The key of the version the server reports (``GET /api/version``). PyPI's ``ollama`` is
    #: the client library, so no package metadata is read under this name.
    engine: ClassVar[str] = "ollama"
    trial_time_estimate_s: ClassVar[float] = 150.0
    description: ClassVar[str] = (
        "Ollama (ollama serve + a Modelfile made with ollama create), one per trial"
    )
    install_hint: ClassVar[str] = (
        f"install Ollama {SOURCE_RELEASE} with its installer script or release binary, then put "
        f"`{BINARY}` on PATH or set {COMMAND_ENV} to a JSON command list that runs it "
        "(docs/engines.md)"
    )
    engine_server: ClassVar[EngineServer] = ENGINE_SERVER

    # -- availability and versions --------------------------------------------------------------

    def check_available(self) -> None:
        spec = self.engine_server
        if os.environ.get(spec.command_env):
            spec.command()  # a wrapper runs Ollama elsewhere; only its syntax is checked here
            return
        if shutil.which(BINARY) is None:
            raise EngineUnavailableError(
                f"the ollama target needs the `{BINARY}` server binary on PATH, which is not "
                "installable from the package registries this project reaches (PyPI's "
                f"`ollama` is only its client): {self.install_hint}")

    def engine_versions(self) -> dict[str, str]:
        # Nothing installed here says which Ollama runs; a trial records what the server reports.
        return {self.engine: UNKNOWN_VERSION}

    def installed_version(self) -> str | None:
        return None  # the names do not drift within what the YAML maps

    # -- workloads ------------------------------------------------------------------------------

    def prepare(self, workload: Workload, cache_dir: Path, progress: ProgressFn | None = None
                ) -> dict[str, Any]:
        self._check_kind(workload)
        served = self.load_served(workload, cache_dir)
        return {"model": served.model.label, "dummy_weights": served.model.dummy_weights,
                "max_model_len": served.max_model_len(),
                "model_source": str(model_source(served.model))}

    # -- one trial ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def serve(self, config: Mapping[str, Any], served: ServingWorkload, cache_dir: Path,
              *, env: Mapping[str, str] | None = None) -> Iterator[RunningServer]:
        """Start ``ollama serve`` with the config's environment, create the model from the
        config's Modelfile, load it, yield the server and always stop it. ``facts`` holds the
        environment (``OLLAMA_*`` only), the Modelfile, both command lines and the start-up,
        create and load times; the reported version and log tail are added once it stops."""
        spec = self.engine_server
        self.check_available()
        max_model_len = served.max_model_len()
        clean = self.validate_config(config)
        check_feasible(clean, max_model_len, model_context=served.model.max_position_embeddings)
        source = model_source(served.model)
        command = spec.command()
        port = free_port()
        base_url = f"http://127.0.0.1:{port}"
        timeout_s = float(served.target_params.get("startup_timeout_s", spec.startup_timeout_s))
        started = time.monotonic()
        deadline = started + timeout_s
        with tempfile.TemporaryDirectory(prefix=f"advisor-{spec.scratch_name}-") as tmp:
            work = Path(tmp)
            launch = build_launch(clean, source=source,
                                  model_name=self.served_model_name(served))
            modelfile = work / "Modelfile"
            modelfile.write_text(launch.modelfile())
            server_env = {**server_environment(launch, host=f"127.0.0.1:{port}",
                                               models_dir=work / "models"), **(env or {})}
            argv = [*command, *SERVE_ARGS]
            create_argv = [*command, *launch.create_args(modelfile)]
            with ManagedServer(argv, base_url=base_url, log_path=work / "ollama.log",
                               health_path=HEALTH_PATH, env=server_env, name=spec.process_name,
                               stop_on_sigterm=True) as server:
                try:
                    server.wait_ready(timeout_s)
                except EngineStartError as exc:
                    cause = root_cause(server.log_tail(ROOT_CAUSE_LOG_CHARS))
                    if cause is None:
                        raise
                    raise EngineStartError(f"Ollama failed to start: {cause}\n{exc}") from None
                create_s = _create_model(create_argv, server_env, deadline)
                load_s = _load_model(base_url, launch.model_name, deadline)
                facts: dict[str, Any] = {
                    "argv": argv, "create_argv": create_argv,
                    "environment": {k: v for k, v in sorted(server_env.items())
                                    if k.startswith(ENV_PREFIX)},
                    "modelfile": launch.modelfile(), "ollama_model": launch.model_name,
                    "model_source": str(source), "model": served.model.label,
                    "model_path": str(served.model.path),
                    "dummy_weights": served.model.dummy_weights, "max_model_len": max_model_len,
                    "startup_s": time.monotonic() - started, "create_s": create_s,
                    "load_s": load_s,
                }
                running = RunningServer(base_url=base_url, server=server, config=clean,
                                        label=spec.process_name, facts=dict(facts))
                try:
                    yield running
                finally:
                    version = server_version(base_url)
                    log = server.log_tail(spec.log_read_chars)
                    versions = self.engine_versions()
                    if version is not None:
                        versions[self.engine] = version
                    running.versions = versions
                    running.facts = {**facts, "engine_version": version,
                                     "engine_log_tail": log, "engine_log_tail_chars": len(log)}

    def reject_infeasible(self, config: Mapping[str, Any], max_model_len: int) -> None:
        check_feasible(config, max_model_len)

    def served_model_name(self, served: ServingWorkload) -> str:
        return model_name_for(served.model.label)

    def engine_refusal(self, log: str, exit_code: int | None) -> str | None:
        return rejection_reason(log, exit_code)

    # -- reproduction ---------------------------------------------------------------------------

    def launch_command(self, config: Mapping[str, Any], workload: Workload | None = None) -> str:
        """The Modelfile (as a here-document), ``ollama serve`` with the config's environment,
        a wait until it answers, and ``ollama create``. A named shape's GGUF is named
        ``./<shape>.gguf`` (the trials used random weights of that architecture)."""
        clean = self.validate_config(config)
        source, name = "./MODEL.gguf", model_name_for("model")
        if (shaped := self.command_model(workload)) is not None:
            model, _ = shaped
            source = f"./{model.shape}.gguf" if model.shape is not None else str(model.path)
            name = model_name_for(model.label)
        launch = build_launch(clean, source=source, model_name=name)
        env = {**launch.env, **DEPLOY_ENV}
        assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
        return (f"cat > Modelfile <<'EOF'\n{launch.modelfile()}EOF\n"
                f"{assignments} {BINARY} serve &\n"
                "until curl -sf http://127.0.0.1:11434/api/version >/dev/null; do sleep 1; done\n"
                f"{shlex.join([BINARY, *launch.create_args('Modelfile')])}")

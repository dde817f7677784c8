"""The transformers target: Hugging Face continuous batching with paged attention, driven online.

A trial builds the workload's model (random weights of a named shape, or a local checkpoint) on
CUDA when there is one and on the CPU otherwise, maps the knobs to the installed transformers
version's ``ContinuousBatchingConfig`` fields (``search_spaces/transformers.yaml``), starts the
engine's online manager (``model.init_continuous_batching``), sends the warm-up requests, then adds
each measured request at its arrival time while consuming the streamed tokens, timing each one
when it becomes visible to the caller. Greedy decoding with EOS disabled gives every request
exactly its ``output_len`` tokens.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import math
import resource
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from advisor.errors import (
    ConfigRejectedError,
    EngineStartError,
    EngineUnavailableError,
    WorkloadError,
)
from objectives.hardware import fingerprint
from objectives.llm.metrics import GoodputFromSLO, request_samples, summarize
from objectives.llm.models import model_config
from objectives.llm.requests import RequestRecord, RequestSpec
from objectives.llm.server import ModelSource, ServingWorkload, package_versions
from objectives.llm.validity import unchecked_details
from objectives.llm.workload import (
    KIND,
    PRESETS,
    LLMWorkloadSpec,
    cpu_scaled,
    drain_cutoff_s,
    load_preset,
    max_concurrency,
)
from objectives.measurement import Measurement
from objectives.metrics import LLM_SERVING
from objectives.target import ProgressFn, Target, checked_config
from objectives.workload import Workload
from search_spaces import SearchSpace, load_space
from search_spaces.knobs import Knob

__all__ = [
    "DEFAULT_CPU_KV_CACHE_TOKENS",
    "GPU_ONLY",
    "TransformersTarget",
    "cpu_space",
    "engine_fields",
    "gpu_only_reason",
    "installed_version",
]

#: Workload parameters the target reads itself (not part of the llm-serving spec).
TARGET_PARAMS = frozenset({"cpu_kv_cache_tokens"})
#: KV-cache capacity on CPU, in tokens. The engine's own CPU sizing takes 60% of system RAM (13 GB
#: of cache and attention masks for the 2-layer tiny model, ~30 s to allocate); a fixed budget is
#: what vLLM's CPU backend does too (VLLM_CPU_KVCACHE_SPACE).
DEFAULT_CPU_KV_CACHE_TOKENS = 16384
#: A request in flight that sees no token for this long fails the trial's remaining requests.
STALL_TIMEOUT_S = 120.0
#: How long the feeder waits for an output before re-checking that the engine is alive.
_POLL_S = 0.5
#: Categorical value passed to the engine as None: the engine decides (its own default).
AUTO = "auto"
_TRISTATE: dict[str, bool | None] = {AUTO: None, "off": False, "on": True}
#: Flags with this prefix are keywords of from_config / from_pretrained, not CB config fields.
MODEL_PREFIX = "model."
#: Real checkpoints of the named shapes, for snippets that deploy the tuned configuration.
HF_MODELS: dict[str, str] = {
    "llama-3-8b": "meta-llama/Meta-Llama-3-8B",
    "llama-3.2-1b": "meta-llama/Llama-3.2-1B",
}
_CPU_PIN_NOTE = "pinned on this machine: it has no CUDA GPU"


#: Knob values that need a CUDA GPU: knob -> (does ``value`` of ``knob`` need one?, why). The
#: target's space pins these knobs to their default on machines without CUDA; run() rejects them.
GPU_ONLY: dict[str, tuple[Callable[[Any, Knob], bool], str]] = {
    "use_cuda_graph": (
        lambda v, k: v == "on",
        "CUDA graphs need a CUDA device (on CPU transformers turns them off with a warning, so the "
        "trial would not measure what it asks for)"),
    "use_async_batching": (
        lambda v, k: v == "on",
        "async batching double-buffers on CUDA streams; transformers raises 'Async batching "
        "requires a device type in (cuda, xpu)' on CPU"),
    "cpu_offload_space": (
        lambda v, k: float(v) > 0,
        "KV offloading copies the accelerator's cache to pinned host memory; without an "
        "accelerator there is nothing to offload (transformers: 'pin_memory=True requires a CUDA "
        "or other accelerator backend')"),
    "max_memory_percent": (
        lambda v, k: not math.isclose(float(v), float(k.default)),
        "max_memory_percent sizes the KV cache from free accelerator memory; on CPU the engine "
        "would size it from system RAM, so this target holds a fixed cpu_kv_cache_tokens "
        f"(default {DEFAULT_CPU_KV_CACHE_TOKENS}) instead"),
}


#: Knobs a CPU study does not sample although a config may still ask for them explicitly: on CPU,
#: torch.compile recompiles for each new batch shape while the workload runs, so such a trial
#: measures compilation (TTFT p95 of seconds, 35-62 s per trial on 2 cores), not serving.
CPU_SAMPLING_PINNED: dict[str, str] = {
    "default_compile_level": "not sampled on CPU: torch.compile recompiles for every new batch "
                             "shape during the measured run",
}


def gpu_only_reason(config: Mapping[str, Any], space: SearchSpace) -> str | None:
    """Why ``config`` cannot run without a CUDA GPU (every GPU-only value named), or None."""
    reasons = [f"{name}={config[name]!r}: {why}" for name, (needs_gpu, why) in GPU_ONLY.items()
               if name in config and needs_gpu(config[name], space.knob(name))]
    return "; ".join(reasons) or None


def cpu_space(space: SearchSpace) -> SearchSpace:
    """``space`` with every GPU-only knob (and those in :data:`CPU_SAMPLING_PINNED`) pinned to
    its (CPU-valid) default.

    Knob names stay the same, so configs measured on CPU and GPU line up; only the values a CPU
    cannot run, or cannot measure meaningfully, are taken out of the sampler's reach.
    """
    knobs: list[Knob] = []
    for knob in space.knobs:
        if knob.name in GPU_ONLY or knob.name in CPU_SAMPLING_PINNED:
            note = CPU_SAMPLING_PINNED.get(knob.name, _CPU_PIN_NOTE)
            pinned: dict[str, Any] = {"help": f"{knob.help} [{note}]"}
            if knob.type == "categorical":
                pinned["choices"] = (knob.default,)
            elif knob.type in ("int", "float"):
                pinned.update(low=knob.default, high=knob.default, log=False)
            knob = dataclasses.replace(knob, **pinned)
        knobs.append(knob)
    return dataclasses.replace(space, knobs=tuple(knobs))


def installed_version() -> str | None:
    """The installed transformers version, read without importing it."""
    try:
        return importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return None


def _versions_with(knob: Knob) -> str:
    return " or ".join(f"{m.flag} in {m.versions or 'all versions'}" for m in knob.flags)


def engine_fields(config: Mapping[str, Any], space: SearchSpace, version: str | None, *,
                  strict: bool = True) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """Map a validated config to ``(cb_fields, model_kwargs, left_out)`` for transformers
    ``version``.

    ``cb_fields`` are ``ContinuousBatchingConfig`` keyword arguments under the field names of
    that version (``block_size`` before 5.18, ``page_size`` from 5.18); ``model_kwargs`` are
    keywords of the model loader (``dtype``, ``attn_implementation``; ``dtype`` None for
    ``auto``). A knob whose engine field does not exist in ``version`` is left out (and named in
    ``left_out``) when it holds its default, which is then the engine's behaviour anyway; any
    other value raises :class:`ConfigRejectedError` naming the versions that have the field
    (with ``strict=False`` the newest name is used instead, for snippets).
    """
    cb_fields: dict[str, Any] = {}
    model_kwargs: dict[str, Any] = {}
    left_out: list[str] = []
    for knob in space.active_knobs(config):
        value = config[knob.name]
        flag = knob.flag_for(version)
        if flag is None:
            if not knob.flags:
                continue
            if value == knob.default:
                left_out.append(knob.name)
                continue
            if strict:
                raise ConfigRejectedError(
                    f"{knob.name}={value!r} has no engine field in transformers {version}; it "
                    f"exists as {_versions_with(knob)}")
            flag = knob.flags[0].flag
        if flag.startswith(MODEL_PREFIX):
            model_kwargs[flag.removeprefix(MODEL_PREFIX)] = None if value == AUTO else value
        elif knob.type == "categorical" and set(knob.choices) <= set(_TRISTATE):
            cb_fields[flag] = _TRISTATE[value]
        elif knob.type == "float":
            cb_fields[flag] = float(value)
        elif knob.type == "int":
            cb_fields[flag] = int(value)
        else:
            cb_fields[flag] = value
    return cb_fields, model_kwargs, left_out


def _page_size(cb_fields: Mapping[str, Any]) -> int:
    """The page size in ``cb_fields`` under either version's name (the engine's 256 if absent)."""
    return int(cb_fields.get("page_size", cb_fields.get("block_size", 256)))


class TransformersTarget(GoodputFromSLO, Target):
    """transformers continuous batching (the online manager), one engine per trial."""

    name: ClassVar[str] = "transformers"
    engine: ClassVar[str] = "transformers"
    metric_families: ClassVar[tuple[str, ...]] = (LLM_SERVING,)
    trial_time_estimate_s: ClassVar[float] = 90.0
    description: ClassVar[str] = (
        "Hugging Face transformers continuous batching with paged attention (online manager), "
        "random-weight models, CPU or CUDA"
    )
    default_objective: ClassVar[str] = "maximize:output_tokens_per_s"
    # Measured on a 2-core CPU, tiny-llama on chat-cpu (24 requests, Poisson 4 req/s), 20 trials:
    # uncompiled configs reached TTFT p95 5.6-11 ms and TPOT p95 2.2-4.9 ms; torch.compile (levels
    # 1-3, recompiling while measured) 47-9400 ms and 30-185 ms. The bounds split the two with ~4x
    # room for a noisy machine (10 of the 20 met them).
    default_slo: ClassVar[str] = "ttft_p95_ms<=50,tpot_p95_ms<=20"
    install_hint: ClassVar[str] = "pip install 'slo-advisor[llm]' (transformers>=5.17 and torch)"

    def __init__(self) -> None:
        self._full_space: SearchSpace | None = None

    # -- knobs ------------------------------------------------------------------------------------

    def full_space(self) -> SearchSpace:
        """Every knob and value of ``search_spaces/transformers.yaml``, GPU-only ones included."""
        if self._full_space is None:
            self._full_space = load_space(self.name)
        return self._full_space

    def space(self) -> SearchSpace:
        # Without a CUDA GPU, GPU-only values are pinned so a CPU study never samples a config it
        # would have to reject (a rejected trial still counts as one of the study's trials).
        if _has_gpu():
            return self.full_space()
        return cpu_space(self.full_space())

    # -- availability and versions ----------------------------------------------------------------

    def check_available(self) -> None:
        missing = [name for name in ("torch", "transformers")
                   if importlib.util.find_spec(name) is None]
        if missing:
            raise EngineUnavailableError(
                f"the transformers target needs {' and '.join(missing)}, which cannot be found; "
                f"install with: {self.install_hint}")

    def engine_versions(self) -> dict[str, str]:
        return package_versions("transformers", "torch", "numpy")

    # -- workloads --------------------------------------------------------------------------------

    def default_workload(self) -> Workload:
        chat = load_preset("chat")
        return chat if _has_gpu() else cpu_scaled(chat)

    def named_workloads(self) -> dict[str, Workload]:
        """The presets, and each one's CPU-sized copy as ``<preset>-cpu``. Without a CUDA GPU the
        plain preset names resolve to the CPU-sized copies as well."""
        presets = {name: load_preset(name) for name in PRESETS}
        scaled = {f"{name}-cpu": cpu_scaled(wl) for name, wl in presets.items()}
        if not _has_gpu():
            presets = {name: scaled[f"{name}-cpu"] for name in presets}
        return {**presets, **scaled}

    def check_workload(self, workload: Workload) -> None:
        _check_kind(workload)
        ServingWorkload.check(workload.params, target_keys=TARGET_PARAMS)

    def prepare(self, workload: Workload, cache_dir: Path, progress: ProgressFn | None = None
                ) -> dict[str, Any]:
        _check_kind(workload)
        served = ServingWorkload.load(workload.params, cache_dir, target_keys=TARGET_PARAMS)
        _cpu_kv_cache_tokens(served)
        return {"model": served.model.label, "dummy_weights": served.model.dummy_weights,
                "n_requests": len(served.requests)}

    # -- one trial --------------------------------------------------------------------------------

    def run(self, config: Mapping[str, Any], workload: Workload, cache_dir: Path) -> Measurement:
        started = time.perf_counter()
        self.check_available()
        _check_kind(workload)
        clean = self.validate_config(config)
        served = ServingWorkload.load(workload.params, cache_dir, target_keys=TARGET_PARAMS)
        kv_tokens = _cpu_kv_cache_tokens(served)
        version = installed_version()
        cb_fields, model_kwargs, left_out = engine_fields(clean, self.full_space(), version)

        import torch

        on_gpu = torch.cuda.is_available()
        if not on_gpu and (why := gpu_only_reason(clean, self.full_space())) is not None:
            raise ConfigRejectedError(f"this machine has no CUDA GPU: {why}")
        device = torch.device("cuda" if on_gpu else "cpu")
        if on_gpu:
            torch.cuda.reset_peak_memory_stats()
        else:
            # The fixed CPU cache: the memory share is left at its default (it only bounds the
            # engine's footprint check against system RAM then).
            cb_fields["num_blocks"] = math.ceil(kv_tokens / _page_size(cb_fields))

        model = _build_model(served.model, model_kwargs, device, served.spec.seed)
        manager = _start_manager(model, cb_fields, served)
        startup_s = time.perf_counter() - started
        failed_run = True
        try:
            attn_used = str(model.config._attn_implementation)
            resolved = _resolved_config(manager.continuous_batching_config)
            cap = max_concurrency(served.spec)
            warm_records, _ = _drive(manager, served.warmup, cap, "warmup")
            warm_ok = [r for r in warm_records if r.ok]
            if warm_records and not warm_ok:
                raise EngineStartError(f"every warm-up request failed; first error: "
                                       f"{warm_records[0].error}")
            # The engine's count of forward passes (internal, so read defensively): how the knobs
            # shaped the schedule, independent of timing noise.
            passes_before = getattr(manager, "current_batch", None)
            records, lag_ms = _drive(manager, served.requests, cap, "req",
                                     drain_cutoff_s(served.spec, served.requests))
            passes_after = getattr(manager, "current_batch", None)
            failed_run = False
        finally:
            manager.stop(block=True, timeout=30, hard_stop=failed_run)
            manager.destroy()

        ends = [r.end_s for r in records if r.ok and r.end_s is not None]
        ends += [r.cut_s for r in records if r.cut_s is not None]
        duration_s = max(ends) if ends else time.perf_counter() - started
        metrics = summarize(records, duration_s=duration_s)
        if on_gpu:
            metrics["peak_memory_mb"] = torch.cuda.max_memory_allocated() / 2**20
        else:
            # ru_maxrss is in KiB on Linux: the trial process's resident high-water mark.
            metrics["peak_memory_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        short = [r.index for r, spec in zip(records, served.requests, strict=True)
                 if r.ok and r.output_tokens != spec.output_len]
        details: dict[str, Any] = {
            "transformers_version": version,
            "device": torch.cuda.get_device_name(device) if on_gpu else "cpu",
            "dtype": str(model.dtype).removeprefix("torch."),
            "model": served.model.label, "model_path": str(served.model.path),
            "dummy_weights": served.model.dummy_weights,
            "attn_implementation_used": attn_used,
            "engine_config": cb_fields, "model_kwargs": {k: v for k, v in model_kwargs.items()
                                                         if v is not None},
            "engine_config_resolved": resolved,
            "knobs_without_field": left_out,
            "kv_cache_sizing": ("max_memory_percent of free GPU memory" if on_gpu else
                                f"fixed on CPU: {kv_tokens} tokens (cpu_kv_cache_tokens)"),
            "n_requests": len(records), "warmup_requests": len(warm_records),
            "warmup_failed": len(warm_records) - len(warm_ok),
            "failed_requests": sum(1 for r in records if not r.ok and r.cut_s is None),
            "drain_limit_s": served.spec.drain_limit_s,
            "output_tokens": sum(r.output_tokens for r in records if r.ok),
            "requests_with_wrong_length": short,
            "max_concurrency": cap, "load_duration_s": duration_s, "startup_s": startup_s,
            "max_queue_delay_s": max((r.sent_s - r.scheduled_s for r in records
                                      if r.sent_s is not None), default=0.0),
            "mean_delivery_lag_ms": lag_ms,
            "forward_passes": (passes_after - passes_before
                               if isinstance(passes_before, int) and isinstance(passes_after, int)
                               else None),
            "requests": request_samples(records),
            # The engine runs in this process and this process times its tokens: nothing
            # independent can check the timings (docs/metrics.md, the validity gate).
            **unchecked_details("in-process engine: no independent server-side timing"),
        }
        if errors := [r.error for r in records if r.error is not None and r.cut_s is None]:
            details["first_request_errors"] = errors[:3]
        return Measurement(metrics=metrics, engine_versions=self.engine_versions(),
                           details=details, duration_s=time.perf_counter() - started)

    def validate_config(self, config: Mapping[str, Any]) -> dict[str, Any]:
        # Against the full space: a GPU-only value is rejected with its reason in run(), not as
        # "must be one of ['auto']".
        return checked_config(self.full_space(), config)

    # -- reproduction -----------------------------------------------------------------------------

    def launch_command(self, config: Mapping[str, Any], workload: Workload | None = None) -> str:
        """A Python snippet that builds the same continuous-batching manager and streams one
        request through it (field names of the installed transformers version)."""
        clean = self.validate_config(config)
        cb_fields, model_kwargs, _ = engine_fields(clean, self.full_space(), installed_version(),
                                                   strict=False)
        model, max_new, kv_tokens = "tiny-llama", 128, DEFAULT_CPU_KV_CACHE_TOKENS
        if workload is not None and workload.kind == KIND:
            spec = LLMWorkloadSpec.from_params(
                {k: v for k, v in workload.params.items() if k not in TARGET_PARAMS})
            model = spec.model
            if spec.output_len is not None:
                max_new = spec.output_len.upper
            kv_tokens = int(workload.params.get("cpu_kv_cache_tokens", kv_tokens))
        dtype = model_kwargs.get("dtype")
        attn = model_kwargs.get("attn_implementation", "sdpa")
        dtype_arg = f"torch.{dtype}" if dtype else '"auto"'
        lines = [
            "import torch",
            "from transformers import (AutoConfig, AutoModelForCausalLM, "
            "ContinuousBatchingConfig,",
            "                          GenerationConfig)",
            "",
        ]
        if model in HF_MODELS:
            lines.append(f'model = AutoModelForCausalLM.from_pretrained("{HF_MODELS[model]}", '
                         f'dtype={dtype_arg}, attn_implementation="{attn}").to("cuda")')
        elif _is_shape(model):
            shape = model_config(model)
            shape.pop("architectures", None)
            model_type = shape.pop("model_type")
            shape["dtype"] = shape.pop("torch_dtype", None)
            lines += [f"# random weights of the {model} shape (as the benchmark ran it)",
                      "torch.manual_seed(0)",
                      f'config = AutoConfig.for_model("{model_type}", **{shape!r})',
                      "model = AutoModelForCausalLM.from_config(config, "
                      f'dtype={dtype_arg if dtype else "config.dtype"}, '
                      f'attn_implementation="{attn}")',
                      'model = model.to("cuda" if torch.cuda.is_available() else "cpu")']
        else:
            lines.append(f"model = AutoModelForCausalLM.from_pretrained({model!r}, "
                         f'dtype={dtype_arg}, attn_implementation="{attn}").to("cuda")')
        cb_args = ", ".join(f"{k}={v!r}" for k, v in cb_fields.items())
        page = _page_size(cb_fields)
        lines += [
            "",
            "# eos_token_id=-1 reproduces the benchmark's fixed output lengths; drop it to stop "
            "at EOS.",
            f"generation_config = GenerationConfig(do_sample=False, max_new_tokens={max_new}, "
            "eos_token_id=-1)",
            f"cb_config = ContinuousBatchingConfig({cb_args})",
            f"# On CPU the benchmark fixed the cache size ({kv_tokens} tokens): there, also pass "
            f"num_blocks={math.ceil(kv_tokens / page)}.",
            "manager = model.init_continuous_batching(generation_config=generation_config,",
            "                                         continuous_batching_config=cb_config)",
            "manager.warmup()",
            "manager.start()",
            "request_id = manager.add_request(input_ids=[1, 2, 3], streaming=True)",
            "for output in manager.request_id_iter(request_id):",
            "    print(len(output.generated_tokens), output.generated_tokens[-1:])",
            "manager.stop(block=True)",
        ]
        return "\n".join(lines)


# -- helpers ---------------------------------------------------------------------------------------

def _has_gpu() -> bool:
    """Whether this machine has a usable NVIDIA GPU (nvidia-smi; no torch import)."""
    return bool(fingerprint()["gpus"])


def _is_shape(model: str) -> bool:
    try:
        model_config(model)
    except WorkloadError:
        return False
    return True


def _check_kind(workload: Workload) -> None:
    if workload.kind != KIND:
        raise WorkloadError(
            f"the transformers target runs workloads of kind {KIND!r}, got {workload.kind!r}")


def _cpu_kv_cache_tokens(served: ServingWorkload) -> int:
    """The CPU cache budget (workload parameter ``cpu_kv_cache_tokens``), checked to hold the
    longest request of the workload."""
    value = served.target_params.get("cpu_kv_cache_tokens", DEFAULT_CPU_KV_CACHE_TOKENS)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WorkloadError(f"`cpu_kv_cache_tokens` must be a positive integer, got {value!r}")
    longest = max((r.prompt_len + r.output_len for r in [*served.requests, *served.warmup]),
                  default=0)
    if longest > value:
        raise WorkloadError(f"`cpu_kv_cache_tokens` ({value}) must hold the longest request of "
                            f"the workload ({longest} tokens of prompt + output)")
    return value


def _has_weights(path: Path) -> bool:
    return any(path.glob("*.safetensors")) or any(path.glob("*.bin"))


def _build_model(source: ModelSource, model_kwargs: Mapping[str, Any], device: Any,
                 seed: int) -> Any:
    """The model on ``device``: random weights (seeded) unless the directory holds weights."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    name = model_kwargs.get("dtype")
    attn = model_kwargs.get("attn_implementation", "sdpa")
    torch.manual_seed(seed)
    if source.dummy_weights or not _has_weights(source.path):
        config = AutoConfig.from_pretrained(source.path)
        dtype = getattr(torch, name) if name else getattr(config, "dtype", None)
        if isinstance(dtype, str):
            dtype = getattr(torch, dtype)
        # Initialised directly on the device: an 8B model's random init on CPU takes minutes.
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, dtype=dtype or torch.float32,
                                                     attn_implementation=attn)
    else:
        model = AutoModelForCausalLM.from_pretrained(
            source.path, dtype=getattr(torch, name) if name else "auto",
            attn_implementation=attn).to(device)
    return model.eval()


def _start_manager(model: Any, cb_fields: Mapping[str, Any], served: ServingWorkload) -> Any:
    """Create the online manager with ``cb_fields``, build its cache and kernels (warmup) and
    start its generation thread; the engine's refusals become :class:`ConfigRejectedError`."""
    import torch
    from transformers import ContinuousBatchingConfig, GenerationConfig

    longest = max((r.output_len for r in [*served.requests, *served.warmup]), default=1)
    # eos_token_id=-1: no token stops a request, so each one yields exactly max_new_tokens.
    generation_config = GenerationConfig(do_sample=False, max_new_tokens=longest,
                                         eos_token_id=-1)
    try:
        cb_config = ContinuousBatchingConfig(**cb_fields)
    except TypeError as exc:
        raise ConfigRejectedError(f"transformers {installed_version()} has no such "
                                  f"ContinuousBatchingConfig field: {exc}") from None
    try:
        manager = model.init_continuous_batching(generation_config=generation_config,
                                                 continuous_batching_config=cb_config)
        manager.warmup()  # allocates the paged cache, captures graphs / compiles if asked
    except (ValueError, MemoryError) as exc:
        # ValueError: invalid values (page size < 4, unsupported attention); MemoryError: the
        # engine's own sizing found the requested footprint larger than the memory it may use.
        raise ConfigRejectedError(f"transformers rejected the configuration: "
                                  f"{type(exc).__name__}: {exc}") from None
    except RuntimeError as exc:
        # torch.OutOfMemoryError from the caching allocator, or torch.AcceleratorError "CUDA
        # error: out of memory" from a raw allocation (5.17 under-counts async batching's second
        # set of attention masks and overcommits): an OOM, not a broken engine.
        if isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc):
            raise MemoryError(f"out of accelerator memory while building the engine: "
                              f"{str(exc).splitlines()[0]}") from exc
        raise EngineStartError(f"the continuous batching engine failed to start: {exc}") from exc
    manager.start()
    return manager


def _resolved_config(cb_config: Any) -> dict[str, Any]:
    """The engine's resolved settings (auto values decided), as plain data."""
    out: dict[str, Any] = {}
    for field in dataclasses.fields(cb_config):
        value = getattr(cb_config, field.name)
        if hasattr(value, "to_dict"):
            value = value.to_dict()
        elif isinstance(value, tuple):
            value = list(value)
        out[field.name] = value
    return out


def _drive(manager: Any, requests: Sequence[RequestSpec], cap: int | None, prefix: str,
           cutoff_s: float | None = None) -> tuple[list[RequestRecord], float | None]:
    """Feed ``requests`` to ``manager`` at their arrival times and consume the streamed outputs.

    Each request is added when its ``arrival_s`` (seconds from the start of this call) has come
    and, with a concurrency ``cap``, once fewer than ``cap`` requests are in flight. A chunk time
    is taken each time an output carrying new tokens is received. Returns the records and the
    mean lag (ms) between the engine producing a request's last token and the caller receiving
    it (None if the engine recorded no timestamps). At ``cutoff_s`` (seconds from the start) it
    stops waiting: requests unfinished or unsent then get ``cut_s`` (the engine is stopped after).
    """
    records = [RequestRecord(index=r.index, scheduled_s=r.arrival_s, prompt_len=r.prompt_len)
               for r in requests]
    position: dict[str, int] = {}
    seen = [0] * len(requests)
    lags: list[float] = []
    next_i = in_flight = done = 0
    t0 = time.perf_counter()
    last_output = t0
    while done < len(requests):
        now = time.perf_counter() - t0
        if cutoff_s is not None and now >= cutoff_s:
            for record in records:
                if record.end_s is None and record.error is None:
                    record.cut_s, record.error = now, f"cut off at {cutoff_s:g} s, unfinished"
            break
        while (next_i < len(requests) and requests[next_i].arrival_s <= now
               and (cap is None or in_flight < cap)):
            spec, record = requests[next_i], records[next_i]
            request_id = f"{prefix}-{spec.index}"
            record.sent_s = time.perf_counter() - t0
            added = manager.add_request(list(spec.prompt_token_ids), request_id=request_id,
                                        max_new_tokens=spec.output_len, streaming=True,
                                        record_timestamps=True, eos_token_id=-1)
            next_i += 1
            if added is None:
                record.error = "the engine refused the request (its loop is stopping or dead)"
                done += 1
                continue
            position[request_id] = next_i - 1
            in_flight += 1
            last_output = time.perf_counter()
        can_send = next_i < len(requests) and (cap is None or in_flight < cap)
        wait = max(0.0, requests[next_i].arrival_s - now) if can_send else _POLL_S
        output = manager.get_result(timeout=min(wait, _POLL_S))
        received = time.perf_counter()
        if output is None:
            if in_flight and (not manager.is_running()
                              or received - last_output > STALL_TIMEOUT_S):
                why = ("the engine's generation loop stopped" if not manager.is_running()
                       else f"no output for {STALL_TIMEOUT_S:.0f} s")
                for k in position.values():
                    if records[k].end_s is None and records[k].error is None:
                        records[k].error = why
                for record in records[next_i:]:
                    record.error = f"not sent: {why}"
                break
            continue
        i = position.get(output.request_id)
        if i is None:
            continue  # not one of ours (cannot happen with unique ids; kept defensive)
        last_output = received
        record, t = records[i], received - t0
        tokens = len(output.generated_tokens)
        if tokens > seen[i]:
            record.chunk_times_s.append(t)
            seen[i] = tokens
            record.output_tokens = tokens
        if output.is_finished():
            record.end_s = t
            if output.error is not None:
                record.error = str(output.error)
            elif output.timestamps:
                lags.append((received - output.timestamps[-1]) * 1e3)
            in_flight -= 1
            done += 1
            del position[output.request_id]
    return records, (sum(lags) / len(lags) if lags else None)

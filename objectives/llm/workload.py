"""LLM serving workloads as data: arrival process, length distributions, shared prefixes, presets.

A workload of kind ``llm-serving`` is validated once into an :class:`LLMWorkloadSpec` and turned
into a seeded, reproducible list of :class:`~objectives.llm.requests.RequestSpec` that every LLM
target (transformers, vLLM, TensorRT-LLM, any OpenAI endpoint) replays the same way, so trials of
different engines and configs see exactly the same requests.

Parameters (``Workload.params``)::

    model: tiny-llama                # a shape of objectives.llm.models.MODEL_SHAPES, or a path
    n_requests: 200                  # measured requests (optional for a trace: the whole file)
    warmup_requests: 8               # sent first and excluded; default min(8, n_requests)
    seed: 0
    arrival:
      process: poisson               # poisson | gamma | concurrency | trace
      rate_rps: 8.0                  # poisson, gamma
      burstiness: 1.0                # gamma shape (1 = Poisson, < 1 burstier), as vllm bench serve
      concurrency: 64                # concurrency: all arrive at t=0, at most this many in flight
      max_concurrency: 32            # optional client-side cap for poisson/gamma/trace
      trace: path/to/trace.jsonl     # trace: one {"arrival_s", "prompt_len", "output_len"} a line
    prompt_len: {dist: lognormal, median: 256, sigma: 0.8, min: 16, max: 2048}
    output_len: {dist: uniform, low: 64, high: 256}     # or {dist: fixed, value: 128}, or 128
    shared_prefix: {fraction: 0.5, length: 512, groups: 4}   # optional
    drain_limit_s: 30                # optional: after the last arrival, wait at most this long;
                                     # requests still running are cut off (see metrics.py)

Each random aspect draws from its own stream spawned from ``seed`` (arrivals, lengths, prompt
tokens, prefixes), so changing the rate leaves the prompts and lengths unchanged, and the
arrivals are a true Poisson/gamma process (not rescaled to an exact total duration as
``vllm bench serve`` does).
"""

from __future__ import annotations

import copy
import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import numpy as np

from advisor.errors import WorkloadError
from objectives.llm.models import N_SPECIAL_TOKENS
from objectives.llm.requests import RequestSpec
from objectives.workload import Workload
from search_spaces.fast_yaml import safe_load

__all__ = [
    "CPU_PRESETS",
    "KIND",
    "PRESETS",
    "ArrivalSpec",
    "LLMWorkloadSpec",
    "LengthDist",
    "SharedPrefixSpec",
    "TraceEntry",
    "at_rate",
    "cpu_scaled",
    "drain_cutoff_s",
    "generate_requests",
    "generate_warmup_requests",
    "load_preset",
    "max_concurrency",
    "prefix_cached_tokens",
    "read_trace",
    "request_shapes",
]

KIND = "llm-serving"
PRESETS: tuple[str, ...] = ("chat", "rag-long-prompt", "batch-summarize")
#: Presets sized for a small model on a few CPU cores (not scaled further by :func:`cpu_scaled`).
CPU_PRESETS: tuple[str, ...] = ("chat-1b-cpu",)

Process = Literal["poisson", "gamma", "concurrency", "trace"]
Dist = Literal["fixed", "uniform", "lognormal"]

_PARAM_KEYS = frozenset({"model", "n_requests", "warmup_requests", "seed", "arrival",
                         "drain_limit_s",
                         "prompt_len", "output_len", "shared_prefix"})
_ARRIVAL_KEYS: dict[str, frozenset[str]] = {
    "poisson": frozenset({"process", "rate_rps", "max_concurrency"}),
    "gamma": frozenset({"process", "rate_rps", "burstiness", "max_concurrency"}),
    "concurrency": frozenset({"process", "concurrency"}),
    "trace": frozenset({"process", "trace", "max_concurrency"}),
}
_DIST_KEYS: dict[str, frozenset[str]] = {
    "fixed": frozenset({"dist", "value"}),
    "uniform": frozenset({"dist", "low", "high"}),
    "lognormal": frozenset({"dist", "median", "sigma", "min", "max"}),
}
_DEFAULT_WARMUP = 8
# Warm-up requests are short: they exist to trigger lazy initialisation (CUDA graphs, kernels,
# allocator pools), not to load the engine.
_WARMUP_PROMPT_LEN = 32
_WARMUP_OUTPUT_LEN = 8
# CPU scaling for the tiny model on 2 cores (see cpu_scaled).
_CPU_MAX_PROMPT = 64
_CPU_MAX_OUTPUT = 16
_CPU_MIN_PROMPT = 4
_CPU_N_REQUESTS = 24
_CPU_RATE_RPS = 4.0
_CPU_MAX_CONCURRENCY = 4
_CPU_MAX_WARMUP = 4


# -- validation helpers ----------------------------------------------------------------------------

def _mapping(value: Any, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise WorkloadError(f"`{field}` must be a mapping, got {value!r}")
    return value


def _check_keys(data: Mapping[str, Any], allowed: frozenset[str], field: str) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise WorkloadError(f"`{field}` has unknown key(s) {', '.join(map(repr, unknown))}; "
                            f"allowed: {', '.join(sorted(allowed))}")


#: The largest integer or number any workload field may hold: far beyond a real workload (a
#: billion requests, tokens or seconds), and small enough that no arithmetic on it overflows.
MAX_VALUE = 10**9


def _shown(value: int | float) -> str:
    """A number for an error message: a 400-digit integer is not printed whole."""
    return repr(value) if abs(value) < 10**15 else f"a {len(str(int(abs(value))))}-digit number"


def _int(value: Any, field: str, *, minimum: int, maximum: int = MAX_VALUE) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or (
            isinstance(value, float) and not value.is_integer()):
        raise WorkloadError(f"`{field}` must be an integer, got {value!r}")
    if not minimum <= value <= maximum:
        raise WorkloadError(f"`{minimum} <= {field} <= {maximum}` must hold, but got "
                            f"{field}={_shown(value)}")
    return int(value)


def _positive(value: Any, field: str, *, allow_zero: bool = False,
              maximum: float = MAX_VALUE) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or (
            isinstance(value, float) and not math.isfinite(value)):
        raise WorkloadError(f"`{field}` must be a finite number, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        op = ">=" if allow_zero else ">"
        raise WorkloadError(f"`{field} {op} 0` must hold, but got {field}={_shown(value)}")
    if value > maximum:
        raise WorkloadError(f"`{field} <= {maximum:g}` must hold, but got {field}={_shown(value)}")
    return float(value)


def _required(data: Mapping[str, Any], key: str, field: str) -> Any:
    if key not in data:
        raise WorkloadError(f"`{field}.{key}` is required")
    return data[key]


# -- the spec --------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class LengthDist:
    """A token-length distribution; every draw is an integer in ``[lower, upper]``.

    ``fixed``: always ``value``. ``uniform``: integers uniform on ``[low, high]`` (both included).
    ``lognormal``: ``round(median * exp(sigma * N(0, 1)))`` clipped to ``[min, max]``.
    """

    dist: Dist
    value: int = 0
    low: int = 0
    high: int = 0
    median: float = 0.0
    sigma: float = 0.0
    min: int = 1
    max: int = 0

    @classmethod
    def from_params(cls, data: Any, field: str) -> LengthDist:
        if isinstance(data, int) and not isinstance(data, bool):
            return cls("fixed", value=_int(data, field, minimum=1))
        data = _mapping(data, field)
        dist = data.get("dist")
        if dist not in _DIST_KEYS:
            raise WorkloadError(f"`{field}.dist` must be one of {', '.join(_DIST_KEYS)}, "
                                f"got {dist!r}")
        _check_keys(data, _DIST_KEYS[dist], field)
        if dist == "fixed":
            return cls("fixed", value=_int(_required(data, "value", field), f"{field}.value",
                                           minimum=1))
        if dist == "uniform":
            low = _int(_required(data, "low", field), f"{field}.low", minimum=1)
            high = _int(_required(data, "high", field), f"{field}.high", minimum=1)
            if low > high:
                raise WorkloadError(f"`{field}.low <= {field}.high` must hold, but got "
                                    f"(low={low}, high={high})")
            return cls("uniform", low=low, high=high)
        median = _positive(_required(data, "median", field), f"{field}.median")
        sigma = _positive(data.get("sigma", 0.0), f"{field}.sigma", allow_zero=True)
        lo = _int(data.get("min", 1), f"{field}.min", minimum=1)
        hi = _int(_required(data, "max", field), f"{field}.max", minimum=1)
        if lo > hi:
            raise WorkloadError(f"`{field}.min <= {field}.max` must hold, but got "
                                f"(min={lo}, max={hi})")
        return cls("lognormal", median=median, sigma=sigma, min=lo, max=hi)

    @property
    def lower(self) -> int:
        return {"fixed": self.value, "uniform": self.low, "lognormal": self.min}[self.dist]

    @property
    def upper(self) -> int:
        return {"fixed": self.value, "uniform": self.high, "lognormal": self.max}[self.dist]

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` integer lengths."""
        if self.dist == "fixed":
            return np.full(n, self.value, dtype=np.int64)
        if self.dist == "uniform":
            return rng.integers(self.low, self.high, size=n, endpoint=True, dtype=np.int64)
        draws = self.median * np.exp(self.sigma * rng.standard_normal(n))
        return np.clip(np.rint(draws), self.min, self.max).astype(np.int64)

    def scaled(self, cap: int, *, floor: int = 1) -> LengthDist:
        """The same shape shrunk by ``cap / upper`` so no draw exceeds ``cap`` (unchanged if it
        already fits); shrunk lower bounds stay ``>= floor``."""
        if self.upper <= cap:
            return self
        s = cap / self.upper

        def shrink(x: float) -> int:
            return max(min(floor, cap), min(cap, round(x * s)))

        if self.dist == "fixed":
            return replace(self, value=shrink(self.value))
        if self.dist == "uniform":
            return replace(self, low=shrink(self.low), high=cap)
        return replace(self, median=max(float(floor), self.median * s), min=shrink(self.min),
                       max=cap)

    def to_params(self) -> dict[str, Any]:
        if self.dist == "fixed":
            return {"dist": "fixed", "value": self.value}
        if self.dist == "uniform":
            return {"dist": "uniform", "low": self.low, "high": self.high}
        return {"dist": "lognormal", "median": self.median, "sigma": self.sigma,
                "min": self.min, "max": self.max}


@dataclass(frozen=True, slots=True)
class ArrivalSpec:
    """When requests arrive (see the module docstring for each process)."""

    process: Process
    rate_rps: float | None = None
    burstiness: float = 1.0
    concurrency: int | None = None
    max_concurrency: int | None = None
    trace: str | None = None

    @classmethod
    def from_params(cls, data: Any) -> ArrivalSpec:
        data = _mapping(data, "arrival")
        process = data.get("process")
        if process not in _ARRIVAL_KEYS:
            raise WorkloadError(f"`arrival.process` must be one of {', '.join(_ARRIVAL_KEYS)}, "
                                f"got {process!r}")
        _check_keys(data, _ARRIVAL_KEYS[process], "arrival")
        cap = data.get("max_concurrency")
        max_conc = None if cap is None else _int(cap, "arrival.max_concurrency", minimum=1)
        if process in ("poisson", "gamma"):
            rate = _positive(_required(data, "rate_rps", "arrival"), "arrival.rate_rps")
            burst = _positive(data.get("burstiness", 1.0), "arrival.burstiness")
            return cls(process, rate_rps=rate, burstiness=burst, max_concurrency=max_conc)
        if process == "concurrency":
            conc = _int(_required(data, "concurrency", "arrival"), "arrival.concurrency",
                        minimum=1)
            return cls("concurrency", concurrency=conc)
        trace = _required(data, "trace", "arrival")
        if not isinstance(trace, str | Path) or not str(trace):
            raise WorkloadError(f"`arrival.trace` must be a file path, got {trace!r}")
        return cls("trace", trace=str(trace), max_concurrency=max_conc)

    def to_params(self) -> dict[str, Any]:
        out: dict[str, Any] = {"process": self.process}
        if self.process in ("poisson", "gamma"):
            out["rate_rps"] = self.rate_rps
        if self.process == "gamma":
            out["burstiness"] = self.burstiness
        if self.process == "concurrency":
            out["concurrency"] = self.concurrency
        if self.process == "trace":
            out["trace"] = self.trace
        if self.max_concurrency is not None:
            out["max_concurrency"] = self.max_concurrency
        return out


@dataclass(frozen=True, slots=True)
class SharedPrefixSpec:
    """``fraction`` of the requests start with one of ``groups`` distinct ``length``-token prefixes.

    The prefix counts toward the request's prompt length (a 2000-token prompt with a 512-token
    shared prefix has 1488 tokens of its own), as a RAG system prompt would.
    """

    fraction: float
    length: int
    groups: int = 1

    @classmethod
    def from_params(cls, data: Any) -> SharedPrefixSpec:
        data = _mapping(data, "shared_prefix")
        _check_keys(data, frozenset({"fraction", "length", "groups"}), "shared_prefix")
        fraction = _positive(_required(data, "fraction", "shared_prefix"),
                             "shared_prefix.fraction", allow_zero=True)
        if fraction > 1:
            raise WorkloadError(f"`0 <= shared_prefix.fraction <= 1` must hold, but got "
                                f"fraction={fraction}")
        length = _int(_required(data, "length", "shared_prefix"), "shared_prefix.length",
                      minimum=1)
        groups = _int(data.get("groups", 1), "shared_prefix.groups", minimum=1)
        return cls(fraction, length, groups)

    def to_params(self) -> dict[str, Any]:
        return {"fraction": self.fraction, "length": self.length, "groups": self.groups}


@dataclass(frozen=True, slots=True)
class TraceEntry:
    """One line of a trace file."""

    arrival_s: float
    prompt_len: int
    output_len: int


def read_trace(path: str | Path) -> list[TraceEntry]:
    """Read a JSONL trace: one ``{"arrival_s": s, "prompt_len": n, "output_len": m}`` a line.

    Blank lines are skipped; anything else malformed raises :class:`WorkloadError` with the line.
    """
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise WorkloadError(f"`arrival.trace`: cannot read {path}: {exc}") from None
    entries: list[TraceEntry] = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"arrival.trace ({path}:{lineno})"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"`{where}` is not JSON: {exc}") from None
        row = _mapping(row, where)
        _check_keys(row, frozenset({"arrival_s", "prompt_len", "output_len"}), where)
        entries.append(TraceEntry(
            arrival_s=_positive(_required(row, "arrival_s", where), f"{where}.arrival_s",
                                allow_zero=True),
            prompt_len=_int(_required(row, "prompt_len", where), f"{where}.prompt_len",
                            minimum=1),
            output_len=_int(_required(row, "output_len", where), f"{where}.output_len",
                            minimum=1),
        ))
    if not entries:
        raise WorkloadError(f"`arrival.trace`: {path} holds no requests")
    return entries


@dataclass(frozen=True, slots=True)
class LLMWorkloadSpec:
    """A validated ``llm-serving`` workload (see the module docstring for the parameters).

    For a trace, ``prompt_len``/``output_len`` are None (the file gives them) and ``n_requests``
    is the number of trace entries replayed (the first ``n_requests`` by arrival).
    """

    model: str
    n_requests: int
    warmup_requests: int
    seed: int
    arrival: ArrivalSpec
    prompt_len: LengthDist | None
    output_len: LengthDist | None
    shared_prefix: SharedPrefixSpec | None = None
    #: Seconds after the last arrival to wait for unfinished requests; None waits for all.
    drain_limit_s: float | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> LLMWorkloadSpec:
        """Validate ``params``; any problem raises :class:`WorkloadError` naming the field."""
        params = _mapping(params, "params")
        _check_keys(params, _PARAM_KEYS, "params")
        model = params.get("model", "tiny-llama")
        if not isinstance(model, str) or not model:
            raise WorkloadError(f"`model` must be a shape name or a model path, got {model!r}")
        seed = _int(params.get("seed", 0), "seed", minimum=0, maximum=2**32 - 1)
        arrival = ArrivalSpec.from_params(_required(params, "arrival", "params"))
        shared = (None if params.get("shared_prefix") is None
                  else SharedPrefixSpec.from_params(params["shared_prefix"]))

        prompt: LengthDist | None = None
        output: LengthDist | None = None
        if arrival.process == "trace":
            for key in ("prompt_len", "output_len"):
                if key in params:
                    raise WorkloadError(f"`{key}` cannot be given with a trace: the trace file "
                                        f"sets every request's lengths")
            assert arrival.trace is not None
            entries = read_trace(arrival.trace)
            n_requests = _int(params.get("n_requests", len(entries)), "n_requests", minimum=1)
            if n_requests > len(entries):
                raise WorkloadError(f"`n_requests` ({n_requests}) exceeds the {len(entries)} "
                                    f"requests of trace {arrival.trace}")
            if shared is not None:
                short = min(e.prompt_len for e in entries)
                if short <= shared.length:
                    raise WorkloadError(f"`shared_prefix.length` ({shared.length}) must be "
                                        f"shorter than every trace prompt (shortest: {short})")
        else:
            n_requests = _int(_required(params, "n_requests", "params"), "n_requests", minimum=1)
            prompt = LengthDist.from_params(_required(params, "prompt_len", "params"),
                                            "prompt_len")
            output = LengthDist.from_params(_required(params, "output_len", "params"),
                                            "output_len")
            if shared is not None and prompt.lower <= shared.length:
                raise WorkloadError(
                    f"`shared_prefix.length < prompt_len` must hold for every prompt (each "
                    f"prompt keeps at least one token of its own), but got "
                    f"(length={shared.length}, shortest prompt_len={prompt.lower})")
        warmup = _int(params.get("warmup_requests", min(_DEFAULT_WARMUP, n_requests)),
                      "warmup_requests", minimum=0)
        drain = params.get("drain_limit_s")
        drain_limit = None if drain is None else _positive(drain, "drain_limit_s")
        return cls(model, n_requests, warmup, seed, arrival, prompt, output, shared, drain_limit)

    @classmethod
    def from_workload(cls, workload: Workload) -> LLMWorkloadSpec:
        """Validate a :class:`Workload`; its kind must be ``llm-serving``."""
        if workload.kind != KIND:
            raise WorkloadError(f"LLM targets run workloads of kind {KIND!r}, "
                                f"got {workload.kind!r} ({workload.name})")
        return cls.from_params(workload.params)

    def to_params(self) -> dict[str, Any]:
        """Plain data that :meth:`from_params` turns back into an equal spec."""
        out: dict[str, Any] = {
            "model": self.model, "n_requests": self.n_requests,
            "warmup_requests": self.warmup_requests, "seed": self.seed,
            "arrival": self.arrival.to_params(),
        }
        if self.prompt_len is not None:
            out["prompt_len"] = self.prompt_len.to_params()
        if self.output_len is not None:
            out["output_len"] = self.output_len.to_params()
        if self.shared_prefix is not None:
            out["shared_prefix"] = self.shared_prefix.to_params()
        if self.drain_limit_s is not None:
            out["drain_limit_s"] = self.drain_limit_s
        return out


# -- generation ------------------------------------------------------------------------------------

def _streams(seed: int, salt: int) -> list[np.random.Generator]:
    """Independent generators for arrivals, lengths, prompt tokens and prefixes."""
    children = np.random.SeedSequence([seed, salt]).spawn(4)
    return [np.random.default_rng(c) for c in children]


def _check_vocab(vocab_size: int) -> None:
    if vocab_size <= N_SPECIAL_TOKENS:
        raise WorkloadError(f"`vocab_size > {N_SPECIAL_TOKENS}` must hold (ids below it are "
                            f"special tokens), but got vocab_size={vocab_size}")


def _arrivals(spec: LLMWorkloadSpec, rng: np.random.Generator, n: int) -> np.ndarray:
    arrival = spec.arrival
    if arrival.process == "concurrency":
        return np.zeros(n)
    assert arrival.rate_rps is not None
    if arrival.process == "poisson":
        gaps = rng.exponential(1.0 / arrival.rate_rps, size=n)
    else:
        # vllm bench serve: Gamma(shape=burstiness, scale=1/(rate*burstiness)) keeps the mean
        # gap at 1/rate while the coefficient of variation is 1/sqrt(burstiness).
        gaps = rng.gamma(arrival.burstiness, 1.0 / (arrival.rate_rps * arrival.burstiness),
                         size=n)
    return np.cumsum(gaps)


def request_shapes(spec: LLMWorkloadSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(arrival times s, prompt lengths, output lengths) of the measured requests of ``spec``:
    what :func:`generate_requests` draws, without the token ids (the same seeded streams), for
    models that replay a run's requests (knowledge/batch_sim.py). Prompt lengths leave out a
    shared prefix; a trace gives its own."""
    arr_rng, len_rng, _, _ = _streams(spec.seed, 0)
    n = spec.n_requests
    if spec.arrival.process == "trace":
        assert spec.arrival.trace is not None
        entries = sorted(read_trace(spec.arrival.trace), key=lambda e: e.arrival_s)[:n]
        return (np.array([e.arrival_s for e in entries]),
                np.array([e.prompt_len for e in entries], dtype=np.int64),
                np.array([e.output_len for e in entries], dtype=np.int64))
    assert spec.prompt_len is not None and spec.output_len is not None
    arrivals = _arrivals(spec, arr_rng, n)
    return arrivals, spec.prompt_len.sample(len_rng, n), spec.output_len.sample(len_rng, n)


def _prefix_groups(spec: LLMWorkloadSpec, pre_rng: np.random.Generator, vocab_size: int
                   ) -> tuple[list[int | None], list[np.ndarray]]:
    """Which measured request starts with which shared prefix (None: none), and each prefix's
    token ids, drawn from ``pre_rng`` (the spec's prefix stream): exactly ``round(fraction *
    n)`` requests, spread round-robin over the groups. The prefixes are drawn first, so the
    choice depends on the vocabulary as well as the seed."""
    n = spec.n_requests
    groups: list[int | None] = [None] * n
    prefixes: list[np.ndarray] = []
    shared = spec.shared_prefix
    if shared is not None:
        prefixes = [pre_rng.integers(N_SPECIAL_TOKENS, vocab_size, size=shared.length)
                    for _ in range(shared.groups)]
        chosen = np.sort(pre_rng.choice(n, size=round(shared.fraction * n), replace=False))
        for k, i in enumerate(chosen):
            groups[int(i)] = k % shared.groups
    return groups, prefixes


def prefix_cached_tokens(spec: LLMWorkloadSpec, vocab_size: int) -> np.ndarray:
    """Per measured request of ``spec`` (in arrival order, as :func:`generate_requests` makes
    them for a model of ``vocab_size`` tokens): the prompt tokens an engine's prefix cache holds
    when it arrives, its shared prefix's whole length where an earlier request carried the same
    prefix, else 0. What a simulator leaves out of the request's prefill; an upper bound (the
    earlier request is taken as prefilled by then, and a window's few prefixes as never
    evicted)."""
    _check_vocab(vocab_size)
    _, _, _, pre_rng = _streams(spec.seed, 0)
    groups, _ = _prefix_groups(spec, pre_rng, vocab_size)
    cached = np.zeros(spec.n_requests, dtype=np.int64)
    if spec.shared_prefix is None:
        return cached
    seen: set[int] = set()
    for i, group in enumerate(groups):
        if group is not None:
            if group in seen:
                cached[i] = spec.shared_prefix.length
            seen.add(group)
    return cached


def generate_requests(spec: LLMWorkloadSpec, vocab_size: int) -> list[RequestSpec]:
    """The measured requests of ``spec``, sorted by arrival (``index`` = position in the list).

    Seeded and reproducible: the same spec and vocabulary give the same requests. Token ids are
    uniform on ``[N_SPECIAL_TOKENS, vocab_size)``; requests chosen for a shared prefix (exactly
    ``round(fraction * n)`` of them, spread round-robin over the groups) start with their group's
    ``length`` ids. Warm-up requests are not included (see :func:`generate_warmup_requests`).
    """
    _check_vocab(vocab_size)
    arr_rng, len_rng, tok_rng, pre_rng = _streams(spec.seed, 0)
    n = spec.n_requests
    if spec.arrival.process == "trace":
        assert spec.arrival.trace is not None
        entries = sorted(read_trace(spec.arrival.trace), key=lambda e: e.arrival_s)[:n]
        arrivals = np.array([e.arrival_s for e in entries])
        prompt_lens = np.array([e.prompt_len for e in entries], dtype=np.int64)
        output_lens = np.array([e.output_len for e in entries], dtype=np.int64)
    else:
        assert spec.prompt_len is not None and spec.output_len is not None
        arrivals = _arrivals(spec, arr_rng, n)
        prompt_lens = spec.prompt_len.sample(len_rng, n)
        output_lens = spec.output_len.sample(len_rng, n)

    groups, prefixes = _prefix_groups(spec, pre_rng, vocab_size)
    shared = spec.shared_prefix
    requests: list[RequestSpec] = []
    for i in range(n):
        group = groups[i]
        length = int(prompt_lens[i])
        prefix_len = 0
        if group is not None:
            assert shared is not None
            prefix_len = shared.length
            own = tok_rng.integers(N_SPECIAL_TOKENS, vocab_size, size=length - prefix_len)
            ids = np.concatenate([prefixes[group], own])
        else:
            ids = tok_rng.integers(N_SPECIAL_TOKENS, vocab_size, size=length)
        requests.append(RequestSpec(
            index=i, arrival_s=float(arrivals[i]),
            prompt_token_ids=tuple(int(t) for t in ids), output_len=int(output_lens[i]),
            prefix_group=group, shared_prefix_len=prefix_len,
        ))
    return requests


def generate_warmup_requests(spec: LLMWorkloadSpec, vocab_size: int) -> list[RequestSpec]:
    """``spec.warmup_requests`` short requests, all arriving at 0, to send before measuring.

    Their prompts come from a separate seed stream and share no prefix with the measured
    requests, so warm-up cannot pre-fill a prefix cache in the engine's favour.
    """
    _check_vocab(vocab_size)
    prompt_cap = spec.prompt_len.upper if spec.prompt_len is not None else _WARMUP_PROMPT_LEN
    output_cap = spec.output_len.upper if spec.output_len is not None else _WARMUP_OUTPUT_LEN
    prompt_len = min(_WARMUP_PROMPT_LEN, prompt_cap)
    output_len = min(_WARMUP_OUTPUT_LEN, output_cap)
    _, _, tok_rng, _ = _streams(spec.seed, 1)
    return [
        RequestSpec(index=i, arrival_s=0.0,
                    prompt_token_ids=tuple(int(t) for t in tok_rng.integers(
                        N_SPECIAL_TOKENS, vocab_size, size=prompt_len)),
                    output_len=output_len)
        for i in range(spec.warmup_requests)
    ]


def drain_cutoff_s(spec: LLMWorkloadSpec, requests: Sequence[RequestSpec]) -> float | None:
    """When a run of ``requests`` stops waiting (seconds from its start): ``spec.drain_limit_s``
    after the last arrival; None (wait for every request) without a drain limit."""
    if spec.drain_limit_s is None or not requests:
        return None
    return max(r.arrival_s for r in requests) + spec.drain_limit_s


def max_concurrency(spec: LLMWorkloadSpec) -> int | None:
    """The client-side cap on requests in flight (None: open loop, no cap)."""
    if spec.arrival.process == "concurrency":
        return spec.arrival.concurrency
    return spec.arrival.max_concurrency


# -- presets ---------------------------------------------------------------------------------------

def load_preset(name: str, **overrides: Any) -> Workload:
    """The shipped workload ``name`` (one of :data:`PRESETS` or :data:`CPU_PRESETS`), with
    top-level params replaced.

    ``load_preset("chat", model="llama-3.2-1b", n_requests=100)``; the result is validated.
    """
    if name not in PRESETS + CPU_PRESETS:
        raise WorkloadError(f"unknown LLM workload preset {name!r}; presets: "
                            f"{', '.join(PRESETS + CPU_PRESETS)}")
    workload = Workload.from_spec(copy.deepcopy(_preset_document(name)))
    if overrides:
        workload = workload.with_params(**overrides)
    LLMWorkloadSpec.from_workload(workload)
    return workload


@functools.cache
def _preset_document(name: str) -> dict[str, Any]:
    """The parsed YAML of the shipped preset ``name``, read once per process: an answer plans
    with presets thousands of times (the consistency audit parsed them 3,918 times, 15 of its
    114 s), and the files ship with the package. Callers copy it before use."""
    text = resources.files("objectives").joinpath("workloads", f"{name}.yaml").read_text()
    return safe_load(text)


def cpu_scaled(workload: Workload) -> Workload:
    """A copy of ``workload`` small enough for the tiny-llama model on a 2-core CPU.

    Lengths keep their distribution's shape but shrink so prompts are 4..64 tokens and outputs
    2..16 (a shared prefix shrinks with the prompts), 24 requests, Poisson/gamma rate 4/s, a
    concurrency of at most 4, and at most 4 warm-up requests. The name gains ``-cpu``. A trace
    cannot be shrunk this way and raises :class:`WorkloadError`.
    """
    spec = LLMWorkloadSpec.from_workload(workload)
    if spec.arrival.process == "trace":
        raise WorkloadError("a trace workload cannot be scaled for CPU; write a smaller trace")
    assert spec.prompt_len is not None and spec.output_len is not None
    prompt = spec.prompt_len.scaled(_CPU_MAX_PROMPT, floor=_CPU_MIN_PROMPT)
    # At least 2 output tokens, so every request has a TPOT.
    output = spec.output_len.scaled(_CPU_MAX_OUTPUT, floor=2)
    arrival = spec.arrival
    if arrival.process == "concurrency":
        assert arrival.concurrency is not None
        arrival = replace(arrival, concurrency=min(arrival.concurrency, _CPU_MAX_CONCURRENCY))
    else:
        arrival = replace(arrival, rate_rps=_CPU_RATE_RPS)
    shared = spec.shared_prefix
    if shared is not None:
        factor = prompt.upper / spec.prompt_len.upper
        length = max(1, min(round(shared.length * factor), prompt.lower - 1))
        shared = replace(shared, length=length) if prompt.lower > 1 else None
    small = replace(spec, model="tiny-llama", n_requests=_CPU_N_REQUESTS,
                    warmup_requests=min(spec.warmup_requests, _CPU_MAX_WARMUP),
                    arrival=arrival, prompt_len=prompt, output_len=output, shared_prefix=shared)
    name = workload.name if workload.name.endswith("-cpu") else f"{workload.name}-cpu"
    return Workload(KIND, name, small.to_params())


def at_rate(workload: Workload, rate_rps: float, *, seed_offset: int) -> Workload:
    """``workload`` at another Poisson/gamma arrival rate, to measure beside it on the same engine.

    The arrival window stays the same (``n_requests`` scales with the rate, at least 1) and the
    seed moves by ``seed_offset`` so the prompts differ from the original's: measured one after the
    other on one server, the second workload must not find the first one's prompts in the prefix
    cache. The name gains ``@<rate>rps``.
    """
    spec = LLMWorkloadSpec.from_workload(workload)
    if spec.arrival.process not in ("poisson", "gamma"):
        raise WorkloadError(f"another arrival rate needs a poisson or gamma workload, but "
                            f"{workload.name!r} arrives by {spec.arrival.process!r}")
    rate = _positive(rate_rps, "rate_rps")
    if seed_offset < 1:
        raise WorkloadError(f"`seed_offset >= 1` must hold, but got {seed_offset=}")
    assert spec.arrival.rate_rps is not None
    n_requests = max(1, round(spec.n_requests * rate / spec.arrival.rate_rps))
    moved = replace(spec, n_requests=n_requests, seed=spec.seed + seed_offset,
                    arrival=replace(spec.arrival, rate_rps=rate))
    return Workload(KIND, f"{workload.name}@{rate:g}rps", moved.to_params())


"""The continuous-batching simulator (knowledge/batch_sim.py) fitted to a context's LLM serving
trials, answering at any arrival rate: the ``llm-serving`` entry of the
``slo_advisor.load_simulators`` entry points (knowledge/curve_blend.py).

A config's *step class* is its config less the knobs whose role is the batch-slot limit or the
step's token budget (the target's search space marks them): the configs of one class share one
step-time model, fitted to the server's mean inter-token latency of the class's trials. A
config is simulated with its own batch limits, so a class measured with one ``max_num_seqs``
answers for another.

An asked workload is given by its features (rate, median prompt and output lengths): the
stream replayed is a stored workload with the same lengths moved to the asked rate (its arrival
window kept), drawn with :data:`SEEDS` seeds no stored trial used, and each figure is the
geometric mean over them. A trial's own arrivals would flatter the simulator (they are what
the measured run saw); an answer at an unmeasured rate has none.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from knowledge.batch_sim import (
    NO_FRONTEND,
    BatchModel,
    Observation,
    RequestStream,
    fit_batch_models,
)
from objectives.llm.models import vocab_size_of
from objectives.llm.workload import KIND, LLMWorkloadSpec, prefix_cached_tokens, request_shapes

__all__ = [
    "SEEDS",
    "SEED_OFFSET",
    "UNMEASURED_SEEDS",
    "LLMSimulation",
    "caches_prefixes",
    "first_token_ms",
    "fit",
    "mean_step_ms",
    "prefill_prompt_tokens",
    "request_stream",
]

#: Streams simulated per asked workload for a config measured with its batch limits (figures
#: are their geometric mean).
SEEDS = 3
#: Streams simulated for a config whose batch limits were never measured in its step class:
#: its figures only blend a knob-level answer whose interval width they keep
#: (knowledge/curve_blend.py), and a question simulates about a hundred such candidates, so one
#: stream each (docs/benchmarks/batch-simulator-2026-12-05/ gives what that cost and changed).
UNMEASURED_SEEDS = 1
#: The seeds of those streams start this far above the stored workload's own.
SEED_OFFSET = 1000
#: The frontend costs the fit chooses from: none. Choosing among the simulator's frontend costs
#: scored no better on the shipped data and took ~3.6x the fit
#: (docs/benchmarks/batch-simulator-2026-12-05/).
FRONTEND_COSTS = (NO_FRONTEND.per_token_ms,)
#: Workload features that must match a stored workload's for its stream to be moved to the
#: asked rate (the rate is what moves).
_SHAPE_FEATURES = ("prompt_len", "output_len")
_RATE = "rate_rps"


def first_token_ms(requests: Any, n: int) -> np.ndarray | None:
    """Each request's measured TTFT (ms) by its index in the stream, from a trial's per-request
    samples (NaN where missing), or None without them."""
    if not isinstance(requests, dict) or not requests.get("index") or not requests.get("ttft_ms"):
        return None
    out = np.full(n, np.nan)
    for i, v in zip(requests["index"], requests["ttft_ms"], strict=False):
        if isinstance(i, int) and 0 <= i < n and isinstance(v, int | float):
            out[i] = float(v)
    return out


def prefill_prompt_tokens(spec: LLMWorkloadSpec, prompts: np.ndarray) -> np.ndarray:
    """``prompts`` (``spec``'s prompt lengths, :func:`request_shapes`) less the tokens an
    engine's prefix cache holds (:func:`prefix_cached_tokens`): what the engine prefills when
    it caches prefixes. Unchanged where the workload shares no prefix or its model's vocabulary
    is unknown (which requests share a prefix depends on it)."""
    if spec.shared_prefix is None:
        return prompts
    vocab = vocab_size_of(spec.model)
    if vocab is None:
        return prompts
    cached = prefix_cached_tokens(spec, vocab)[:len(prompts)]
    return np.maximum(np.asarray(prompts) - cached, 1)


def request_stream(spec: LLMWorkloadSpec, prefix_cache: bool = False) -> RequestStream:
    """The requests of ``spec`` as the simulator replays them; with ``prefix_cache`` (the
    engine caches prefixes: :func:`caches_prefixes`), each prompt counts only the tokens the
    engine prefills (:func:`prefill_prompt_tokens`)."""
    arrivals, prompts, outputs = request_shapes(spec)
    if prefix_cache:
        prompts = prefill_prompt_tokens(spec, prompts)
    return RequestStream(arrivals, prompts, outputs, spec.drain_limit_s)


def caches_prefixes(knob: str | None, defaults: Mapping[str, Any],
                    config: Mapping[str, Any]) -> bool:
    """Whether ``config`` (missing knobs at ``defaults``) turns on ``knob``, the knob a search
    space marks with the role ``prefix_cache`` (None: it marks none)."""
    return knob is not None and bool(config.get(knob, defaults.get(knob)))


def _stream(params: Mapping[str, Any], prefix_cache: bool = False) -> RequestStream:
    return request_stream(LLMWorkloadSpec.from_params(params), prefix_cache)


def mean_step_ms(trial: Any) -> float | None:
    """The engine's mean time per iteration a trial recorded (the server's mean inter-token
    latency, ms), or None."""
    itl = ((trial.details or {}).get("server_metrics") or {}).get("itl") or {}
    value = itl.get("mean_ms") if isinstance(itl, Mapping) else None
    return float(value) if isinstance(value, int | float) and value > 0 else None


class LLMSimulation:
    """A context's batch models per step class, and the stored workloads its streams start from.

    Built by :func:`fit`; ``predict(config, workload)`` gives the client's figures (the names
    the trials report) or None where the config's class was never measured or no stored
    workload has the asked lengths.
    """

    def __init__(self, slots: str, budget: str, defaults: Mapping[str, Any],
                 unvaried: frozenset[str], models: Mapping[str, BatchModel],
                 templates: Sequence[Mapping[str, Any]], prefix_cache: str | None = None
                 ) -> None:
        self.slots = slots
        self.budget = budget
        #: The knob whose role is the engine's prefix cache (None: the space marks none).
        self.prefix_cache = prefix_cache
        self.defaults = dict(defaults)
        self.unvaried = unvaried
        self.models = dict(models)
        self.templates = [dict(t) for t in templates]
        #: (step class, batch slots, token budget) of every config the fit saw.
        self.measured: set[tuple[str, int, int]] = set()

    def step_class(self, config: Mapping[str, Any]) -> str:
        rest = {k: v for k, v in config.items()
                if k not in (self.slots, self.budget) and k not in self.unvaried}
        return json.dumps(rest, sort_keys=True, default=str)

    def caches_prefixes(self, config: Mapping[str, Any]) -> bool:
        """Whether ``config``'s engine serves shared prompt prefixes from its cache."""
        return caches_prefixes(self.prefix_cache, self.defaults, config)

    def limits(self, config: Mapping[str, Any]) -> tuple[int, int]:
        return (int(config.get(self.slots, self.defaults[self.slots])),
                int(config.get(self.budget, self.defaults[self.budget])))

    def template(self, workload: Mapping[str, float]) -> dict[str, Any] | None:
        """The stored workload's params whose lengths are the asked ones, nearest in rate."""
        rate = workload.get(_RATE)
        if not isinstance(rate, int | float) or not rate > 0:
            return None
        same = [t for t in self.templates if all(
            _close(_median(t.get(f)), workload.get(f)) for f in _SHAPE_FEATURES)]
        if not same:
            return None
        return min(same, key=lambda t: (abs(math.log(t["arrival"]["rate_rps"] / rate)),
                                        json.dumps(t, sort_keys=True)))

    def streams(self, workload: Mapping[str, float], seeds: int = SEEDS,
                prefix_cache: bool = False) -> list[RequestStream]:
        """The ``seeds`` streams replayed for ``workload`` (none where no template fits), each
        prompt counting only what the engine prefills where it caches prefixes."""
        base = self.template(workload)
        if base is None:
            return []
        rate = float(workload[_RATE])
        spec = LLMWorkloadSpec.from_params(base)
        assert spec.arrival.rate_rps is not None  # templates are Poisson or gamma
        window = spec.n_requests / spec.arrival.rate_rps
        moved = {**base, "arrival": {**base["arrival"], "rate_rps": rate},
                 "n_requests": max(1, round(window * rate))}
        seed = int(base.get("seed", 0)) + SEED_OFFSET
        return [_stream({**moved, "seed": seed + k}, prefix_cache) for k in range(seeds)]

    def predict(self, config: Mapping[str, Any], workload: Mapping[str, float]
                ) -> dict[str, float] | None:
        """The client's figures of ``config`` at ``workload``: the geometric mean over the
        streams (:data:`SEEDS` for batch limits measured in the config's class, else
        :data:`UNMEASURED_SEEDS`) of each figure every stream gave, or None (see the class)."""
        cls = self.step_class(config)
        model = self.models.get(cls)
        slots, budget = self.limits(config)
        seeds = SEEDS if (cls, slots, budget) in self.measured else UNMEASURED_SEEDS
        streams = (self.streams(workload, seeds, self.caches_prefixes(config))
                   if model is not None else [])
        if model is None or not streams:
            return None
        logs: dict[str, list[float]] = {}
        for stream in streams:
            for name, value in model.predict(stream, slots, budget).items():
                if value > 0:
                    logs.setdefault(name, []).append(math.log(value))
        return {name: math.exp(float(np.mean(v))) for name, v in logs.items()
                if len(v) == len(streams)}


def _median(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, Mapping):
        for key in ("median", "value"):
            if isinstance(value.get(key), int | float):
                return float(value[key])
    return None


def _close(a: float | None, b: Any) -> bool:
    if a is None or not isinstance(b, int | float):
        return a is None and b is None
    return abs(a - float(b)) <= 1e-9 * max(1.0, abs(a))


def fit(trials: Sequence[Any], frontend_costs: Sequence[float] = FRONTEND_COSTS
        ) -> LLMSimulation | None:
    """The simulator of one context's trials (all one target), or None where its search space
    marks no batch-slot or token-budget knob or no trial recorded the server's mean
    inter-token latency on a Poisson or gamma workload. ``frontend_costs``: the frontend
    costs per token the fit chooses from (a calibration probe, whose top window nears the
    server's capacity, chooses among the simulator's own, advisor/calibrate.py)."""
    from advisor.errors import SearchSpaceError
    from knowledge.load_curve import unvaried_knobs
    from search_spaces.space import load_space

    timed = [(t, step_ms) for t in trials if (step_ms := mean_step_ms(t)) is not None
             and (t.workload_spec or {}).get("kind") == KIND
             and ((t.workload_spec.get("params") or {}).get("arrival") or {}).get("process")
             in ("poisson", "gamma")]
    targets = {t.target for t in trials}
    if not timed or len(targets) != 1:
        return None
    try:
        space = load_space(targets.pop())
    except SearchSpaceError:  # a target without a search space of its own (a scripted one)
        return None
    slots, budget = space.knob_with_role("batch_slots"), space.knob_with_role("step_token_budget")
    if slots is None or budget is None:
        return None
    sim = LLMSimulation(slots, budget, space.default_config(),
                        unvaried_knobs([t.config for t in trials]), {}, [],
                        prefix_cache=space.knob_with_role("prefix_cache"))
    classes: dict[str, list[Observation]] = {}
    templates: dict[str, dict[str, Any]] = {}
    for t, step_ms in timed:
        params = t.workload_spec["params"]
        stream = _stream(params, sim.caches_prefixes(t.config))
        slots_n, budget_n = sim.limits(t.config)
        cls = sim.step_class(t.config)
        sim.measured.add((cls, slots_n, budget_n))
        classes.setdefault(cls, []).append(Observation(
            stream, slots_n, budget_n, step_ms, t.metrics,
            first_token_ms((t.details or {}).get("requests"), len(stream.arrivals_s))))
        templates.setdefault(json.dumps(params, sort_keys=True), dict(params))
    sim.models = fit_batch_models(classes, frontend_costs)
    sim.templates = list(templates.values())
    return sim

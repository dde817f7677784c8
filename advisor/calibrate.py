"""Calibrate a serving target on a machine the knowledge has never seen: one engine start of the
defaults, a short ladder of arrival rates, and the continuous-batching simulator's step-time
model fitted to what the server itself reported (a hardware profile, knowledge/profiles.py).

The probe is the cross-check's measurement (advisor/crosscheck.py) with the reference harness
off: one engine start, one window per probe rate, every window stored as a trial with the
server's own metrics (its mean inter-token latency is the engine's mean time per iteration) and
each request's first-token latency. The fit is the simulator's own (objectives/llm/simulation.py
on knowledge/batch_sim.py): the cost per prompt token from the light-load windows' first-token
latencies against prompt length, the fixed and per-sequence costs from the mean iteration time
of every window, the offsets for the time a request spends outside the engine.

The calibration's error is measured, not assumed: each probe window is predicted by a model
fitted to the other windows (its own requests replayed), and the RMS of log(predicted /
measured) per figure is stored. Window-to-window noise (the same config and rate measured in
consecutive windows) is read from stored trials with repeats and stored beside it; intervals
are widened by both (knowledge/calibrated.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from advisor.errors import AdvisorError
from knowledge.batch_sim import FRONTEND_TOKEN_MS, RequestStream
from knowledge.models import TrialRecord, TrialStatus
from knowledge.profiles import HardwareProfile
from objectives.llm.simulation import fit as fit_simulation
from objectives.llm.simulation import mean_step_ms, request_stream
from objectives.llm.workload import LLMWorkloadSpec

__all__ = [
    "ERROR_METRICS",
    "PREDICT_SEEDS",
    "PROBE_DRAIN_LIMIT_S",
    "PROBE_FRONTEND_TOKEN_MS",
    "PROBE_RATE_FACTORS",
    "PROBE_WINDOW_S",
    "calibrate_from_trials",
    "leave_one_out_errors",
    "probe_rates",
    "probe_window",
    "probe_window_params",
    "profile_from_probe",
    "window_noise",
    "workload_streams",
]

#: The figures whose calibration error and noise are measured (the SLO's and the goal's).
ERROR_METRICS: tuple[str, ...] = ("ttft_p95_ms", "tpot_p95_ms", "output_tokens_per_s")
#: The default probe ladder, as multiples of the workload's own arrival rate: one window at
#: light load (pins the prompt cost and the offsets), three with more sequences running (pin the
#: per-sequence cost; the top one nears the knee, where the frontend shows). Chosen for the 8B
#: shape on the first new GPU (2026-12-06): 8, 24, 40 and 64 req/s of the `chat` preset's 20.
PROBE_RATE_FACTORS: tuple[float, ...] = (0.4, 1.2, 2.0, 3.2)


#: Seconds of arrivals per probe window, and how long a window waits for its last answers: a
#: workload preset sized for a long run (`chat`: 600 requests, 30 s at its 20 req/s) would
#: make the four windows cost two minutes past the engine start; eight seconds settle the
#: server's mean iteration time and a p95 of every window (docs/benchmarks.md, measurement
#: windows: 8 s against 30 s of arrivals).
PROBE_WINDOW_S = 8.0
PROBE_DRAIN_LIMIT_S = 15.0


def probe_window_params(overrides: Mapping[str, Any], base_rate: float | None) -> list[str]:
    """The ``KEY=VALUE`` workload parameters that give the probe its own window length
    (:data:`PROBE_WINDOW_S` of arrivals at the workload's rate, :data:`PROBE_DRAIN_LIMIT_S`
    of drain), each only where the user's ``overrides`` set none (a ``--rate`` list moves the
    window to every rate; the length stays)."""
    out = []
    if "n_requests" not in overrides and base_rate:
        out.append(f"n_requests={max(1, round(base_rate * PROBE_WINDOW_S))}")
    if "drain_limit_s" not in overrides:
        out.append(f"drain_limit_s={PROBE_DRAIN_LIMIT_S:g}")
    return out


def probe_rates(workload_rate: float, factors: Sequence[float] = PROBE_RATE_FACTORS
                ) -> tuple[float, ...]:
    """The probe's arrival rates for a workload arriving at ``workload_rate`` req/s."""
    return tuple(round(workload_rate * f, 3) for f in factors)


def _usable(trials: Sequence[TrialRecord]) -> list[TrialRecord]:
    return [t for t in trials if t.status == TrialStatus.COMPLETE and mean_step_ms(t)]


def _gpu(trial: TrialRecord) -> Mapping[str, Any]:
    gpus = (trial.hardware or {}).get("gpus") or []
    return gpus[0] if gpus and isinstance(gpus[0], Mapping) else {}


def probe_window(trial: TrialRecord) -> dict[str, Any]:
    """One probe window's raw data as the profile keeps it (enough to refit without the
    machine): the workload, the config, the measured figures, the server's own metrics and
    each request's first-token latency."""
    details = trial.details or {}
    return {"uid": trial.uid, "config": dict(trial.config),
            "workload_spec": dict(trial.workload_spec), "metrics": dict(trial.metrics),
            "server_metrics": details.get("server_metrics"),
            "requests": details.get("requests"), "mean_step_ms": mean_step_ms(trial),
            "duration_s": trial.duration_s}


def _log_errors(fitted: Mapping[str, float], measured: Mapping[str, Any]) -> dict[str, float]:
    out = {}
    for m in ERROR_METRICS:
        v, p = measured.get(m), fitted.get(m)
        if isinstance(v, int | float) and v > 0 and isinstance(p, int | float) and p > 0:
            out[m] = math.log(p / float(v))
    return out


#: The frontend costs per streamed token (ms) a calibration chooses among: the simulator's own
#: (knowledge/batch_sim.py, down to a frontend that saturates at ~14,000 tokens/s) and slower
#: ones, down to ~5,000 tokens/s. The first H100 probe (2026-12-06) met its frontend at ~6,300
#: tokens/s (64 req/s of `chat`, TTFT p95 460 ms): held to the simulator's own costs, its fit
#: chose the slowest (0.07 ms) and still read that window's TTFT p95 as 150 ms, so the capacity
#: it predicted (79.6 req/s) was past the measured one (52 met, 64 missed); with these it chooses
#: 0.11 ms and predicts 58 req/s (docs/benchmarks/h100-new-gpu-2026-12-07/). A probe whose top
#: window stays below the frontend's capacity still chooses a low cost: the extra choices only
#: add fits (~0.1 s each on the 8B's four windows).
PROBE_FRONTEND_TOKEN_MS: tuple[float, ...] = (*FRONTEND_TOKEN_MS, 0.09, 0.11, 0.13, 0.16, 0.2)


def _fit(trials: Sequence[TrialRecord]) -> Any:
    """The simulator fitted to probe windows, choosing the server's frontend cost among
    :data:`PROBE_FRONTEND_TOKEN_MS` (the probe's top window nears the server's capacity, where
    it shows)."""
    return fit_simulation(trials, PROBE_FRONTEND_TOKEN_MS)


def _predict_own(trials: Sequence[TrialRecord], held: TrialRecord) -> dict[str, float] | None:
    """``held``'s figures from a simulator fitted to ``trials``, replaying its own requests."""
    sim = _fit(trials)
    if sim is None:
        return None
    model = sim.models.get(sim.step_class(held.config))
    if model is None:
        return None
    stream = request_stream(LLMWorkloadSpec.from_params(held.workload_spec["params"]),
                            sim.caches_prefixes(held.config))
    return model.predict(stream, *sim.limits(held.config))


def leave_one_out_errors(trials: Sequence[TrialRecord]) -> dict[str, float]:
    """Per figure, the RMS of log(predicted / measured) over the windows, each predicted by a
    model fitted to the others (a figure no window could be predicted for is left out)."""
    errors: dict[str, list[float]] = {}
    for i, held in enumerate(trials):
        rest = [t for j, t in enumerate(trials) if j != i]
        predicted = _predict_own(rest, held) if rest else None
        if predicted is None:
            continue
        for m, e in _log_errors(predicted, held.metrics).items():
            errors.setdefault(m, []).append(e)
    return {m: float(np.sqrt(np.mean(np.square(v)))) for m, v in errors.items()}


def window_noise(trials: Sequence[TrialRecord], target: str) -> dict[str, float]:
    """Per figure, the pooled standard deviation of its log between repeated windows (the same
    study, config and workload) of ``target``'s complete trials."""
    groups: dict[tuple[int, str, str], list[TrialRecord]] = {}
    for t in trials:
        if t.target == target and t.status == TrialStatus.COMPLETE:
            groups.setdefault((t.study_id, t.config_hash, t.workload_hash), []).append(t)
    out = {}
    for m in ERROR_METRICS:
        ss, dof = 0.0, 0
        for members in groups.values():
            logs = [math.log(float(v)) for t in members
                    if isinstance(v := t.metrics.get(m), int | float) and v > 0]
            if len(logs) >= 2:
                ss += float(np.sum(np.square(np.asarray(logs) - np.mean(logs))))
                dof += len(logs) - 1
        if dof:
            out[m] = math.sqrt(ss / dof)
    return out


def calibrate_from_trials(trials: Sequence[TrialRecord], *, noise: Mapping[str, float],
                          noise_source: str, model_shape: Mapping[str, Any] | None = None,
                          probe_seconds: float | None = None,
                          uid: str | None = None, created_at: str | None = None
                          ) -> HardwareProfile:
    """The hardware profile of one probe: ``trials`` are its windows (one target, one config,
    one machine, one model). Raises :class:`AdvisorError` where they cannot pin the model."""
    usable = _usable(trials)
    if len(usable) < 2:
        raise AdvisorError(f"a calibration needs at least two probe windows with the server's "
                           f"mean iteration time; got {len(usable)} of {len(trials)}")
    for what, values in (("target", {t.target for t in usable}),
                         ("machine", {t.hardware_key for t in usable}),
                         ("config", {t.config_hash for t in usable}),
                         ("model", {str((t.workload_spec.get("params") or {}).get("model"))
                                    for t in usable})):
        if len(values) != 1:
            raise AdvisorError(f"a calibration's windows share one {what}; got "
                               f"{sorted(map(str, values))}")
    sim = _fit(usable)
    if sim is None or len(sim.models) != 1:
        raise AdvisorError("the probe's windows did not give one step-time model (does the "
                           "target's search space mark its batch-limit knobs?)")
    model = next(iter(sim.models.values()))
    first = usable[0]
    gpu = _gpu(first)
    slots, budget = sim.limits(first.config)
    extra: dict[str, Any] = {}
    if uid is not None:
        extra["uid"] = uid
    if created_at is not None:
        extra["created_at"] = created_at
    return HardwareProfile(
        target=first.target, model=str(first.workload_spec["params"].get("model")),
        hardware_key=first.hardware_key, gpu_name=str(gpu.get("name", first.hardware_key)),
        gpu_memory_mib=float(gpu.get("memory_mib", 0.0)), driver=str(gpu.get("driver", "")),
        engine_versions={str(k): str(v) for k, v in (first.engine_versions or {}).items()},
        model_shape=dict(model_shape or {}), config=dict(first.config), slots=slots,
        token_budget=budget, fixed_ms=model.step.fixed_ms,
        per_sequence_ms=model.step.per_sequence_ms,
        per_prefill_token_ms=model.step.per_prefill_token_ms,
        frontend_token_ms=model.frontend.per_token_ms, offsets_ms=dict(model.offsets_ms),
        error_log=leave_one_out_errors(usable), noise_log=dict(noise),
        noise_source=noise_source, probe=tuple(probe_window(t) for t in usable),
        probe_seconds=probe_seconds, **extra)


def profile_from_probe(profile: HardwareProfile,
                       rebuild: Callable[[Mapping[str, Any]], TrialRecord]) -> HardwareProfile:
    """``profile`` fitted again from its own stored probe (``rebuild`` turns a probe window
    back into a trial record): what the recorded-probe test checks reproduces it."""
    trials = [rebuild(w) for w in profile.probe]
    return calibrate_from_trials(trials, noise=profile.noise_log,
                                 noise_source=profile.noise_source,
                                 model_shape=profile.model_shape,
                                 probe_seconds=profile.probe_seconds, uid=profile.uid,
                                 created_at=profile.created_at)


#: The seeds of predicted streams start this far above the workload's own (no measured window
#: replays them; objectives/llm/simulation.py does the same for its answers).
PREDICT_SEED_OFFSET = 1000
#: Streams replayed per predicted rate (each figure is their geometric mean).
PREDICT_SEEDS = 3


def workload_streams(params: Mapping[str, Any], *, seeds: int = PREDICT_SEEDS,
                     prefix_cache: bool = False) -> Callable[[float], list[RequestStream]]:
    """The request streams of the workload ``params`` (an ``llm-serving`` spec's params) moved
    to any arrival rate, its arrival window kept: a stream source for knowledge/calibrated.py.
    ``prefix_cache``: the engine serves shared prompt prefixes from its cache, so each prompt
    counts only what it prefills (objectives/llm/simulation.py ``request_stream``)."""
    spec = LLMWorkloadSpec.from_params(params)
    if spec.arrival.rate_rps is None:
        raise AdvisorError("a predicted rate needs a poisson or gamma workload")
    window = spec.n_requests / spec.arrival.rate_rps
    seed = int(params.get("seed", 0)) + PREDICT_SEED_OFFSET

    def at(rate: float) -> list[RequestStream]:
        moved = {**params, "arrival": {**params["arrival"], "rate_rps": rate},
                 "n_requests": max(1, round(window * rate))}
        out = []
        for k in range(seeds):
            out.append(request_stream(LLMWorkloadSpec.from_params({**moved, "seed": seed + k}),
                                      prefix_cache))
        return out

    return at

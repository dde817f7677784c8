"""A discrete-event simulator of continuous batching, driven by a step-time model fitted from the
engine's own per-iteration timings.

An LLM server under continuous batching runs engine steps back to back. Each step decodes one
token for every running sequence and spends what is left of its token budget on prompt chunks
(the oldest waiting prompts first, as many new sequences as free batch slots allow); a step
takes ``fixed + per_sequence * decodes + per_prefill_token * prompt tokens`` milliseconds. A
prompt's last chunk yields its first token; a sequence leaves when its output is complete.
Replaying a workload's exact requests (arrival times, prompt and output lengths) through that
loop gives every request's TTFT, TPOT and end-to-end latency, so the figures the client
reports (percentiles over the run, throughput to the last completion, requests still running
at the drain limit cut off) come out of one simulation, including the knee where the batch
slots fill and a queue forms, and the backlog a finite run leaves past it.

The step-time model is fitted from the engine's own timings of measured runs: the cost per
prompt token is the slope of each request's TTFT against its prompt length at light load
(:func:`prefill_cost_ms`); the other two make the simulated runs reproduce the server's mean
inter-token latency (an engine iteration per token): simulate each run, read the
decode-weighted means of the step's regressors, solve a non-negative least squares, repeat
(:func:`fit_batch_model`). In front of the engine sits the server's own
process, which streams every output token at a cost per token and takes new requests in
between (:class:`Frontend`): past its capacity requests wait before the engine sees them. Its
cost is chosen from a few values by how well the fitted models reproduce their own runs
(:func:`fit_batch_models`). What else the simulator leaves out (HTTP, tokenisation: the time a
request spends outside the engine at light load) is one offset per first-token latency, read
where the simulation shows no queue.

Nothing here names an engine or a knob: the caller passes the batch-slot limit and the step's
token budget (the search space marks the knobs that hold them with a ``role``) and the request
stream (``objectives`` builds it from a workload spec).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = ["FRONTEND_TOKEN_MS", "NO_FRONTEND", "BatchModel", "Frontend", "Observation",
           "RequestStream", "SimulatedRun", "StepModel", "fit_batch_model", "fit_batch_models",
           "prefill_cost_ms", "simulate"]

#: Percentiles the client reports (objectives/llm/metrics.py), the simulator reports the same.
_PERCENTILES = (50, 90, 95, 99)
#: Fixed-point rounds of the step-model fit: simulate, regress, repeat (the costs settle in
#: two or three; each round costs one simulation per observation).
FIT_ROUNDS = 3
#: A run counts as queue-free (its TTFT is engine prefill plus the time outside the engine)
#: when 95 % of its simulated requests took a batch slot within this many engine steps of
#: arriving (the step under way, and one more where a step's token budget ran out).
_QUEUE_FREE_STEPS = 2
#: How many steps a request never admitted counts as having waited (:meth:`queue_free`).
_NEVER_STEPS = 1e18
#: Shortest step the model may predict (ms): a fit through few runs may put the fixed cost at 0.
_MIN_STEP_MS = 0.5


@dataclass(frozen=True)
class RequestStream:
    """One run's requests in arrival order: arrival times from the run's start (s), prompt and
    output lengths (tokens), and the drain limit after the last arrival (s; None: wait for all)."""

    arrivals_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    drain_limit_s: float | None = None

    def __post_init__(self) -> None:
        n = len(self.arrivals_s)
        if not n or len(self.prompt_tokens) != n or len(self.output_tokens) != n:
            raise ValueError("a request stream needs one prompt and one output length per "
                             f"arrival, got {n}, {len(self.prompt_tokens)}, "
                             f"{len(self.output_tokens)}")


@dataclass(frozen=True)
class StepModel:
    """One engine step's duration (ms) from what it computes."""

    fixed_ms: float
    per_sequence_ms: float
    per_prefill_token_ms: float

    def step_ms(self, decodes: int, prefill_tokens: float) -> float:
        return max(self.fixed_ms + self.per_sequence_ms * decodes
                   + self.per_prefill_token_ms * prefill_tokens, _MIN_STEP_MS)

    def as_tuple(self) -> tuple[float, float, float]:
        return self.fixed_ms, self.per_sequence_ms, self.per_prefill_token_ms


@dataclass(frozen=True)
class Frontend:
    """The server's own process in front of the engine: each output token costs it
    ``per_token_ms`` before the client has it (detokenisation, streaming), and it takes new
    requests in only between that work. Near its capacity tokens leave late and requests wait
    to reach the engine, a queue the engine's own gauges never show."""

    per_token_ms: float = 0.0

    @property
    def active(self) -> bool:
        return self.per_token_ms > 0


NO_FRONTEND = Frontend()


@dataclass
class SimulatedRun:
    """Per request: first-token and finish times (s from the run's start; NaN where it never
    got there before the drain limit), the time a batch slot took it, and the tokens it
    produced; plus the decode-weighted mean regressors of the steps (for the fit)."""

    stream: RequestStream
    first_token_s: np.ndarray
    finish_s: np.ndarray
    admitted_s: np.ndarray
    waited_steps: np.ndarray
    produced: np.ndarray
    end_s: float
    step_regressors: np.ndarray = field(default_factory=lambda: np.zeros(3))
    mean_step_ms: float = 0.0

    def metrics(self) -> dict[str, float]:
        """The client's figures of this run: TTFT / TPOT / E2E percentiles and means (ms) over
        the requests (a request cut off at the drain limit counts with its lower bounds, never
        in TPOT), output tokens and completed requests per second to the last completion."""
        s = self.stream
        done = ~np.isnan(self.finish_s)
        cut = ~done
        ttft = np.where(np.isnan(self.first_token_s), self.end_s, self.first_token_s) - s.arrivals_s
        e2e = np.where(done, self.finish_s, self.end_s) - s.arrivals_s
        multi = done & (s.output_tokens > 1)
        tpot = ((self.finish_s - self.first_token_s)[multi]
                / (s.output_tokens[multi] - 1))
        out: dict[str, float] = {}
        for family, values in (("ttft", ttft), ("tpot", tpot), ("e2e", e2e)):
            if len(values):
                ms = np.asarray(values, dtype=float) * 1e3
                # One call for the four (each the same value as its own call: the same sort,
                # the same interpolation), not four sorts of the same values.
                out |= {f"{family}_p{q}_ms": float(v)
                        for q, v in zip(_PERCENTILES, np.percentile(ms, _PERCENTILES),
                                        strict=True)}
                out[f"{family}_mean_ms"] = float(ms.mean())
        duration = float(np.nanmax(np.where(done, self.finish_s, np.nan))) if done.any() else 0.0
        duration = max(duration, self.end_s if cut.any() else 0.0)
        if duration > 0:
            out["output_tokens_per_s"] = float(self.produced.sum()) / duration
            out["requests_per_s"] = float(done.sum()) / duration
        return out

    def queue_free(self) -> bool:
        """Whether 95 % of the requests took a batch slot within :data:`_QUEUE_FREE_STEPS`
        engine steps of arriving (a request never admitted waited forever)."""
        # A large finite stand-in, not inf: numpy's percentile interpolates inf - inf to NaN
        # (a RuntimeWarning on the user's terminal, and a NaN that compared as 'queued').
        waited = np.where(np.isnan(self.admitted_s), _NEVER_STEPS, self.waited_steps)
        return bool(np.percentile(waited, 95) <= _QUEUE_FREE_STEPS)


def simulate(stream: RequestStream, slots: int, token_budget: int, step: StepModel,
             frontend: Frontend = NO_FRONTEND) -> SimulatedRun:
    """Replay ``stream`` through continuous batching with at most ``slots`` sequences and
    ``token_budget`` tokens per step (running sequences first, then the oldest waiting),
    behind ``frontend`` (first come, first served: a request reaches the engine when the
    frontend has taken it in; a step's tokens reach the client when it has sent them).

    A step's work is proportional to the sequences it prefills and those it finishes, not to
    all it decodes: every decoding sequence emits one token per step, so the simulator counts
    decode steps once (``decoded``) and keeps each decoding sequence's finishing count in a heap
    (it finishes when ``decoded`` reaches it). Near the knee a few hundred sequences decode at
    once, and a per-sequence loop over them at every step was 85 % of a calibrated answer's
    time. Plain Python lists and floats, not numpy: the work per step is a few sequences, where
    numpy's per-call cost dominated. Every token count is a whole number, exact in a float, so
    the results equal the per-sequence loop's to the last bit (tests/knowledge/test_batch_sim.py
    replays random streams through both)."""
    if slots < 1 or token_budget < 1:
        raise ValueError(f"`slots >= 1` and `token_budget >= 1` must hold, got {slots}, "
                         f"{token_budget}")
    arrivals: list[float] = np.asarray(stream.arrivals_s, dtype=float).tolist()
    prefill_left: list[float] = np.maximum(
        np.asarray(stream.prompt_tokens, dtype=float), 1.0).tolist()
    outputs: list[float] = np.maximum(
        np.asarray(stream.output_tokens, dtype=float), 1.0).tolist()
    n = len(arrivals)
    first = [math.nan] * n
    finish = [math.nan] * n
    admitted = [math.nan] * n
    queued_at = [0] * n
    waited = [0.0] * n
    produced = [0.0] * n
    decode_start = [0.0] * n  # ``decoded`` when each sequence's prompt was done
    cutoff = (arrivals[-1] + stream.drain_limit_s if stream.drain_limit_s is not None
              else math.inf)
    waiting: deque[int] = deque()
    prefilling: list[int] = []  # running sequences still in their prompt, in admission order
    finishing: list[tuple[float, int]] = []  # (``decoded`` count at which it ends, sequence)
    decoded = 0.0  # decode steps so far: each decoding sequence emitted one token per step
    t, nxt = 0.0, 0
    weighted = [0.0, 0.0, 0.0]
    weight = 0.0
    step_total, steps = 0.0, 0
    ready = list(arrivals)  # when the engine sees each request (after the frontend)
    fe_free, fe_next = 0.0, 0  # when the frontend is next free; the next request it takes in
    heappush, heappop = heapq.heappush, heapq.heappop
    # Read once: the loop runs millions of times in a calibrated answer (the consistency audit:
    # 4.2 million steps), and attribute and method lookups were a fifth of its time. The
    # arithmetic below is StepModel.step_ms's and send's own, term for term (same results).
    fe_active = frontend.active
    fixed_ms, per_sequence_ms = step.fixed_ms, step.per_sequence_ms
    per_prefill_token_ms = step.per_prefill_token_ms
    per_token_ms = frontend.per_token_ms

    # The frontend's bookkeeping and the two-way min/max below are written out inline rather
    # than called (a frontend function and builtins.max were a third of the loop's time in the
    # consistency audit); each keeps the operands' order, so the results are the same floats:
    # ``max(a, b)`` is ``b if b > a else a``, ``min(a, b)`` is ``b if b < a else a``.
    while True:
        if fe_active:
            # The frontend takes in every request that arrived by now, and, where the next one
            # is still on its way, every one that arrived by then (in arrival order), each when
            # it is free of the streaming work queued there.
            while fe_next < n and arrivals[fe_next] <= t:
                arrived = arrivals[fe_next]
                ready[fe_next] = fe_free if fe_free > arrived else arrived
                fe_next += 1
            if nxt < n and fe_next <= nxt:
                until = arrivals[nxt]
                while fe_next < n and arrivals[fe_next] <= until:
                    arrived = arrivals[fe_next]
                    ready[fe_next] = fe_free if fe_free > arrived else arrived
                    fe_next += 1
        while nxt < n and ready[nxt] <= t:
            waiting.append(nxt)
            queued_at[nxt] = steps
            nxt += 1
        decodes = len(finishing)  # the budget is never below the slots (engines check it)
        if not decodes and not prefilling and not waiting:
            if nxt >= n:
                break
            t = ready[nxt]
            continue
        if t > cutoff:
            break
        budget = float(token_budget - decodes)
        chunk: list[float] = []
        for i in prefilling:
            if budget <= 0:
                break
            c = prefill_left[i]
            if budget < c:
                c = budget
            chunk.append(c)
            budget -= c
        while waiting and decodes + len(prefilling) < slots and budget > 0:
            i = waiting.popleft()
            c = prefill_left[i]
            if budget < c:
                c = budget
            prefilling.append(i)  # every earlier prompt got tokens: the budget is not spent
            chunk.append(c)
            admitted[i] = t
            waited[i] = steps - queued_at[i]
            budget -= c
        prefill_tokens = float(sum(chunk))
        dt_ms = fixed_ms + per_sequence_ms * decodes + per_prefill_token_ms * prefill_tokens
        if dt_ms < _MIN_STEP_MS:
            dt_ms = _MIN_STEP_MS
        # A stretch of decode-only steps changes nothing but the clock and the outputs until a
        # sequence finishes or (with a free slot) a request arrives: take it in one go.
        repeat = 1
        if prefill_tokens == 0 and decodes:
            repeat = int(min(finishing[0][0] - decoded,
                             min([outputs[i] for i in prefilling]) if prefilling
                             else math.inf))
            if nxt < n and decodes + len(prefilling) < slots:
                repeat = min(repeat, max(1, math.ceil((arrivals[nxt] - t) * 1e3 / dt_ms)))
            if math.isfinite(cutoff):  # stop where the client stops waiting
                repeat = min(repeat, max(1, math.ceil((cutoff - t) * 1e3 / dt_ms) + 1))
        if decodes:
            k = repeat * decodes
            weighted[0] += k * 1.0
            weighted[1] += k * float(decodes)
            weighted[2] += k * prefill_tokens
            weight += k
        step_total += repeat * dt_ms
        steps += repeat
        t += repeat * dt_ms / 1e3
        # A sequence emits a token when it decodes or when this step ends its prompt.
        completes = []
        if chunk:
            still = []
            for j, i in enumerate(prefilling):
                c = chunk[j] if j < len(chunk) else 0.0
                if c:
                    prefill_left[i] -= c
                    if prefill_left[i] <= 0:
                        completes.append(i)
                        decode_start[i] = decoded
                        heappush(finishing, (decoded + outputs[i], i))
                        continue
                still.append(i)
            prefilling = still
        if fe_active:
            # The tokens of each of ``repeat`` steps of ``dt`` ending at ``t`` leave when the
            # frontend is free of the earlier ones, before any request that arrived meanwhile
            # (it takes requests in between its streaming work).
            dt = dt_ms / 1e3
            work = float(len(finishing)) * per_token_ms / 1e3
            first_end = t - (repeat - 1) * dt
            free = first_end if first_end > fe_free else fe_free
            alone, behind = t + work, free + repeat * work
            fe_free = behind if behind > alone else alone
            sent = fe_free
        else:
            sent = t
        for i in completes:
            first[i] = sent
        decoded += repeat
        while finishing and finishing[0][0] <= decoded:
            i = heappop(finishing)[1]
            produced[i] = outputs[i]
            finish[i] = sent
    for _, i in finishing:  # cut off at the drain limit while decoding
        produced[i] = decoded - decode_start[i]
    return SimulatedRun(stream, np.asarray(first), np.asarray(finish), np.asarray(admitted),
                        np.asarray(waited), np.asarray(produced), t,
                        np.asarray(weighted) / weight if weight else np.zeros(3),
                        step_total / steps if steps else 0.0)


@dataclass(frozen=True)
class Observation:
    """One measured run for the fit: its requests, the batch limits it ran with, the engine's
    mean time per iteration (the server's mean inter-token latency, ms) and its figures."""

    stream: RequestStream
    slots: int
    token_budget: int
    mean_step_ms: float
    measured: Mapping[str, float]
    #: Each request's measured TTFT (ms, aligned with the stream; NaN where not recorded).
    first_token_ms: np.ndarray | None = None

    @property
    def offered_rps(self) -> float:
        return len(self.stream.arrivals_s) / max(float(self.stream.arrivals_s[-1]), 1e-9)


def prefill_cost_ms(observations: Sequence[Observation]) -> float | None:
    """The engine's time per prompt token (ms), read off the light-load runs: each request's
    measured TTFT against its prompt length (least squares), the median slope over the runs at
    the lowest quarter of the offered rates that recorded per-request TTFTs (at light load a
    request's first token is one prefill step after it arrives, so the slope is the prefill
    cost; the intercept holds the step's fixed cost and the time outside the engine)."""
    light = _light(observations)
    slopes = []
    for o in light:
        if o.first_token_ms is None:
            continue
        ttft = np.asarray(o.first_token_ms, dtype=float)
        ok = np.isfinite(ttft)
        if ok.sum() < 10:
            continue
        prompt = np.asarray(o.stream.prompt_tokens, dtype=float)[ok]
        if np.ptp(prompt) <= 0:
            continue
        slopes.append(float(np.polyfit(prompt, ttft[ok], 1)[0]))
    return max(float(np.median(slopes)), 0.0) if slopes else None


#: Share of the offered rates (lowest first) whose runs count as light load.
_LIGHT_SHARE = 0.25


def _light(observations: Sequence[Observation]) -> list[Observation]:
    """The observations at the lowest quarter of the offered rates (at least one)."""
    rates = np.asarray([o.offered_rps for o in observations])
    bound = float(np.quantile(rates, _LIGHT_SHARE))
    return [o for o, r in zip(observations, rates, strict=True) if r <= bound + 1e-9]


@dataclass(frozen=True)
class BatchModel:
    """A fitted step-time model and the offsets of the first-token latencies (ms) for the time
    a request spends outside the engine."""

    step: StepModel
    offsets_ms: Mapping[str, float]
    frontend: Frontend = NO_FRONTEND

    def predict(self, stream: RequestStream, slots: int, token_budget: int
                ) -> dict[str, float]:
        """The client's figures of ``stream`` under these batch limits."""
        return self.figures(simulate(stream, slots, token_budget, self.step, self.frontend))

    def figures(self, run: SimulatedRun) -> dict[str, float]:
        """The client's figures of a run simulated with this model: its metrics, the latencies
        moved by their offsets."""
        figures = run.metrics()
        for name, offset in self.offsets_ms.items():
            if name in figures:
                figures[name] = max(figures[name] + offset, 1e-3)
        return figures


def _offset_names(figures: Mapping[str, float]) -> list[str]:
    """The figures that include the wait for the first token (and so the time outside it)."""
    return [m for m in figures if m.startswith(("ttft_", "e2e_")) and m.endswith("_ms")]


def _runs(observations: Sequence[Observation], step: StepModel, frontend: Frontend
          ) -> list[SimulatedRun]:
    """One simulation per observation; repeats of one run (the same requests and limits)
    share theirs, since the simulation is deterministic."""
    done: dict[tuple[int, int, int], SimulatedRun] = {}
    out = []
    for o in observations:
        key = (id(o.stream), o.slots, o.token_budget)
        if key not in done:
            done[key] = simulate(o.stream, o.slots, o.token_budget, step, frontend)
        out.append(done[key])
    return out


def fit_batch_model(observations: Sequence[Observation], rounds: int = FIT_ROUNDS,
                    frontend: Frontend = NO_FRONTEND) -> BatchModel:
    """The step-time model that reproduces the observations' mean iteration times (its prompt
    token cost read off the light-load runs, :func:`prefill_cost_ms`), and the latency
    offsets read at the light-load runs the simulation shows without a queue, behind
    ``frontend``."""
    from scipy.optimize import nnls

    if not observations:
        raise ValueError("fit_batch_model needs at least one observation")
    y = np.asarray([o.mean_step_ms for o in observations], dtype=float)
    if np.any(~np.isfinite(y)) or np.any(y <= 0):
        raise ValueError("every observation needs a positive mean step time")
    prefill = prefill_cost_ms(observations)
    step = StepModel(float(np.min(y)) * 0.8, 0.05, 0.01 if prefill is None else prefill)
    w = 1.0 / y
    for _ in range(max(rounds, 1)):
        X = np.asarray([r.step_regressors for r in _runs(observations, step, frontend)])
        if prefill is None:
            coef, _ = nnls(X * w[:, None], y * w)
        else:  # the prompt cost is known: the fixed and per-sequence costs take the rest
            two, _ = nnls(X[:, :2] * w[:, None], (y - prefill * X[:, 2]) * w)
            coef = np.asarray([two[0], two[1], prefill])
        step = StepModel(*map(float, coef))
    offsets: dict[str, list[float]] = {}
    light = _light(observations)
    for o, run in zip(light, _runs(light, step, frontend), strict=True):
        if not run.queue_free():
            continue
        figures = run.metrics()
        for name in _offset_names(figures):
            if isinstance(o.measured.get(name), int | float):
                offsets.setdefault(name, []).append(float(o.measured[name]) - figures[name])
    return BatchModel(step, {k: float(np.median(v)) for k, v in offsets.items()}, frontend)


#: Frontend costs per output token (ms) the fit chooses from (:func:`fit_batch_models`):
#: from none to a frontend that saturates at ~14,000 tokens/s.
FRONTEND_TOKEN_MS = (0.0, 0.015, 0.03, 0.05, 0.07)


def _misfit(models: Mapping[str, BatchModel],
            classes: Mapping[str, Sequence[Observation]]) -> float:
    """Mean squared log error of the models' figures against every measured figure they
    predict, over all observations (the fit's own data: the choice is nested in the fit)."""
    errors: list[float] = []
    for key, model in models.items():
        observations = classes[key]
        runs = _runs(observations, model.step, model.frontend)
        for o, run in zip(observations, runs, strict=True):
            figures = model.figures(run)
            errors.extend(math.log(figures[m] / float(v)) ** 2 for m, v in o.measured.items()
                          if m in figures and isinstance(v, int | float) and v > 0
                          and figures[m] > 0)
    return float(np.mean(errors)) if errors else math.inf


def fit_batch_models(classes: Mapping[str, Sequence[Observation]],
                     token_costs: Sequence[float] = FRONTEND_TOKEN_MS
                     ) -> dict[str, BatchModel]:
    """One batch model per step class (configs that differ only in their batch limits), all
    behind one frontend: the per-token cost of :data:`FRONTEND_TOKEN_MS` whose models
    reproduce the classes' own measured figures best. The frontend is the server's, shared by
    every config; only runs near its capacity show it, so all classes choose it together."""
    best: tuple[float, dict[str, BatchModel]] | None = None
    for cost in token_costs:
        frontend = Frontend(per_token_ms=cost)
        models = {k: fit_batch_model(obs, frontend=frontend) for k, obs in classes.items() if obs}
        error = _misfit(models, classes)
        if best is None or error < best[0]:
            best = (error, models)
    return best[1] if best is not None else {}

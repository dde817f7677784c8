"""The continuous-batching simulator as a loop over every running sequence at every step: the
reference that knowledge.batch_sim.simulate (an event heap over the decoding sequences) must equal
to the last bit (tests/knowledge/test_batch_sim.py)."""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from knowledge.batch_sim import NO_FRONTEND, Frontend, RequestStream, SimulatedRun, StepModel


def _per_sequence_simulate(stream: RequestStream, slots: int, token_budget: int, step: StepModel,
             frontend: Frontend = NO_FRONTEND) -> SimulatedRun:
    """The simulator as it was before the event heap (a loop over every running sequence at
    every step), kept as the reference the fast one must equal to the last bit."""
    if slots < 1 or token_budget < 1:
        raise ValueError(f"`slots >= 1` and `token_budget >= 1` must hold, got {slots}, "
                         f"{token_budget}")
    arrivals: list[float] = np.asarray(stream.arrivals_s, dtype=float).tolist()
    prefill_left: list[float] = np.maximum(
        np.asarray(stream.prompt_tokens, dtype=float), 1.0).tolist()
    out_left: list[float] = np.maximum(
        np.asarray(stream.output_tokens, dtype=float), 1.0).tolist()
    n = len(arrivals)
    first = [math.nan] * n
    finish = [math.nan] * n
    admitted = [math.nan] * n
    queued_at = [0] * n
    waited = [0.0] * n
    produced = [0.0] * n
    cutoff = (arrivals[-1] + stream.drain_limit_s if stream.drain_limit_s is not None
              else math.inf)
    waiting: deque[int] = deque()
    running: list[int] = []
    t, nxt = 0.0, 0
    weighted = [0.0, 0.0, 0.0]
    weight = 0.0
    step_total, steps = 0.0, 0
    ready = list(arrivals)  # when the engine sees each request (after the frontend)
    fe_free, fe_next = 0.0, 0  # when the frontend is next free; the next request it takes in

    def take_in(until: float) -> None:
        """The frontend takes in every request that arrived by ``until`` (in arrival order),
        each when it is free of the streaming work queued there."""
        nonlocal fe_next
        while fe_next < n and arrivals[fe_next] <= until:
            ready[fe_next] = max(arrivals[fe_next], fe_free)
            fe_next += 1

    def send(end: float, tokens: float, repeat: int, dt: float) -> float:
        """When the frontend has sent the ``tokens`` of each of ``repeat`` steps of ``dt``
        seconds ending at ``end``: each step's share leaves when the frontend is free of the
        earlier ones, before any request that arrived meanwhile (it takes requests in
        between its streaming work)."""
        nonlocal fe_free
        work = tokens * frontend.per_token_ms / 1e3
        first_end = end - (repeat - 1) * dt
        fe_free = max(end + work, max(fe_free, first_end) + repeat * work)
        return fe_free

    while True:
        if frontend.active:
            take_in(t)
            if nxt < n and fe_next <= nxt:  # the next request is still on its way
                take_in(arrivals[nxt])
        while nxt < n and ready[nxt] <= t:
            waiting.append(nxt)
            queued_at[nxt] = steps
            nxt += 1
        if not running and not waiting:
            if nxt >= n:
                break
            t = ready[nxt]
            continue
        if t > cutoff:
            break
        budget = float(token_budget)
        decoding = [prefill_left[i] <= 0 for i in running]
        decodes = sum(decoding)  # the budget is never below the slots (engines check it)
        budget -= decodes
        chunk = [0.0] * len(running)
        for j, dec in enumerate(decoding):
            if dec:
                continue
            if budget <= 0:
                break
            chunk[j] = min(prefill_left[running[j]], budget)
            budget -= chunk[j]
        while waiting and len(running) < slots and budget > 0:
            i = waiting.popleft()
            c = min(prefill_left[i], budget)
            running.append(i)
            chunk.append(c)
            decoding.append(False)
            admitted[i] = t
            waited[i] = steps - queued_at[i]
            budget -= c
        prefill_tokens = float(sum(chunk))
        dt_ms = step.step_ms(decodes, prefill_tokens)
        # A stretch of decode-only steps changes nothing but the clock and the outputs until a
        # sequence finishes or (with a free slot) a request arrives: take it in one go.
        repeat = 1
        if prefill_tokens == 0 and decodes:
            repeat = int(min(out_left[i] for i in running))
            if nxt < n and len(running) < slots:
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
        for j, i in enumerate(running):
            if chunk[j]:
                prefill_left[i] -= chunk[j]
                if not decoding[j] and prefill_left[i] <= 0:
                    completes.append(i)
                    decoding[j] = True
        sent = (send(t, float(sum(decoding)), repeat, dt_ms / 1e3) if frontend.active
                else t)
        for i in completes:
            first[i] = sent
        still = []
        for j, i in enumerate(running):
            if decoding[j]:
                out_left[i] -= repeat
                produced[i] += repeat
                if out_left[i] <= 0:
                    finish[i] = sent
                    continue
            still.append(i)
        running = still
    return SimulatedRun(stream, np.asarray(first), np.asarray(finish), np.asarray(admitted),
                        np.asarray(waited), np.asarray(produced), t,
                        np.asarray(weighted) / weight if weight else np.zeros(3),
                        step_total / steps if steps else 0.0)

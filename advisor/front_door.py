"""What a front door of a study request (CLI, REST, sweep files) shows before any planning: how it
spells the request's fields in errors (:class:`Door`) and the defaults its help text names. Plain
values, so ``advisor --help`` names them without loading the driver, optuna or the models."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BEST_KNOWN", "DEFAULT_TRIALS", "Door"]

#: Search trials of a new study when none are asked for.
DEFAULT_TRIALS = 30

#: How many of the best measured configs a new `advisor tune` / API study queues.
BEST_KNOWN = 3


@dataclass(frozen=True)
class Door:
    """How a front door spells a request's fields in the errors it shows its user, so one rule
    reads as that door's own (``--resume`` on the command line, ``resume`` in a JSON body)."""

    resume: str = "resume"
    name: str = "name"
    continue_hint: str = "resume it to continue it"
    enqueue: str = "enqueue"
    startup_trials: str = "startup_trials"
    also_rate: str = "also_rate"
    trials: str = "trials"
    sampler: str = "sampler"
    seed: str = "seed"
    search_sweep: str = "search_sweep"
    paired_repeats: str = "paired_repeats"
    failure_gate: str = "failure_gate"
    failure_threshold: str = "failure_threshold"

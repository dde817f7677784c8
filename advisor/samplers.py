"""The search algorithms a study can use, as Optuna samplers.

One place builds them, so the driver, the sweeps and the sampler-efficiency benchmark run exactly
the same sampler for a name.
"""

from __future__ import annotations

import warnings

import optuna

__all__ = ["SAMPLERS", "make_sampler"]

#: Sampler names accepted everywhere a study is requested (CLI, REST, sweep files).
SAMPLERS = ("tpe", "gp", "random")


def make_sampler(name: str, seed: int | None) -> optuna.samplers.BaseSampler:
    """The sampler called ``name`` (one of :data:`SAMPLERS`), seeded with ``seed``.

    Configs enqueued before sampling (the engine default, a warm start) count towards a model-based
    sampler's random start-up trials, as Optuna counts every finished trial there.
    """
    # `group` (TPE over conditional sub-spaces) is marked experimental; it is what makes TPE model
    # the per-index-family knobs jointly, so we use it and keep the warning out of user output.
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True,
                                          n_startup_trials=10)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=10)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise ValueError(f"unknown sampler {name!r}; choose one of {SAMPLERS}")

"""The search algorithms a study can use, as Optuna samplers.

One place builds them, so the driver, the sweeps and the sampler-efficiency benchmark run exactly
the same sampler for a name.
"""

from __future__ import annotations

import warnings

import optuna

__all__ = ["DEFAULT_SAMPLER", "MAX_STARTUP", "SAMPLERS", "STARTUP_TRIALS", "make_sampler"]

#: Sampler names accepted everywhere a study is requested (CLI, REST, sweep files).
SAMPLERS = ("tpe", "gp", "random")

#: The sampler a study uses when none is named.
DEFAULT_SAMPLER = "tpe"

#: Finished trials a model-based sampler waits for before it models (Optuna's default is 10).
#: Five, because the engine default and the warm start are queued first and count here too (with
#: 10, a 30-trial study spends its first third before TPE models at all). On the
#: sampler-efficiency grid TPE needed 0.33x random search's trials with 5 and 0.34x with 10, not
#: told apart (docs/benchmarks.md, "Sampler efficiency").
STARTUP_TRIALS = 5
#: The longest random start-up a study may ask for.
MAX_STARTUP = 1000


def make_sampler(name: str, seed: int | None, *,
                 n_startup_trials: int = STARTUP_TRIALS) -> optuna.samplers.BaseSampler:
    """The sampler called ``name`` (one of :data:`SAMPLERS`), seeded with ``seed``.

    Configs enqueued before sampling (the engine default, a warm start) count towards a model-based
    sampler's ``n_startup_trials`` random start-up trials, as Optuna counts every finished trial
    there. ``n_startup_trials`` is a parameter so the benchmark can compare start-up lengths.
    """
    # `group` (TPE over conditional sub-spaces) is marked experimental; it is what makes TPE model
    # the per-index-family knobs jointly, so we use it and keep the warning out of user output.
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True,
                                          n_startup_trials=n_startup_trials)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=n_startup_trials)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise ValueError(f"unknown sampler {name!r}; choose one of {SAMPLERS}")

"""The search algorithms a study can use, as Optuna samplers.

A registry of sampler factories (one object per name) builds them, so the driver, the sweeps and
the sampler-efficiency benchmark run exactly the same sampler for a name, and every front door
(CLI, REST, sweep files) validates a sampler name against the same list, :data:`SAMPLERS`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    # Imported by the factories when they build a sampler: the registry's names are listed by
    # `advisor --help` and validated by every front door without loading optuna.
    import optuna

__all__ = ["DEFAULT_SAMPLER", "MAX_STARTUP", "SAMPLERS", "SAMPLER_FACTORIES", "STARTUP_TRIALS",
           "SamplerFactory", "make_sampler", "sampler_factory", "sampler_names"]

#: Finished trials a model-based sampler waits for before it models (Optuna's default is 10).
#: Five, because the engine default and the warm start are queued first and count here too (with
#: 10, a 30-trial study spends its first third before TPE models at all). On the
#: sampler-efficiency grid TPE needed 0.33x random search's trials with 5 and 0.34x with 10, not
#: told apart (docs/benchmarks.md, "Sampler efficiency").
STARTUP_TRIALS = 5
#: The longest random start-up a study may ask for.
MAX_STARTUP = 1000


class SamplerFactory(Protocol):
    """Builds one search algorithm. Called once per Optuna study a process opens (a study's
    start, each resume, each worker of a shared study), with the seed that process must use."""

    @property
    def name(self) -> str:
        """The name a study request uses for it (``--sampler``, ``"sampler"`` in REST and
        sweeps)."""
        ...

    def __call__(self, seed: int | None, n_startup_trials: int) -> optuna.samplers.BaseSampler:
        """A fresh sampler seeded with ``seed``; ``n_startup_trials`` random trials (queued ones
        included) before a model-based sampler models; a sampler without a model ignores it."""
        ...


@dataclass(frozen=True)
class _TPE:
    name: str = "tpe"

    def __call__(self, seed: int | None, n_startup_trials: int) -> optuna.samplers.BaseSampler:
        # `group` (TPE over conditional sub-spaces) is marked experimental; it is what makes TPE
        # model the per-index-family knobs jointly, so we use it and keep the warning out of
        # user output.
        import optuna

        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True,
                                          n_startup_trials=n_startup_trials)


@dataclass(frozen=True)
class _GP:
    name: str = "gp"

    def __call__(self, seed: int | None, n_startup_trials: int) -> optuna.samplers.BaseSampler:
        import optuna

        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=n_startup_trials)


@dataclass(frozen=True)
class _Random:
    name: str = "random"

    def __call__(self, seed: int | None, n_startup_trials: int) -> optuna.samplers.BaseSampler:
        import optuna

        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.RandomSampler(seed=seed)


#: Every sampler a study may name, by name, in the order front doors list them.
SAMPLER_FACTORIES: dict[str, SamplerFactory] = {f.name: f for f in (_TPE(), _GP(), _Random())}


def sampler_names() -> tuple[str, ...]:
    """The sampler names accepted everywhere a study is requested (CLI, REST, sweep files)."""
    return tuple(SAMPLER_FACTORIES)


#: Sampler names accepted everywhere a study is requested (CLI, REST, sweep files).
SAMPLERS = sampler_names()

#: The sampler a study uses when none is named.
DEFAULT_SAMPLER = "tpe"


def sampler_factory(name: str) -> SamplerFactory:
    """The factory registered as ``name``; raises :class:`ValueError` naming the choices."""
    try:
        return SAMPLER_FACTORIES[name]
    except KeyError:
        raise ValueError(f"unknown sampler {name!r}; choose one of {SAMPLERS}") from None


def make_sampler(name: str, seed: int | None, *,
                 n_startup_trials: int = STARTUP_TRIALS) -> optuna.samplers.BaseSampler:
    """The sampler called ``name`` (one of :data:`SAMPLERS`), seeded with ``seed``.

    Configs enqueued before sampling (the engine default, a warm start) count towards a model-based
    sampler's ``n_startup_trials`` random start-up trials, as Optuna counts every finished trial
    there. ``n_startup_trials`` is a parameter so the benchmark can compare start-up lengths.
    """
    return sampler_factory(name)(seed, n_startup_trials)

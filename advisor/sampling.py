"""Turn an Optuna trial into a config of a SearchSpace (define-by-run, honouring conditions).

Knobs whose range is capped by another knob (``nprobe <= nlist``) are sampled over their static
range and clamped, so every trial sees the same distribution: Optuna's multivariate TPE only models
parameters whose distributions agree across trials. The config returned holds effective values:
clamped, and floats rounded to 4 significant digits, so the engine, the store and the launch
command all hold ``0.7385`` rather than ``0.7384722744215538``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from search_spaces import Knob, SearchSpace

__all__ = ["FLOAT_DIGITS", "knob_distribution", "round_float", "suggest_config", "swept_params"]

#: Significant digits a sampled float knob keeps: finer steps than 0.01 % of a value change
#: nothing measurable (memory fractions, GiB of swap), and short values read back as typed.
FLOAT_DIGITS = 4


def round_float(value: float, low: float, high: float) -> float:
    """``value`` to :data:`FLOAT_DIGITS` significant digits, kept inside ``[low, high]``."""
    if value == 0 or not math.isfinite(value):
        return value
    digits = FLOAT_DIGITS - 1 - math.floor(math.log10(abs(value)))
    return min(max(round(value, digits), low), high)


def _suggest(trial: optuna.Trial, knob: Knob) -> Any:
    if knob.type == "categorical":
        return trial.suggest_categorical(knob.name, list(knob.choices))
    if knob.type == "bool":
        return trial.suggest_categorical(knob.name, [False, True])
    assert knob.low is not None and knob.high is not None
    if knob.type == "int":
        step = int(knob.step) if knob.step and not knob.log else 1
        return trial.suggest_int(knob.name, int(knob.low), int(knob.high), log=knob.log, step=step)
    value = trial.suggest_float(knob.name, float(knob.low), float(knob.high), log=knob.log,
                                step=None if knob.log else knob.step)
    # A stepped knob is on its grid already; Optuna keeps the unrounded value as the param.
    return value if knob.step and not knob.log else round_float(value, knob.low, knob.high)


def suggest_config(trial: optuna.Trial, space: SearchSpace,
                   swept: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Sample every active knob of ``space`` through ``trial`` and return the effective config.

    Knobs in ``swept`` are not sampled (the target sweeps them within the trial): they take the
    value the trial was queued with, if it was, else their default, so a queued config's own
    setting is among those the sweep measures.
    """
    queued = (trial.storage.get_trial_system_attrs(trial._trial_id).get("fixed_params", {})
              if swept else {})
    config: dict[str, Any] = {}
    for knob in space:
        if not knob.is_active(config):
            continue
        value = queued.get(knob.name, knob.default) if knob.name in swept else _suggest(trial, knob)
        if knob.high_from is not None:
            _, cap = knob.bounds(config)
            value = type(value)(min(value, cap))
        config[knob.name] = value
    return config


def knob_distribution(knob: Knob) -> BaseDistribution:
    """The Optuna distribution :func:`suggest_config` samples ``knob`` from."""
    if knob.type == "categorical":
        return CategoricalDistribution(list(knob.choices))
    if knob.type == "bool":
        return CategoricalDistribution([False, True])
    assert knob.low is not None and knob.high is not None
    if knob.type == "int":
        step = int(knob.step) if knob.step and not knob.log else 1
        return IntDistribution(int(knob.low), int(knob.high), log=knob.log, step=step)
    return FloatDistribution(float(knob.low), float(knob.high), log=knob.log,
                             step=None if knob.log else knob.step)


def swept_params(space: SearchSpace, config: Mapping[str, Any], names: Iterable[str]
                 ) -> dict[str, tuple[Any, BaseDistribution]]:
    """``config``'s values of the knobs ``names`` with their distributions, to record as the
    params of a trial whose target chose them (a search sweep's setting)."""
    return {name: (config[name], knob_distribution(space.knob(name))) for name in names
            if name in config}

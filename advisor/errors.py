"""The one exception tree of slo-advisor.

This module imports nothing from the project, so every package (search_spaces, objectives,
knowledge, api) may raise these errors without breaking the one-way dependency rule. The CLI
prints them without a traceback; the API maps them to HTTP codes in one place.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = [
    "AdvisorError",
    "ConfigRejectedError",
    "DataError",
    "EngineStartError",
    "EngineUnavailableError",
    "InputError",
    "JobError",
    "NotFoundError",
    "NotMeasuredError",
    "NotReadyError",
    "SLOParseError",
    "SearchSpaceError",
    "StoreConflictError",
    "StoreError",
    "StudyBusyError",
    "StudyError",
    "TrialFailedError",
    "TrialTakenError",
    "UnknownTargetError",
    "WorkloadError",
    "did_you_mean",
]


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """``"; did you mean 'ttft_p95_ms'?"`` for the choice closest to a misspelt ``name``, ``""``
    when none is close: appended to an error naming ``name``, it replaces a list of every valid
    name with the one meant. A closer cut than Click's own (0.6), which offered a target name
    for an unrelated four-letter word."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.75)
    if not close:
        return ""
    return f"; did you mean {close[0]!r}?"


class AdvisorError(Exception):
    """Base of every error the advisor raises on purpose (bad input, unavailable engine, ...)."""


class SearchSpaceError(AdvisorError):
    """A search-space YAML file, or a config checked against it, breaks a rule."""


class SLOParseError(AdvisorError):
    """An SLO expression could not be parsed or names an unknown metric."""


class WorkloadError(AdvisorError):
    """A workload spec is malformed or refers to data that cannot be produced."""


class DataError(AdvisorError):
    """A dataset (corpus, embeddings, synthetic vectors) could not be loaded or built."""


class UnknownTargetError(AdvisorError):
    """A target name is not registered."""


class EngineUnavailableError(AdvisorError):
    """The engine behind a target is not installed or cannot run on this machine."""


class EngineStartError(AdvisorError):
    """The engine was installed but failed to start with the trial's configuration."""


class ConfigRejectedError(AdvisorError):
    """The engine rejected a config (invalid knob combination); recorded as a failed trial."""


class TrialFailedError(AdvisorError):
    """A trial did not produce a measurement (crash, timeout, OOM, rejection)."""


class NotMeasuredError(TrialFailedError):
    """A later workload of a trial's series was left unmeasured on purpose: what it would show
    follows from a workload measured before it (an SLO miss at a lower arrival rate on the same
    engine start). A target returns it in that workload's place; it is not a failure of the
    config, and no trial is recorded for it."""


class InputError(AdvisorError):
    """A value the user gave cannot be used as given (e.g. a label with a control character)."""


class StoreError(AdvisorError):
    """The trial store could not be opened or written."""


class StoreConflictError(StoreError):
    """A write the store refused as a duplicate (a unique key another process wrote first)."""


class TrialTakenError(StoreConflictError):
    """Another worker already claimed the trial number this one tried to claim (both were handed
    the same queued Optuna trial)."""


class NotReadyError(AdvisorError):
    """The service is still starting (its models are being fitted); retry shortly."""


class StudyError(AdvisorError):
    """A study cannot be created, resumed or run as asked."""


class StudyBusyError(StudyError):
    """Another driver holds the study's lease (knowledge/leases.py): it is being run now."""


class NotFoundError(AdvisorError):
    """Something asked for does not exist: a study, trial or job by id, or knowledge (no
    cheat-sheet row / knob for that context)."""


class JobError(AdvisorError):
    """A background job cannot be created or changed as asked (e.g. cancelling a finished job)."""

"""The states a stored study, trial, sweep run and background job can be in: plain string
constants that import nothing, so the command line offers them as choices (``advisor trials
--status``) without loading the store. Re-exported by knowledge/models.py, whose rows hold them."""

from __future__ import annotations

__all__ = ["JobStatus", "StudyStatus", "SweepRunStatus", "TrialStatus"]


class StudyStatus:
    """Study states. ``imported`` studies came from another store: readable, not resumable."""

    RUNNING = "running"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"
    IMPORTED = "imported"


class TrialStatus:
    """Trial states. ``interrupted`` trials died with the driver and were re-queued on resume.
    ``invalid`` trials were measured, but the measurement failed its validity check
    (knowledge/validity.py): kept with their metrics and reason, never used; they count
    against a study's budget like failed ones."""

    RUNNING = "running"
    COMPLETE = "complete"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    INVALID = "invalid"
    ALL = (RUNNING, COMPLETE, FAILED, INTERRUPTED, INVALID)
    FINISHED = (COMPLETE, FAILED, INVALID)
    #: States of a trial that produced a measurement (its metrics are stored).
    MEASURED = (COMPLETE, INVALID)


class SweepRunStatus:
    """Sweep run states. A run left ``running`` by a killed sweep is resumed by the next
    ``advisor sweep run`` of the same sweep file."""

    RUNNING = "running"
    FINISHED = "finished"
    ABANDONED = "abandoned"


class JobStatus:
    """Background job states (``POST /v1/studies``). ``queued`` and ``running`` are active."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    ALL = (QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED)
    ACTIVE = (QUEUED, RUNNING)

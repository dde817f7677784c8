"""SQLModel tables of the trial store: studies, trials and each trial's SLO margins.

Table names carry an ``advisor_`` prefix because Optuna's own tables (``studies``, ``trials``)
live in the same database, so ``optuna-dashboard <url>`` opens it directly.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, Column, DateTime, UniqueConstraint
from sqlalchemy.types import TypeDecorator
from sqlmodel import Field, SQLModel

# The states live in a module of plain values (the command line lists them in `--help` without
# loading SQLModel); they are names of this module too.
from knowledge.statuses import JobStatus, StudyStatus, SweepRunStatus, TrialStatus

__all__ = ["ImportRecord", "JobRecord", "JobStatus", "SLOMarginRecord", "StudyLeaseRecord",
           "StudyRecord", "StudyStatus", "SweepRunRecord", "SweepRunStatus", "TrialRecord",
           "TrialStatus", "utcnow"]


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite drops the zone; this restores it)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the trial store; use utcnow()")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class StudyRecord(SQLModel, table=True):
    """One tuning study: what was tuned, against which SLO and objective, on which workload."""

    __tablename__ = "advisor_study"

    id: int | None = Field(default=None, primary_key=True)
    #: Globally unique, so studies exported from one store and imported into another stay one.
    uid: str = Field(default_factory=lambda: uuid.uuid4().hex, index=True, unique=True,
                     max_length=32)
    name: str = Field(index=True, unique=True, max_length=200)
    target: str = Field(index=True, max_length=64)
    slo: str = Field(max_length=2000)
    objective_metric: str = Field(max_length=64)
    objective_direction: str = Field(max_length=16)
    workload_spec: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    workload_hash: str = Field(index=True, max_length=32)
    sampler: str = Field(max_length=32)
    seed: int | None = None
    n_trials: int
    status: str = Field(default="running", max_length=16)
    hardware_key: str = Field(index=True, max_length=200)
    advisor_version: str = Field(max_length=32)
    data_provenance: dict[str, Any] = Field(default_factory=dict,
                                            sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    updated_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    #: Every setting of the study as one JSON document (advisor/study_spec.py); None for a study
    #: an earlier release created (the driver writes it from that study's scattered settings).
    spec: dict[str, Any] | None = Field(default=None,
                                        sa_column=Column(JSON(none_as_null=True), nullable=True))


class StudyLeaseRecord(SQLModel, table=True):
    """Which driver runs a study now (knowledge/leases.py): one row per study name while a driver
    holds it. Keyed by name, not id, so the lease is taken before the study is created."""

    __tablename__ = "advisor_study_lease"

    study_name: str = Field(primary_key=True, max_length=200)
    #: A token of the holding driver (unique per lease taken), so a renewal or release by a
    #: driver that lost the lease changes nothing.
    owner: str = Field(max_length=64)
    host: str = Field(max_length=255)
    pid: int
    acquired_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    renewed_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    expires_at: datetime = Field(sa_type=UTCDateTime)


class TrialRecord(SQLModel, table=True):
    """One trial, failed ones included: config, context, metrics, outcome and timestamps."""

    __tablename__ = "advisor_trial"
    __table_args__ = (UniqueConstraint("study_id", "number", name="uq_advisor_trial_number"),)

    id: int | None = Field(default=None, primary_key=True)
    uid: str = Field(default_factory=lambda: uuid.uuid4().hex, index=True, unique=True,
                     max_length=32)
    study_id: int = Field(foreign_key="advisor_study.id", index=True)
    number: int
    optuna_trial_id: int | None = None
    target: str = Field(index=True, max_length=64)
    config: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    config_hash: str = Field(index=True, max_length=32)
    workload_spec: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    workload_hash: str = Field(index=True, max_length=32)
    hardware: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    hardware_key: str = Field(index=True, max_length=200)
    engine_versions: dict[str, Any] = Field(default_factory=dict,
                                            sa_column=Column(JSON, nullable=False))
    advisor_version: str = Field(max_length=32)
    metrics: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    details: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    status: str = Field(default=TrialStatus.RUNNING, index=True, max_length=16)
    feasible: bool | None = None
    objective_value: float | None = None
    error_type: str | None = Field(default=None, max_length=64)
    error: str | None = None
    host: str = Field(default="", max_length=255)
    pid: int | None = None
    started_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    heartbeat_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    finished_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    duration_s: float | None = None
    #: For a setting measured by a search sweep beside a sampled trial (objectives/search_sweep.py):
    #: that trial's number. Such trials take no slot of the study's budget.
    swept_from: int | None = None


class SweepRunRecord(SQLModel, table=True):
    """One run of a sweep file (e.g. one night): the expanded matrix, and its summary when done.

    The cells' studies name their run in ``data_provenance["sweep_run"]``; the drift report
    compares a run with the previous finished run of the same sweep.
    """

    __tablename__ = "advisor_sweep_run"

    id: int | None = Field(default=None, primary_key=True)
    sweep: str = Field(index=True, max_length=100)
    name: str = Field(index=True, unique=True, max_length=150)
    spec: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    spec_hash: str = Field(max_length=32)
    backend: str = Field(max_length=16)
    status: str = Field(default=SweepRunStatus.RUNNING, index=True, max_length=16)
    summary: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    finished_at: datetime | None = Field(default=None, sa_type=UTCDateTime)


class SLOMarginRecord(SQLModel, table=True):
    """One SLO bound's margin for one trial (typed, not hidden in JSON): ``margin <= 0`` iff met."""

    __tablename__ = "advisor_slo_margin"

    id: int | None = Field(default=None, primary_key=True)
    trial_id: int = Field(foreign_key="advisor_trial.id", index=True)
    metric: str = Field(max_length=64)
    op: str = Field(max_length=2)
    threshold: float
    value: float | None = None
    margin: float


class ImportRecord(SQLModel, table=True):
    """A JSONL file imported into this store (shipped knowledge is imported once per content)."""

    __tablename__ = "advisor_import"

    id: int | None = Field(default=None, primary_key=True)
    source: str = Field(max_length=500)
    sha256: str = Field(index=True, unique=True, max_length=64)
    studies: int = 0
    trials: int = 0
    imported_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)


class JobRecord(SQLModel, table=True):
    """A tuning study requested over the REST API and run by the worker, not by the request.

    ``request`` holds the validated study spec (plain data only: a registered target name, an
    SLO, knob values checked against the target's space, a workload spec); nothing in it is ever
    passed to a shell or used as a path.
    """

    __tablename__ = "advisor_job"

    id: int | None = Field(default=None, primary_key=True)
    uid: str = Field(default_factory=lambda: uuid.uuid4().hex, index=True, unique=True,
                     max_length=32)
    status: str = Field(default=JobStatus.QUEUED, index=True, max_length=16)
    study_name: str = Field(index=True, max_length=200)
    target: str = Field(max_length=64)
    request: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    cancel_requested: bool = False
    host: str | None = Field(default=None, max_length=255)
    pid: int | None = None
    error: str | None = None
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    started_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    heartbeat_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    finished_at: datetime | None = Field(default=None, sa_type=UTCDateTime)

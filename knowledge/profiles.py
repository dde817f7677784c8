"""Hardware profiles: what a short calibration probe on one machine pinned about one engine
serving one model shape there, stored beside the trials as evidence of its own.

A profile holds the machine (GPU name, memory, driver, the hardware key trials use), the engine
and its version, the model shape, the config the probe ran (the engine's defaults), the fitted
step-time model of the continuous-batching simulator (knowledge/batch_sim.py: fixed cost per
step, cost per running sequence, cost per prompt token; the frontend's cost per streamed token;
the latency offsets for the time outside the engine), the calibration's own error per metric
(from predicting each probe window with a model fitted to the others), the window-to-window
noise it is widened by, and the probe's raw data (each window's request stream parameters,
mean step time, measured figures, per-request first-token latencies, the server's own metrics),
so a later release can refit it without the machine.

Profiles live in their own table (created on first use, so a store opened by an older release
gains it without a migration), travel in the knowledge's JSONL export as lines of their own
format (:data:`PROFILE_FORMAT`) and are imported idempotently by ``uid``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import JSON, Column
from sqlmodel import Field, Session, SQLModel, func, select

from advisor.errors import StoreError
from knowledge.models import UTCDateTime, utcnow
from knowledge.store import TrialStore

if TYPE_CHECKING:
    # The simulator (numpy) is imported where a profile becomes a model: every command that
    # opens a store imports this module (knowledge/transfer.py), and few of them simulate.
    from knowledge.batch_sim import BatchModel

__all__ = ["PROFILE_FORMAT", "HardwareProfile", "HardwareProfileRecord", "calibrated_at",
           "export_profile_lines",
           "find_profile", "import_profile_rows", "is_profile_row", "list_profiles",
           "profile_line", "profiles_version", "save_profile"]

#: The JSONL format of a profile line in a knowledge export (trial lines have their own).
PROFILE_FORMAT = "slo-advisor-profile/1"


@dataclass(frozen=True)
class HardwareProfile:
    """One calibration: the machine, the engine, the model shape, the fitted step model, its
    measured error and the probe it came from. Plain data: it round-trips through JSON."""

    target: str
    model: str
    hardware_key: str
    gpu_name: str
    gpu_memory_mib: float
    driver: str
    engine_versions: Mapping[str, str]
    model_shape: Mapping[str, Any]
    config: Mapping[str, Any]
    slots: int
    token_budget: int
    fixed_ms: float
    per_sequence_ms: float
    per_prefill_token_ms: float
    frontend_token_ms: float
    offsets_ms: Mapping[str, float]
    #: Per metric: the calibration's own error, the RMS of the log ratio predicted / measured
    #: over the probe windows each predicted by a model fitted without it.
    error_log: Mapping[str, float]
    #: Per metric: window-to-window noise (standard deviation of the log figure between
    #: repeated windows of one config and rate) the intervals are widened by, and its source.
    noise_log: Mapping[str, float]
    noise_source: str
    #: The probe's raw windows (:func:`advisor.calibrate` writes them; the fit reads them back).
    probe: tuple[Mapping[str, Any], ...]
    probe_seconds: float | None = None
    uid: str = field(default_factory=lambda: uuid.uuid4().hex)
    created_at: str = field(default_factory=lambda: utcnow().isoformat())

    @property
    def hardware(self) -> str:
        """The short GPU name users type (``h100``, ``h200``): the last word of the GPU's
        name, lower case (``NVIDIA H100 80GB HBM3`` -> ``h100``)."""
        words = [w for w in self.gpu_name.lower().replace("-", " ").split()
                 if any(c.isdigit() for c in w) and any(c.isalpha() for c in w)
                 and not w.endswith("gb")]
        return words[0] if words else self.hardware_key

    @property
    def name(self) -> str:
        return f"{self.hardware}/{self.target}/{self.model}"

    def batch_model(self) -> BatchModel:
        """The simulator's model this profile pinned."""
        from knowledge.batch_sim import BatchModel, Frontend, StepModel

        return BatchModel(StepModel(self.fixed_ms, self.per_sequence_ms,
                                    self.per_prefill_token_ms),
                          dict(self.offsets_ms), Frontend(self.frontend_token_ms))

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["probe"] = list(self.probe)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HardwareProfile:
        known = set(cls.__dataclass_fields__)
        missing = [k for k, f in cls.__dataclass_fields__.items()
                   if k not in data and f.default is f.default_factory is None]
        values = {k: v for k, v in data.items() if k in known}
        try:
            values["probe"] = tuple(values.get("probe") or ())
            return cls(**values)
        except TypeError as exc:
            raise StoreError(f"not a hardware profile ({exc}; missing: {missing})") from None


class HardwareProfileRecord(SQLModel, table=True):
    """A stored profile: its identity columns for lookups, the whole profile as a document."""

    __tablename__ = "advisor_hardware_profile"

    id: int | None = Field(default=None, primary_key=True)
    uid: str = Field(index=True, unique=True, max_length=32)
    target: str = Field(index=True, max_length=64)
    model: str = Field(index=True, max_length=200)
    hardware: str = Field(index=True, max_length=64)
    hardware_key: str = Field(max_length=200)
    document: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)


def _ensure_table(store: TrialStore) -> None:
    """Create the profile table where the store lacks it (a store an older release made)."""
    HardwareProfileRecord.__table__.create(store.engine, checkfirst=True)  # type: ignore[attr-defined]


def _record(profile: HardwareProfile) -> HardwareProfileRecord:
    return HardwareProfileRecord(uid=profile.uid, target=profile.target, model=profile.model,
                                 hardware=profile.hardware, hardware_key=profile.hardware_key,
                                 document=profile.to_json())


def save_profile(store: TrialStore, profile: HardwareProfile) -> bool:
    """Store ``profile``; False where one with its ``uid`` is there already (nothing changes)."""
    _ensure_table(store)
    with store.session() as s:
        if _present(s, profile.uid):
            return False
        s.add(_record(profile))
        s.commit()
    return True


def _present(s: Session, uid: str) -> bool:
    return s.exec(select(HardwareProfileRecord).where(
        HardwareProfileRecord.uid == uid)).first() is not None


def calibrated_at(profile: HardwareProfile) -> datetime:
    """When ``profile``'s calibration ran (its own ``created_at``, UTC; a date alone reads as
    its midnight; an unreadable one as the earliest time), not when a store received it."""
    try:
        when = datetime.fromisoformat(str(profile.created_at).replace("Z", "+00:00"))
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def list_profiles(store: TrialStore, *, target: str | None = None, model: str | None = None,
                  hardware: str | None = None) -> list[HardwareProfile]:
    """The stored profiles matching the filters, oldest calibration first (:func:`calibrated_at`;
    profiles calibrated at one time in the order stored). A store imports its knowledge files
    in name order, so the time a profile was stored says nothing of which is newer."""
    _ensure_table(store)
    with store.session() as s:
        q = select(HardwareProfileRecord)
        if target is not None:
            q = q.where(HardwareProfileRecord.target == target)
        if model is not None:
            q = q.where(HardwareProfileRecord.model == model)
        if hardware is not None:
            q = q.where(HardwareProfileRecord.hardware == hardware.lower())
        rows = s.exec(q.order_by(HardwareProfileRecord.created_at,  # type: ignore[arg-type]
                                 HardwareProfileRecord.id)).all()  # type: ignore[arg-type]
        profiles = [HardwareProfile.from_json(r.document) for r in rows]
    return sorted(profiles, key=calibrated_at)  # stable: stored order among equal times


def profiles_version(store: TrialStore) -> tuple[int, int]:
    """The stored profiles' count and newest id (one aggregate query): profiles are only ever
    added (:func:`save_profile` and the imports skip a ``uid`` present), so this pair changes
    whenever :func:`list_profiles` could answer differently, and a caller may keep what it read
    for as long as the pair holds."""
    _ensure_table(store)
    with store.session() as s:
        count, newest = s.exec(select(func.count(), func.max(HardwareProfileRecord.id))).one()
    return int(count or 0), int(newest or 0)


def find_profile(store: TrialStore, *, target: str, model: str, hardware: str
                 ) -> HardwareProfile | None:
    """The newest profile of ``target`` serving ``model`` on ``hardware`` (``h100``), or None."""
    found = list_profiles(store, target=target, model=model, hardware=hardware)
    return found[-1] if found else None


def profile_line(profile: HardwareProfile) -> str:
    """``profile`` as one JSONL line of a knowledge export (no newline)."""
    return json.dumps({"format": PROFILE_FORMAT, "profile": profile.to_json()}, sort_keys=True)


def export_profile_lines(store: TrialStore, *, target: str | None = None) -> Iterator[str]:
    """One JSONL line per stored profile (of ``target``, where given)."""
    for profile in list_profiles(store, target=target):
        yield profile_line(profile)


def is_profile_row(row: Mapping[str, Any]) -> bool:
    """Whether a parsed JSONL row of a knowledge file is a profile line."""
    return row.get("format") == PROFILE_FORMAT


def import_profile_rows(store: TrialStore, rows: Iterable[Mapping[str, Any]], *,
                        source: str = "<stdin>") -> tuple[int, int]:
    """Store the profiles of ``rows`` (profile lines), skipping those present by ``uid``;
    returns (imported, skipped). Every row is checked before any is written."""
    profiles = []
    for number, row in enumerate(rows, 1):
        data = row.get("profile")
        if not isinstance(data, Mapping):
            raise StoreError(f"{source}: profile line {number} holds no profile")
        try:
            profiles.append(HardwareProfile.from_json(data))
        except StoreError as exc:
            raise StoreError(f"{source}: profile line {number}: {exc}") from None
    _ensure_table(store)
    imported = skipped = 0
    with store.session() as s:
        for profile in profiles:
            if _present(s, profile.uid):
                skipped += 1
                continue
            s.add(_record(profile))
            imported += 1
        s.commit()
    return imported, skipped

"""The one builder of a new trial row: what every trial records before it runs (its config and
the config's hash, the workload, the hardware fingerprint and its key, this advisor's version)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from advisor import __version__
from knowledge import TrialRecord
from objectives.workload import Workload, canonical_json

__all__ = ["config_hash", "new_trial_record"]


def config_hash(config: Mapping[str, Any]) -> str:
    """A short, stable hash of a config (its canonical JSON), stored and indexed with a trial."""
    return hashlib.sha256(canonical_json(dict(config)).encode()).hexdigest()[:16]


def new_trial_record(*, study_id: int, number: int, optuna_trial_id: int | None, target: str,
                     config: Mapping[str, Any], workload: Workload,
                     hardware: Mapping[str, Any], details: Mapping[str, Any],
                     swept_from: int | None = None) -> TrialRecord:
    """A new trial row of study ``study_id`` (not yet stored: ``TrialStore.start_trial`` or
    ``claim_trial`` stores it running)."""
    return TrialRecord(
        study_id=study_id, number=number, optuna_trial_id=optuna_trial_id, target=target,
        config=dict(config), config_hash=config_hash(config), workload_spec=workload.spec,
        workload_hash=workload.spec_hash, hardware=dict(hardware),
        hardware_key=str(hardware["key"]), advisor_version=__version__, details=dict(details),
        swept_from=swept_from)

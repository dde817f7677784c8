"""The one builder of a new trial row: what every trial records before it runs (its config and
the config's hash, the workload, the hardware fingerprint and its key, this advisor's version)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from advisor import __version__
from advisor.errors import UnknownTargetError
from knowledge import TrialRecord
from objectives.hardware import filed_under
from objectives.registry import target_class
from objectives.workload import Workload, canonical_json

__all__ = ["FRESH_BUILD", "config_hash", "new_trial_record", "trial_hardware_key"]

#: Trial detail set on a trial whose build was made for it (not read from a build cache); read by
#: advisor/answers/headroom.py. Here, not there, so running a study loads no answer planner.
FRESH_BUILD = "fresh_build"


def config_hash(config: Mapping[str, Any]) -> str:
    """A short, stable hash of a config (its canonical JSON), stored and indexed with a trial."""
    return hashlib.sha256(canonical_json(dict(config)).encode()).hexdigest()[:16]


def trial_hardware_key(target: str, hardware: Mapping[str, Any]) -> str:
    """The hardware key trials of ``target`` measured on ``hardware`` (a fingerprint) are
    filed under: the machine's, or the CPU's alone for a target that declares it runs on the
    CPU only (objectives/hardware.py ``filed_under``). A target the registry does not know
    keeps the machine's key."""
    try:
        uses_accelerator = target_class(target).uses_accelerator
    except UnknownTargetError:
        uses_accelerator = True
    return filed_under(hardware, uses_accelerator=uses_accelerator)


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
        hardware_key=trial_hardware_key(target, hardware), advisor_version=__version__,
        details=dict(details),
        swept_from=swept_from)

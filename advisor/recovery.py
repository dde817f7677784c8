"""Recovery, written once: find the trials a dead process left ``running``, mark them
``interrupted``, tell Optuna and re-queue their configs, so no reader sees a trial "running"
forever and no asked-for config is lost.

Used by the study driver (``resume``, ``recover``; a co-measured study's half-written trial), the
Ray Tune path (a trial closed by a recovery before Tune restored it, a trial whose Ray worker
died), the job worker (a job whose process died) and the job process itself (a cancel).
Whoever calls :func:`recover_study` holds the study's lease (knowledge/leases.py), so recovery
never touches a live driver's trial.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING

from advisor.errors import StudyError
from knowledge import StudyRecord, TrialRecord, TrialStatus, TrialStore
from knowledge.jobs import pid_alive
from knowledge.models import StudyStatus, utcnow
from objectives import SLO

if TYPE_CHECKING:  # the job worker closes trials without importing optuna
    import optuna

    from advisor.optuna_bridge import OptunaBridge

__all__ = ["died_here", "fail_running", "interrupt", "is_abandoned", "leave_consistent",
           "recover_recording", "recover_study", "this_process"]

log = logging.getLogger(__name__)

#: Heartbeat intervals a trial on another host may miss before it counts as abandoned.
_MISSED_BEATS = 5


def interrupt(store: TrialStore, rec: TrialRecord, reason: str) -> TrialRecord:
    """Mark the running trial ``rec`` interrupted (it died with the process running it)."""
    return store.fail_trial(rec.id or 0, status=TrialStatus.INTERRUPTED,
                            error_type="interrupted", error=reason)


def is_abandoned(trial: TrialRecord, heartbeat_interval_s: float) -> bool:
    """Whether the running ``trial`` has no live process: on this host its process is gone (or
    is this one, which is not running it); elsewhere its heartbeat stopped."""
    if trial.host == socket.gethostname() and trial.pid is not None:
        return trial.pid == os.getpid() or not pid_alive(trial.pid)
    stale_after = timedelta(seconds=_MISSED_BEATS * heartbeat_interval_s)
    return utcnow() - trial.heartbeat_at > stale_after


def this_process(trial: TrialRecord) -> bool:
    """Whether this process ran ``trial`` (a job process closing its own trials)."""
    return trial.pid == os.getpid()


def died_here(trial: TrialRecord) -> bool:
    """Whether ``trial`` ran on this host in a process that is gone."""
    return (trial.host == socket.gethostname() and trial.pid is not None
            and not pid_alive(trial.pid))


def recover_study(store: TrialStore, bridge: OptunaBridge, ostudy: optuna.Study,
                  study: StudyRecord, slo: SLO, *, heartbeat_interval_s: float) -> None:
    """Reconcile the store and Optuna after a killed driver: a trial measured and stored but
    not told is told; any other asked trial is told failed, and its config re-queued when it
    never finished in the store; its store row becomes interrupted. Raises
    :class:`StudyError` when a trial of the study still runs in a live process."""
    records = {t.optuna_trial_id: t for t in store.trials_of_study(study.id or 0)}
    for stored in records.values():
        if stored.status == TrialStatus.RUNNING and not is_abandoned(stored,
                                                                     heartbeat_interval_s):
            raise StudyError(
                f"study {study.name!r} is still running elsewhere (trial {stored.number} on "
                f"{stored.host}, pid {stored.pid}); stop that driver first")
    for frozen in bridge.unfinished(ostudy):  # queued, never asked ones run in the loop
        rec = records.get(frozen._trial_id)
        if rec is not None and rec.status == TrialStatus.COMPLETE:
            # Killed after storing the measurement but before telling Optuna: tell it now.
            bridge.tell_complete(ostudy, frozen._trial_id, frozen.number, slo, rec.metrics,
                                 rec.objective_value)  # type: ignore[arg-type]
            continue
        bridge.tell_failed(ostudy, frozen.number)
        # Never measured: its config runs again (a row a dead job's worker already marked
        # interrupted included, leave_consistent).
        if rec is None or rec.status in (TrialStatus.RUNNING, TrialStatus.INTERRUPTED):
            bridge.requeue(ostudy, frozen.params, frozen.user_attrs, from_number=frozen.number)
        if rec is not None and rec.status == TrialStatus.RUNNING:
            interrupt(store, rec, f"the driver (pid {rec.pid} on {rec.host}) died while this "
                                  "trial ran; its config was re-queued on resume")
            log.warning("trial %s was interrupted; its config is re-queued", rec.number)
    # Store rows still running whose Optuna trial is already finished (a driver killed during
    # an earlier recovery, after failing the Optuna trial but before writing the store).
    for rec in store.trials_of_study(study.id or 0, [TrialStatus.RUNNING]):
        interrupt(store, rec, "the driver died while this trial ran")


def recover_recording(store: TrialStore, bridge: OptunaBridge, ostudy: optuna.Study,
                      study: StudyRecord) -> None:
    """A co-measured study's trials are written after their measurement, so a killed driver
    leaves at most one half-written; fail it (its config is re-queued in the leading study)."""
    for frozen in bridge.unfinished(ostudy):
        bridge.tell_failed(ostudy, frozen.number)
    for rec in store.trials_of_study(study.id or 0, [TrialStatus.RUNNING]):
        interrupt(store, rec, "the driver died while this trial was being recorded")


def leave_consistent(store: TrialStore, study_name: str, *,
                     owned: Callable[[TrialRecord], bool], reason: str,
                     only_when_idle: bool) -> None:
    """After the process running study ``study_name`` stopped or died: its running trials that
    ``owned`` picks become interrupted (``reason``), and the study interrupted if it still says
    running (with ``only_when_idle``, only once no trial of it runs anywhere), so no reader sees
    them "running" forever and ``advisor tune --resume`` continues it."""
    study = store.get_study(study_name)
    if study is None:
        return
    for rec in store.trials_of_study(study.id or 0, [TrialStatus.RUNNING]):
        if owned(rec):
            interrupt(store, rec, reason)
    if only_when_idle and store.trials_of_study(study.id or 0, [TrialStatus.RUNNING]):
        return
    current = store.get_study_by_id(study.id or 0)
    if current is not None and current.status == StudyStatus.RUNNING:
        store.set_study_status(study.id or 0, StudyStatus.INTERRUPTED)


def fail_running(store: TrialStore, study_name: str, number: int, *, error_type: str,
                 reason: str, status: str = TrialStatus.FAILED) -> TrialRecord | None:
    """Close trial ``number`` of study ``study_name`` if its row still says running (a Ray trial
    whose worker died; one a recovery closed in Optuna before Ray restored it); returns it."""
    study = store.get_study(study_name)
    rec = store.trial_by_number(study.id or 0, number) if study else None
    if rec is None or rec.status != TrialStatus.RUNNING:
        return None
    return store.fail_trial(rec.id or 0, status=status, error_type=error_type, error=reason)

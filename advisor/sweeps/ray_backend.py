"""Ray Tune backend: a cell's trials spread over a Ray cluster, one trial per GPU (or CPU slot).

Optuna stays the search algorithm, on the study in the project database, through Ray's
``OptunaSearch`` — wrapped, because the stock searcher tells Optuna only the objective value: the
SLO margins must reach the sampler as constraints (``trial.set_constraint``), failed trials must be
told as failed (the stock one reports a missing value as *pruned*), and the trial's identity
(number, Optuna id, role) must reach the Ray worker so it can claim and store the trial.

The trainable runs on a Ray worker: :meth:`StudyDriver.execute` claims the trial in the store,
runs it in an isolated child with heartbeats (a crash or hang fails only that trial) and stores
the outcome; the driver-side searcher tells Optuna. Ray restarts a trial whose worker died
(``FailureConfig.max_failures``); the store row is then restarted, not duplicated. A killed sweep
resumes its cell with ``Tuner.restore`` from the experiment directory.
"""

from __future__ import annotations

import logging
import os
import pickle
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from advisor.driver import StudyDriver
from advisor.errors import StudyError
from advisor.sampling import suggest_config
from advisor.settings import Settings
from advisor.sweeps.spec import RayOptions
from knowledge import TrialRecord, TrialStatus, TrialStore
from objectives.registry import get_target

__all__ = ["ConstrainedOptunaSearch", "RayBackend", "advisor_trainable"]

log = logging.getLogger(__name__)

# Failed trials report no objective: Tune must accept a result without the metric. Tune's own
# console tables and result loggers are off: the sweep draws its progress from the store.
os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")

from ray import tune  # noqa: E402  (after the environment above)
from ray.tune.search.optuna import OptunaSearch  # noqa: E402

_METRIC = "objective"


class _Space:
    """Define-by-run space of a target (picklable, unlike a lambda: Tune checkpoints it)."""

    def __init__(self, target: str) -> None:
        self.target = target

    def __call__(self, trial: optuna.Trial) -> dict[str, Any]:
        return suggest_config(trial, get_target(self.target).space())


class ConstrainedOptunaSearch(OptunaSearch):
    """Ray's OptunaSearch on an existing study, with SLO constraints and failures told right."""

    def __init__(self, *, study_name: str, db_url: str, target: str, direction: str,
                 sampler: optuna.samplers.BaseSampler, settings: dict[str, Any]) -> None:
        from advisor.driver import optuna_storage

        super().__init__(space=_Space(target), metric=_METRIC,
                         mode="max" if direction == "maximize" else "min", sampler=sampler,
                         study_name=study_name, storage=optuna_storage(db_url))
        self.study_name, self.db_url, self.settings = study_name, db_url, settings

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        params = super().suggest(trial_id)
        if params is None:
            return None
        ot = self._ot_trials[trial_id]
        details: dict[str, Any] = {"ray_trial_id": trial_id}
        for key, value in ot.user_attrs.items():
            if key == "advisor_role":
                details["role"] = value
            elif key.startswith("advisor_"):
                details[key.removeprefix("advisor_")] = value
        return {"knobs": params, "advisor": {
            "study": self.study_name, "number": ot.number, "optuna_trial_id": ot._trial_id,
            "details": details, "settings": self.settings}}

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        pass  # one final result per trial: nothing to report as an intermediate value

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None,
                          error: bool = False) -> None:
        if trial_id in self._completed_trials or trial_id not in self._ot_trials:
            return
        ot, study = self._ot_trials[trial_id], self._study()
        value = (result or {}).get(_METRIC)
        if result and result.get("status") == TrialStatus.COMPLETE and value is not None:
            for name, margin in (result.get("margins") or {}).items():
                ot.set_constraint(name, float(margin))
            study.tell(ot, float(value))
        else:
            study.tell(ot, state=TrialState.FAIL)
            if error:
                self._fail_stored(ot.number, "the Ray trial errored (its worker died or could "
                                             "not start it) after the retries FailureConfig "
                                             "allows")
        self._completed_trials.add(trial_id)

    def _fail_stored(self, number: int, reason: str) -> None:
        store = TrialStore(self.db_url)
        try:
            study = store.get_study(self.study_name)
            rec = store.trial_by_number(study.id or 0, number) if study else None
            if rec is not None and rec.status == TrialStatus.RUNNING:
                store.fail_trial(rec.id or 0, error_type="worker_crash", error=reason)
        finally:
            store.close()

    # Tune checkpoints the searcher; the Optuna study lives in the database, so only the map
    # from Tune trial ids to Optuna trials is saved, and the study is reopened on restore.
    def save(self, checkpoint_path: str) -> None:
        state = {"trials": {tid: t._trial_id for tid, t in self._ot_trials.items()},
                 "completed": set(self._completed_trials)}
        with open(checkpoint_path, "wb") as f:
            pickle.dump(state, f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            state = pickle.load(f)
        self._ot_trials = {tid: optuna.trial.Trial(self._study(), otid)
                           for tid, otid in state["trials"].items()}
        self._completed_trials = set(state["completed"])

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_ot_trials"] = {tid: t._trial_id for tid, t in self._ot_trials.items()}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._ot_trials = {tid: optuna.trial.Trial(self._study(), otid)
                           for tid, otid in state["_ot_trials"].items()}

    def _study(self) -> optuna.Study:
        assert self._ot_study is not None, "the study is set up in __init__"
        return self._ot_study


def advisor_trainable(config: dict[str, Any]) -> dict[str, Any]:
    """One trial on a Ray worker: claim, run isolated, store; return what the searcher tells."""
    meta = config["advisor"]
    settings = Settings(**meta["settings"])
    store = TrialStore(settings.db_url)
    try:
        rec = StudyDriver(store, settings).execute(
            meta["study"], number=int(meta["number"]),
            optuna_trial_id=int(meta["optuna_trial_id"]), config=config["knobs"],
            details=meta["details"])
        return _result(store, rec)
    finally:
        store.close()


def _result(store: TrialStore, rec: TrialRecord) -> dict[str, Any]:
    margins = {f"{m.metric}{m.op}{m.threshold:g}": m.margin for m in store.margins(rec.id or 0)}
    return {_METRIC: rec.objective_value, "status": rec.status, "margins": margins,
            "trial_id": rec.id, "error": rec.error}


class RayBackend:
    """Runs a study's remaining budget as a Ray Tune experiment."""

    name = "ray"

    def __init__(self, store: TrialStore, settings: Settings, *, concurrency: int,
                 options: RayOptions, storage_dir: Path | None = None) -> None:
        self.store, self.settings = store, settings
        self.concurrency, self.options = concurrency, options
        self.storage_dir = storage_dir or settings.cache_dir / "ray-tune"
        self._started = False

    def _init(self) -> None:
        import ray

        if ray.is_initialized():
            return
        ray.init(address=self.options.address, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.WARNING)
        self._started = True

    def close(self) -> None:
        import ray

        if self._started and ray.is_initialized():
            ray.shutdown()

    def run_study(self, study_name: str,
                  on_trial: Callable[[TrialRecord], None] | None = None) -> None:
        self._init()
        driver = StudyDriver(self.store, self.settings)
        spec, study, ostudy = driver.shared_study(study_name)
        taken = self.store.count_trials(study.id or 0, [*TrialStatus.FINISHED,
                                                        TrialStatus.RUNNING])
        remaining = study.n_trials - taken
        # One experiment per budget extension (the repeats run as a second one).
        name = f"{study_name.replace('/', '_').replace('@', '_')}-{study.n_trials}"
        path = self.storage_dir / name
        trainable = tune.with_resources(advisor_trainable, {
            "cpu": self.options.cpus_per_trial, "gpu": self.options.gpus_per_trial})
        seen = {t.id for t in self.store.trials_of_study(study.id or 0)
                if t.status != TrialStatus.RUNNING}
        if tune.Tuner.can_restore(str(path)):
            log.info("restoring the Tune experiment %s", path)
            tuner = tune.Tuner.restore(str(path), trainable=trainable, resume_unfinished=True,
                                       resume_errored=False, restart_errored=False)
        else:
            if remaining <= 0:
                return
            searcher = ConstrainedOptunaSearch(
                study_name=study_name, db_url=self.store.url, target=spec.target,
                direction=spec.objective.direction, sampler=ostudy.sampler,
                settings={"db_url": self.settings.db_url,
                          "cache_dir": str(self.settings.cache_dir),
                          "trial_timeout_s": self.settings.trial_timeout_s,
                          "trial_memory_limit_mb": self.settings.trial_memory_limit_mb,
                          "heartbeat_interval_s": self.settings.heartbeat_interval_s,
                          "import_shipped": False})
            tuner = tune.Tuner(
                trainable,
                tune_config=tune.TuneConfig(search_alg=searcher, num_samples=remaining,
                                            max_concurrent_trials=self.concurrency),
                run_config=tune.RunConfig(
                    name=name, storage_path=str(self.storage_dir), verbose=0,
                    failure_config=tune.FailureConfig(max_failures=self.options.max_failures)))
        stop = threading.Event()

        def scan() -> None:
            for t in self.store.trials_of_study(study.id or 0):
                if t.status != TrialStatus.RUNNING and t.id not in seen:
                    seen.add(t.id)
                    if on_trial is not None:
                        on_trial(t)

        def report() -> None:  # progress from the store, as the local backend draws it
            while not stop.wait(2.0):
                scan()
            scan()

        poller = threading.Thread(target=report, name="sweep-progress", daemon=True)
        poller.start()
        try:
            tuner.fit()
        except Exception as exc:  # Tune's own errors (not a trial's): name them, keep the store
            raise StudyError(f"Ray Tune failed on study {study_name!r}: {exc}") from exc
        finally:
            stop.set()
            poller.join()

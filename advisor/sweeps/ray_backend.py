"""Ray Tune backend: a cell's trials spread over a Ray cluster, one trial per GPU (or CPU slot).

Optuna stays the search algorithm, on the study in the project database, through Ray's
``OptunaSearch`` — wrapped, because the stock searcher tells Optuna only the objective value: the
SLO margins must reach the sampler as constraints, failed trials must be told as failed (the stock
one reports a missing value as *pruned*), and the trial's identity (number, Optuna id, role) must
reach the Ray worker so it can claim and store the trial. The searcher tells each trial through
:class:`OptunaBridge`, exactly as the in-process driver does.

The trainable runs on a Ray worker: :meth:`StudyDriver.execute` claims the trial in the store,
runs it in an isolated child with heartbeats (a crash or hang fails only that trial) and stores
the outcome; the driver-side searcher tells Optuna. Ray restarts a trial whose worker died
(``FailureConfig.max_failures``); the store row is then restarted, not duplicated. A killed sweep
resumes its cell with ``Tuner.restore`` from the experiment directory.
"""

from __future__ import annotations

import logging
import math
import os
import pickle
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna

from advisor import recovery
from advisor.driver import StudyDriver, failure_streak
from advisor.errors import StudyError
from advisor.optuna_bridge import OptunaBridge, optuna_storage, trial_details
from advisor.sampling import suggest_config
from advisor.settings import Settings
from advisor.sweeps.spec import RayOptions
from knowledge import TrialRecord, TrialStatus, TrialStore
from objectives import parse_slo
from objectives.hardware import hardware_key_with_gpus
from objectives.registry import get_target

__all__ = ["ConstrainedOptunaSearch", "RayBackend", "advisor_trainable"]

log = logging.getLogger(__name__)

# Failed trials report no objective: Tune must accept a result without the metric. Tune's own
# console tables and result loggers are off: the sweep draws its progress from the store.
os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")

from ray import tune  # noqa: E402  (after the environment above)
from ray.tune.search import Searcher  # noqa: E402
from ray.tune.search.optuna import OptunaSearch  # noqa: E402

_METRIC = "objective"
#: Experiments one cell may take to fill its budget (a restored one, then ones for the slots its
#: interrupted trials left open).
_MAX_EXPERIMENTS = 4


class _Space:
    """Define-by-run space of a target (picklable, unlike a lambda: Tune checkpoints it)."""

    def __init__(self, target: str) -> None:
        self.target = target

    def __call__(self, trial: optuna.Trial) -> dict[str, Any]:
        return suggest_config(trial, get_target(self.target).space())


class ConstrainedOptunaSearch(OptunaSearch):
    """Ray's OptunaSearch on an existing study, with SLO constraints and failures told right."""

    def __init__(self, *, study_name: str, db_url: str, target: str, direction: str, slo: str,
                 sampler: optuna.samplers.BaseSampler, settings: dict[str, Any]) -> None:
        super().__init__(space=_Space(target), metric=_METRIC,
                         mode="max" if direction == "maximize" else "min", sampler=sampler,
                         study_name=study_name, storage=optuna_storage(db_url))
        self.study_name, self.db_url, self.settings = study_name, db_url, settings
        self.slo = slo  # the study's SLO, whose margins are told as constraints
        self._store: TrialStore | None = None

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        if self._budget_taken():
            # A restored experiment counts trials in the state its killed driver saved last; the
            # store knows how many the study has run. (Workers claim slots too: this only
            # saves asking Optuna for trials that would be turned away.)
            return Searcher.FINISHED  # type: ignore[return-value]  # Ray's own sentinel, a str
        params = super().suggest(trial_id)
        if params is None:
            return None
        ot = self._ot_trials[trial_id]
        details: dict[str, Any] = {"ray_trial_id": trial_id, **trial_details(ot.user_attrs)}
        return {"knobs": params, "advisor": {
            "study": self.study_name, "number": ot.number, "optuna_trial_id": ot._trial_id,
            "details": details, "settings": self.settings}}

    def _trial_store(self) -> TrialStore:
        if getattr(self, "_store", None) is None:  # also a searcher unpickled from a checkpoint
            self._store = TrialStore(self.db_url)
        assert self._store is not None
        return self._store

    def _budget_taken(self) -> bool:
        store = self._trial_store()
        study = store.get_study(self.study_name)
        if study is None:
            return False
        taken = store.count_trials(study.id or 0, [*TrialStatus.FINISHED, TrialStatus.RUNNING])
        return taken >= study.n_trials

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        pass  # one final result per trial: nothing to report as an intermediate value

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None,
                          error: bool = False) -> None:
        if trial_id in self._completed_trials or trial_id not in self._ot_trials:
            return
        ot, study = self._ot_trials[trial_id], self._study()
        rec = None
        if result and result.get("status") == TrialStatus.COMPLETE \
                and result.get(_METRIC) is not None:
            # Told from the stored trial, as the driver tells it (Tune puts its own trial id
            # in every result: the store finds the trial by its number).
            store = self._trial_store()
            stored_study = store.get_study(self.study_name)
            rec = (store.trial_by_number(stored_study.id or 0, ot.number)
                   if stored_study is not None else None)
        try:
            OptunaBridge.tell_stored(study, ot._trial_id, ot.number, parse_slo(self.slo), rec)
        except (ValueError, RuntimeError) as exc:
            # Already told: a sweep's recovery failed this trial after a kill, before Tune
            # restored it.
            log.info("trial %s was already finished in Optuna: %s", ot.number, exc)
            if error:
                recovery.fail_running(
                    self._trial_store(), self.study_name, ot.number, error_type="worker_crash",
                    reason="the Ray trial errored (its worker died or could not start it) "
                           "after the retries FailureConfig allows")
        self._completed_trials.add(trial_id)

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
        state["_store"] = None  # a database connection is not state
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._ot_trials = {tid: optuna.trial.Trial(self._study(), otid)
                           for tid, otid in state["_ot_trials"].items()}
        # Tuner.restore unpickles the sampler as it was saved: a fresh random state keeps it
        # from proposing the configs it proposed before the kill all over again.
        self._study().sampler.reseed_rng()

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
        if rec is None:  # closed by a recovery before it ran, or the budget is taken
            return {_METRIC: None, "status": "skipped", "margins": {}, "trial_id": None,
                    "error": None}
        return _result(store, rec)
    finally:
        store.close()


def _result(store: TrialStore, rec: TrialRecord) -> dict[str, Any]:
    margins = {f"{m.metric}{m.op}{m.threshold:g}": m.margin for m in store.margins(rec.id or 0)}
    return {_METRIC: rec.objective_value, "status": rec.status, "margins": margins,
            "trial_id": rec.id, "error": rec.error}


class _StopWhenFailing(tune.Stopper):
    """Stops the experiment once the study's last ``limit`` finished trials all failed (a cell
    that keeps failing is reported, not run to the end of its budget)."""

    def __init__(self, db_url: str, study_id: int, limit: int | None) -> None:
        self.db_url, self.study_id, self.limit = db_url, study_id, limit
        self._store: TrialStore | None = None

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return False

    def stop_all(self) -> bool:
        if self.limit is None:
            return False
        if self._store is None:
            self._store = TrialStore(self.db_url)
        return failure_streak(self._store, self.study_id) >= self.limit

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_store": None}


class RayBackend:
    """Runs a study's remaining budget as a Ray Tune experiment."""

    name = "ray"

    def __init__(self, store: TrialStore, settings: Settings, *, concurrency: int,
                 options: RayOptions, max_consecutive_failures: int | None = None,
                 storage_dir: Path | None = None) -> None:
        self.store, self.settings = store, settings
        self.max_consecutive_failures = max_consecutive_failures
        self.concurrency, self.options = concurrency, options
        self.storage_dir = storage_dir or settings.cache_dir / "ray-tune"
        self._started = False

    def _init(self) -> None:
        import ray

        if ray.is_initialized():
            return
        # ray.init installs its own SIGTERM handler; keep ours, which stops the sweep cleanly
        # (trials recorded as interrupted) instead of dying with a native stack dump.
        previous = (signal.getsignal(signal.SIGTERM)
                    if threading.current_thread() is threading.main_thread() else None)
        # Ray workers do not inherit this process's environment: the advisor's settings and
        # plugin targets (ADVISOR_*) travel in the job's runtime environment.
        # Plugin targets must import there too: this checkout goes first on their path (on a
        # single machine that is enough; on other nodes they must be installed).
        env = {k: v for k, v in os.environ.items() if k.startswith("ADVISOR_")}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (os.getcwd(),
                                                        os.environ.get("PYTHONPATH")) if p)
        ray.init(address=self.options.address, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.WARNING, runtime_env={"env_vars": env})
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        self._started = True

    def trial_hardware_key(self) -> str:
        """The hardware one trial runs on: ``gpus_per_trial`` GPUs of this machine's kind (Ray
        narrows ``CUDA_VISIBLE_DEVICES`` to them), or the CPU when it asks for none."""
        return hardware_key_with_gpus(math.ceil(self.options.gpus_per_trial))

    def close(self) -> None:
        import ray

        if self._started and ray.is_initialized():
            ray.shutdown()

    def run_study(self, study_name: str,
                  on_trial: Callable[[TrialRecord], None] | None = None) -> None:
        """Run the study's remaining budget as Tune experiments: an unfinished experiment of a
        killed sweep is resumed with ``Tuner.restore``; trials the recovery failed as interrupted
        left slots open, which a further experiment fills."""
        self._init()
        study = self.store.get_study(study_name)
        if study is None:
            raise StudyError(f"no study named {study_name!r}")
        seen = {t.id for t in self.store.trials_of_study(study.id or 0)
                if t.status != TrialStatus.RUNNING}
        base = f"{study_name.replace('/', '_').replace('@', '_')}-{study.n_trials}"
        for attempt in range(_MAX_EXPERIMENTS):
            study = self.store.get_study(study_name) or study
            taken = self.store.count_trials(study.id or 0, [*TrialStatus.FINISHED,
                                                            TrialStatus.RUNNING])
            path = self.storage_dir / f"{base}-{attempt}"
            restorable = tune.Tuner.can_restore(str(path))
            if restorable and taken < study.n_trials:
                log.info("restoring the Tune experiment %s", path)
                tuner = tune.Tuner.restore(str(path), trainable=self._trainable(),
                                           resume_unfinished=True, resume_errored=False,
                                           restart_errored=False)
            elif restorable:
                continue  # a finished experiment of an earlier run of this code path
            elif taken >= study.n_trials or (
                    self.max_consecutive_failures is not None
                    and failure_streak(self.store, study.id or 0)
                    >= self.max_consecutive_failures):
                return
            else:
                tuner = self._new_tuner(study_name, path.name, study.n_trials - taken)
            self._fit(tuner, study_name, study.id or 0, seen, on_trial)
        log.warning("study %s: budget still open after %d Tune experiments", study_name,
                    _MAX_EXPERIMENTS)

    def _trainable(self) -> Any:
        return tune.with_resources(advisor_trainable, {
            "cpu": self.options.cpus_per_trial, "gpu": self.options.gpus_per_trial})

    def _new_tuner(self, study_name: str, name: str, samples: int) -> tune.Tuner:
        driver = StudyDriver(self.store, self.settings)
        spec, study, ostudy = driver.shared_study(study_name)
        searcher = ConstrainedOptunaSearch(
            study_name=study_name, db_url=self.store.url, target=spec.target,
            direction=spec.objective.direction, slo=str(spec.slo), sampler=ostudy.sampler,
            settings={"db_url": self.settings.db_url,
                      "cache_dir": str(self.settings.cache_dir),
                      "trial_timeout_s": self.settings.trial_timeout_s,
                      "trial_memory_limit_mb": self.settings.trial_memory_limit_mb,
                      "heartbeat_interval_s": self.settings.heartbeat_interval_s,
                      "import_shipped": False})
        return tune.Tuner(
            self._trainable(),
            tune_config=tune.TuneConfig(search_alg=searcher, num_samples=samples,
                                        max_concurrent_trials=self.concurrency),
            run_config=tune.RunConfig(
                name=name, storage_path=str(self.storage_dir), verbose=0,
                stop=_StopWhenFailing(self.store.url, study.id or 0,
                                      self.max_consecutive_failures),
                failure_config=tune.FailureConfig(max_failures=self.options.max_failures)))

    def _fit(self, tuner: tune.Tuner, study_name: str, study_id: int, seen: set[int | None],
             on_trial: Callable[[TrialRecord], None] | None) -> None:
        stop = threading.Event()

        def scan() -> None:
            for t in self.store.trials_of_study(study_id):
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

"""Fitted surrogate models for a whole store, their freshness key, and their on-disk cache.

A long-running server holds one :class:`ModelCache` and calls :meth:`ModelCache.get` per request:
that costs one aggregate query (count and newest id of measured trials) and refits only when the
store has changed. ``advisor knowledge fit`` writes the fitted set (with its cross-validated
scores) to the cache directory, so a later ``advisor recommend`` only loads it. A fresh store of
the shipped knowledge loads the models shipped beside it (:mod:`knowledge.shipped_models`)
instead of fitting them.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import inspect
import logging
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import func
from sqlmodel import select

from knowledge.models import ImportRecord, TrialRecord, TrialStatus
from knowledge.shipped_models import (
    ShippedKey,
    library_versions,
    read_shipped,
    shipped_content,
    source_digest,
)
from knowledge.store import TrialFilter, TrialStore
from knowledge.surrogates import (
    DEFAULT_FAMILY,
    ContextKey,
    ContextModels,
    context_of,
    fit_context,
)

__all__ = ["CACHE_FORMAT", "DataKey", "KnowledgeModels", "ModelCache", "content_key", "data_key",
           "fit_code_version", "shipped_models_key"]

log = logging.getLogger(__name__)
#: Bump whenever a pickled class changes shape (3: noise_sd_; 4: work features, family slopes;
#: 5: the HNSW queue work term and the fitted cost law; 6: per-config load curves; 7: curve
#: identity without unvaried knobs, latencies always curved; 8: the curves' held-out-rate error;
#: 9: the knob-level model of the curves; 10: the curves' blend with a simulator; 11: the
#: blend's scores as a BlendScore; 12: the LLM simulator's measured batch limits; 13: no MAPE
#: for a metric measured at zero, coverage with latencies bounded below the measured rates;
#: 14: the surrogate classes moved into the knowledge/surrogates/ package).
CACHE_FORMAT = 14
#: A context needs at least this many measured trials to get models.
MIN_TRIALS = 4


@dataclass(frozen=True)
class DataKey:
    """What the models were fitted on: measured-trial count and the newest trial id."""

    trials: int
    newest_id: int


#: Contexts are fitted in child processes when there are several and this process may use
#: several cores (``ADVISOR_FIT_PROCESSES`` caps the processes; 1 fits everything here).
FIT_PROCESSES_ENV = "ADVISOR_FIT_PROCESSES"
#: One context's fit: its key, its complete trials, the family, whether to score, its failed
#: trials and the study names (what :func:`knowledge.surrogates.fit_context` takes).
FitJob = tuple[ContextKey, list[TrialRecord], str, bool, list[TrialRecord], dict[int, str]]


def fit_job(job: FitJob) -> ContextModels:
    ctx, rows, family, score, failed, names = job
    return fit_context(ctx, rows, family=family, score=score, failed=failed, study_names=names)


def fit_processes(n_jobs: int) -> int:
    """How many processes fit ``n_jobs`` contexts: the usable cores (or
    ``ADVISOR_FIT_PROCESSES``), at most one per context."""
    raw = os.environ.get(FIT_PROCESSES_ENV, "")
    try:
        cap = int(raw) if raw else len(os.sched_getaffinity(0))
    except ValueError:
        cap = 1
    return max(1, min(cap, n_jobs))


def share_out(sizes: list[int], bins: int) -> list[list[int]]:
    """Job indices split into ``bins`` shares of about equal total size, largest job first (each
    goes to the least loaded share); the first share holds the largest job."""
    shares: list[list[int]] = [[] for _ in range(bins)]
    loads = [0] * bins
    for i in sorted(range(len(sizes)), key=lambda j: -sizes[j]):
        least = loads.index(min(loads))
        shares[least].append(i)
        loads[least] += sizes[i]
    return shares


def _child_path() -> str:
    """Where a fitting child runs and what it puts first on its path: the directory holding this
    package, so it imports the same code as this process (``-m`` puts the working directory
    first, which must not be wherever the caller happens to run)."""
    return str(Path(__file__).resolve().parent.parent)


def _fit_all(jobs: list[FitJob]) -> list[ContextModels]:
    """Every job's fit, in order. Contexts are independent and the biggest takes most of a fit's
    time, so with several cores this process fits the share holding the biggest while child
    processes (:mod:`knowledge.fit_worker`) fit the others at the same time. A child that fails
    is logged and its share fitted here: a fit never fails for want of a process."""
    processes = fit_processes(len(jobs))
    if processes <= 1:
        return [fit_job(job) for job in jobs]
    shares = share_out([len(job[1]) + len(job[4]) for job in jobs], processes)
    results: dict[int, ContextModels] = {}
    with tempfile.TemporaryDirectory(prefix="advisor-fit-") as tmp:
        children: list[tuple[list[int], Path, subprocess.Popen[bytes]]] = []
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            filter(None, [_child_path(), os.environ.get("PYTHONPATH")])), FIT_PROCESSES_ENV: "1"}
        for n, share in enumerate(shares[1:], start=1):
            if not share:
                continue
            jobs_path, out_path = Path(tmp) / f"jobs-{n}.pkl", Path(tmp) / f"out-{n}.pkl"
            jobs_path.write_bytes(pickle.dumps([jobs[i] for i in share],
                                               protocol=pickle.HIGHEST_PROTOCOL))
            try:
                child = subprocess.Popen(
                    [sys.executable, "-m", "knowledge.fit_worker", str(jobs_path), str(out_path)],
                    env=env, cwd=_child_path(), stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE)
            except OSError as exc:
                log.warning("cannot start a fitting process (%s): fitting here", exc)
                shares[0] += share
                continue
            children.append((share, out_path, child))
        for i in shares[0]:
            results[i] = fit_job(jobs[i])
        for share, out_path, child in children:
            _, err = child.communicate()
            if child.returncode == 0 and out_path.is_file():
                fitted = pickle.loads(out_path.read_bytes())  # our own child's output
                results.update(zip(share, fitted, strict=True))
                continue
            log.warning("a fitting process failed (exit code %s): fitting its contexts here\n%s",
                        child.returncode, err.decode(errors="replace")[-2000:])
            for i in share:
                results[i] = fit_job(jobs[i])
    return [results[i] for i in range(len(jobs))]


def data_key(store: TrialStore) -> DataKey:
    """The store's current :class:`DataKey` (one aggregate query)."""
    with store.session() as s:
        row = s.exec(select(func.count(), func.max(TrialRecord.id)).where(
            TrialRecord.status != TrialStatus.RUNNING)).one()
    return DataKey(int(row[0] or 0), int(row[1] or 0))


def content_key(store: TrialStore) -> str | None:
    """A digest of the store's content when it holds exactly the JSONL files imported into it
    (e.g. a fresh store of the shipped knowledge), else None.

    Exactly: every trial came from those imports (the store's trial count is the sum of the
    imports' counts) and none was deleted since (ids run 1..count). Two such stores hold the same
    trials, so they can share one fit.
    """
    with store.session() as s:
        count, newest = s.exec(select(func.count(), func.max(TrialRecord.id))).one()
        imports = s.exec(select(ImportRecord.sha256, ImportRecord.trials)).all()
    count, newest = int(count or 0), int(newest or 0)
    if not imports or count == 0 or count != sum(n for _, n in imports) or newest != count:
        return None
    # An import that added no trial (a file of hardware profiles) leaves the fitted data as it
    # was: it is no part of the content (knowledge.shipped_models.shipped_content skips it too).
    return hashlib.sha256("\n".join(sorted(d for d, n in imports if n)).encode()
                          ).hexdigest()[:16]


@dataclass
class KnowledgeModels:
    """Every context's fitted models; the type ``recommend(..., models=...)`` takes."""

    data: DataKey
    family: str
    contexts: dict[ContextKey, ContextModels] = field(default_factory=dict)
    fitted_at: float = field(default_factory=time.time)
    fit_seconds: float = 0.0

    @classmethod
    def fit(cls, store: TrialStore, *, family: str = DEFAULT_FAMILY, score: bool = True,
            target: str | None = None) -> KnowledgeModels:
        """Fit models for every context of ``store`` (of ``target`` only, when given)."""
        started = time.perf_counter()
        key = data_key(store)
        trials = store.list_trials(TrialFilter(target=target))
        grouped: dict[ContextKey, list[TrialRecord]] = {}
        failed: dict[ContextKey, list[TrialRecord]] = {}
        for t in trials:
            if t.status == TrialStatus.COMPLETE and t.metrics:
                grouped.setdefault(context_of(t), []).append(t)
            elif t.status == TrialStatus.FAILED:
                failed.setdefault(context_of(t), []).append(t)
        names = {int(s.id or 0): s.name for s in store.list_studies(target)}
        jobs: list[FitJob] = []
        for ctx, rows in sorted(grouped.items()):
            if len(rows) < MIN_TRIALS:
                log.info("context %s: %d trials, too few to fit", ctx.label(), len(rows))
                continue
            jobs.append((ctx, rows, family, score, failed.get(ctx, []), names))
        contexts = dict(zip([job[0] for job in jobs], _fit_all(jobs), strict=True))
        return cls(key, family, contexts, fit_seconds=time.perf_counter() - started)

    def for_target(self, target: str) -> list[ContextModels]:
        return [c for k, c in sorted(self.contexts.items()) if k.target == target]

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Several processes may save the same shared file at once: each writes its own.
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        with tmp.open("wb") as f:
            pickle.dump({"format": CACHE_FORMAT, "models": self}, f,
                        protocol=pickle.HIGHEST_PROTOCOL)
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> KnowledgeModels | None:
        """The models saved at ``path``, or None when absent or written by another format."""
        try:
            with path.open("rb") as f:
                payload: dict[str, Any] = pickle.load(f)  # our own cache file, never user input
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
            return None
        if payload.get("format") != CACHE_FORMAT or not isinstance(payload.get("models"), cls):
            return None
        models: KnowledgeModels = payload["models"]
        return models


@functools.cache
def fit_code_version() -> str:
    """A digest of the fitting code: the sources the surrogate fit runs
    (:func:`knowledge.shipped_models.source_digest`) and the part of this module that groups
    trials into fits (its format number, the fewest trials per context, :meth:`KnowledgeModels.
    fit`). Shipped models fitted by other code are not used."""
    digest = hashlib.sha256(source_digest().encode())
    digest.update(f"{CACHE_FORMAT} {MIN_TRIALS}\n".encode())
    for part in (KnowledgeModels.fit, fit_job):
        digest.update(inspect.getsource(part).encode())
    return digest.hexdigest()[:16]


def shipped_models_key(family: str = DEFAULT_FAMILY, content: str | None = None) -> ShippedKey:
    """The key of models fitted now, by this code, on a store holding exactly ``content`` (by
    default: the shipped files)."""
    return ShippedKey(shipped_content() if content is None else content, fit_code_version(),
                      family, library_versions())


def cache_path(cache_dir: Path, db_url: str, family: str = DEFAULT_FAMILY,
               target: str | None = None) -> Path:
    """Where the models of the store at ``db_url`` are cached: one file per store and family
    (all targets), or per store, family and target."""
    digest = hashlib.sha256(db_url.encode()).hexdigest()[:12]
    suffix = f"-{target}" if target else ""
    return Path(cache_dir) / "knowledge" / f"models-{digest}-{family}{suffix}.pkl"


def shared_cache_path(shared_dir: Path, content: str, family: str = DEFAULT_FAMILY,
                      target: str | None = None) -> Path:
    """Where the models of any store holding exactly the imports ``content`` are cached."""
    suffix = f"-{target}" if target else ""
    return Path(shared_dir) / f"imported-{content}-{family}{suffix}.pkl"


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` between processes (POSIX ``flock``; released when the
    holder exits, even by a crash). Without a writable directory it locks nothing: the fit
    then merely happens twice."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        log.warning("cannot lock %s (%s): fitting without it", path, exc)
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _held(path: Path) -> bool:
    """Whether another process holds the :func:`_file_lock` on ``path`` now."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # releases the probe's own shared lock, if it got one
    return False


class ModelCache:
    """Fitted models for one store, in memory and on disk, refitted when the store changes.

    A store that holds exactly the files imported into it (:func:`content_key`: a fresh store of
    the shipped knowledge) also looks in ``shared_dir`` (default: the cache dir's ``knowledge``
    folder) for the models another such store fitted on the same content, and leaves its own
    there: a second fresh store, say a PostgreSQL one beside the SQLite default, loads instead of
    fitting again (the shipped knowledge takes over a minute to fit on 2 cores). Processes that
    need the same shared fit at once take turns on a lock file beside it: one fits, the others
    load its result. A cache of one target takes its contexts out of such a fit of every
    target when there is one, or when another process is making one (it waits for it).

    Thread-safe: concurrent requests share one fit.
    """

    def __init__(self, store: TrialStore, cache_dir: Path | None = None, *,
                 family: str = DEFAULT_FAMILY, target: str | None = None,
                 shared_dir: Path | None = None) -> None:
        self.store, self.family, self.target = store, family, target
        self.path = (cache_path(cache_dir, store.url, family, target)
                     if cache_dir is not None else None)
        self.shared_dir = (shared_dir if shared_dir is not None
                           else None if cache_dir is None else Path(cache_dir) / "knowledge")
        self._models: KnowledgeModels | None = None
        self._lock = threading.Lock()

    def get(self, *, refit: bool = True) -> KnowledgeModels:
        """Current models: from memory, else from disk, else fitted now (and saved).

        With ``refit=False`` stale models are returned as they are (the caller reports their
        age); absent models are still fitted.
        """
        with self._lock:
            current = data_key(self.store)
            if self._models is None and self.path is not None:
                self._models = KnowledgeModels.load(self.path)
            if self._models is not None and (self._models.data == current or not refit):
                return self._models
            if (models := self._adopt_shipped(current)) is not None:
                return models
            paths = self._shared_paths()
            if paths is None:
                return self._refit_locked(None)
            shared, whole = paths
            models = (self._adopt_shared(shared, current)
                      or self._adopt_whole(whole, shared, current))
            if models is not None:
                return models
            # Another process on the same content may be fitting it now: wait for its fit
            # rather than fitting the same trials twice on the same cores.
            with _file_lock(shared.with_suffix(".lock")):
                return (self._adopt_shared(shared, current)
                        or self._adopt_whole(whole, shared, current, wait=True)
                        or self._refit_locked(shared))

    def peek(self) -> KnowledgeModels | None:
        """Current models from memory or disk (the shipped ones included), or None (never
        fits)."""
        with self._lock:
            current = data_key(self.store)
            if self._models is None and self.path is not None:
                self._models = KnowledgeModels.load(self.path)
            if self._models is not None and self._models.data == current:
                return self._models
            return self._adopt_shipped(current)

    def refit(self) -> KnowledgeModels:
        with self._lock:
            return self._refit_locked(self._shared_path())

    def save(self, models: KnowledgeModels) -> None:
        """Keep ``models`` (fitted on this store elsewhere) as this cache's current set."""
        with self._lock:
            self._models = models
            self._save(models, self.path)
            self._save(models, self._shared_path())

    def _shared_path(self) -> Path | None:
        paths = self._shared_paths()
        return None if paths is None else paths[0]

    def _shared_paths(self) -> tuple[Path, Path | None] | None:
        """This cache's shared fit and, for a cache of one target, the shared fit of every
        target on the same content (one read of the store's content for both); None without
        a shared directory or where the store holds more than its imports."""
        if self.shared_dir is None:
            return None
        content = content_key(self.store)
        if content is None:
            return None
        whole = (None if self.target is None
                 else shared_cache_path(self.shared_dir, content, self.family))
        return shared_cache_path(self.shared_dir, content, self.family, self.target), whole

    def _adopt_shipped(self, current: DataKey) -> KnowledgeModels | None:
        """The models shipped with the knowledge (this cache's target's part of them) when the
        store holds exactly the shipped files and they were fitted on it by this fitting code
        (:func:`knowledge.shipped_models.load_shipped`), kept as this cache's."""
        content = content_key(self.store)
        shipped = (None if content is None else
                   read_shipped(shipped_models_key(self.family, content), CACHE_FORMAT))
        if not isinstance(shipped, KnowledgeModels) or shipped.data != current:
            return None
        models = shipped if self.target is None else KnowledgeModels(
            shipped.data, shipped.family,
            {k: c for k, c in shipped.contexts.items() if k.target == self.target},
            fitted_at=shipped.fitted_at, fit_seconds=shipped.fit_seconds)
        self._models = models
        self._save(models, self.path)
        return models

    def _adopt_shared(self, shared: Path, current: DataKey) -> KnowledgeModels | None:
        """The models at ``shared`` when they were fitted on ``current``, kept as this cache's."""
        models = KnowledgeModels.load(shared)
        if models is None or models.data != current:
            return None
        self._models = models
        self._save(models, self.path)
        return models

    def _adopt_whole(self, whole_path: Path | None, shared: Path, current: DataKey, *,
                     wait: bool = False) -> KnowledgeModels | None:
        """For a cache of one target: its contexts out of the shared fit of every target on the
        same content (``whole_path``, None for a cache of every target), when that fit is there
        (a served store fits every target) or, with ``wait``, is being made by another process
        right now (then this waits for it rather than fitting a part of the same trials beside
        it). Contexts are fitted independently, so they are the models a fit of this target
        alone makes. The part is kept here and as this target's ``shared`` fit."""
        if whole_path is None:
            return None
        whole = KnowledgeModels.load(whole_path)
        if (whole is None or whole.data != current) and wait:
            # Look again: after that fit, when another process is making it now, else at once
            # (it may have ended between the two looks).
            lock = whole_path.with_suffix(".lock")
            with _file_lock(lock) if _held(lock) else contextlib.nullcontext():
                whole = KnowledgeModels.load(whole_path)
        if whole is None or whole.data != current:
            return None
        models = KnowledgeModels(
            whole.data, whole.family,
            {k: c for k, c in whole.contexts.items() if k.target == self.target},
            fitted_at=whole.fitted_at, fit_seconds=whole.fit_seconds)
        self._models = models
        self._save(models, self.path)
        self._save(models, shared)
        return models

    def _refit_locked(self, shared: Path | None) -> KnowledgeModels:
        models = KnowledgeModels.fit(self.store, family=self.family, target=self.target)
        self._models = models
        self._save(models, self.path)
        self._save(models, shared)
        return models

    @staticmethod
    def _save(models: KnowledgeModels, path: Path | None) -> None:
        if path is None:
            return
        try:
            models.save(path)
        except OSError as exc:
            log.warning("cannot write the model cache %s: %s", path, exc)

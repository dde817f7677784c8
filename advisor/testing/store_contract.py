"""The contract every trial store must pass, whatever database is behind it.

The in-tree suite runs it on SQLite and on PostgreSQL; a plugin that ships a store of its own, or
points the stock one at another database, subclasses :class:`StoreContract` in its own tests and
passes the same tests.
"""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from advisor.errors import StoreError, TrialTakenError
from knowledge import (
    SLOMarginRecord,
    StudyRecord,
    TrialFilter,
    TrialRecord,
    TrialStatus,
    TrialStore,
)
from knowledge.models import utcnow

#: How one claim of a queued trial ended, as a worker reports it.
CLAIMED, TAKEN, FULL = "claimed", "taken", "full"
#: Seconds a worker of the concurrency tests may wait for the others (and the test for them)
#: before the test fails instead of hanging: the SQLite store waits up to 60 s for a lock.
_WORKER_TIMEOUT_S = 120.0


def _study(name: str = "s1", target: str = "target-a") -> StudyRecord:
    return StudyRecord(name=name, target=target, slo="p95_latency_ms<=1", objective_metric="qps",
                       objective_direction="maximize", workload_spec={"kind": "k"},
                       workload_hash="w1", sampler="tpe", n_trials=3, hardware_key="cpu-x-2c",
                       advisor_version="0")


def _trial(study: StudyRecord, number: int, **kw: object) -> TrialRecord:
    fields: dict[str, object] = dict(
        study_id=study.id, number=number, target=study.target, config={"knob_a": number},
        config_hash=f"h{number}", workload_spec={"kind": "k"}, workload_hash="w1",
        hardware={"key": "cpu-x-2c"}, hardware_key="cpu-x-2c", advisor_version="0")
    fields.update(kw)
    return TrialRecord(**fields)  # type: ignore[arg-type]


def _id(record: StudyRecord | TrialRecord) -> int:
    """The id the store gave ``record`` when it stored it."""
    assert record.id is not None
    return record.id


def _claim_each(store: TrialStore, study: StudyRecord, numbers: range, budget: int,
                claimer: int) -> list[tuple[int, str]]:
    """Claim every trial in ``numbers`` in turn, as a worker handed them by the sampler's queue
    would; how each claim ended, in order."""
    outcomes: list[tuple[int, str]] = []
    for number in numbers:
        try:
            claimed = store.claim_trial(_trial(study, number, details={"claimer": claimer}),
                                        budget)
        except TrialTakenError:
            outcomes.append((number, TAKEN))
        else:
            outcomes.append((number, FULL if claimed is None else CLAIMED))
    return outcomes


def _claim_in_child(open_store: Callable[[str], TrialStore], url: str, study: StudyRecord,
                    numbers: range, budget: int, claimer: int, barrier: Any, results: Any
                    ) -> None:
    """A worker process: its own store on ``url``, then every claim once all workers are ready.
    Reports its outcomes, or what it raised, through ``results``."""
    try:
        store = open_store(url)
        try:
            barrier.wait(_WORKER_TIMEOUT_S)
            results.put((claimer, _claim_each(store, study, numbers, budget, claimer)))
        finally:
            store.close()
    except BaseException as exc:  # reported to the test, which fails on it
        results.put((claimer, f"{type(exc).__name__}: {exc}"))


class StoreContract:
    """Subclass it as ``class TestMyStore(StoreContract)`` beside a ``store_url`` fixture: the URL
    of a fresh, empty database for each test. A store class of your own overrides
    :meth:`open_store`; or provide the ``store`` fixture itself (the contract reads its ``url``
    to open more stores on the same database, as several workers do)."""

    #: Workers that claim one study's queued trials at the same moment.
    n_claimers = 4
    #: Trials queued for those workers, and the study's budget (fewer: some claims find it full).
    n_queued, budget = 8, 6
    #: A URL whose database cannot be reached (nothing listens on port 1).
    unreachable_url = "postgresql+psycopg://nobody:secret@127.0.0.1:1/none"

    def open_store(self, url: str) -> TrialStore:
        """The store under test on ``url``; called once per test, and once in each worker of
        the concurrency tests (a forked process: it needs nothing but ``url``)."""
        return TrialStore(url)

    @pytest.fixture
    def store(self, store_url: str) -> Iterator[TrialStore]:
        store = self.open_store(store_url)
        yield store
        store.close()

    def test_study_roundtrip_and_unique_name(self, store: TrialStore) -> None:
        created = store.create_study(_study())
        assert created.id is not None
        loaded = store.get_study("s1")
        assert loaded is not None and loaded.workload_spec == {"kind": "k"}
        assert loaded.created_at.tzinfo is not None
        with pytest.raises(StoreError, match="already exists"):
            store.create_study(_study())
        store.set_study_status(_id(created), "finished")
        assert store.get_study("s1").status == "finished"  # type: ignore[union-attr]

    def test_trial_lifecycle_complete_with_typed_margins(self, store: TrialStore) -> None:
        study = store.create_study(_study())
        t = store.start_trial(_trial(study, 0))
        assert t.status == TrialStatus.RUNNING and t.pid is not None
        margins = [SLOMarginRecord(trial_id=0, metric="p95_latency_ms", op="<=", threshold=1.0,
                                   value=0.8, margin=-0.2)]
        done = store.complete_trial(_id(t), metrics={"qps": 100.0, "p95_latency_ms": 0.8,
                                                   "bad": float("nan")},
                                    engine_versions={"engine-a": "1"}, details={"cached": True},
                                    margins=margins, feasible=True, objective_value=100.0,
                                    duration_s=1.5)
        assert done.status == TrialStatus.COMPLETE and done.finished_at is not None
        assert done.metrics == {"qps": 100.0, "p95_latency_ms": 0.8, "bad": None}
        stored = store.margins(_id(t))
        assert [(m.metric, m.op, m.threshold, m.margin) for m in stored] == [
            ("p95_latency_ms", "<=", 1.0, -0.2)]
        with pytest.raises(StoreError, match="refusing to overwrite"):
            store.fail_trial(_id(t), error_type="x", error="late")

    def test_failed_and_interrupted_trials_keep_their_reason(self, store: TrialStore) -> None:
        study = store.create_study(_study())
        a = store.start_trial(_trial(study, 0))
        b = store.start_trial(_trial(study, 1))
        store.fail_trial(_id(a), error_type="crash", error="killed by signal SIGABRT",
                         duration_s=0.1)
        store.fail_trial(_id(b), error_type="interrupted", error="driver died",
                         status=TrialStatus.INTERRUPTED)
        got = {t.number: t for t in store.trials_of_study(_id(study))}
        assert (got[0].status, got[0].error_type, got[0].error) == (
            TrialStatus.FAILED, "crash", "killed by signal SIGABRT")
        assert got[1].status == TrialStatus.INTERRUPTED
        assert store.count_trials(_id(study), TrialStatus.FINISHED) == 1
        with pytest.raises(ValueError, match="failed or interrupted"):
            store.fail_trial(_id(a), error_type="x", error="y", status="complete")

    def test_trial_numbers_are_unique_per_study(self, store: TrialStore) -> None:
        study = store.create_study(_study())
        store.start_trial(_trial(study, 0))
        with pytest.raises(StoreError):
            store.start_trial(_trial(study, 0))
        other = store.create_study(_study("s2"))
        store.start_trial(_trial(other, 0))  # same number, other study: fine

    def test_filters(self, store: TrialStore) -> None:
        s1 = store.create_study(_study("s1", "target-a"))
        s2 = store.create_study(_study("s2", "target-b"))
        for study in (s1, s2):
            for n in range(3):
                t = store.start_trial(_trial(study, n, hardware_key="1x-nvidia-h200" if n == 2
                                             else "cpu-x-2c"))
                if n == 0:
                    store.fail_trial(_id(t), error_type="crash", error="boom")
                else:
                    store.complete_trial(_id(t), metrics={"qps": float(n)}, engine_versions={},
                                         details={}, margins=[], feasible=n == 1,
                                         objective_value=float(n), duration_s=0.0)
        assert len(store.list_trials()) == 6
        assert len(store.list_trials(TrialFilter(target="target-a"))) == 3
        assert len(store.list_trials(TrialFilter(study="s2"))) == 3
        assert len(store.list_trials(TrialFilter(status=TrialStatus.FAILED))) == 2
        assert [t.number for t in store.list_trials(TrialFilter(study="s1", feasible=True))] == [1]
        assert len(store.list_trials(TrialFilter(hardware_key="h200"))) == 2
        # The filter names a key or a run of its dash-separated parts, in any case (objectives/
        # hardware.py hardware_matches), never a fragment of a part; not a pattern either: SQL
        # wildcards match only themselves.
        for named in ("1x-nvidia-h200", "NVIDIA-H200", "1x-nvidia", "x"):
            assert len(store.list_trials(TrialFilter(hardware_key=named))) == {
                "x": len(store.list_trials(TrialFilter(hardware_key="cpu-x-2c")))}.get(named, 2)
        assert store.list_trials(TrialFilter(hardware_key="h20")) == []
        assert store.list_trials(TrialFilter(hardware_key="0")) == []
        assert store.list_trials(TrialFilter(hardware_key="%")) == []
        assert store.list_trials(TrialFilter(hardware_key="nvidia_h200")) == []
        for flt in (TrialFilter(), TrialFilter(study="s2"), TrialFilter(hardware_key="h200"),
                    TrialFilter(status=TrialStatus.FAILED), TrialFilter(workload_hash="none"),
                    TrialFilter(target="target-a", limit=1, offset=1)):
            unpaged = TrialFilter(**{**vars(flt), "limit": None, "offset": 0})
            assert store.count_matching(flt) == len(store.list_trials(unpaged))
        page = store.list_trials(TrialFilter(limit=2, offset=1))
        assert [t.id for t in page] == [t.id for t in store.list_trials()][1:3]

    def test_heartbeat_and_stale_detection(self, store: TrialStore) -> None:
        study = store.create_study(_study())
        t = store.start_trial(_trial(study, 0))
        before = store.get_trial(_id(t)).heartbeat_at  # type: ignore[union-attr]
        store.heartbeat(_id(t))
        assert store.get_trial(_id(t)).heartbeat_at >= before  # type: ignore[union-attr]
        assert store.stale_running_trials(_id(study), utcnow() - timedelta(hours=1)) == []
        stale = store.stale_running_trials(_id(study), utcnow() + timedelta(seconds=1))
        assert [s.id for s in stale] == [t.id]

    def test_unreachable_database_is_a_clear_error(self) -> None:
        with pytest.raises(StoreError, match="cannot reach trial store"):
            self.open_store(self.unreachable_url)

    # claiming queued trials ------------------------------------------------------------------

    def test_a_claim_takes_a_slot_of_the_budget_and_a_number_once(
            self, store: TrialStore) -> None:
        study = store.create_study(_study())
        first = store.claim_trial(_trial(study, 0), 2)
        assert first is not None and first.status == TrialStatus.RUNNING
        with pytest.raises(TrialTakenError):
            store.claim_trial(_trial(study, 0), 2)
        store.fail_trial(_id(first), error_type="crash", error="boom")  # still spent
        assert store.claim_trial(_trial(study, 1), 2) is not None
        assert store.claim_trial(_trial(study, 2), 2) is None
        assert [t.number for t in store.trials_of_study(_id(study))] == [0, 1]

    @pytest.mark.parametrize("workers", ["threading", "multiprocessing"])
    def test_concurrent_claims_take_each_queued_trial_exactly_once(
            self, store: TrialStore, workers: str) -> None:
        """``n_claimers`` workers are all handed the same queued trials at the same moment (a
        sampler's storage that cannot lock a row does that) and claim each in turn. Workers in
        one process share its store; worker processes open their own."""
        study = store.create_study(_study())
        numbers = range(self.n_queued)
        if workers == "threading":
            outcomes = self._claim_in_one_process(store, study, numbers)
        else:
            outcomes = self._claim_in_processes(store.url, study, numbers)
        errors = {c: o for c, o in outcomes.items() if isinstance(o, str)}
        assert not errors, errors
        claimed_by: dict[int, list[int]] = {}
        taken: set[int] = set()
        for claimer, ends in outcomes.items():
            assert not isinstance(ends, str)
            assert [n for n, _ in ends] == list(numbers)
            kinds = [end for _, end in ends]
            # A full budget stays full: a claim refused as over budget while a slot was free
            # would stop its worker early and leave that slot unmeasured.
            assert FULL not in kinds or set(kinds[kinds.index(FULL):]) == {FULL}, (claimer, ends)
            for number, end in ends:
                if end == CLAIMED:
                    claimed_by.setdefault(number, []).append(claimer)
                elif end == TAKEN:
                    taken.add(number)
                if number >= self.budget:
                    assert end == FULL, (claimer, number, end)
        # Every queued trial within the budget was claimed, each by one worker, none beyond it;
        # a worker told a trial was taken was told the truth.
        assert {n: len(c) for n, c in claimed_by.items()} == dict.fromkeys(range(self.budget), 1)
        assert taken <= set(claimed_by)
        stored = store.trials_of_study(_id(study))
        assert [t.number for t in stored] == list(range(self.budget))
        assert all(t.status == TrialStatus.RUNNING for t in stored)
        assert {t.number: [t.details["claimer"]] for t in stored} == claimed_by

    def _claim_in_one_process(self, store: TrialStore, study: StudyRecord, numbers: range
                              ) -> dict[int, list[tuple[int, str]] | str]:
        barrier = threading.Barrier(self.n_claimers)
        outcomes: dict[int, list[tuple[int, str]] | str] = {}

        def claim(claimer: int) -> None:
            try:
                barrier.wait(_WORKER_TIMEOUT_S)
                outcomes[claimer] = _claim_each(store, study, numbers, self.budget, claimer)
            except BaseException as exc:  # reported to the test, which fails on it
                outcomes[claimer] = f"{type(exc).__name__}: {exc}"

        workers = [threading.Thread(target=claim, args=(i,), daemon=True)
                   for i in range(self.n_claimers)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(_WORKER_TIMEOUT_S)
        assert len(outcomes) == self.n_claimers, f"workers still claiming: {outcomes}"
        return outcomes

    def _claim_in_processes(self, url: str, study: StudyRecord, numbers: range
                            ) -> dict[int, list[tuple[int, str]] | str]:
        # Forked, so a subclass's ``open_store`` needs no pickling; each child opens its own
        # store and never touches the connections it inherited.
        ctx = multiprocessing.get_context("fork")
        barrier, results = ctx.Barrier(self.n_claimers), ctx.Queue()
        children = [ctx.Process(target=_claim_in_child, daemon=True, args=(
            self.open_store, url, study, numbers, self.budget, i, barrier, results))
            for i in range(self.n_claimers)]
        for child in children:
            child.start()
        try:
            outcomes = dict(results.get(timeout=_WORKER_TIMEOUT_S) for _ in children)
        finally:
            for child in children:
                child.join(_WORKER_TIMEOUT_S)
                if child.is_alive():
                    child.kill()
        return outcomes

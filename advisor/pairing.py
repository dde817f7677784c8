"""Re-measuring configs side by side within a study: queue arms interleaved, then compare them.

A *block* is one set of arms (say the search's best config and the engine default) measured
``repeats`` rounds, one trial of each arm per round, in arm order: X Y X Y ... Each queued trial
records its arm (``details["role"]``: ``paired-<arm>``, or the sweep's ``repeat`` with
``repeat_of``), its block and its round, so a resumed study never queues a block twice and the
comparison is computed from exactly that block's measurements (advisor/paired.py). The study
driver pairs the best with the default at the end of a study; a sweep pairs a cell's best with the
previous run's best. Invalid and failed repeats are not measurements and are left out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from advisor.errors import AdvisorError
from advisor.objective import Objective
from advisor.paired import Better, PairedComparison, PairedComparisonError, Repeat, compare
from knowledge import StudyRecord, TrialRecord, TrialStatus, TrialStore
from knowledge.queries import best_feasible
from objectives import SLO
from objectives.workload import canonical_json

__all__ = ["BEST", "DEFAULT", "PROVENANCE_KEY", "SWEEP_REPEAT_ROLE", "Arm", "QueueResult",
           "StudyQueue", "arm_of", "block_id", "block_of", "comparison_in", "directions",
           "incumbent", "is_paired", "latest_block", "outcome", "outcome_of_configs", "pending",
           "queue_interleaved", "stored_comparison"]

BEST, DEFAULT = "best", "default"
#: ``StudyRecord.data_provenance`` key holding the study's best-vs-default comparison (or why
#: there is none).
PROVENANCE_KEY = "paired_comparison"
_ROLE_PREFIX = "paired-"
#: The Optuna user attribute (and, without its prefix, the trial detail) naming a repeat's block.
BLOCK_ATTR = "advisor_paired_block"
#: The sweep runner's role for its repeats (its arm is in ``details["repeat_of"]``).
SWEEP_REPEAT_ROLE = "repeat"


class StudyQueue(Protocol):
    """What queueing a block needs of the study driver (advisor/driver.py's ``StudyDriver``):
    its store and its ``enqueue``. Described here rather than imported, because the driver
    itself pairs through this module."""

    @property
    def store(self) -> TrialStore: ...

    def enqueue(self, name: str, configs: Sequence[Mapping[str, Any]], *, role: str,
                attrs: Mapping[str, Any] | None = None, extend_budget: bool = False
                ) -> StudyRecord: ...


@dataclass(frozen=True)
class Arm:
    """One config of a block: ``label`` names it (``best``, ``default``, ``previous-best``);
    ``role`` is what its trials record (default ``paired-<label>``)."""

    label: str
    config: Mapping[str, Any]
    role: str | None = None

    @property
    def stored_role(self) -> str:
        return self.role or f"{_ROLE_PREFIX}{self.label}"


@dataclass(frozen=True)
class QueueResult:
    """What :func:`queue_interleaved` did: trials queued (0 when the block was already queued or
    measured), the block's id, and the arms left out with the reason."""

    queued: int
    block: str
    skipped: dict[str, str] = field(default_factory=dict)
    already_queued: bool = False


def block_id(arms: Sequence[Arm]) -> str:
    """A stable id of a block: its arms' labels and configs."""
    text = canonical_json([[a.label, dict(a.config)] for a in arms])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def arm_of(details: Mapping[str, Any]) -> str | None:
    """The arm a trial re-measured, from its details (``None``: not a re-measurement)."""
    role = str(details.get("role") or "")
    if role.startswith(_ROLE_PREFIX):
        return role.removeprefix(_ROLE_PREFIX)
    if role == SWEEP_REPEAT_ROLE:
        return str(details.get("repeat_of", BEST))
    return None


def block_of(details: Mapping[str, Any]) -> str | None:
    value = details.get("paired_block")
    return None if value is None else str(value)


def is_paired(trial: TrialRecord) -> bool:
    """Whether ``trial`` re-measured a config after a search (not a search trial)."""
    return arm_of(trial.details) is not None


def incumbent(trials: Sequence[TrialRecord], objective: Objective) -> TrialRecord | None:
    """The search's best feasible trial (re-measurements excluded), by ``objective``."""
    return best_feasible(trials, objective.direction, exclude=is_paired)


def queue_interleaved(driver: StudyQueue, study_name: str, arms: Sequence[Arm], repeats: int,
                      *, extend_budget: bool) -> QueueResult:
    """Queue ``repeats`` rounds of ``arms`` in the study ``study_name``, interleaved (one trial
    of each arm per round, in arm order), unless this block is already queued or measured there.

    An arm whose config the study refuses (e.g. a knob its space no longer has) is left out, with
    the reason. With ``extend_budget`` the study's budget grows by the trials queued.
    """
    if repeats < 1 or not arms:
        return QueueResult(0, block_id(arms))
    block = block_id(arms)
    if block in _blocks_present(driver, study_name):
        return QueueResult(0, block, already_queued=True)
    skipped: dict[str, str] = {}
    live = list(arms)
    queued = 0
    for round_ in range(repeats):
        for arm in list(live):
            try:
                driver.enqueue(study_name, [arm.config], role=arm.stored_role,
                               attrs={BLOCK_ATTR: block,
                                      "advisor_paired_round": round_,
                                      **({"advisor_repeat_of": arm.label}
                                         if arm.role == SWEEP_REPEAT_ROLE else {})},
                               extend_budget=extend_budget)
            except AdvisorError as exc:
                if round_ > 0:
                    raise  # checked in round 0: a config accepted once is accepted again
                skipped[arm.label] = str(exc)
                live.remove(arm)
                continue
            queued += 1
    return QueueResult(queued, block, skipped)


def _blocks_present(driver: StudyQueue, study_name: str) -> set[str]:
    """Blocks of the study already stored (any state) or queued in Optuna and not yet asked."""
    import optuna
    from optuna.trial import TrialState

    from advisor.optuna_bridge import optuna_storage

    study = driver.store.get_study(study_name)
    present = {b for t in (driver.store.trials_of_study(study.id or 0) if study else [])
               if (b := block_of(t.details)) is not None}
    try:
        ostudy = optuna.load_study(study_name=study_name, storage=optuna_storage(driver.store.url),
                                   sampler=optuna.samplers.RandomSampler())
    except KeyError:
        return present
    for frozen in ostudy.get_trials(deepcopy=False,
                                    states=(TrialState.WAITING, TrialState.RUNNING)):
        if (b := frozen.user_attrs.get(BLOCK_ATTR)) is not None:
            present.add(str(b))
    return present


def pending(trials_waiting: Sequence[Mapping[str, Any]]) -> int:
    """How many of the given Optuna user-attr mappings (of waiting trials) belong to a block."""
    return sum(1 for attrs in trials_waiting if attrs.get(BLOCK_ATTR) is not None)


def latest_block(trials: Sequence[TrialRecord], arms: Sequence[str]) -> str | None:
    """The most recently queued block holding trials of every arm in ``arms``."""
    seen: dict[str, tuple[int, set[str]]] = {}
    for t in trials:
        block, arm = block_of(t.details), arm_of(t.details)
        if block is None or arm is None:
            continue
        last, labels = seen.get(block, (-1, set()))
        seen[block] = (max(last, t.number), labels | {arm})
    full = [(last, b) for b, (last, labels) in seen.items() if set(arms) <= labels]
    return max(full)[1] if full else None


def directions(objective: Objective, slo: SLO) -> dict[str, Better]:
    """Each compared metric's good direction: the objective's, then each SLO metric's (``<=``
    bounds are latencies and the like: lower is better)."""
    better: dict[str, Better] = {
        objective.metric: "higher" if objective.direction == "maximize" else "lower"}
    for b in slo.bounds:
        better.setdefault(b.metric, "lower" if b.op == "<=" else "higher")
    return better


def comparison_in(trials: Sequence[TrialRecord], x: str, y: str, *, objective: Objective,
                  slo: SLO, block: str | None = None, seed: int = 0,
                  context: Mapping[str, Any] | None = None) -> PairedComparison:
    """Compare arm ``x`` with arm ``y`` from the usable measurements of one block of ``trials``
    (the latest holding both arms when ``block`` is None). Raises
    :class:`PairedComparisonError` when there is no such block, too few usable repeats, or the
    repeats were not interleaved."""
    block = block if block is not None else latest_block(trials, [x, y])
    if block is None:
        raise PairedComparisonError(f"no re-measurements of both {x!r} and {y!r} in this study")
    repeats: dict[str, list[Repeat]] = {x: [], y: []}
    configs: dict[str, dict[str, Any]] = {}
    lost: dict[str, int] = {x: 0, y: 0}
    for t in trials:
        arm = arm_of(t.details)
        if arm not in repeats or block_of(t.details) != block:
            continue
        configs.setdefault(arm, dict(t.config))
        if t.status != TrialStatus.COMPLETE:  # failed, invalid or interrupted: no measurement
            lost[arm] += t.status != TrialStatus.INTERRUPTED
            continue
        repeats[arm].append(Repeat(arm, t.number, dict(t.metrics), t.id))
    hardware = {t.hardware_key for t in trials if block_of(t.details) == block}
    if len(hardware) > 1:
        raise PairedComparisonError(f"the repeats ran on different hardware: {sorted(hardware)}")
    try:
        return compare(repeats[x], repeats[y], better=directions(objective, slo), seed=seed,
                       x_config=configs.get(x), y_config=configs.get(y),
                       context={**(context or {}), "block": block,
                                "hardware_key": next(iter(hardware), None),
                                "unusable_repeats": lost})
    except PairedComparisonError as exc:
        if any(lost.values()):
            raise PairedComparisonError(f"{exc} ({lost[x]} repeat(s) of {x!r} and {lost[y]} of "
                                        f"{y!r} failed or were invalid)") from None
        raise


def outcome(trials: Sequence[TrialRecord], study: StudyRecord, *, x: str = BEST,
            y: str = DEFAULT, block: str | None = None) -> dict[str, Any]:
    """The study's comparison of ``x`` with ``y`` as stored data: ``status`` ``compared`` with
    the comparison's fields, or ``refused`` with the reason."""
    objective = Objective(study.objective_metric, study.objective_direction)  # type: ignore[arg-type]
    from objectives import parse_slo

    try:
        found = comparison_in(trials, x, y, objective=objective, slo=parse_slo(study.slo),
                              block=block, context={"study": study.name,
                                                    "workload_hash": study.workload_hash})
    except PairedComparisonError as exc:
        return {"status": "refused", "x": x, "y": y, "reason": str(exc)}
    return {"status": "compared", **found.to_dict()}


def outcome_of_configs(trials: Sequence[TrialRecord], study: StudyRecord,
                       x_config: Mapping[str, Any], y_config: Mapping[str, Any], *,
                       x: str = BEST, y: str = DEFAULT) -> dict[str, Any]:
    """Like :func:`outcome`, for trials that carry no arm labels but alternate between two
    configs (e.g. two co-resident servers measured in turn): the arms are the complete trials
    whose config is ``x_config`` / ``y_config``, in trial-number order. Store the result under
    :data:`PROVENANCE_KEY` (``TrialStore.update_provenance``) and the recommenders use it."""
    from objectives import parse_slo

    objective = Objective(study.objective_metric, study.objective_direction)  # type: ignore[arg-type]
    keys = {x: canonical_json(dict(x_config)), y: canonical_json(dict(y_config))}
    if keys[x] == keys[y]:
        return {"status": "refused", "x": x, "y": y, "reason": "the two configs are the same"}
    arms: dict[str, list[Repeat]] = {x: [], y: []}
    for t in trials:
        arm = next((a for a, k in keys.items() if canonical_json(dict(t.config)) == k), None)
        if arm is not None and t.status == TrialStatus.COMPLETE:
            arms[arm].append(Repeat(arm, t.number, dict(t.metrics), t.id))
    hardware = {t.hardware_key for t in trials}
    try:
        if len(hardware) > 1:
            raise PairedComparisonError(f"the trials ran on different hardware: "
                                        f"{sorted(hardware)}")
        found = compare(arms[x], arms[y], better=directions(objective, parse_slo(study.slo)),
                        x_config=x_config, y_config=y_config,
                        context={"study": study.name, "workload_hash": study.workload_hash,
                                 "hardware_key": next(iter(hardware), None)})
    except PairedComparisonError as exc:
        return {"status": "refused", "x": x, "y": y, "reason": str(exc)}
    return {"status": "compared", **found.to_dict()}


def stored_comparison(study: StudyRecord) -> PairedComparison | None:
    """The study's stored best-vs-default comparison (``None`` when none was compared)."""
    data = study.data_provenance.get(PROVENANCE_KEY)
    if not isinstance(data, Mapping) or data.get("status") != "compared":
        return None
    return PairedComparison.from_dict(data)

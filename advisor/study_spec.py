"""What a study tunes (:class:`StudySpec`) and how its settings are stored: one JSON document.

A study's settings used to be scattered over its store row, its ``data_provenance`` and its
Optuna study's user attributes. :class:`StoredStudy` is all of them in one document
(``StudyRecord.spec``), written when the study is created and read back the same way by every
process that opens it. A study an earlier release created has no document: :meth:`StoredStudy.of`
reads its scattered settings instead, and the driver stores them as its document on first open.

The scattered copies are still written (the budget column that claims read, the provenance keys
and Optuna attributes that the CLI, the failure model and optuna-dashboard show): they are views
of the document, never read back by the driver.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from advisor.errors import SearchSpaceError, StudyError
from advisor.inputs import check_label
from advisor.objective import Objective
from advisor.samplers import DEFAULT_SAMPLER, MAX_STARTUP, SAMPLERS
from advisor.settings import check_paired_repeats
from knowledge.model_choices import DEFAULT_FAILURE_THRESHOLD as DEFAULT_THRESHOLD
from objectives import SLO, Workload, parse_slo

if TYPE_CHECKING:  # the store's rows (SQLAlchemy): a request is checked without them
    from knowledge import StudyRecord
    from search_spaces import SearchSpace

__all__ = [
    "CO_STUDIES_KEY",
    "CO_WITH_KEY",
    "FIXED_ATTR",
    "GATE_KEY",
    "SPEC_VERSION",
    "STARTUP_ATTR",
    "SWEPT_ATTR",
    "WARM_START_PENDING",
    "WARM_START_QUEUED",
    "CoMeasured",
    "StoredStudy",
    "StudySpec",
    "check_threshold",
    "co_studies_of",
    "complete_enqueued",
    "gate_settings",
]

#: Version of the settings document's layout (bumped when a key changes meaning).
SPEC_VERSION = 1
#: Provenance keys linking a study and the studies measured alongside it (a view for readers).
CO_STUDIES_KEY, CO_WITH_KEY = "co_measured_studies", "co_measured_with"
#: Optuna study attributes an earlier release kept settings in (read only from such a study;
#: still written so optuna-dashboard shows them).
FIXED_ATTR = "advisor_fixed"
#: Optuna study attribute: the random start-up length of the study's model-based sampler.
STARTUP_ATTR = "advisor_startup_trials"
#: ``warm_start`` of a study whose warm-start configs are not queued yet / are queued.
WARM_START_PENDING, WARM_START_QUEUED = "pending", "queued"
#: Optuna study attribute: the knobs each trial sweeps (absent or empty: none, all sampled).
SWEPT_ATTR = "advisor_search_sweep"
#: Provenance key of the failure gate's settings (advisor/failure_gate.py, which re-exports it as
#: ``PROVENANCE_KEY``); kept here so checking a study request does not load the failure model.
GATE_KEY = "failure_gate"


def check_threshold(threshold: float) -> float:
    """``threshold`` when it is a probability a skip can be decided at (0 < p <= 1)."""
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"`0 < failure threshold <= 1` must hold, but got {threshold}")
    return threshold


def complete_enqueued(space: SearchSpace, fixed: Mapping[str, Any],
                      enqueued: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each enqueued (possibly partial) config completed with the engine defaults and checked
    against ``space`` and the study's ``fixed`` knobs; raises :class:`SearchSpaceError` naming
    the config (1-based) and what is wrong with it."""
    configs = []
    for position, partial in enumerate(enqueued, start=1):
        clashes = {k: v for k, v in partial.items() if k in fixed and fixed[k] != v}
        if clashes:
            raise SearchSpaceError(f"enqueued config {position} sets {clashes}, but the study "
                                   f"fixes {dict(fixed)}")
        try:
            configs.append(space.validate_config({**fixed, **partial}, fill_defaults=True))
        except SearchSpaceError as exc:
            raise SearchSpaceError(f"enqueued config {position}: {exc}") from None
    return configs


@dataclass(frozen=True)
class CoMeasured:
    """A study whose trials are measured alongside another study's, under its own workload."""

    name: str
    workload: Workload


@dataclass(frozen=True)
class StudySpec:
    """What to tune. ``n_trials`` counts trials that finished (measured or failed)."""

    name: str
    target: str
    slo: SLO
    objective: Objective
    workload: Workload
    n_trials: int
    sampler: str = DEFAULT_SAMPLER
    seed: int | None = None
    #: Random trials a model-based sampler (tpe, gp) takes before it models, queued ones
    #: included (None: what the study started with, else ``samplers.STARTUP_TRIALS``).
    startup_trials: int | None = None
    include_default: bool = True
    #: Studies measured in the same trials under other workloads (see advisor/driver.py).
    co_measured: tuple[CoMeasured, ...] = ()
    #: Knobs held at one value for the whole study (validated against the space by the caller).
    fixed: Mapping[str, Any] = field(default_factory=dict)
    #: Configs measured first, after the engine default (partial ones are completed with the
    #: engine defaults): a production config, or one-knob variations of a config to ablate it.
    enqueued: tuple[Mapping[str, Any], ...] = ()
    #: After the search, measure the best config and the engine default this many times each,
    #: interleaved, and store their paired comparison (None: ``Settings.paired_repeats``).
    paired_repeats: int | None = None
    #: Let a target that sweeps search-time knobs in one trial do so (Target.swept_knobs): the
    #: sampler then picks only the other knobs. Off (the default until it measures better on
    #: the quickstart, docs/benchmarks.md): every knob is sampled, a setting per trial.
    search_sweep: bool = False
    #: Skip a sampled config the failure model (knowledge/failures.py) predicts to fail with
    #: probability >= ``failure_threshold`` (None: its default) instead of starting its engine;
    #: it is stored failed (``predicted_failure``) with the reason. Queued configs always run.
    failure_gate: bool = True
    failure_threshold: float | None = None
    #: Queue a warm start (advisor/warm_start.py) after the default and enqueued configs; the
    #: study records it pending until it is queued, so a killed creation leaves it to the resume.
    warm_start: bool = False

    def __post_init__(self) -> None:
        if self.failure_threshold is not None:
            try:
                check_threshold(self.failure_threshold)
            except ValueError as exc:
                raise StudyError(str(exc)) from None
        if self.n_trials < 1:
            raise StudyError(f"`n_trials >= 1` must hold, but got n_trials={self.n_trials}")
        if self.paired_repeats is not None:
            try:
                check_paired_repeats(self.paired_repeats)
            except ValueError as exc:
                raise StudyError(str(exc)) from None
        if self.sampler not in SAMPLERS:
            raise StudyError(f"unknown sampler {self.sampler!r}; choose one of {SAMPLERS}")
        if self.startup_trials is not None and not 1 <= self.startup_trials <= MAX_STARTUP:
            raise StudyError(f"`1 <= startup_trials <= {MAX_STARTUP}` must hold, but got "
                             f"startup_trials={self.startup_trials}")
        if not self.name or len(self.name) > 200:
            raise StudyError("a study name must have 1 to 200 characters")
        check_label(self.name, "a study name")
        names = [self.name, *(c.name for c in self.co_measured)]
        if len(set(names)) != len(names):
            raise StudyError(f"co-measured studies need names of their own, got {names}")
        for co in self.co_measured:
            if not co.name or len(co.name) > 200:
                raise StudyError("a study name must have 1 to 200 characters")


def gate_settings(spec: StudySpec) -> dict[str, Any]:
    """The failure gate's settings as recorded with the study (so a resume keeps them)."""
    return {"enabled": spec.failure_gate,
            "threshold": spec.failure_threshold or DEFAULT_THRESHOLD}


@dataclass(frozen=True)
class StoredStudy:
    """A study's settings as stored: its spec as started (its budget and failure gate as changed
    since; ``fixed`` and ``startup_trials`` as resolved at its start; ``co_measured`` empty: the
    co-measured studies are named in ``co_studies``, each with its workload in its own document)
    and what its start decided beyond the spec: the knobs each trial sweeps, and the study it is
    measured alongside."""

    spec: StudySpec
    #: Knobs a trial's search sweep covers (empty: every knob sampled).
    swept: tuple[str, ...] = ()
    #: The studies measured alongside this one (each keeps its workload in its own document).
    co_studies: tuple[str, ...] = ()
    #: The study whose trials measure this one (a co-measured study), else None.
    measured_with: str | None = None
    #: The search budget asked for (``advisor tune --trials``): search trials only, the
    #: closing paired repeats and free gate skips apart (advisor/budget.py). None: a document
    #: written before it was kept, whose budget is ``spec.n_trials`` less its repeats.
    search_trials: int | None = None
    #: The study's warm start (advisor/warm_start.py): ``pending`` from its creation until its
    #: configs are queued (a resume queues them then), ``queued`` after, None when not asked for.
    warm_start: str | None = None

    def to_document(self) -> dict[str, Any]:
        """The JSON document stored as ``StudyRecord.spec``."""
        s = self.spec
        return {
            "version": SPEC_VERSION, "name": s.name, "target": s.target, "slo": str(s.slo),
            "objective": {"metric": s.objective.metric, "direction": s.objective.direction},
            "workload": s.workload.spec, "n_trials": s.n_trials, "sampler": s.sampler,
            "seed": s.seed, "startup_trials": s.startup_trials,
            "include_default": s.include_default,
            "co_measured": list(self.co_studies),
            "measured_with": self.measured_with, "fixed": dict(s.fixed),
            "enqueued": [dict(c) for c in s.enqueued], "paired_repeats": s.paired_repeats,
            "search_sweep": s.search_sweep, "swept": list(self.swept),
            "failure_gate": gate_settings(s),
            "search_trials": self.search_trials if self.search_trials is not None
            else s.n_trials,
            "warm_start": self.warm_start,
        }

    @classmethod
    def from_document(cls, doc: Mapping[str, Any]) -> StoredStudy:
        if doc.get("version") != SPEC_VERSION:
            raise StudyError(f"study {doc.get('name')!r} was stored by a newer advisor (settings "
                             f"document version {doc.get('version')!r}); upgrade to open it")
        gate = doc["failure_gate"]
        spec = StudySpec(
            name=doc["name"], target=doc["target"], slo=parse_slo(doc["slo"]),
            objective=Objective(doc["objective"]["metric"], doc["objective"]["direction"]),
            workload=Workload.from_spec(doc["workload"]), n_trials=int(doc["n_trials"]),
            sampler=doc["sampler"], seed=doc["seed"], startup_trials=doc["startup_trials"],
            include_default=bool(doc["include_default"]),
            fixed=dict(doc["fixed"]), enqueued=tuple(dict(c) for c in doc["enqueued"]),
            paired_repeats=doc["paired_repeats"], search_sweep=bool(doc["search_sweep"]),
            failure_gate=bool(gate["enabled"]), failure_threshold=gate["threshold"])
        search = doc.get("search_trials")
        return cls(spec, tuple(doc["swept"]), tuple(doc["co_measured"]), doc["measured_with"],
                   None if search is None else int(search), doc.get("warm_start"))

    @classmethod
    def of(cls, study: StudyRecord, optuna_attrs: Mapping[str, Any] | None = None
           ) -> StoredStudy:
        """The stored settings of ``study``: its document, or for a study an earlier release
        created, its row, provenance and (when given) its Optuna study's user attributes."""
        if study.spec is not None:
            return cls.from_document(study.spec)
        attrs = optuna_attrs or {}
        provenance = study.data_provenance
        # A study created before the failure gate existed gets the gate's defaults.
        gate = provenance.get(GATE_KEY) or {}
        startup = attrs.get(STARTUP_ATTR)
        spec = StudySpec(
            name=study.name, target=study.target, slo=parse_slo(study.slo),
            objective=Objective(study.objective_metric, study.objective_direction),  # type: ignore[arg-type]
            workload=Workload.from_spec(study.workload_spec), n_trials=study.n_trials,
            sampler=study.sampler, seed=study.seed,
            startup_trials=None if startup is None else int(startup), include_default=False,
            fixed=dict(attrs.get(FIXED_ATTR, {})),
            search_sweep=bool(attrs.get(SWEPT_ATTR)),
            failure_gate=bool(gate.get("enabled", True)), failure_threshold=gate.get("threshold"))
        return cls(spec, tuple(attrs.get(SWEPT_ATTR, [])),
                   tuple(provenance.get(CO_STUDIES_KEY, [])), provenance.get(CO_WITH_KEY))

    def resume_spec(self, n_trials: int | None = None) -> StudySpec:
        """The spec a resume runs on: the stored one with ``n_trials`` (None: the stored budget)
        and none of the one-time requests of a start (the engine default and enqueued configs
        were queued then). Its paired repeats are the study's own, as every setting is."""
        return replace(self.spec, n_trials=self.spec.n_trials if n_trials is None else n_trials,
                       include_default=False, enqueued=())


def co_studies_of(study: StudyRecord) -> tuple[str, ...]:
    """The studies measured alongside ``study`` (read without building its spec, so it also
    answers for a study no driver can resume: an imported one, a cross-check's)."""
    if study.spec is not None:
        return tuple(study.spec.get("co_measured", ()))
    return tuple(study.data_provenance.get(CO_STUDIES_KEY, []))

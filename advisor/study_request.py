"""One study request, planned once for every front door.

``advisor tune``, ``POST /v1/studies`` and sweep files each translate their input into a
:class:`StudyRequest`; :func:`plan_study` checks it against the target registry and the store and
returns the :class:`StudyPlan` to run: the resolved SLO, objective, workload and preset, the
sampler (one list, :data:`advisor.samplers.SAMPLERS`), the study's name (given, or derived so
that the same request names the same study), and, for a resume, that the stored study was asked
for with the same settings. A rule changed here changes for every door at once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from advisor.errors import SearchSpaceError, StudyError, did_you_mean
from advisor.front_door import DEFAULT_TRIALS, Door
from advisor.inputs import check_numbers, check_study_name, requested_slo
from advisor.objective import Objective
from advisor.presets import resolve_workload
from advisor.samplers import DEFAULT_SAMPLER, SAMPLERS
from advisor.study_spec import CoMeasured, StoredStudy, StudySpec, complete_enqueued
from knowledge.model_choices import DEFAULT_FAILURE_THRESHOLD as DEFAULT_THRESHOLD
from objectives import SLO
from objectives.registry import get_target
from objectives.target import Target
from objectives.workload import Workload
from search_spaces import SearchSpace

if TYPE_CHECKING:  # the store (SQLAlchemy) is opened only once a request passes its checks
    from knowledge import StudyRecord, TrialStore

__all__ = ["DEFAULT_SAMPLER", "DEFAULT_TRIALS", "Door", "StudyPlan", "StudyRequest",
           "check_sampler", "default_study_name", "plan_study", "resolve_objective",
           "resolve_slo", "suggested_tune_command"]

#: Store key of the studies measured alongside a study (``--also-rate``), as the driver keeps it.
_CO_STUDIES = "co_measured_studies"


@dataclass(frozen=True)
class StudyRequest:
    """A tuning study as a front door asks for it, before any check. ``None`` means the
    target's default (SLO, objective, workload) or a derived value (name)."""

    target: str
    slo: str | None = None
    objective: str | None = None
    #: A preset name, a workload file (not ``from_client``), or a workload already resolved.
    workload: str | Workload | None = None
    workload_params: Mapping[str, Any] = field(default_factory=dict)
    #: The request came over the network: presets only, overrides checked against the preset.
    from_client: bool = False
    #: Search trials (None: :data:`DEFAULT_TRIALS` for a new study; a resume keeps its own).
    trials: int | None = None
    #: None: :data:`DEFAULT_SAMPLER` for a new study; a resume keeps its own (so for ``seed``,
    #: ``search_sweep`` and ``paired_repeats``: a value given on resume must match, or for the
    #: budget, the repeats and the gate, is an explicit change).
    sampler: str | None = None
    seed: int | None = None
    startup_trials: int | None = None
    include_default: bool = True
    fixed: Mapping[str, Any] = field(default_factory=dict)
    enqueued: tuple[Mapping[str, Any], ...] = ()
    paired_repeats: int | None = None
    search_sweep: bool | None = None
    #: None: on for a new study; a resumed study keeps what it recorded.
    failure_gate: bool | None = None
    failure_threshold: float | None = None
    #: Arrival rates also measured on every trial's engine start, as studies of their own.
    also_rates: tuple[float, ...] = ()
    warm_start: bool = True
    name: str | None = None
    #: A name a user chose (checked as a new study's name); False for names the advisor derives.
    user_named: bool = True
    resume: bool = False
    door: Door = field(default_factory=Door)


@dataclass(frozen=True)
class StudyPlan:
    """What to run: a new study (``spec``), or the stored study ``spec.name`` continued
    (``resume``; the driver then reads its settings from the store)."""

    spec: StudySpec
    resume: bool
    warm_start: bool
    #: The stored study a resume continues.
    stored: StudyRecord | None = None
    #: A resume's explicit changes to the stored settings, one line each (a larger budget...).
    changes: tuple[str, ...] = ()
    #: A resume's new search budget (None: the study keeps its own).
    search_trials: int | None = None


def check_sampler(name: str) -> str:
    """``name`` when it names a sampler, else :class:`StudyError` naming them."""
    if name not in SAMPLERS:
        raise StudyError(f"unknown sampler {name!r}; choose one of {', '.join(SAMPLERS)}")
    return name


def resolve_slo(target: Target, text: str | None) -> SLO:
    """The SLO asked for (the target's default when ``None``), on metrics ``target`` reports."""
    slo = requested_slo(target.default_slo if text is None else text,
                        target.reported_metrics())
    slo.check_metrics(target.name, target.reported_metrics())
    return slo


def resolve_objective(target: Target, text: str | None) -> Objective:
    """The objective asked for (the target's default when ``None``); ``target`` must report its
    metric, else :class:`StudyError`."""
    objective = Objective.parse(target.default_objective if text is None else text)
    reported = target.reported_metrics()
    if objective.metric not in reported:
        raise StudyError(f"target {target.name!r} does not report the objective metric "
                         f"{objective.metric!r}; its metrics: {', '.join(sorted(reported))}")
    return objective


def default_study_name(target: str, wl: Workload, slo: str, objective: str) -> str:
    """The name a study gets when none is given: the same target, workload, SLO and objective
    name the same study, so asking again with ``resume`` continues it."""
    digest = hashlib.sha256(f"{wl.spec_hash}|{slo}|{objective}".encode()).hexdigest()[:6]
    return f"{target}-{wl.name}-{digest}"


def plan_study(request: StudyRequest,
               store: TrialStore | Callable[[], TrialStore] | None = None) -> StudyPlan:
    """Check ``request`` and plan it; raises an :class:`~advisor.errors.AdvisorError` subclass
    naming what is wrong. Without ``store`` only the request itself is checked (a sweep file
    when it is loaded); with it, also the name against the stored studies and a resume against
    the study it continues. ``store`` may be a function opening it, called once the request
    itself passed its checks: a bad request then opens no store (nor loads its libraries)."""
    target = get_target(request.target)
    slo = resolve_slo(target, request.slo or None)
    objective = resolve_objective(target, request.objective or None)
    wl = _workload(target, request)
    fixed = _check_fixed(target.space(), request.fixed)
    sampler = check_sampler(request.sampler or DEFAULT_SAMPLER)
    name = request.name or default_study_name(request.target, wl, str(slo), str(objective))
    co_measured = _co_measured(request, name, wl)
    if callable(store):
        store = store()
    stored = store.get_study(name) if store is not None else None
    if request.name and request.user_named and (store is None or stored is None):
        check_study_name(request.name)  # a new study's name: a plain word
    changes: tuple[str, ...] = ()
    search_trials: int | None = None
    if stored is not None and request.resume:
        _check_resume(request, stored, slo, objective, wl, co_measured)
        kept = StoredStudy.of(stored)
        changes, search_trials = _resume_changes(request, kept)
    elif stored is not None:
        n = len(store.trials_of_study(stored.id or 0)) if store is not None else 0
        raise StudyError(f"a study named {name!r} already exists ({n} trials); "
                         f"{request.door.continue_hint}, or choose another {request.door.name}")
    enqueued = complete_enqueued(target.space(), fixed, request.enqueued)
    if stored is not None:  # a resume runs on the stored settings, with the changes asked for
        kept = StoredStudy.of(stored)
        base = kept.spec
        spec = dataclasses.replace(
            base, n_trials=search_trials or _search_of(kept), co_measured=co_measured,
            include_default=False, enqueued=(),
            paired_repeats=_given(request.paired_repeats, base.paired_repeats),
            failure_gate=_given(request.failure_gate, base.failure_gate),
            failure_threshold=_given(request.failure_threshold, base.failure_threshold))
    else:
        spec = StudySpec(
            name=name, target=request.target, slo=slo, objective=objective, workload=wl,
            n_trials=request.trials or DEFAULT_TRIALS, sampler=sampler, seed=request.seed,
            startup_trials=request.startup_trials, include_default=request.include_default,
            co_measured=co_measured, fixed=fixed, enqueued=tuple(enqueued),
            paired_repeats=request.paired_repeats, search_sweep=bool(request.search_sweep),
            failure_gate=True if request.failure_gate is None else request.failure_gate,
            failure_threshold=request.failure_threshold, warm_start=request.warm_start)
    return StudyPlan(spec, resume=stored is not None, warm_start=request.warm_start,
                     stored=stored, changes=changes, search_trials=search_trials)


def _given(value: Any, stored: Any) -> Any:
    return stored if value is None else value


def _search_of(kept: StoredStudy) -> int:
    return kept.search_trials if kept.search_trials is not None else kept.spec.n_trials


def _resume_changes(request: StudyRequest, kept: StoredStudy
                    ) -> tuple[tuple[str, ...], int | None]:
    """A resume's options against the stored settings: the search budget, the paired repeats
    and the failure gate may change (each said in one line); the sampler, its seed and the
    search sweep define the search, and a value that differs is refused."""
    door, spec, name = request.door, kept.spec, kept.spec.name
    refused = []
    if request.sampler is not None and request.sampler != spec.sampler:
        refused.append(f"{door.sampler} {spec.sampler!r} != {request.sampler!r}")
    if request.seed is not None and request.seed != spec.seed:
        refused.append(f"{door.seed} {spec.seed!r} != {request.seed!r}")
    if request.search_sweep is not None and request.search_sweep != spec.search_sweep:
        refused.append(f"{door.search_sweep} {spec.search_sweep} != {request.search_sweep}")
    if refused:
        raise StudyError(f"{door.resume} of study {name!r} with different settings: "
                         f"{'; '.join(refused)}. Resume without them to continue it as it "
                         f"was started, or start a new study with another {door.name}")
    changes = []
    search = _search_of(kept)
    new_search = None
    if request.trials is not None and request.trials != search:
        new_search = request.trials
        changes.append(f"study {name!r}: search budget {search} -> {request.trials} trials "
                       f"({door.trials})")
    if request.paired_repeats is not None and request.paired_repeats != spec.paired_repeats:
        changes.append(f"study {name!r}: paired repeats {spec.paired_repeats} -> "
                       f"{request.paired_repeats} ({door.paired_repeats})")
    if request.failure_gate is not None and request.failure_gate != spec.failure_gate:
        changes.append(f"study {name!r}: failure gate "
                       f"{'on -> off' if spec.failure_gate else 'off -> on'} "
                       f"({door.failure_gate})")
    threshold = spec.failure_threshold or DEFAULT_THRESHOLD
    if request.failure_threshold is not None and request.failure_threshold != threshold:
        changes.append(f"study {name!r}: failure threshold {threshold:g} -> "
                       f"{request.failure_threshold:g} ({door.failure_threshold})")
    return tuple(changes), new_search


def _workload(target: Target, request: StudyRequest) -> Workload:
    if isinstance(request.workload, Workload):
        return request.workload
    return resolve_workload(target, request.workload, request.workload_params,
                            from_client=request.from_client)


def _check_fixed(space: SearchSpace, fixed: Mapping[str, Any]) -> dict[str, Any]:
    """Fixed knob values, each checked against its knob's type and static range."""
    problems: list[str] = []
    clean: dict[str, Any] = {}
    for name, value in fixed.items():
        if name not in space:
            problems.append(f"unknown knob {name!r}"
                            f"{did_you_mean(name, [k.name for k in space.knobs])}")
            continue
        knob = space.knob(name)
        if knob.type == "int" and isinstance(value, float) and value.is_integer():
            value = int(value)
        why = knob.check_value(value, {})
        if why:
            problems.append(f"{name}: {why}")
        clean[name] = value
    if problems:
        raise SearchSpaceError(f"invalid fixed knobs for target {space.target!r}: "
                               + "; ".join(problems) + ". Its knobs: "
                               + ", ".join(k.name for k in space))
    return clean


def _co_measured(request: StudyRequest, name: str, wl: Workload) -> tuple[CoMeasured, ...]:
    """The studies ``also_rates`` asks for: ``wl`` at each rate, named ``<study>@<rate>rps``."""
    rates = list(request.also_rates)
    if not rates:
        return ()
    # Here, not at import: the LLM workloads load numpy, which checking a vector-search study
    # request has no use for.
    from objectives.llm.workload import KIND as LLM_KIND
    from objectives.llm.workload import at_rate

    flag = request.door.also_rate
    if wl.kind != LLM_KIND:
        raise StudyError(f"{flag} needs an {LLM_KIND!r} workload (an LLM serving "
                         f"target), but workload {wl.name!r} is of kind {wl.kind!r}")
    if len(set(rates)) != len(rates):
        raise StudyError(f"{flag} values must differ, got {rates}")
    return tuple(CoMeasured(f"{name}@{rate:g}rps", at_rate(wl, rate, seed_offset=i + 1))
                 for i, rate in enumerate(rates))


def _check_resume(request: StudyRequest, stored: StudyRecord, slo: SLO, objective: Objective,
                  wl: Workload, co_measured: tuple[CoMeasured, ...]) -> None:
    """A resume continues the stored study as it was asked for: settings the request gives
    explicitly must match it, and options that only apply when a study starts are refused."""
    door = request.door
    if request.slo or request.objective or request.workload or request.workload_params:
        diffs = []
        if stored.target != request.target:
            diffs.append(f"target {stored.target!r} != {request.target!r}")
        if stored.slo != str(slo):
            diffs.append(f"SLO {stored.slo!r} != {str(slo)!r}")
        if (stored.objective_metric, stored.objective_direction) != (objective.metric,
                                                                      objective.direction):
            diffs.append(f"objective {stored.objective_direction}:{stored.objective_metric} "
                         f"!= {objective}")
        if stored.workload_hash != wl.spec_hash:
            diffs.append("the workload differs")
        if diffs:
            raise StudyError(f"{door.resume} of study {stored.name!r} with different settings: "
                             f"{'; '.join(diffs)}. Resume with the original options, or start "
                             f"a new study with another {door.name}")
    stored_co = stored.data_provenance.get(_CO_STUDIES, [])
    if co_measured and [c.name for c in co_measured] != stored_co:
        raise StudyError(f"{door.resume} of study {stored.name!r} with other {door.also_rate} "
                         f"values: it is measured with {stored_co or 'no other study'}")
    if request.enqueued or request.startup_trials is not None:
        flag = door.enqueue if request.enqueued else door.startup_trials
        raise StudyError(f"{flag} applies when a study starts; study {stored.name!r} exists "
                         f"(start a new one with another {door.name})")


def suggested_tune_command(target: str, *, slo: str | None = None,
                           objective: str | None = None, model: str | None = None,
                           workload: str | None = None,
                           workload_params: Mapping[str, Any] | None = None,
                           trials: int | None = None,
                           enqueue: Sequence[Mapping[str, Any]] = ()) -> str:
    """An ``advisor tune`` command line that `tune` accepts, for ``target`` under ``slo``
    optimising ``objective`` (None: the target's defaults, left off the line), serving
    ``model`` (LLM targets), at the preset ``workload`` with ``workload_params`` overridden,
    measuring each (partial) config of ``enqueue`` first after the engine default.

    The line is built from the options and then read back the way `tune` reads them (each
    ``--workload-param`` VALUE as YAML, ``--model`` as the workload's ``model``) and planned
    by :func:`plan_study`, which runs the target's own workload checks; whatever `tune` would
    refuse (an unknown or mistyped parameter, a dataset larger than its corpus) raises the
    :class:`~advisor.errors.AdvisorError` `tune` would print, so no suggestion is refused when
    pasted."""
    import shlex

    import yaml

    from advisor.errors import WorkloadError
    from advisor.presets import check_model

    args = ["advisor", "tune", "--target", target]
    for flag, value in (("--slo", slo), ("--objective", objective), ("--model", model),
                        ("--workload", workload)):
        if value is not None:
            args += [flag, str(value)]
    params: dict[str, Any] = dict(workload_params or {})
    if "model" in params:
        raise WorkloadError("give the model as `model`, not as a workload parameter")
    for key, value in params.items():
        # Plain where YAML reads the text back as the same value, else as JSON (YAML reads it).
        text = (str(value).lower() if isinstance(value, bool)
                else json.dumps(value) if isinstance(value, dict | list) else str(value))
        if yaml.safe_load(text) != value or isinstance(yaml.safe_load(text), str) != isinstance(
                value, str):
            text = json.dumps(value)
        args += ["--workload-param", f"{key}={text}"]
    for config in enqueue:
        args += ["--enqueue", json.dumps(dict(config), sort_keys=True)]
    if trials is not None:
        args += ["--trials", str(trials)]
    # Read back as `advisor tune` reads its options, then planned as it plans them.
    read: dict[str, Any] = {}
    values = iter(args)
    for arg in values:
        if arg == "--workload-param":
            key, _, text = next(values).partition("=")
            read[key] = check_numbers(yaml.safe_load(text), f"--workload-param {key}")
    if model is not None:
        check_model(model)
        read["model"] = model
    enqueued = tuple(yaml.safe_load(args[i + 1]) for i, a in enumerate(args) if a == "--enqueue")
    plan = plan_study(StudyRequest(target=target, slo=slo, objective=objective,
                                   workload=workload, workload_params=read, trials=trials,
                                   enqueued=enqueued))
    get_target(target).check_workload(plan.spec.workload)
    return shlex.join(args)

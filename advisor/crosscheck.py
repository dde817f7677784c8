"""``advisor crosscheck``: the advisor's client, a reference harness and the server's own metrics,
side by side on the same server, the same requests and the same rates.

A measuring client can be part of what it measures (docs/metrics.md): this is how a GPU run shows
that it is not, before any trial of it is trusted. For each config (the engine default unless
others are given) and each rate, the advisor's client measures the workload exactly as a trial
does (warm-up, replay, server scrape, validity gate), then the target's reference harness (the
engine's own benchmark client) replays the same requests, exported as ShareGPT, with the server's
metrics scraped around it too. The workload's lengths are clamped to what the harness replays so
both send the same requests. The report gives every figure of both harnesses and the server's
view of each window, with the advisor/reference ratios and whether the advisor's TTFT p95, TPOT
p95 and output tokens/s are within :data:`GOAL_RELATIVE` of the reference or agree with the
server (the server decides when the reference is itself client-bound).

With ``repeats`` the advisor's client measures every config at every rate that many times,
interleaved (round 1: each rate, each config; round 2: ...), each measurement optionally stored
as a trial (``store_as``: one study per rate, ``<name>@<rate>rps``). With ``co_resident`` every
config's server is up at once, each limited to ``memory_share`` of the accelerator, so configs
alternate within a round (X Y X Y ...) without restarts: the paired same-lease comparison
docs claims need.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from advisor import __version__
from advisor.errors import AdvisorError, WorkloadError
from advisor.inputs import requested_slo
from advisor.trial_records import new_trial_record, trial_hardware_key
from knowledge import SLOMarginRecord, StudyRecord, TrialRecord, TrialStatus, TrialStore
from knowledge.models import StudyStatus
from knowledge.validity import is_usable
from objectives import SLO, parse_slo
from objectives.hardware import fingerprint
from objectives.llm.reference import ReferenceHarness, ReferenceRun, clamp_lengths
from objectives.llm.server import (
    ServingWorkload,
    client_processes_max_param,
    client_processes_param,
    measure_endpoint,
)
from objectives.llm.server_metrics import (
    GaugeSampler,
    ServerMetricsError,
    reset_cache,
    scrape,
    summarize_window,
)
from objectives.llm.serving_target import RunningServer, ServingTarget
from objectives.llm.validity import judge
from objectives.llm.workload import at_rate
from objectives.measurement import Measurement
from objectives.registry import get_target
from objectives.runner import error_type_of
from objectives.workload import Workload

__all__ = ["GOAL_RELATIVE", "CrosscheckPlan", "CrosscheckReport", "Measured", "compare_rounds",
           "compare_row", "run_crosscheck", "write_report"]

#: The agreement the issue asks of the advisor's client: within 15 % of the reference.
GOAL_RELATIVE = 0.15
#: The figures the goal is judged on (TTFT p95, TPOT p95, output tokens/s).
GOAL_METRICS: tuple[str, ...] = ("ttft_p95_ms", "tpot_p95_ms", "output_tokens_per_s")
#: How the gate's check names map to the goal's figures.
_GATE_CHECK = {"ttft_p95_ms": "ttft_p95_ms", "tpot_p95_ms": "tpot_p95_ms",
               "output_tokens_per_s": "output_tokens"}
_REFERENCE_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class CrosscheckPlan:
    """What to measure. ``configs`` are ``(label, partial config)``; an empty config is the
    engine's default. ``base_url`` measures a running server instead (one config, "as running")."""

    target: str
    workload: Workload
    rates: tuple[float, ...]
    configs: tuple[tuple[str, Mapping[str, Any]], ...] = (("default", {}),)
    repeats: int = 1
    reference_repeats: int = 1
    co_resident: bool = False
    memory_share: float | None = None
    base_url: str | None = None
    served_model: str | None = None
    store_as: str | None = None
    slo: str | None = None
    #: The configs the reference harness also measures (None: all of them).
    reference_configs: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not self.rates:
            raise AdvisorError("crosscheck needs at least one --rate")
        if any(not r > 0 for r in self.rates):
            raise AdvisorError(f"every --rate must be > 0, got {list(self.rates)}")
        if len(set(self.rates)) != len(self.rates):
            raise AdvisorError(f"--rate values must differ, got {list(self.rates)}")
        if not 1 <= self.repeats <= 20:
            raise AdvisorError(f"`1 <= --repeats <= 20` must hold, got {self.repeats}")
        if not 0 <= self.reference_repeats <= self.repeats:
            raise AdvisorError(f"`0 <= --reference-repeats <= --repeats` must hold, got "
                               f"{self.reference_repeats} and {self.repeats}")
        labels = [label for label, _ in self.configs]
        if not labels or len(set(labels)) != len(labels):
            raise AdvisorError(f"configs need distinct labels, got {labels}")
        if self.base_url is not None and (len(self.configs) != 1 or self.co_resident):
            raise AdvisorError("--base-url measures the running server as it is: no --config "
                               "and no --co-resident")
        if self.reference_configs is not None and (
                unknown := sorted(set(self.reference_configs) - set(labels))):
            raise AdvisorError(f"--reference-config names unknown configs {unknown}; the "
                               f"configs are {labels}")
        if self.co_resident and len(self.configs) < 2:
            raise AdvisorError("--co-resident needs at least two configs")
        if self.co_resident and self.memory_share is None:
            raise AdvisorError("--co-resident needs --memory-share")
        if self.memory_share is not None and not 0 < self.memory_share * len(self.configs) <= 1:
            raise AdvisorError(f"{len(self.configs)} servers of --memory-share "
                               f"{self.memory_share} do not fit on one accelerator")


@dataclass
class Measured:
    """One measurement: the advisor's client (``kind="advisor"``) or the reference harness."""

    kind: str
    config: str
    rate_rps: float
    round: int
    metrics: dict[str, float] = field(default_factory=dict)
    server: dict[str, Any] = field(default_factory=dict)
    validity: str | None = None
    reasons: list[str] = field(default_factory=list)
    checks: list[dict[str, Any]] = field(default_factory=list)
    client_processes: int | None = None
    error: str | None = None
    #: The stored trial's ``error_type`` of a measurement that failed (``error``: the advisor's
    #: own checks, e.g. every request refused; ``rejected`` / ``engine_start``: the config).
    error_type: str | None = None
    trial_id: int | None = None
    at_s: float = 0.0
    argv: list[str] | None = None
    #: The advisor measurement's full trial details (what a stored trial keeps; not reported).
    details: dict[str, Any] | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out.pop("details")
        return out


@dataclass
class CrosscheckReport:
    """Everything one crosscheck measured, with the plan and the facts of the run."""

    session: str
    plan: dict[str, Any]
    facts: dict[str, Any]
    measured: list[Measured] = field(default_factory=list)
    servers: dict[str, dict[str, Any]] = field(default_factory=dict)

    def rows(self) -> list[dict[str, Any]]:
        """Per config and rate: the first round's advisor and reference figures, the server's
        view of each window, their ratios and the goal's verdict per figure."""
        out = []
        for label in dict.fromkeys(m.config for m in self.measured):
            for rate in dict.fromkeys(m.rate_rps for m in self.measured):
                adv = self._first("advisor", label, rate)
                ref = self._first("reference", label, rate)
                if adv is None:
                    continue
                out.append(compare_row(label, rate, adv, ref))
        return out

    def round_rows(self) -> list[dict[str, Any]]:
        """Per config and rate, every round in which both harnesses measured (the advisor's
        window, then the reference's, back to back): :func:`compare_rounds` of those pairs.
        Near a knee consecutive windows differ more than the harnesses do, so the goal is
        judged on the median of the per-round ratios, not on one pair."""
        out = []
        for label in dict.fromkeys(m.config for m in self.measured):
            for rate in dict.fromkeys(m.rate_rps for m in self.measured):
                pairs = []
                for m in self.measured:
                    if (m.kind, m.config, m.rate_rps) != ("advisor", label, rate) or m.error:
                        continue
                    ref = next((r for r in self.measured if r.kind == "reference"
                                and r.config == label and r.rate_rps == rate
                                and r.round == m.round and r.error is None), None)
                    if ref is not None:
                        pairs.append((m, ref))
                if pairs:
                    out.append(compare_rounds(label, rate, pairs))
        return out

    def _first(self, kind: str, label: str, rate: float) -> Measured | None:
        return next((m for m in self.measured if m.kind == kind and m.config == label
                     and m.rate_rps == rate and m.error is None), None)

    def to_lines(self) -> list[dict[str, Any]]:
        """The JSONL report: a header, one line per measurement, one per summary row."""
        return [{"type": "crosscheck", "session": self.session, "plan": self.plan,
                 "facts": self.facts, "servers": self.servers},
                *({"type": "measurement", **m.to_dict()} for m in self.measured),
                *({"type": "row", **row} for row in self.rows()),
                *({"type": "round_row", **row} for row in self.round_rows())]


def _server_figure(server: Mapping[str, Any], metric: str) -> float | None:
    family, _, stat = metric.partition("_")
    if metric == "output_tokens_per_s":
        value = server.get("output_tokens_per_s")
        return None if value is None else float(value)
    value = (server.get(family) or {}).get(stat)
    return None if value is None else float(value)


def compare_row(label: str, rate: float, adv: Measured, ref: Measured | None
                ) -> dict[str, Any]:
    """One config and rate side by side: each figure of the advisor, the reference and the
    server's view of each window, their ratio, and the goal's verdict on the goal figures."""
    row: dict[str, Any] = {"config": label, "rate_rps": rate,
                           "advisor_validity": adv.validity,
                           "reference_validity": None if ref is None else ref.validity,
                           "client_processes": adv.client_processes, "figures": {}}
    gate = {c["name"]: c for c in adv.checks}
    for metric in (*GOAL_METRICS, "ttft_p50_ms", "tpot_p50_ms", "itl_p50_ms", "itl_p95_ms",
                   "e2e_p95_ms", "requests_per_s"):
        a = adv.metrics.get(metric)
        r = None if ref is None else ref.metrics.get(metric)
        figure: dict[str, Any] = {"advisor": a, "reference": r,
                                  "server_advisor_window": _server_figure(adv.server, metric),
                                  "server_reference_window": None if ref is None
                                  else _server_figure(ref.server, metric)}
        if a is not None and r:
            figure["ratio"] = a / r
        if metric in GOAL_METRICS:
            near_reference = "ratio" in figure and abs(figure["ratio"] - 1) <= GOAL_RELATIVE
            check = gate.get(_GATE_CHECK[metric])
            agrees_server = None if check is None else bool(check["agrees"])
            figure["within_goal_of_reference"] = near_reference
            figure["agrees_with_server"] = agrees_server
            figure["goal_met"] = near_reference or bool(agrees_server)
        row["figures"][metric] = figure
    row["goal_met"] = all(row["figures"][m]["goal_met"] for m in GOAL_METRICS)
    return row


def compare_rounds(label: str, rate: float, pairs: list[tuple[Measured, Measured]]
                   ) -> dict[str, Any]:
    """One config and rate over several rounds, each an advisor window and the reference's
    window right after it: per goal figure the medians of both, the median and range of the
    per-round ratios, and how many advisor windows agreed with the server's view of them.

    The goal is met by a figure when the median ratio is within :data:`GOAL_RELATIVE` of 1, or
    when every advisor window agreed with its server (the server decides where the reference
    harness is itself the one that drifts)."""
    rows = [compare_row(label, rate, adv, ref) for adv, ref in pairs]
    out: dict[str, Any] = {"config": label, "rate_rps": rate, "rounds": len(pairs),
                           "advisor_validity": [adv.validity for adv, _ in pairs],
                           "reference_validity": [ref.validity for _, ref in pairs],
                           "figures": {}}
    for metric in GOAL_METRICS:
        figs = [row["figures"][metric] for row in rows]
        ratios = [f["ratio"] for f in figs if "ratio" in f]
        agree = [f["agrees_with_server"] for f in figs if f["agrees_with_server"] is not None]
        figure: dict[str, Any] = {
            "advisor_median": _median([f["advisor"] for f in figs if f["advisor"] is not None]),
            "reference_median": _median([f["reference"] for f in figs
                                         if f["reference"] is not None]),
            "ratio_median": _median(ratios),
            "ratio_range": [min(ratios), max(ratios)] if ratios else None,
            "agrees_with_server": f"{sum(agree)}/{len(figs)}"}
        near = figure["ratio_median"] is not None and abs(
            figure["ratio_median"] - 1) <= GOAL_RELATIVE
        figure["within_goal_of_reference"] = near
        figure["goal_met"] = near or (len(agree) == len(figs) and all(agree))
        out["figures"][metric] = figure
    out["goal_met"] = all(out["figures"][m]["goal_met"] for m in GOAL_METRICS)
    return out


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


# -- running it -----------------------------------------------------------------------------------

ProgressFn = Callable[[str], None]


def _serving_target(name: str) -> ServingTarget:
    target = get_target(name)
    if not isinstance(target, ServingTarget):
        raise AdvisorError(f"crosscheck measures LLM serving targets; {name!r} is not one")
    return target


def _workload_at(plan: CrosscheckPlan, rate: float, position: int) -> Workload:
    return at_rate(plan.workload, rate, seed_offset=position + 1)


def run_crosscheck(plan: CrosscheckPlan, *, cache_dir: Path, store: TrialStore | None = None,
                   progress: ProgressFn | None = None,
                   on_measured: Callable[[Measured], None] | None = None,
                   metrics_sample: Path | None = None) -> CrosscheckReport:
    """Run ``plan`` (see the module docstring) and return its report; with ``store`` and
    ``plan.store_as``, every advisor measurement is stored as a trial as it is taken. With
    ``metrics_sample``, the server's raw metrics text after the first measurement is written
    there (a real exposition for the parser's tests)."""
    target = _serving_target(plan.target)
    harness = target.reference_harness() if plan.reference_repeats else None
    if plan.reference_repeats and harness is None:
        raise AdvisorError(f"the {plan.target} target has no reference harness; pass "
                           "--reference-repeats 0 to measure without one")
    if harness is not None and (why := harness.unavailable_reason()) is not None:
        raise AdvisorError(why)
    try:
        return _run(plan, target, harness, cache_dir=cache_dir, store=store,
                    say=progress or (lambda _msg: None), on_measured=on_measured,
                    metrics_sample=metrics_sample)
    finally:
        if harness is not None:
            harness.close()


def _run(plan: CrosscheckPlan, target: ServingTarget, harness: ReferenceHarness | None, *,
         cache_dir: Path, store: TrialStore | None, say: ProgressFn,
         on_measured: Callable[[Measured], None] | None,
         metrics_sample: Path | None) -> CrosscheckReport:
    workload = plan.workload
    clamped: dict[str, Any] = {}
    if harness is not None:
        workload, clamped = clamp_lengths(workload, harness.limits,
                                          target_keys=target.target_params)
        plan = dataclasses.replace(plan, workload=workload)
    if plan.base_url is None:
        target.check_available()
    workloads = [_workload_at(plan, rate, i) for i, rate in enumerate(plan.rates)]
    series = target.load_series(workloads, cache_dir)
    report = CrosscheckReport(
        session=uuid.uuid4().hex[:12], plan=_plan_dict(plan),
        facts={"hardware": fingerprint(), "advisor_version": __version__,
               "engine_versions": target.engine_versions(), "clamped_lengths": clamped,
               "reference": None if harness is None else harness.name,
               "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    slo = requested_slo(plan.slo or target.default_slo)
    recorder = (_Recorder(store, plan, target, report.session)
                if store is not None and plan.store_as else None)
    started = time.perf_counter()

    def measure(running: _Endpoint, label: str, rate_index: int, round_: int) -> None:
        served = series[rate_index]
        rate = plan.rates[rate_index]
        say(f"[{label}] {rate:g} req/s, round {round_ + 1}/{plan.repeats}: advisor client")
        one = _measure_advisor(target, running, served, label, rate, round_, slo)
        one.at_s = time.perf_counter() - started
        if recorder is not None:
            one.trial_id = (recorder.record(one, running, workloads[rate_index])
                            if one.error is None
                            else recorder.record_failure(one, running, workloads[rate_index]))
        report.measured.append(one)
        if on_measured:
            on_measured(one)
        if metrics_sample is not None and not metrics_sample.exists() and target.server_metrics:
            _save_metrics_text(running.base_url + target.server_metrics.path, metrics_sample)
        if harness is not None and round_ < plan.reference_repeats and (
                plan.reference_configs is None or label in plan.reference_configs):
            say(f"[{label}] {rate:g} req/s, round {round_ + 1}: {harness.name}")
            ref = _measure_reference(target, harness, running, served, label, rate, round_,
                                     seed=served.spec.seed + round_)
            ref.at_s = time.perf_counter() - started
            report.measured.append(ref)
            if on_measured:
                on_measured(ref)

    configs = [(label, dict(config)) for label, config in plan.configs]
    if plan.base_url is not None:
        endpoint = _Endpoint(plan.base_url, plan.served_model or series[0].model.label, {}, None)
        for round_ in range(plan.repeats):
            for i in range(len(plan.rates)):
                measure(endpoint, configs[0][0], i, round_)
        return report
    if plan.co_resident:
        assert plan.memory_share is not None
        configs = [(label, target.with_memory_share(config, plan.memory_share))
                   for label, config in configs]
        with contextlib.ExitStack() as stack:
            endpoints = []
            for label, config in configs:
                say(f"[{label}] starting the server (memory share {plan.memory_share:g})")
                running = stack.enter_context(target.serve(config, series[0], cache_dir))
                endpoints.append(_Endpoint(running.base_url, target.served_model_name(series[0]),
                                           running.config, running))
            for round_ in range(plan.repeats):
                for i in range(len(plan.rates)):
                    for (label, _), endpoint in zip(configs, endpoints, strict=True):
                        endpoint.check_alive(label)
                        measure(endpoint, label, i, round_)
        for (label, _), endpoint in zip(configs, endpoints, strict=True):
            report.servers[label] = _server_facts(endpoint)
        if recorder is not None and len(configs) == 2:
            report.facts["paired_comparisons"] = recorder.store_comparisons(
                [endpoint.config for endpoint in endpoints], [label for label, _ in configs])
        return report
    for label, config in configs:
        say(f"[{label}] starting the server")
        with target.serve(config, series[0], cache_dir) as running:
            endpoint = _Endpoint(running.base_url, target.served_model_name(series[0]),
                                 running.config, running)
            for round_ in range(plan.repeats):
                for i in range(len(plan.rates)):
                    endpoint.check_alive(label)
                    measure(endpoint, label, i, round_)
        report.servers[label] = _server_facts(endpoint)
    return report


@dataclass
class _Endpoint:
    base_url: str
    served_model: str
    config: dict[str, Any]
    running: RunningServer | None

    def check_alive(self, label: str) -> None:
        if self.running is not None:
            self.running.check_alive(f"crosscheck of {label}")


def _server_facts(endpoint: _Endpoint) -> dict[str, Any]:
    if endpoint.running is None:
        return {}
    facts = {k: v for k, v in endpoint.running.facts.items() if k != "engine_log_tail"}
    return {"config": endpoint.config, **facts, "engine_versions": endpoint.running.versions}


def _measure_advisor(target: ServingTarget, endpoint: _Endpoint, served: ServingWorkload,
                     label: str, rate: float, round_: int, slo: SLO) -> Measured:
    one = Measured("advisor", label, rate, round_)
    try:
        if endpoint.running is not None:
            metrics, details = target.measure(endpoint.running, served)
        else:
            metrics, details = measure_endpoint(
                endpoint.base_url, endpoint.served_model, served,
                extra_body={"ignore_eos": True},
                client_processes=client_processes_param(served.target_params),
                max_client_processes=client_processes_max_param(served.target_params),
                vocabulary=target.server_metrics)
    except AdvisorError as exc:
        one.error, one.error_type = f"{type(exc).__name__}: {exc}", error_type_of(exc)
        return one
    # Goodput at the plan's SLO (the per-request bounds), as a stored trial reports it.
    scored = target.apply_slo(Measurement(metrics=metrics, engine_versions={}, details=details,
                                          duration_s=0.0), slo)
    metrics = dict(scored.metrics)
    one.metrics, one.server = metrics, details.get("server_metrics", {})
    one.validity, one.reasons = details.get("validity"), details.get("validity_reasons", [])
    one.checks = details.get("validity_checks", [])
    one.client_processes = details.get("client_processes")
    one.details = details
    return one


def _measure_reference(target: ServingTarget, harness: ReferenceHarness, endpoint: _Endpoint,
                       served: ServingWorkload, label: str, rate: float, round_: int, *,
                       seed: int) -> Measured:
    one = Measured("reference", label, rate, round_)
    vocabulary = target.server_metrics
    before = None
    with tempfile.TemporaryDirectory(prefix="advisor-crosscheck-") as tmp:
        if vocabulary is not None:
            reset_cache(endpoint.base_url, vocabulary)
            with contextlib.suppress(ServerMetricsError):
                before = scrape(endpoint.base_url, vocabulary)
        sampler = (GaugeSampler(endpoint.base_url, vocabulary)
                   if vocabulary is not None and before is not None
                   else contextlib.nullcontext())
        try:
            with sampler:
                run: ReferenceRun = harness.run(
                    base_url=endpoint.base_url, served_model=endpoint.served_model,
                    tokenizer=served.model.tokenizer_path, requests=served.requests,
                    rate_rps=rate, seed=seed, workdir=Path(tmp), timeout_s=_REFERENCE_TIMEOUT_S)
        except (RuntimeError, ValueError, OSError) as exc:
            one.error = str(exc)[-2000:]
            return one
    one.metrics, one.argv = run.summary, run.argv
    window = float(run.raw.get("duration") or run.duration_s)
    one.server = {"available": False, "reason": "no server metrics"}
    if vocabulary is not None and before is not None:
        try:
            after = scrape(endpoint.base_url, vocabulary)
            one.server = {"available": True, **summarize_window(
                before, after, vocabulary, window_s=window,
                gauges=sampler.trace if isinstance(sampler, GaugeSampler) else None)}
        except ServerMetricsError as exc:
            one.server = {"available": False, "reason": str(exc)}
    verdict = judge(run.records, one.server if one.server.get("available") else None,
                    capped=True)
    one.validity, one.reasons = verdict.validity, list(verdict.reasons)
    one.checks = [dataclasses.asdict(c) for c in verdict.checks]
    return one


def _save_metrics_text(url: str, path: Path) -> None:
    with contextlib.suppress(httpx.HTTPError, OSError):
        response = httpx.get(url, timeout=10.0, trust_env=False)
        if response.status_code == 200:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(response.text)


def _plan_dict(plan: CrosscheckPlan) -> dict[str, Any]:
    return {"target": plan.target, "workload": plan.workload.spec,
            "rates": list(plan.rates), "configs": [[label, dict(c)] for label, c in plan.configs],
            "repeats": plan.repeats, "reference_repeats": plan.reference_repeats,
            "co_resident": plan.co_resident, "memory_share": plan.memory_share,
            "base_url": plan.base_url, "store_as": plan.store_as,
            "reference_configs": None if plan.reference_configs is None
            else list(plan.reference_configs)}


# -- storing the advisor's measurements as trials ------------------------------------------------

class _Recorder:
    """Stores each advisor measurement as a trial of ``<store_as>@<rate>rps`` (a study recorded
    here, readable but not resumable: its configs were not chosen by a sampler)."""

    def __init__(self, store: TrialStore, plan: CrosscheckPlan, target: ServingTarget,
                 session: str) -> None:
        self.store, self.plan, self.target, self.session = store, plan, target, session
        self.slo: SLO = parse_slo(plan.slo or target.default_slo)
        self.objective = target.default_objective
        self.default = target.space().default_config()
        self.studies: dict[float, StudyRecord] = {}

    def _study(self, rate: float, workload: Workload) -> StudyRecord:
        if rate in self.studies:
            return self.studies[rate]
        name = f"{self.plan.store_as}@{rate:g}rps"
        study = self.store.get_study(name)
        if study is None:
            direction, _, metric = self.objective.partition(":")
            study = self.store.create_study(StudyRecord(
                name=name, target=self.plan.target, slo=str(self.slo),
                objective_metric=metric, objective_direction=direction,
                workload_spec=workload.spec, workload_hash=workload.spec_hash,
                sampler="none", seed=None, n_trials=0,
                hardware_key=trial_hardware_key(self.plan.target, fingerprint()),
                advisor_version=__version__,
                data_provenance={"recorded_by": "advisor crosscheck",
                                 "crosscheck_session": self.session,
                                 "co_resident": self.plan.co_resident,
                                 "memory_share": self.plan.memory_share}))
            self.store.set_study_status(study.id or 0, StudyStatus.FINISHED)
        elif study.workload_hash != workload.spec_hash:
            raise WorkloadError(f"study {name!r} holds another workload; choose another "
                                "--store-as")
        self.studies[rate] = study
        return study

    def _details(self, one: Measured, endpoint: _Endpoint) -> dict[str, Any]:
        """What a stored trial keeps of ``one``: its measurement details, the server's launch
        facts and where it came from."""
        details = dict(one.details or {})
        if endpoint.running is not None:
            details.update({k: v for k, v in endpoint.running.facts.items()})
        config = endpoint.config
        is_default = all(config.get(k) == v for k, v in self.default.items()) and not (
            self.plan.co_resident)
        details.update({"role": "engine-default" if is_default else "crosscheck",
                        "crosscheck": {"session": self.session, "config_label": one.config,
                                       "round": one.round, "co_resident": self.plan.co_resident,
                                       "memory_share": self.plan.memory_share}})
        return details

    def _start(self, one: Measured, endpoint: _Endpoint, workload: Workload) -> TrialRecord:
        """The trial row of ``one`` in its rate's study, started (numbered after the study's
        last trial)."""
        study = self._study(one.rate_rps, workload)
        config = endpoint.config
        hw = fingerprint()
        number = len(self.store.trials_of_study(study.id or 0))
        return self.store.start_trial(new_trial_record(
            study_id=study.id or 0, number=number, optuna_trial_id=None, target=self.plan.target,
            config=config, workload=workload, hardware=hw, details={}))

    def record_failure(self, one: Measured, endpoint: _Endpoint, workload: Workload) -> int:
        """Store a measurement that failed as a failed trial with its reason, nothing lost. Its
        ``error_type`` is the measurement's: ``error`` when the advisor's own checks stopped it
        (every request refused, say), which the failure model never reads as the config's
        fault."""
        rec = self._start(one, endpoint, workload)
        stored = self.store.fail_trial(
            rec.id or 0, error_type=one.error_type or "error", error=one.error or "",
            duration_s=0.0, details=self._details(one, endpoint))
        return stored.id or 0

    def record(self, one: Measured, endpoint: _Endpoint, workload: Workload) -> int:
        details = self._details(one, endpoint)
        measurement = self.target.apply_slo(
            Measurement(metrics=dict(one.metrics), engine_versions=self.target.engine_versions(),
                        details=details, duration_s=0.0), self.slo)
        rec = self._start(one, endpoint, workload)
        margins = [SLOMarginRecord(trial_id=0, metric=b.metric, op=b.op, threshold=b.threshold,
                                   value=float(measurement.metrics[b.metric]),
                                   margin=b.margin(float(measurement.metrics[b.metric])))
                   for b in self.slo.bounds if b.metric in measurement.metrics]
        metric = self.objective.partition(":")[2]
        usable = is_usable(measurement.details)
        stored = self.store.complete_trial(
            rec.id or 0, metrics=measurement.metrics, engine_versions=measurement.engine_versions,
            details=measurement.details, margins=margins,
            feasible=usable and len(margins) == len(self.slo.bounds)
            and all(m.margin <= 0 for m in margins),
            objective_value=float(measurement.metrics.get(metric, float("nan"))),
            duration_s=float(details.get("load_duration_s", 0.0)),
            status=TrialStatus.COMPLETE if usable else TrialStatus.INVALID)
        return stored.id or 0


    def store_comparisons(self, configs: list[dict[str, Any]], labels: list[str]
                          ) -> dict[str, Any]:
        """The paired comparison of two co-resident configs in each rate's study (the first
        against the second, which is the default when one of them is), stored with the study so
        the recommenders use it; returns each study's outcome."""
        from advisor.pairing import PROVENANCE_KEY, outcome_of_configs

        x, y = (1, 0) if not self.plan.configs[0][1] and self.plan.configs[1][1] else (0, 1)
        outcomes = {}
        for study in self.studies.values():
            trials = self.store.trials_of_study(study.id or 0)
            found = outcome_of_configs(trials, study, configs[x], configs[y], x=labels[x],
                                       y=labels[y])
            self.store.update_provenance(study.id or 0, {PROVENANCE_KEY: found})
            outcomes[study.name] = found
        return outcomes


def write_report(report: CrosscheckReport, path: Path) -> None:
    """Write the JSONL report (one object a line)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for line in report.to_lines():
            f.write(json.dumps(line, default=str) + "\n")


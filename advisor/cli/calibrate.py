"""`advisor calibrate`: pin the engine simulator's step-time model on this machine with one
engine start of the defaults and a short probe, and store it as a hardware profile
(advisor/calibrate.py, knowledge/profiles.py)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from advisor.cli.context import (
    MODEL_CONFIG_HELP,
    cli_settings,
    cli_store,
    err,
    model_option,
    one_line,
    out,
    parse_workload,
    sigterm_interrupts,
    workload_overrides,
)
from advisor.errors import AdvisorError
from objectives.registry import DEFAULT_SERVING_TARGET, get_target

if TYPE_CHECKING:
    from knowledge.models import TrialRecord
    from knowledge.profiles import HardwareProfile
    from knowledge.store import TrialStore

__all__ = ["calibrate_cmd"]


def _probe_trials(store: TrialStore, study: str) -> list[TrialRecord]:
    """The windows stored as ``<study>@<rate>rps``."""
    trials: list[TrialRecord] = []
    for record in store.list_studies():
        if record.name.startswith(study + "@") and record.id is not None:
            trials.extend(store.trials_of_study(record.id))
    return trials


def calibrate_cmd(
    target: Annotated[str, typer.Option(help="LLM serving target (see `advisor targets`).")
                      ] = DEFAULT_SERVING_TARGET,
    model: Annotated[str | None, typer.Option(help="Model shape (e.g. a built-in name).")] = None,
    model_config: Annotated[str | None, typer.Option(help=MODEL_CONFIG_HELP)] = None,
    workload: Annotated[str | None, typer.Option(
        help="Probe workload: a preset or file (default: the target's).")] = None,
    workload_param: Annotated[list[str] | None, typer.Option(
        help="Override a workload parameter (KEY=VALUE, VALUE as YAML).")] = None,
    rate: Annotated[list[float] | None, typer.Option(
        help="Probe arrival rates, req/s (default: 0.4, 1.2, 2.0 and 3.2 times the "
             "workload's).")] = None,
    from_study: Annotated[str | None, typer.Option(
        callback=one_line, help="Fit the windows already stored as <NAME>@<rate>rps (no "
                                "engine start).")] = None,
    store_as: Annotated[str | None, typer.Option(
        callback=one_line, help="Store the probe's windows as <NAME>@<rate>rps (default: "
                                "calibrate-<model>-<time>).")] = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="Also write the profile here as JSON.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the profile as JSON.")] = False,
) -> None:
    """Calibrate this machine: one engine start of the defaults, a probe ladder of arrival
    rates, the simulator's step-time model fitted to the server's own timings, stored as a
    hardware profile (shown by `advisor knowledge profiles`, exported with the knowledge)."""
    from advisor.calibrate import (
        calibrate_from_trials,
        probe_rates,
        probe_window_params,
        window_noise,
    )
    from advisor.crosscheck import CrosscheckPlan, run_crosscheck
    from knowledge.profiles import save_profile
    from objectives.llm.workload import LLMWorkloadSpec

    sigterm_interrupts()
    settings = cli_settings()
    store = cli_store(settings)
    started = time.perf_counter()
    if from_study is None:
        model = model_option(model, model_config)
        tgt = get_target(target)
        params = [*(workload_param or []), *([f"model={model}"] if model else [])]
        wl = parse_workload(tgt, workload, params)
        base_rate = LLMWorkloadSpec.from_workload(wl).arrival.rate_rps
        if not rate and base_rate is None:
            raise AdvisorError("the probe workload arrives at no rate: pass --rate")
        window = probe_window_params(workload_overrides(params), base_rate)
        if window:  # the probe's own window length, where the user set none
            wl = parse_workload(tgt, workload, [*window, *params])
        rates = tuple(rate) if rate else probe_rates(float(base_rate or 0.0))
        study = store_as or f"calibrate-{wl.params.get('model')}-{time.strftime('%m%d%H%M')}"
        plan = CrosscheckPlan(target=target, workload=wl, rates=rates, repeats=1,
                              reference_repeats=0, store_as=study)
        run_crosscheck(plan, cache_dir=settings.cache_dir, store=store,
                       progress=lambda msg: err.print(escape(msg), highlight=False))
    else:
        study = from_study
    trials = _probe_trials(store, study)
    if not trials:
        raise AdvisorError(f"no stored windows named {study}@<rate>rps")
    noise = window_noise(store.list_trials(), trials[0].target)
    profile = calibrate_from_trials(
        trials, noise=noise, noise_source=f"repeated windows of {trials[0].target} in this "
                                          "store",
        probe_seconds=None if from_study else round(time.perf_counter() - started, 1))
    save_profile(store, profile)
    if output is not None:
        output.write_text(json.dumps(profile.to_json(), indent=1, sort_keys=True) + "\n")
    if as_json:
        out.print_json(json.dumps(profile.to_json()))
        return
    _show(profile)


def _show(profile: HardwareProfile) -> None:
    from advisor.calibrate import ERROR_METRICS

    out.print(escape(f"{profile.name}: {profile.gpu_name} ({profile.gpu_memory_mib:,.0f} MiB, "
                     f"driver {profile.driver}), {len(profile.probe)} probe windows"),
              highlight=False)
    out.print(f"  step = {profile.fixed_ms:.3f} ms + {profile.per_sequence_ms:.4f} ms/sequence "
              f"+ {profile.per_prefill_token_ms:.5f} ms/prompt token; frontend "
              f"{profile.frontend_token_ms:g} ms/token", highlight=False)
    errors = ", ".join(f"{m} {100 * math.expm1(profile.error_log[m]):.0f} %"
                       for m in ERROR_METRICS if m in profile.error_log)
    out.print(f"  calibration error (each window predicted from the others): {errors}",
              highlight=False)

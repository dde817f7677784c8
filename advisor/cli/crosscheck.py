"""`advisor crosscheck`: the advisor's client against a reference harness and the server's own
metrics, on one server, before any GPU run's trials are trusted (see advisor/crosscheck.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import yaml
from rich.markup import escape
from rich.table import Table

from advisor.cli.context import (
    MODEL_CONFIG_HELP,
    cli_settings,
    cli_store,
    err,
    model_option,
    one_line,
    out,
    parse_enqueued,
    parse_workload,
    sigterm_interrupts,
)
from advisor.cli.render import fmt_value, print_json
from advisor.errors import AdvisorError
from objectives.registry import DEFAULT_SERVING_TARGET, get_target

if TYPE_CHECKING:
    from advisor.crosscheck import CrosscheckReport, Measured

__all__ = ["crosscheck_cmd"]


def _configs(values: list[str]) -> tuple[tuple[str, dict[str, Any]], ...]:
    """``--config LABEL=KNOBS`` values (KNOBS as for --enqueue: inline YAML/JSON or @FILE)."""
    if not values:
        return (("default", {}),)
    configs: list[tuple[str, dict[str, Any]]] = []
    for value in values:
        label, sep, knobs = value.partition("=")
        if not sep or not label.strip() or not label.replace("-", "").replace("_", "").isalnum():
            raise AdvisorError(f"--config expects LABEL=KNOBS (LABEL of letters, digits, - and "
                               f"_), got {value!r}")
        if knobs.strip() in ("", "{}", "default"):
            configs.append((label.strip(), {}))
            continue
        items = parse_enqueued([knobs])
        if len(items) != 1:
            raise AdvisorError(f"--config {label}: expected one mapping of knobs, got "
                               f"{len(items)}")
        configs.append((label.strip(), items[0]))
    return tuple(configs)


def crosscheck_cmd(
    target: Annotated[str, typer.Option(help="LLM serving target (see `advisor targets`).")
                      ] = DEFAULT_SERVING_TARGET,
    rate: Annotated[list[float] | None, typer.Option(
        "--rate", help="Poisson arrival rate in req/s to measure at (repeatable).")] = None,
    workload: Annotated[str | None, typer.Option(
        help="Workload preset or file (default: the target's).")] = None,
    model: Annotated[str | None, typer.Option(
        callback=one_line, help="Model shape or local path (sets the workload's `model`).")
    ] = None,
    model_config: Annotated[str | None, typer.Option(
        "--model-config", callback=one_line, help=MODEL_CONFIG_HELP,
        metavar="PATH|KEY=VALUE,...")] = None,
    workload_param: Annotated[list[str] | None, typer.Option(
        "--workload-param", help="Override one workload parameter, KEY=VALUE (repeatable).")
                              ] = None,
    config: Annotated[list[str] | None, typer.Option(
        "--config", help="A config to start the server with, LABEL=KNOBS (repeatable; KNOBS "
        "as for `tune --enqueue`; knobs left out keep the engine default). Default: "
        "default={} (the engine's defaults).")] = None,
    repeats: Annotated[int, typer.Option(
        help="Advisor-client measurements per config and rate, interleaved (1..20).")] = 1,
    reference_repeats: Annotated[int, typer.Option(
        help="Reference-harness runs per config and rate (0: none), after the advisor's.")] = 1,
    reference_config: Annotated[list[str] | None, typer.Option(
        "--reference-config", help="Run the reference harness for this config only "
        "(repeatable; default: every config).")] = None,
    co_resident: Annotated[bool, typer.Option(
        help="Start every config's server at once (each with --memory-share of the GPU) and "
             "alternate between them within each round: a paired comparison without "
             "restarts.")] = False,
    memory_share: Annotated[float | None, typer.Option(
        help="With --co-resident: the share of the accelerator each server may use.")] = None,
    base_url: Annotated[str | None, typer.Option(
        help="Measure this running server instead of starting one.")] = None,
    served_model: Annotated[str | None, typer.Option(
        callback=one_line, help="With --base-url: the model name the server serves.")] = None,
    store_as: Annotated[str | None, typer.Option(
        callback=one_line,
        help="Store every advisor measurement as a trial of study <NAME>@<rate>rps.")] = None,
    slo: Annotated[str | None, typer.Option(
        help="SLO the stored trials are scored against (default: the target's).")] = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="Write the JSONL report here.")] = None,
    metrics_sample: Annotated[Path | None, typer.Option(
        help="Write the server's raw metrics text after the first measurement here.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the rows as JSON.")] = False,
) -> None:
    """Cross-check the advisor's client against a reference harness and the server's metrics.

    For each config and rate: the advisor's client measures as a trial does (server scrape and
    validity gate included), then the target's reference harness (its engine's own benchmark
    client) replays the same requests on the same server. Prints advisor vs reference vs server
    with ratios, and whether TTFT p95, TPOT p95 and output tok/s are within 15 % of the reference
    or agree with the server. Run it first in every GPU run that measures LLM trials.
    """
    from advisor.crosscheck import CrosscheckPlan, run_crosscheck, write_report

    sigterm_interrupts()
    if not rate:
        raise AdvisorError("crosscheck needs at least one --rate, e.g. --rate 15 --rate 45")
    model = model_option(model, model_config)
    settings = cli_settings()
    tgt = get_target(target)
    params = [*(workload_param or []), *([f"model={model}"] if model else [])]
    wl = parse_workload(tgt, workload, params)
    plan = CrosscheckPlan(target=target, workload=wl, rates=tuple(rate),
                          configs=_configs(config or []), repeats=repeats,
                          reference_repeats=reference_repeats, co_resident=co_resident,
                          memory_share=memory_share, base_url=base_url,
                          served_model=served_model, store_as=store_as, slo=slo,
                          reference_configs=tuple(reference_config) if reference_config
                          else None)
    store = cli_store(settings) if store_as else None

    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text("")

    def show(one: Measured) -> None:
        if output is not None:  # kept as measured, so an interrupted run loses nothing
            with output.open("a") as f:
                f.write(json.dumps({"type": "measurement", **one.to_dict()}, default=str) + "\n")
        if one.error:
            err.print(escape(f"  {one.kind} {one.config} @ {one.rate_rps:g} req/s failed: "
                             f"{one.error.splitlines()[0][:200]}"), highlight=False)
            return
        m = one.metrics
        err.print(f"  {one.kind:9} {one.config} @ {one.rate_rps:g} req/s: "
                  f"TTFT p95 {fmt_value(m.get('ttft_p95_ms'))} ms, TPOT p95 "
                  f"{fmt_value(m.get('tpot_p95_ms'))} ms, "
                  f"{fmt_value(m.get('output_tokens_per_s'))} tok/s"
                  f" [{one.validity}]", highlight=False)

    report = run_crosscheck(plan, cache_dir=settings.cache_dir, store=store,
                            progress=lambda msg: err.print(escape(msg), highlight=False),
                            on_measured=show, metrics_sample=metrics_sample)
    if output is not None:
        write_report(report, output)
        err.print(f"report written to {output}", highlight=False)
    rows, round_rows = report.rows(), report.round_rows()
    if as_json:
        print_json(out, {"rows": rows, "round_rows": round_rows})
        return
    _print_rows(report, rows)
    if any(r["rounds"] > 1 for r in round_rows):
        _print_round_rows(round_rows)


def _print_rows(report: CrosscheckReport, rows: list[dict[str, Any]]) -> None:
    from advisor.crosscheck import GOAL_METRICS, GOAL_RELATIVE

    reference = report.facts.get("reference")
    against = f"{reference} vs server" if reference else "server (no reference harness)"
    table = Table(title=f"crosscheck {report.session}: advisor vs {against} (ms, tok/s)")
    for col in ("config", "req/s", "figure", "advisor", "reference", "ratio", "server",
                "goal"):
        table.add_column(col, overflow="fold")
    for row in rows:
        for metric in GOAL_METRICS:
            f = row["figures"][metric]
            ratio = f.get("ratio")
            server = f.get("server_advisor_window")
            goal = ("met" if f["goal_met"] else "MISSED") + (
                " (server)" if f["goal_met"] and not f["within_goal_of_reference"] else "")
            table.add_row(row["config"], f"{row['rate_rps']:g}", metric, fmt_value(f["advisor"]),
                          fmt_value(f["reference"]), "" if ratio is None else f"{ratio:.2f}",
                          fmt_value(server), goal)
    out.print(table)
    missed = [r for r in rows if not r["goal_met"]]
    out.print(f"{len(rows) - len(missed)} of {len(rows)} config x rate rows within "
              f"{GOAL_RELATIVE:.0%} of the reference or agreeing with the server.")
    if report.facts.get("clamped_lengths"):
        out.print("lengths clamped for the reference harness: "
                  + yaml.safe_dump(report.facts["clamped_lengths"], default_flow_style=True)
                  .strip())


def _print_round_rows(rows: list[dict[str, Any]]) -> None:
    """Rounds of advisor-then-reference windows: the goal judged on the median ratio."""
    from advisor.crosscheck import GOAL_METRICS

    table = Table(title=escape("over the rounds (each an advisor window, then the reference's):"
                               " median ratio [range], advisor windows agreeing with the "
                               "server"))
    for col in ("config", "req/s", "rounds", "figure", "advisor", "reference", "ratio",
                "server agrees", "goal"):
        table.add_column(col, overflow="fold")
    for row in rows:
        for metric in GOAL_METRICS:
            f = row["figures"][metric]
            lo_hi = f["ratio_range"]
            ratio = "" if f["ratio_median"] is None else (
                f"{f['ratio_median']:.2f} [{lo_hi[0]:.2f}-{lo_hi[1]:.2f}]")
            table.add_row(row["config"], f"{row['rate_rps']:g}", str(row["rounds"]), metric,
                          fmt_value(f["advisor_median"]), fmt_value(f["reference_median"]), ratio,
                          f["agrees_with_server"], "met" if f["goal_met"] else "MISSED")
    out.print(table)


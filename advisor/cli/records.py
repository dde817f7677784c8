"""`advisor studies` and `advisor trials`: what the store holds.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from advisor.cli.context import CSV_HELP, WIDE_HELP, choice, cli_store, err, one_line, out
from advisor.cli.render import compact_config, emit_table, fmt_value, print_json, table_format
from knowledge.statuses import TrialStatus
from knowledge.validity import invalid_reason, validity_of
from objectives import parse_slo

__all__ = ["studies_cmd", "trials_cmd"]


def studies_cmd(
    target: Annotated[str | None, typer.Option(help="Only studies of this target.")] = None,
    wide: Annotated[bool, typer.Option("--wide", help=WIDE_HELP)] = False,
    as_csv: Annotated[bool, typer.Option("--csv", help=CSV_HELP)] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """List stored studies with their trial counts."""
    store = cli_store()
    rows: list[dict[str, Any]] = []
    for s in store.list_studies(target):
        trials = store.trials_of_study(s.id or 0)
        rows.append({
            "id": s.id, "name": s.name, "target": s.target, "slo": s.slo,
            "objective": f"{s.objective_direction}:{s.objective_metric}", "status": s.status,
            "trials": len(trials), "requested": s.n_trials,
            "swept": sum(t.swept_from is not None for t in trials),
            "complete": sum(t.status == TrialStatus.COMPLETE for t in trials),
            "failed": sum(t.status == TrialStatus.FAILED for t in trials),
            "hardware_key": s.hardware_key, "created_at": s.created_at.isoformat(),
        })
    if as_json:
        print_json(out, rows)
        return
    table = Table()
    for c in ("id", "name", "target", "status", "trials", "complete", "failed", "SLO",
              "objective", "hardware"):
        table.add_column(c, overflow="fold")
    emit_table(out, table, [
        [str(r["id"]), r["name"], r["target"], r["status"], f"{r['trials']}/{r['requested']}",
         str(r["complete"]), str(r["failed"]), r["slo"], r["objective"], r["hardware_key"]]
        for r in rows], table_format(wide, as_csv))


def trials_cmd(
    target: Annotated[str | None, typer.Option(help="Only trials of this target.")] = None,
    study: Annotated[str | None, typer.Option(help="Only trials of this study (name).")] = None,
    status: Annotated[str | None, typer.Option(
        help="Only trials in this state.", **choice(TrialStatus.ALL))] = None,
    feasible: Annotated[bool | None, typer.Option(
        "--feasible/--infeasible", help="Only trials that met / missed their study's SLO.",
        show_default=False)] = None,
    hardware: Annotated[str | None, typer.Option(callback=one_line,
        help="Only trials on this hardware: its key, or a run of the key's dash-separated "
             "parts (e.g. h200, nvidia-h200, cpu).")] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many (newest).")] = 50,
    wide: Annotated[bool, typer.Option("--wide", help=WIDE_HELP)] = False,
    as_csv: Annotated[bool, typer.Option("--csv", help=CSV_HELP)] = False,
    as_json: Annotated[bool, typer.Option("--json", help="All fields, as JSON.")] = False,
) -> None:
    """List stored trials (failed ones show their reason)."""
    from knowledge.store import TrialFilter

    store = cli_store()
    matching = store.list_trials(TrialFilter(target=target, study=study, status=status,
                                             feasible=feasible, hardware_key=hardware))
    rows = matching[-limit:]
    if len(rows) < len(matching):
        err.print(f"showing the newest {len(rows)} of {len(matching)} matching trials; "
                  f"--limit {len(matching)} shows them all")
    if as_json:
        print_json(out, [r.model_dump(mode="json") for r in rows])
        return
    if not rows and not as_csv:
        out.print("no trials match")
        return
    studies = {s.id: s for s in store.list_studies()}
    # Validity labels come from targets that check themselves (LLM serving): a column then.
    labelled = any(validity_of(r.details) for r in rows)
    table = Table()
    for c in ("id", "study", "#", "status", *(["validity"] if labelled else []), "SLO",
              "objective", "metrics", "config / error"):
        # Short columns never wrap; the long ones wrap at spaces (fold only what has none).
        table.add_column(c, no_wrap=c in ("id", "#", "status", "SLO", "objective"),
                         overflow="fold")
    cells: list[list[str]] = []
    for r in rows:
        s = studies.get(r.study_id)
        slo_metrics = parse_slo(s.slo).metrics if s else []
        shown = {m: r.metrics.get(m) for m in slo_metrics if m in r.metrics}
        metrics = " ".join(f"{k}={fmt_value(v)}" for k, v in shown.items())
        tail = compact_config(r.config) if r.status in TrialStatus.MEASURED else \
            f"{r.error_type}: {(r.error or '').splitlines()[0][:120] if r.error else ''}"
        slo_mark = "-" if r.status == TrialStatus.INVALID else \
            {True: "met", False: "missed", None: "-"}[r.feasible]
        validity = [invalid_reason(r.details) or validity_of(r.details) or "-"] if labelled \
            else []
        cells.append([str(r.id), s.name if s else "?", str(r.number), r.status, *validity,
                      slo_mark, fmt_value(r.objective_value), metrics, tail])
    emit_table(out, table, cells, table_format(wide, as_csv))


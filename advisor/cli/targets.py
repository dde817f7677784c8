"""`advisor targets`: the registered targets and their knobs.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from advisor.cli.context import WIDE_HELP, out
from advisor.cli.render import emit_table, print_json, table_format
from objectives.registry import get_target, target_names

__all__ = ["targets_cmd"]


def _knob_range(knob: Any) -> str:
    if knob.type == "categorical":
        return ", ".join(map(str, knob.choices))
    if knob.type == "bool":
        return "true, false"
    text = f"{knob.low:g} .. {knob.high:g}" + (" (log)" if knob.log else "")
    return text + (f", <= {knob.high_from}" if knob.high_from else "")


def targets_cmd(
    wide: Annotated[bool, typer.Option("--wide", help=WIDE_HELP)] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """List the targets (engines) you can tune and their knobs."""
    data: list[dict[str, Any]] = []
    for name in target_names():
        target = get_target(name)
        space = target.space()
        data.append({
            "name": name, "engine": target.engine, "description": target.description,
            "default_objective": target.default_objective, "default_slo": target.default_slo,
            "workloads": sorted(target.named_workloads()),
            "knobs": [{
                "name": k.name, "type": k.type, "range": _knob_range(k), "default": k.default,
                "unit": k.unit, "stage": k.stage, "flag": k.flag_for(None),
                "when": {n: list(v) for n, v in k.when.items()}, "help": k.help,
            } for k in space],
        })
    if as_json:
        print_json(out, data)
        return
    for t in data:
        out.print(f"[bold]{t['name']}[/bold] ({t['engine']}): {t['description']}")
        out.print(f"  default objective: {t['default_objective']}   default SLO: "
                  f"{t['default_slo']}   workloads: {', '.join(t['workloads'])}")
        table = Table(show_edge=False, pad_edge=False)
        for col_name in ("knob", "type", "range / choices", "default", "unit", "engine flag",
                         "applies when"):
            table.add_column(col_name, overflow="fold")
        rows = [[k["name"], k["type"], k["range"], str(k["default"]), k["unit"], k["flag"] or "",
                 "; ".join(f"{n} in {', '.join(map(str, v))}" for n, v in k["when"].items())]
                for k in t["knobs"]]
        emit_table(out, table, rows, table_format(wide, False))
        out.print()


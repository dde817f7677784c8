"""Rich renderings for the CLI of the engine-default comparisons: a study's paired comparison
(advisor/paired.py) and a recommendation's verdict against the default (advisor/baseline.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.markup import escape
from rich.table import Table

from advisor.baseline import DefaultComparison

__all__ = ["baseline_text", "paired_table"]

_VERDICT = {"better": "[green]better[/green]", "worse": "[red]worse[/red]",
            "within_noise": "[yellow]within noise[/yellow]"}


def _num(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    return str(value)


def paired_table(data: Mapping[str, Any] | None) -> Table | str | None:
    """A study's stored paired comparison as a table (``compared``), or one line saying why
    there is none (``refused`` / ``skipped``); ``None`` when the study holds none."""
    if not data:
        return None
    x, y = data.get("x", "best"), data.get("y", "default")
    if data.get("status") != "compared":
        return (f"paired comparison of the {x} config with the engine {y}: "
                f"{data.get('status')} ({escape(str(data.get('reason', '')))})")
    level = float(data.get("level", 0.95))
    table = Table(title=f"{x} vs engine {y}: re-measured interleaved in this run "
                        f"({len(data.get('x_trials', []))}+{len(data.get('y_trials', []))} "
                        f"repeats; {level:.0%} bootstrap interval of the difference)")
    for c in ("metric", f"{x} (mean)", f"{y} (mean)", "difference", "interval",
              f"{x} is"):
        table.add_column(c)
    for m in data.get("metrics", []):
        rel = m.get("relative_difference")
        lo, hi = m["interval"]
        table.add_row(m["metric"], _num(m["mean_x"]), _num(m["mean_y"]),
                      f"{m['difference']:+.4g}" + (f" ({rel:+.1%})" if rel is not None else ""),
                      f"[{lo:+.4g}, {hi:+.4g}]", _VERDICT.get(m["verdict"], m["verdict"]))
    return table


def baseline_text(baseline: DefaultComparison | None) -> str | None:
    """One line: how the answer compares with the engine default, and why."""
    if baseline is None:
        return None
    where = {"paired": "paired re-measurement", "default_repeats": "repeated default trials",
             "margin": "no noise measured", "is_default": "the best is the default",
             "default_misses_slo": "default misses the SLO",
             "no_default": "default not measured here"}.get(baseline.basis, baseline.basis)
    if baseline.answer != "keep_defaults":
        return f"Against the engine default ({where}): {escape(baseline.reason)}"
    text = f"Why ({where}): {escape(baseline.reason)}"
    if baseline.basis != "is_default" and baseline.candidate_config:
        config = " ".join(f"{k}={_num(v)}" for k, v in baseline.candidate_config.items())
        text += f". Best other config, not recommended: {escape(config)}"
    return text

"""How an :class:`~advisor.answers.Answer` reads on the command line: a short rich layout on a
terminal, one ``key=value`` per line when stdout is piped (nothing split mid-word, easy to
grep), and ``--json`` for machines (the document itself). Rendering only: every verdict shown
was decided by the planner.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from advisor.answers import Answer
from advisor.answers.document import CapacityFigure, Figure, ReplicasFigure
from advisor.cli.render import compact_config, fmt_value
from advisor.errors import AdvisorError
from objectives.registry import get_target

__all__ = ["answer_lines", "print_answer"]


def _figure_text(f: Figure) -> str:
    span = ("" if f.low is None or f.high is None or f.low == f.high
            else f" [{fmt_value(f.low)} .. {fmt_value(f.high)}]")
    where = (f"measured, median of {f.windows} window{'s' if f.windows != 1 else ''}"
             if f.basis == "measured" else "predicted, 90% interval")
    return f"{fmt_value(f.value)}{span} ({where})" + (f"; {f.note}" if f.note else "")


def _capacity_text(c: CapacityFigure) -> str:
    span = "" if c.low == c.high else f" [{fmt_value(c.low)} .. {fmt_value(c.high)}]"
    return f"{fmt_value(c.rate_rps)} req/s{span}" + (f" ({c.note})" if c.note else "")


def _replicas_text(r: ReplicasFigure) -> str:
    def n(v: int | None) -> str:
        return "none holds it" if v is None else str(v)

    span = "" if r.low == r.high else f" [{n(r.low)} .. {n(r.high)}]"
    return f"{n(r.count)}{span} for {fmt_value(r.total_rate_rps)} req/s"


def _capacity_lines(answer: Answer) -> Iterator[tuple[str, str]]:
    """(key, text) of the answer's capacity at the SLO and replicas, where it has them."""
    c = answer.capacity
    if c is None:
        return
    for key, fig in (("capacity", c.config), ("default.capacity", c.default)):
        if fig is not None:
            yield key, _capacity_text(fig)
    for key, rep in (("replicas", c.replicas), ("default.replicas", c.default_replicas)):
        if rep is not None:
            yield key, _replicas_text(rep)


def _config_text(answer: Answer) -> str | None:
    if answer.config is None:
        return None
    if answer.status == "keep_defaults":  # which values those are: what the user runs
        return f"the engine defaults ({compact_config(answer.config)})"
    default: dict[str, Any] | None
    try:  # the space's defaults: a knob the default's stored form lacks ran at its default
        default = get_target(answer.question.target).space().default_config()
    except AdvisorError:
        default = None
    if answer.default is not None and answer.default.config:
        # The answered machine's defaults (all of its cores, say) over this machine's.
        default = {**(default or {}), **answer.default.config}
    if default:
        changed = {k: v for k, v in answer.config.items() if default.get(k) != v}
        if changed and len(changed) < len(answer.config):
            return compact_config(changed) + " (the rest at the engine defaults)"
    return compact_config(answer.config)


def answer_lines(answer: Answer, explain: bool = False) -> Iterator[str]:
    """The answer as ``key=value`` lines (the piped layout)."""
    yield f"status={answer.status}"
    yield f"summary={answer.summary}"
    q = answer.question
    yield f"asked=target {q.target}, slo {q.slo}, objective {q.objective}" + (
        f", model {q.model}" if q.model else "") + (
        f", hardware {q.hardware_key}" if q.hardware_key else "") + "".join(
        f", {k} {v:g}" for k, v in q.workload.items())
    if answer.config is not None:
        if answer.status == "keep_defaults":
            yield "config=the engine defaults"
        for k, v in answer.config.items():
            yield f"config.{k}={fmt_value(v)}"
    for m, f in answer.figures.items():
        yield f"figure.{m}={_figure_text(f)}"
    if answer.verdict is not None:
        yield f"verdict={answer.verdict.text}"
    if answer.default is not None and answer.default.verdict is not None:
        yield f"default.verdict={answer.default.verdict.text}"
    if answer.comparison is not None:
        yield f"versus_default={answer.comparison.reason}"
    for key, text in _capacity_lines(answer):
        yield f"{key}={text}"
    yield f"confidence={answer.confidence.level}: {answer.confidence.reason}"
    if answer.evidence:
        yield "evidence=trials " + ", ".join(str(e.trial_id) for e in answer.evidence)
    if explain:
        for e in answer.evidence:
            yield (f"evidence.{e.trial_id}={e.workload}; "
                   + ("meets" if e.meets_slo else "misses") + " the SLO; "
                   + " ".join(f"{k}={fmt_value(v)}" for k, v in e.measured.items())
                   + ("; this config" if e.same_config else ""))
        for m, quality in answer.model_quality.items():
            mape = quality.get("mape")
            yield f"model_quality.{m}=" + (f"MAPE {mape:.1%}" if mape is not None else "unknown")
    if answer.next.tune_command:
        yield f"next={answer.next.tune_command}"
    if answer.launch_command:
        yield f"launch={answer.launch_command}"
    for note in answer.notes if explain else answer.notes[:2]:
        yield f"note={note}"


def print_answer(console: Console, answer: Answer, explain: bool = False) -> None:
    """Print ``answer`` for a person: rich on a terminal, ``key=value`` lines otherwise."""
    if not console.is_terminal:
        for line in answer_lines(answer, explain):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
        return
    # Prose is wrapped by rich at word boundaries (a terminal's own wrap splits words); a
    # command stays one line (soft_wrap) so it copies whole.
    colour = "green" if answer.found else "yellow"
    console.print(f"[bold {colour}]{escape(answer.summary)}[/bold {colour}]")
    if (config := _config_text(answer)) is not None:
        console.print(f"  {escape(config)}", highlight=False)
    if answer.comparison is not None and answer.status in ("recommended", "keep_defaults"):
        console.print(f"Against the engine default: {escape(answer.comparison.reason)}")
    if answer.figures:
        bounds = {b.split("<=")[0].split(">=")[0]: b for b in answer.question.slo.split(",")}
        table = Table(title="figures at the asked workload")
        for c in ("metric", "value", "SLO", "default"):
            table.add_column(c, overflow="fold")
        default = answer.default.figures if answer.default is not None else {}
        for m, f in answer.figures.items():
            table.add_row(m, _figure_text(f), bounds.get(m, ""),
                          fmt_value(default[m].value) if m in default else "")
        console.print(table)
    if answer.default is not None and answer.default.verdict is not None:
        console.print(f"Engine default: {escape(answer.default.verdict.text)}")
    if answer.closest is not None and not answer.found:
        console.print(f"Closest: {escape(compact_config(answer.closest.get('config') or {}))}",
                      highlight=False)
    labels = {"capacity": "Capacity at the SLO (one GPU)",
              "default.capacity": "Capacity at the SLO with the defaults",
              "replicas": "Replicas", "default.replicas": "Replicas with the defaults"}
    for key, text in _capacity_lines(answer):
        console.print(f"{labels[key]}: {escape(text)}", highlight=False)
    console.print(f"Confidence: [bold]{answer.confidence.level}[/bold] "
                  f"({escape(answer.confidence.reason)})")
    if answer.evidence:
        console.print("Evidence: trials " + ", ".join(str(e.trial_id) for e in answer.evidence)
                      + ("" if explain else " (--explain shows them)"))
    if explain:
        _print_evidence(console, answer)
    if answer.next.tune_command:
        console.print(f"Next ({escape(answer.next.reason or '')}), run:")
        console.print(f"  {answer.next.tune_command}", markup=False, highlight=False,
                      soft_wrap=True)
    if answer.launch_command:
        console.print("Launch:")
        console.print(answer.launch_command, markup=False, highlight=False, soft_wrap=True)
    for note in answer.notes if explain else answer.notes[:2]:
        console.print(f"[dim]note: {escape(note)}[/dim]")
    if not explain and len(answer.notes) > 2:
        console.print(f"[dim]({len(answer.notes) - 2} more notes: --explain)[/dim]")


def _print_evidence(console: Console, answer: Answer) -> None:
    table = Table(title="measured trials cited (evidence)")
    for c in ("trial", "workload", "SLO", "measured"):
        table.add_column(c, overflow="fold")
    for e in answer.evidence:
        table.add_row(str(e.trial_id) + (" *" if e.same_config else ""), e.workload,
                      "meets" if e.meets_slo else "misses",
                      " ".join(f"{k}={fmt_value(v)}" for k, v in e.measured.items()))
    console.print(table)
    console.print("[dim]* the answered config's own windows[/dim]")
    if answer.model_quality:
        q = Table(title="model quality (held out)")
        for c in ("metric", "MAPE", "trials"):
            q.add_column(c)
        for m, v in answer.model_quality.items():
            q.add_row(m, f"{v['mape']:.1%}" if v.get("mape") is not None else "-",
                      str(v.get("n")))
        console.print(q)

"""Cheat-sheet renderers: Markdown (tables, no plots), and a self-contained static HTML page with a
table of contents and inline SVG figures drawn by matplotlib (knowledge/plots.py): latency against
arrival rate per serving workload family, recall against QPS per vector index workload, Pareto
fronts and the rules of thumb that fit well enough to show. No scripts, fonts, CDN or network:
the page is one file that opens anywhere.

Both render the plain-data form of the sheet (``CheatSheet.to_dict()``), so they need no models.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from typing import Any

from knowledge.plots import knob_figure, rate_figure, recall_qps_figure, scatter_figure
from knowledge.rules import R2_MIN

__all__ = ["render_html", "render_markdown", "svg_plot"]


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        if v == 0:
            return "0"
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        return f"{v:.3g}"
    return str(v)


def _config_text(config: Mapping[str, Any] | None) -> str:
    if not config:
        return "-"
    return " ".join(f"{k}={_fmt(v)}" for k, v in config.items())


#: A metric whose held-out error (MAPE) is above this is not modelled: its "prediction" would be
#: noise with an interval, so it is shown with its error instead of a value.
NOT_MODELLED_MAPE = 1.0


def _figures_text(figures: Mapping[str, Mapping[str, Any]],
                  quality: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """A row's figures as its answer gives them: a measured one as the median of its windows
    (``measured, 3 windows``), a predicted one with its 90 % interval, or "not modelled" where
    the model's held-out error makes a prediction noise."""
    def one(m: str, f: Mapping[str, Any]) -> str:
        if f.get("basis") == "measured":
            n = f.get("windows")
            return f"{m} {_fmt(f['value'])} (measured{f', {n} windows' if n else ''})"
        mape = (quality or {}).get(m, {}).get("mape")
        if mape is not None and mape > NOT_MODELLED_MAPE:
            return f"{m} not modelled (held-out error {mape:.0%})"
        if f.get("low") is None or f.get("high") is None:
            return f"{m} {_fmt(f['value'])} (predicted)"
        return f"{m} {_fmt(f['value'])} [{_fmt(f['low'])}, {_fmt(f['high'])}]"

    return "; ".join(one(m, f) for m, f in figures.items())


def _stage_text(row: Mapping[str, Any]) -> str:
    """'dominant stage: decode 71% (predicted)' for pipeline targets, '' otherwise."""
    budget, stage = row.get("stage_budget_ms") or {}, row.get("dominant_stage")
    total = sum(budget.values())
    if not stage or total <= 0:
        return ""
    shares = ", ".join(f"{s} {v / total:.0%}" for s, v in budget.items())
    return f"dominant stage: {stage} ({shares}; {row.get('stage_budget_source', '')})"


def _knobs_text(row: Mapping[str, Any]) -> str:
    """The knobs a row recommends; a keep-the-defaults row says so first, with why."""
    if not row["config"]:
        return f"*{row['status']}*"
    if row.get("answer") == "keep_defaults":
        why = (row.get("comparison") or {}).get("reason", "")
        return f"**defaults**{': ' + why if why else ''}"
    return _config_text(row["config"])


def _importance_text(imp: Mapping[str, float], top: int = 3) -> str:
    return ", ".join(f"{k} {v:.0%}" for k, v in list(imp.items())[:top]) or "-"


def _fit_text(rule: Mapping[str, Any]) -> str:
    params = ", ".join(f"{k}={_fmt(v)}" for k, v in rule["params"].items())
    return f"{rule['formula']} with {params}"


def _r2_min(rule: Mapping[str, Any]) -> float:
    return float(rule.get("r2_min", R2_MIN))


def _shown(rule: Mapping[str, Any]) -> bool:
    """A fitted rule whose R² reaches the threshold (knowledge/rules.py, R2_MIN)."""
    return (rule["status"] == "fitted" and rule.get("r2") is not None
            and rule["r2"] >= _r2_min(rule))


def _rule_groups(rules: Sequence[Mapping[str, Any]]
                 ) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]],
                            list[Mapping[str, Any]]]:
    """(shown, fitted but hidden for a poor R², not fitted)."""
    return ([r for r in rules if _shown(r)],
            [r for r in rules if r["status"] == "fitted" and not _shown(r)],
            [r for r in rules if r["status"] != "fitted"])


def _hidden_note(poor: Sequence[Mapping[str, Any]]) -> str:
    """One line naming how many fits were hidden and the threshold."""
    if not poor:
        return ""
    names = "; ".join(f"{r['name']} (R² {r['r2']:.2f})" for r in poor)
    return (f"{len(poor)} fit{'s' if len(poor) > 1 else ''} hidden: R² below "
            f"{_r2_min(poor[0]):g} ({names})")


def _unfitted_note(unfitted: Sequence[Mapping[str, Any]]) -> str:
    """One line naming the rules that could not be fitted, and why in short."""
    few = [r["name"] for r in unfitted if r["status"].startswith("insufficient data")]
    failed = [f"{r['name']} ({r['status']})" for r in unfitted
              if not r["status"].startswith("insufficient data")]
    parts = ([f"too few distinct measured values for {'; '.join(few)}"] if few else []) + failed
    return ("Not fitted: " + "; ".join(parts)) if parts else ""


def render_markdown(sheet: Mapping[str, Any]) -> str:
    """The sheet as Markdown: one table per context, then its rules of thumb (R² at or above the
    threshold; the others counted in one line) and model quality. No plots."""
    lines = ["# Tuning cheat-sheet", "",
             f"Built from {sheet['trials']} stored trials. {sheet['note']}.", ""]
    rows = sheet["rows"]
    for section in sheet["contexts"]:
        lines += [f"## {section['label']}", "",
                  f"{section['trials']} measured trials. Columns: tier (its SLO), recommended "
                  "knobs, figures (measured: median of the windows there; predicted: 90% "
                  "interval), the knobs that move the "
                  "objective most, confidence, measured trials at that workload.", "",
                  "| workload | tier | SLO / objective | knobs | figures | importance | "
                  "confidence | evidence |", "|---|---|---|---|---|---|---|---|"]
        for r in _rows_of(rows, section):
            knobs = _knobs_text(r)
            lines.append(
                f"| {r['workload_class']} | {r['tier']} | `{r['slo']}` {r['objective']} | "
                f"{knobs} | {_figures_text(r['figures'], section['model_quality']) or '-'}"
                f"{'; ' + _stage_text(r) if _stage_text(r) else ''} | "
                f"{_importance_text(r['knob_importance'])} | {r['confidence']} | "
                f"{r['evidence_count']} trials |")
        shown, poor, unfitted = _rule_groups(section["rules_of_thumb"])
        lines += ["", "Rules of thumb (fitted to measured trials):", ""]
        if shown:
            lines += ["| rule | fit | R² | n |", "|---|---|---|---|"]
            lines += [f"| {r['name']} | {_fit_text(r)} | {r['r2']:.2f} | {r['n']} |"
                      for r in shown]
            lines.append("")
        lines += [f"- {note}" for note in (_hidden_note(poor), _unfitted_note(unfitted))
                  if note]
        if not section["rules_of_thumb"]:
            lines.append("- none for this context")
        quality = section["model_quality"]
        if quality:
            lines += ["", "Surrogate quality (grouped cross-validation):", "",
                      "| metric | MAPE | 90% interval coverage | trials |", "|---|---|---|---|"]
            for m, q in sorted(quality.items()):
                if q.get("mape") is None:
                    continue
                lines.append(f"| {m} | {q['mape']:.1%}"
                             + (" (not modelled)" if q["mape"] > NOT_MODELLED_MAPE else "")
                             + f" | {q['interval_coverage']:.0%} | {q['n']} |")
        lines.append("")
    if not sheet["contexts"]:
        lines.append("No fitted knowledge matches these filters.")
    return "\n".join(lines) + "\n"


def _rows_of(rows: Sequence[Mapping[str, Any]], section: Mapping[str, Any]
             ) -> list[Mapping[str, Any]]:
    ctx = section["context"]
    return [r for r in rows if (r["target"], r["hardware_key"], r["model"], r["engine_version"])
            == (ctx["target"], ctx["hardware_key"], ctx["model"], ctx["engine_version"])]


def svg_plot(title: str, x_label: str, y_label: str, points: Sequence[Sequence[float]],
             line: Sequence[Sequence[float]] = (), *, line_label: str = "",
             log_x: bool = False, log_y: bool = False) -> str:
    """A scatter of ``points`` with an optional line (a Pareto front or fitted curve), as an
    SVG element drawn by matplotlib (knowledge/plots.py); linear axes start at 0."""
    return scatter_figure(f"fig-{_anchor(title)}", title, x_label, y_label, points, line,
                          line_label=line_label, log_x=log_x, log_y=log_y)


def _anchor(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x"


_CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1250px;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:13px}
td,th{border:1px solid #ccc;padding:4px 6px;vertical-align:top;text-align:left}
td code{overflow-wrap:anywhere}
th{background:#f2f2f2} code,pre{font-size:12px;background:#f7f7f7}
.plots{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start} .note{color:#555;font-size:13px}
pre{white-space:pre-wrap;overflow-wrap:anywhere;max-width:420px;margin:0}
td details pre{min-width:24em;overflow-wrap:normal} td summary{cursor:pointer}
svg.figure{max-width:100%;height:auto;display:block;margin:6px 0}
.plots svg.figure{max-width:560px}
nav.toc{background:#f7f7f7;border:1px solid #ddd;padding:.5em 1.2em;font-size:14px}
nav.toc ul{margin:.2em 0 .6em 0;padding-left:1.2em} nav.toc li{margin:.15em 0}
nav.toc .sub a{font-size:13px;margin-right:.9em}
h2{border-top:2px solid #ddd;padding-top:.6em;margin-top:2em} h4{margin:1.4em 0 .2em 0}
table.keys{font-size:12px} .wide{overflow-x:auto;max-width:100%}"""

_HOW_TO_READ = (
    "How to read the figures: every point is measured (no predictions). Latency against arrival "
    "rate: one line per config, the engine default dashed; a marker is the median of the "
    "repeats at that rate, its bar spans the lowest to the highest repeat; filled markers meet "
    "the tier's SLO, hollow ones miss it; red lines are the tier's SLO bounds. Recall against "
    "QPS: every trial a faint dot, each index family's Pareto front a line. Rules of thumb are "
    "shown with their R² and only when R² >= {r2:g}.")

_KIND_TEXT = {"serving": "serving context (it measures TTFT and TPOT)",
              "vector_index": "vector index context (it measures recall and QPS)"}


class _Page:
    """Builds the HTML body and its table of contents together, with unique anchors."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.toc: list[tuple[str, str, list[tuple[str, str]]]] = []
        self.ids: set[str] = set()

    def anchor(self, text: str) -> str:
        base = _anchor(text)
        out, n = base, 2
        while out in self.ids:
            out, n = f"{base}-{n}", n + 1
        self.ids.add(out)
        return out

    def toc_html(self) -> str:
        e = html.escape
        items = []
        for anchor, label, subs in self.toc:
            sub = "".join(f"<a href='#{a}'>{e(t)}</a>" for a, t in subs)
            items.append(f"<li><a href='#{anchor}'>{e(label)}</a>"
                         f"<div class='sub'>{sub}</div></li>")
        return ("<nav class='toc'><h2 style='border:0;margin:.3em 0'>Contents</h2><ul>"
                + "".join(items) + "</ul></nav>")


def _rows_html(rows: Sequence[Mapping[str, Any]],
               quality: Mapping[str, Mapping[str, Any]] | None = None) -> list[str]:
    e = html.escape
    parts = ["<table><tr><th>workload</th><th>tier</th><th>SLO / objective</th>"
             "<th>recommended knobs</th><th>figures (measured, or predicted: 90% interval)</th>"
             "<th>knob importance</th><th>confidence</th><th>evidence</th>"
             "<th>launch</th></tr>"]
    for r in rows:
        knobs = e(_config_text(r["config"])) if r["config"] else f"<i>{e(r['status'])}</i>"
        if r["config"] and r.get("answer") == "keep_defaults":
            why = (r.get("comparison") or {}).get("reason", "")
            knobs = ("<b>defaults</b>"
                     + (f"<br><span class='note'>{e(why)}</span>" if why else ""))
        if not r["config"] and r.get("tune_command"):
            knobs += (f"<br><span class='note'>to cover it: <code>{e(r['tune_command'])}</code>"
                      "</span>")
        # The launch column holds launch code only: a row with nothing to launch shows a dash.
        launch = _launch_html(r["launch_command"]) if r["launch_command"] else "-"
        parts.append(
            f"<tr><td>{e(r['workload_class'])}</td><td>{e(r['tier'])}</td>"
            f"<td><code>{e(r['slo'])}</code><br>{e(r['objective'])}</td><td>{knobs}</td>"
            f"<td>{e(_figures_text(r['figures'], quality) or '-')}"
            f"{'<br>' + e(_stage_text(r)) if _stage_text(r) else ''}</td>"
            f"<td>{e(_importance_text(r['knob_importance']))}</td>"
            f"<td title='{e(r['confidence_reason'])}'>{e(r['confidence'])}</td>"
            f"<td>{r['evidence_count']} trials</td><td>{launch}</td></tr>")
    parts.append("</table>")
    return parts


def _launch_html(command: str) -> str:
    """A launch command folded to its first two words and its flag count (native ``<details>``, no
    script): unfolded in a narrow table cell, a 12-flag command wrapped over ~40 lines."""
    e = html.escape
    words = command.split()
    flags = sum(1 for w in words if w.startswith("--"))
    head = " ".join(words[:2])
    return (f"<details><summary><code>{e(head)}</code> … ({flags} flags)</summary>"
            f"<pre>{e(command)}</pre></details>")


def _rate_html(page: _Page, prefix: str, fig: Mapping[str, Any]) -> tuple[str, str, list[str]]:
    """One serving workload family: a figure per tier, then the key to its curves."""
    e = html.escape
    anchor = page.anchor(f"{prefix}-rate-{fig['family']}")
    rates = fig["rates"]
    parts = [f"<h4 id='{anchor}'>{e(fig['family'])}: TTFT and TPOT p95 against arrival rate"
             "</h4>",
             f"<p class='note'>{fig['trials']} measured trials at {len(rates)} arrival rates "
             f"({_fmt(float(rates[0]))}-{_fmt(float(rates[-1]))} req/s). Per tier: the configs "
             "recommended for it, then those measured at two or more rates that meet its SLO "
             "up to the highest rate."
             + ("" if fig["default_measured"] else
                " The engine default was not measured in this family.") + "</p>"]
    for tier in fig["tiers"]:
        parts.append(rate_figure(f"{anchor}-{tier['tier']}", fig, tier))
    parts.append("<table class='keys'><tr><th>curve</th><th>knobs that differ from the engine "
                 "default</th><th>measured at (req/s)</th><th>trials</th></tr>")
    for s in fig["series"]:
        differs = ("(the engine default)" if s["default"]
                   else _config_text(s["differs"]) if s["differs"] else "(same as the default)")
        at = ", ".join(_fmt(float(p["rate_rps"])) for p in s["points"])
        parts.append(f"<tr><td>{'default' if s['default'] else 'config ' + e(s['key'])}</td>"
                     f"<td>{e(differs)}</td><td>{at}</td>"
                     f"<td>{sum(p['n'] for p in s['points'])}</td></tr>")
    parts.append("</table>")
    return anchor, f"{fig['family']} against rate", parts


def _knob_html(page: _Page, prefix: str, fig: Mapping[str, Any]) -> tuple[str, str, list[str]]:
    e = html.escape
    anchor = page.anchor(f"{prefix}-one-rate-{fig['workload_class']}")
    parts = [f"<h4 id='{anchor}'>{e(fig['workload_class'])}: {e(fig['note'])}</h4>"]
    if fig.get("knob"):
        parts.append(f"<p class='note'>No rate curve: the {fig['trials']} trials are plotted "
                     f"against {e(fig['knob'])}, {e(fig['why'])}. Marker colour: the strictest "
                     "tier whose whole SLO the trial meets.</p>")
        parts.append(knob_figure(anchor, fig))
    else:
        parts.append(f"<p class='note'>No figure: {fig['trials']} trials, no knob varied.</p>")
    return anchor, f"{fig['workload_class']} (one rate)", parts


def _recall_html(page: _Page, prefix: str, fig: Mapping[str, Any]
                 ) -> tuple[str, str, list[str]]:
    e = html.escape
    anchor = page.anchor(f"{prefix}-recall-{fig['workload_class']}")
    parts = [f"<h4 id='{anchor}'>{e(fig['workload_class'])}: recall against QPS</h4>",
             f"<p class='note'>{fig['trials']} measured trials"
             + (f", by {e(fig['family_knob'])}" if fig.get("family_knob") else "") + ".</p>",
             recall_qps_figure(anchor, fig)]
    return anchor, f"{fig['workload_class']}", parts


def _rules_html(prefix: str, rules: Sequence[Mapping[str, Any]]) -> list[str]:
    e = html.escape
    shown, poor, unfitted = _rule_groups(rules)
    parts: list[str] = []
    if shown:
        parts.append("<table><tr><th>rule</th><th>fit</th><th>R²</th><th>n</th><th>note</th>"
                     "</tr>")
        parts += [f"<tr><td>{e(r['name'])}</td><td>{e(_fit_text(r))}</td>"
                  f"<td>{r['r2']:.2f}</td><td>{r['n']}</td>"
                  f"<td class='note'>{e(r['note'])}</td></tr>" for r in shown]
        parts.append("</table>")
    for note in (_hidden_note(poor), _unfitted_note(unfitted)):
        if note:
            parts.append(f"<p class='note'>{e(note)}.</p>")
    if not rules:
        parts.append("<p class='note'>None for this context.</p>")
    plots = [scatter_figure(f"{prefix}-rule-{i}", f"{r['name']}: R² = {r['r2']:.2f}, "
                            f"n = {r['n']}", r["x"], r["y"], r["points"], r["curve"],
                            line_label=f"fit: {r['formula']}")
             for i, r in enumerate(shown) if r["points"]]
    if plots:
        parts += ["<div class='plots'>", *plots, "</div>"]
    return parts


def render_html(sheet: Mapping[str, Any]) -> str:
    """A static, self-contained HTML page: a table of contents, then per context its table,
    figures, rules of thumb and surrogate quality."""
    e = html.escape
    page = _Page()
    for section in sheet["contexts"]:
        anchor = page.anchor(section["label"])
        subs: list[tuple[str, str]] = []
        kind = section.get("kind", "other")
        parts = [f"<section id='{anchor}'><h2>{e(section['label'])}</h2>"
                 f"<p class='note'>{section['trials']} measured trials"
                 + (f"; {_KIND_TEXT[kind]}" if kind in _KIND_TEXT else "") + "</p>",
                 ]
        figures = section.get("figures") or {}
        blocks = ([_rate_html(page, anchor, f) for f in figures.get("rate", [])]
                  + [_knob_html(page, anchor, f) for f in figures.get("single_rate", [])]
                  + [_recall_html(page, anchor, f) for f in figures.get("recall_qps", [])])
        pareto = [p for p in section["pareto"] if p.get("plot", kind == "other")]
        if blocks or pareto:
            title = ("Recall against QPS" if kind == "vector_index"
                     else "Latency against arrival rate" if figures.get("rate")
                     else "Latency at the measured rate" if kind == "serving" else "Figures")
            parts.append(f"<h3 id='{anchor}-figures'>{title}</h3>")
            subs.append((f"{anchor}-figures", title.lower()))
            for sub_anchor, sub_title, block in blocks:
                parts += block
                if len(blocks) > 1:
                    subs.append((sub_anchor, sub_title))
        if pareto:
            parts.append(f"<h4 id='{anchor}-pareto'>Pareto fronts of the measured trials</h4>"
                         "<div class='plots'>")
            parts += [scatter_figure(
                f"{anchor}-pareto-{i}", f"Pareto front: {p['workload_class']}",
                p.get("x_label", p["x"]), p.get("y_label", p["y"]), p["points"], p["front"],
                line_label="Pareto front") for i, p in enumerate(pareto)]
            parts.append("</div>")
        parts += [f"<h3 id='{anchor}-table'>Recommendations</h3><div class='wide'>",
                  *_rows_html(_rows_of(sheet["rows"], section), section["model_quality"]),
                  "</div>"]
        parts.append(f"<h3 id='{anchor}-rules'>Rules of thumb</h3>")
        subs += [(f"{anchor}-table", "recommendations"), (f"{anchor}-rules", "rules of thumb")]
        parts += _rules_html(anchor, section["rules_of_thumb"])
        quality = {m: q for m, q in section["model_quality"].items() if q.get("mape") is not None}
        if quality:
            parts.append(f"<h3 id='{anchor}-quality'>Surrogate quality (grouped "
                         "cross-validation)</h3><table><tr><th>metric</th><th>MAPE</th>"
                         "<th>90% interval coverage</th><th>trials</th></tr>")
            subs.append((f"{anchor}-quality", "surrogate quality"))
            parts += [f"<tr><td>{e(m)}</td><td>{q['mape']:.1%}</td>"
                      f"<td>{q['interval_coverage']:.0%}</td><td>{q['n']}</td></tr>"
                      for m, q in sorted(quality.items())]
            parts.append("</table>")
        parts.append("</section>")
        page.toc.append((anchor, f"{section['label']} ({section['trials']} trials)", subs))
        page.parts += parts
    head = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
            "<title>slo-advisor tuning cheat-sheet</title>", f"<style>{_CSS}</style>",
            "</head><body><h1>Tuning cheat-sheet</h1>",
            f"<p class='note'>Built from {sheet['trials']} stored trials. "
            f"{e(sheet['note'])}.</p>",
            f"<p class='note'>{e(_HOW_TO_READ.format(r2=R2_MIN))}</p>"]
    if sheet["contexts"]:
        head.append(page.toc_html())
    else:
        head.append("<p>No fitted knowledge matches these filters.</p>")
    return "\n".join([*head, *page.parts, "</body></html>"])

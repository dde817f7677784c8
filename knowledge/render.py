"""Cheat-sheet renderers: Markdown, and a self-contained static HTML page with inline SVG plots
(Pareto fronts of the measured trials, fitted rule-of-thumb response curves). No scripts, fonts,
CDN or network: the page is one file that opens anywhere.

Both render the plain-data form of the sheet (``CheatSheet.to_dict()``), so they need no models.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

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


def _predicted_text(predicted: Mapping[str, Mapping[str, float]]) -> str:
    return "; ".join(f"{m} {_fmt(p['value'])} [{_fmt(p['low'])}, {_fmt(p['high'])}]"
                     for m, p in predicted.items())


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
        why = (row.get("baseline") or {}).get("reason", "")
        return f"**keep the defaults** ({_config_text(row['config'])}){': ' + why if why else ''}"
    return _config_text(row["config"])


def _importance_text(imp: Mapping[str, float], top: int = 3) -> str:
    return ", ".join(f"{k} {v:.0%}" for k, v in list(imp.items())[:top]) or "-"


def _rule_text(rule: Mapping[str, Any]) -> str:
    if rule["status"] != "fitted":
        return f"{rule['name']}: {rule['status']}"
    params = ", ".join(f"{k}={_fmt(v)}" for k, v in rule["params"].items())
    return f"{rule['name']}: {rule['formula']} with {params} (R²={rule['r2']:.2f}, n={rule['n']})"


def render_markdown(sheet: Mapping[str, Any]) -> str:
    """The sheet as Markdown: one table per context, then its rules of thumb and model quality."""
    lines = ["# Tuning cheat-sheet", "",
             f"Built from {sheet['trials']} stored trials. {sheet['note']}.", ""]
    rows = sheet["rows"]
    for section in sheet["contexts"]:
        ctx = section["context"]
        lines += [f"## {section['label']}", "",
                  f"{section['trials']} measured trials. Columns: tier (its SLO), recommended "
                  "knobs, predicted metrics with 90% intervals, the knobs that move the "
                  "objective most, confidence, measured trials at that workload.", "",
                  "| workload | tier | SLO / objective | knobs | predicted | importance | "
                  "confidence | evidence |", "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            if (r["target"], r["hardware_key"], r["model"], r["engine_version"]) != (
                    ctx["target"], ctx["hardware_key"], ctx["model"], ctx["engine_version"]):
                continue
            knobs = _knobs_text(r)
            lines.append(
                f"| {r['workload_class']} | {r['tier']} | `{r['slo']}` {r['objective']} | "
                f"{knobs} | {_predicted_text(r['predicted']) or '-'}"
                f"{'; ' + _stage_text(r) if _stage_text(r) else ''} | "
                f"{_importance_text(r['knob_importance'])} | {r['confidence']} | "
                f"{r['evidence_count']} trials |")
        lines += ["", "Rules of thumb (fitted to measured trials):", ""]
        lines += [f"- {_rule_text(rule)}" for rule in section["rules_of_thumb"]]
        quality = section["model_quality"]
        if quality:
            lines += ["", "Surrogate quality (grouped cross-validation):", "",
                      "| metric | MAPE | 90% interval coverage | trials |", "|---|---|---|---|"]
            for m, q in sorted(quality.items()):
                if q.get("mape") is None:
                    continue
                lines.append(f"| {m} | {q['mape']:.1%} | {q['interval_coverage']:.0%} | "
                             f"{q['n']} |")
        lines.append("")
    if not sheet["contexts"]:
        lines.append("No fitted knowledge matches these filters.")
    return "\n".join(lines) + "\n"


# -- SVG --------------------------------------------------------------------------------------

_W, _H, _PAD = 460, 300, 50


def _scale(values: Sequence[float], log: bool, lo_px: float, hi_px: float
           ) -> tuple[Any, float, float]:
    vals = [math.log10(v) if log else v for v in values]
    lo, hi = min(vals), max(vals)
    if hi - lo < 1e-12:
        lo, hi = lo - 0.5, hi + 0.5
    span = hi - lo
    lo, hi = lo - 0.05 * span, hi + 0.05 * span

    def f(v: float) -> float:
        x = math.log10(v) if log else v
        return lo_px + (x - lo) / (hi - lo) * (hi_px - lo_px)

    return f, lo, hi


def svg_plot(title: str, x_label: str, y_label: str, points: Sequence[Sequence[float]],
             line: Sequence[Sequence[float]] = (), *, line_label: str = "",
             log_x: bool = False, log_y: bool = False) -> str:
    """A scatter of ``points`` with an optional polyline (a Pareto front or fitted curve)."""
    pts = [(float(x), float(y)) for x, y in points if math.isfinite(x) and math.isfinite(y)
           and (not log_x or x > 0) and (not log_y or y > 0)]
    ln = [(float(x), float(y)) for x, y in line if math.isfinite(x) and math.isfinite(y)
          and (not log_x or x > 0) and (not log_y or y > 0)]
    allp = pts + ln
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" '
           f'viewBox="0 0 {_W} {_H}" role="img" aria-label="{html.escape(title)}">',
           f'<text x="{_W / 2}" y="16" text-anchor="middle" font-size="13">'
           f'{html.escape(title)}</text>']
    if not allp:
        out.append(f'<text x="{_W / 2}" y="{_H / 2}" text-anchor="middle">no data</text></svg>')
        return "".join(out)
    fx, xlo, xhi = _scale([p[0] for p in allp], log_x, _PAD, _W - 15)
    fy, ylo, yhi = _scale([p[1] for p in allp], log_y, _H - _PAD + 10, 28)
    out.append(f'<rect x="{_PAD}" y="28" width="{_W - 15 - _PAD}" height="{_H - _PAD - 18}" '
               'fill="none" stroke="#999"/>')
    for i in range(5):  # axis ticks
        tx = xlo + (xhi - xlo) * i / 4
        ty = ylo + (yhi - ylo) * i / 4
        vx = 10 ** tx if log_x else tx
        vy = 10 ** ty if log_y else ty
        px = _PAD + (_W - 15 - _PAD) * i / 4
        py = _H - _PAD + 10 - (_H - _PAD - 18) * i / 4
        out.append(f'<text x="{px:.1f}" y="{_H - _PAD + 24}" font-size="10" '
                   f'text-anchor="middle">{_fmt(vx)}</text>')
        out.append(f'<text x="{_PAD - 4}" y="{py + 3:.1f}" font-size="10" '
                   f'text-anchor="end">{_fmt(vy)}</text>')
    out.append(f'<text x="{_W / 2}" y="{_H - 8}" text-anchor="middle" font-size="11">'
               f'{html.escape(x_label)}{" (log)" if log_x else ""}</text>')
    out.append(f'<text x="12" y="{_H / 2}" text-anchor="middle" font-size="11" '
               f'transform="rotate(-90 12 {_H / 2})">{html.escape(y_label)}'
               f'{" (log)" if log_y else ""}</text>')
    for x, y in pts:
        out.append(f'<circle cx="{fx(x):.1f}" cy="{fy(y):.1f}" r="3" fill="#4a7ab8" '
                   'fill-opacity="0.6"/>')
    if ln:
        coords = " ".join(f"{fx(x):.1f},{fy(y):.1f}" for x, y in ln)
        out.append(f'<polyline points="{coords}" fill="none" stroke="#d0543c" '
                   'stroke-width="2"/>')
        if line_label:
            out.append(f'<text x="{_W - 20}" y="42" text-anchor="end" font-size="10" '
                       f'fill="#d0543c">{html.escape(line_label)}</text>')
    out.append("</svg>")
    return "".join(out)


_CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:13px}
td,th{border:1px solid #ccc;padding:4px 6px;vertical-align:top;text-align:left}
th{background:#f2f2f2} code,pre{font-size:12px;background:#f7f7f7}
.plots{display:flex;flex-wrap:wrap;gap:12px} .note{color:#555;font-size:13px}
pre{white-space:pre-wrap;max-width:420px;margin:0}"""


def render_html(sheet: Mapping[str, Any]) -> str:
    """A static, self-contained HTML page: tables per context plus inline SVG plots."""
    e = html.escape
    parts = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
             "<title>slo-advisor tuning cheat-sheet</title>", f"<style>{_CSS}</style>",
             "</head><body><h1>Tuning cheat-sheet</h1>",
             f"<p class='note'>Built from {sheet['trials']} stored trials. "
             f"{e(sheet['note'])}.</p>"]
    for section in sheet["contexts"]:
        ctx = section["context"]
        parts.append(f"<h2>{e(section['label'])}</h2><p class='note'>{section['trials']} "
                     "measured trials</p>")
        parts.append("<table><tr><th>workload</th><th>tier</th><th>SLO / objective</th>"
                     "<th>recommended knobs</th><th>predicted (90% interval)</th>"
                     "<th>knob importance</th><th>confidence</th><th>evidence</th>"
                     "<th>launch</th></tr>")
        for r in sheet["rows"]:
            if (r["target"], r["hardware_key"], r["model"], r["engine_version"]) != (
                    ctx["target"], ctx["hardware_key"], ctx["model"], ctx["engine_version"]):
                continue
            knobs = e(_config_text(r["config"])) if r["config"] else f"<i>{e(r['status'])}</i>"
            if r["config"] and r.get("answer") == "keep_defaults":
                why = (r.get("baseline") or {}).get("reason", "")
                knobs = (f"<b>keep the defaults</b> ({knobs})"
                         + (f"<br><span class='note'>{e(why)}</span>" if why else ""))
            launch = f"<pre>{e(r['launch_command'])}</pre>" if r["launch_command"] else (
                f"<code>{e(r['tune_command'] or '')}</code>")
            parts.append(
                f"<tr><td>{e(r['workload_class'])}</td><td>{e(r['tier'])}</td>"
                f"<td><code>{e(r['slo'])}</code><br>{e(r['objective'])}</td><td>{knobs}</td>"
                f"<td>{e(_predicted_text(r['predicted']) or '-')}"
                f"{'<br>' + e(_stage_text(r)) if _stage_text(r) else ''}</td>"
                f"<td>{e(_importance_text(r['knob_importance']))}</td>"
                f"<td title='{e(r['confidence_reason'])}'>{e(r['confidence'])}</td>"
                f"<td>{r['evidence_count']} trials</td><td>{launch}</td></tr>")
        parts.append("</table><h3>Rules of thumb</h3><ul>")
        parts += [f"<li>{e(_rule_text(rule))}. <span class='note'>{e(rule['note'])}</span></li>"
                  for rule in section["rules_of_thumb"]]
        parts.append("</ul><div class='plots'>")
        for p in section["pareto"]:
            parts.append(svg_plot(f"Pareto front: {p['workload_class']}", p["x"], p["y"],
                                  p["points"], p["front"], line_label="Pareto front",
                                  log_x=True, log_y=True))
        for rule in section["rules_of_thumb"]:
            if rule["points"]:
                parts.append(svg_plot(rule["name"], rule["x"], rule["y"], rule["points"],
                                      rule["curve"], line_label=rule["formula"]))
        parts.append("</div>")
        quality = {m: q for m, q in section["model_quality"].items() if q.get("mape") is not None}
        if quality:
            parts.append("<h3>Surrogate quality (grouped cross-validation)</h3><table><tr>"
                         "<th>metric</th><th>MAPE</th><th>90% interval coverage</th>"
                         "<th>trials</th></tr>")
            parts += [f"<tr><td>{e(m)}</td><td>{q['mape']:.1%}</td>"
                      f"<td>{q['interval_coverage']:.0%}</td><td>{q['n']}</td></tr>"
                      for m, q in sorted(quality.items())]
            parts.append("</table>")
    if not sheet["contexts"]:
        parts.append("<p>No fitted knowledge matches these filters.</p>")
    parts.append("</body></html>")
    return "\n".join(parts)

"""Cheat-sheet figures drawn with matplotlib and returned as inline SVG text.

Only the object-oriented API with the SVG canvas is used (no pyplot: no global backend switch and
no figure registry that could leak figures); each figure is drawn, serialised and cleared under
one lock, because the rc settings it draws with are process-global. The output is deterministic
(fixed ``svg.hashsalt``, no date) and small (``svg.fonttype = none`` keeps text as text), and
every element id is prefixed with the figure's own id so that many figures share one HTML page.

The figures draw the plain data of the sheet's JSON form (advisor/sheet_figures.py). Positive
quantities get an axis from 0 or a log axis (never a negative tick), nice tick values from
``MaxNLocator`` / ``LogLocator`` with plain labels, units in every label, and legends outside the
axes so they cover no data.
"""

from __future__ import annotations

import io
import math
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import matplotlib
import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_svg import FigureCanvasSVG
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

__all__ = ["LOG_SPAN", "knob_figure", "rate_figure", "recall_qps_figure", "scatter_figure",
           "tick_text"]

#: Values spanning more than this factor get a log axis (a linear one would flatten all but the
#: largest); TTFT p95 past saturation is 100x its unloaded value.
LOG_SPAN = 30.0

_RC: dict[RcKeyType, Any] = {
    "svg.hashsalt": "slo-advisor-cheatsheet", "svg.fonttype": "none",
    "font.family": "sans-serif", "font.sans-serif": ["DejaVu Sans", "Arial", "Helvetica"],
    "font.size": 9.0, "axes.titlesize": 9.5, "axes.labelsize": 9.0, "legend.fontsize": 8.0,
    "xtick.labelsize": 8.0, "ytick.labelsize": 8.0, "axes.spines.top": False,
    "axes.spines.right": False, "axes.grid": True, "grid.color": "#e4e4e4",
    "grid.linewidth": 0.6, "axes.axisbelow": True, "axes.formatter.use_mathtext": False,
    "axes.unicode_minus": False, "path.simplify": True, "lines.solid_capstyle": "round",
}
_LOCK = threading.Lock()
_NO_METADATA = {"Date": None, "Creator": None, "Format": None, "Type": None}

SLO_COLOR = "#c0392b"
DEFAULT_COLOR = "#222222"
#: Config curves (red is the SLO's, black the default's).
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#17becf", "#bcbd22")
#: Tiers in the sheet's order (strictest first).
TIER_COLORS = ("#1b7837", "#2166ac", "#e08214", "#762a83")
HOLLOW = "white"


def tick_text(value: float, _pos: object = None) -> str:
    """A plain tick label: ``0``, ``0.05``, ``2.5``, ``500``, ``2k``, ``1.5M``."""
    a = abs(value)
    if a < 1e-12:
        return "0"
    if a >= 1e6:
        return f"{value / 1e6:.3g}M"
    if a >= 1e3:
        return f"{value / 1e3:.3g}k"
    if a >= 1:
        return f"{value:.4g}"
    return f"{value:.3g}"


def _finite_positive(values: Sequence[float]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(v) and v > 0]


def positive_axis(ax: Axes, which: str, values: Sequence[float], *, log: bool | None = None
                  ) -> bool:
    """Scale one axis of ``ax`` (``"x"`` or ``"y"``) for a positive quantity over ``values``:
    log when asked or when they span more than :data:`LOG_SPAN`, else linear from 0; nice ticks
    with plain labels. Returns whether the axis is logarithmic."""
    vals = _finite_positive(values)
    if log is None:
        # A zero (a knob turned off) has no place on a log axis: keep those linear.
        zero = any(v is not None and math.isfinite(v) and v <= 0 for v in values)
        log = bool(vals) and not zero and max(vals) / min(vals) > LOG_SPAN
    axis = ax.xaxis if which == "x" else ax.yaxis
    set_lim = ax.set_xlim if which == "x" else ax.set_ylim
    if log and vals:
        (ax.set_xscale if which == "x" else ax.set_yscale)("log")
        lo, hi = min(vals), max(vals)
        span = math.log10(hi / lo) if hi > lo else 0.0
        subs = (1.0, 2.0, 3.0, 5.0) if span < 1 else (1.0, 2.0, 5.0) if span < 2.5 else (1.0,)
        axis.set_major_locator(LogLocator(base=10, subs=subs, numticks=12))
        axis.set_minor_formatter(NullFormatter())
        pad = 10 ** max(0.06 * span, 0.08)
        set_lim(lo / pad, hi * pad)
    else:
        log = False
        axis.set_major_locator(MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10], min_n_ticks=3))
        hi = (max(vals) * 1.08) if vals else 1.0
        # A value at exactly 0 (a knob off) gets a sliver of room so its marker is not cut by
        # the spine; ticks stay >= 0 (the locator's ticks outside the limits are not drawn).
        at_zero = any(v is not None and math.isfinite(v) and v == 0 for v in values)
        set_lim(-0.03 * hi if at_zero else 0, hi)
    axis.set_major_formatter(FuncFormatter(tick_text))
    return log


def _svg(fig: Figure, fig_id: str, title: str) -> str:
    buf = io.StringIO()
    FigureCanvasSVG(fig).print_svg(buf, metadata=_NO_METADATA)
    return inline_svg(buf.getvalue(), fig_id, title)


def inline_svg(svg: str, fig_id: str, title: str) -> str:
    """Matplotlib's SVG document as an element for an HTML page: no XML prolog or DOCTYPE, every
    id (and every reference to one) prefixed with ``fig_id``, a class, role and title."""
    svg = svg[svg.index("<svg"):]

    def own(name: str) -> str:
        return name if name.startswith(fig_id) else f"{fig_id}-{name}"

    svg = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{own(m[1])}"', svg)
    svg = re.sub(r'href="#([^"]+)"', lambda m: f'href="#{own(m[1])}"', svg)
    svg = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{own(m[1])})", svg)
    safe = (title.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))
    head_end = svg.index(">") + 1
    return (svg[:4] + f' class="figure" role="img" aria-label="{safe}"' + svg[4:head_end]
            + f"<title>{safe}</title>" + svg[head_end:])


def _draw(fig_id: str, size: tuple[float, float], title: str,
          draw: Callable[[Figure], None]) -> str:
    """Draw with ``draw`` on a fresh constrained-layout figure and return its inline SVG."""
    with _LOCK, matplotlib.rc_context(_RC):
        fig = Figure(figsize=size, layout="constrained")
        fig.set_gid(fig_id)
        try:
            draw(fig)
            return _svg(fig, fig_id, title)
        finally:
            fig.clear()


def _bound_text(op: str, threshold: float, unit: str) -> str:
    sign = "≤" if op == "<=" else "≥"
    value = f"{threshold:,.6g}" if abs(threshold) >= 1 else f"{threshold:.3g}"
    return f"{sign} {value}{' ' + unit if unit and unit != 'fraction' else ''}"


def _data_in_axes(ax: Axes) -> np.ndarray:
    """Every plotted point of ``ax`` (markers, and lines sampled along their segments) in axes
    coordinates, the SLO lines left out."""
    to_axes = ax.transData + ax.transAxes.inverted()
    chunks = []
    for line in ax.lines:
        if "-slo" in (line.get_gid() or ""):
            continue
        xy = to_axes.transform(np.asarray(line.get_xydata(), dtype=float))
        if len(xy) > 1:  # the segments between markers hide a label as much as the markers do
            t = np.linspace(0.0, 1.0, 12)[:, None, None]
            xy = (xy[:-1] * (1 - t) + xy[1:] * t).reshape(-1, 2)
        chunks.append(xy)
    for coll in ax.collections:
        offsets = np.asarray(coll.get_offsets(), dtype=float)
        if len(offsets) and "-slo" not in (coll.get_gid() or ""):
            chunks.append(to_axes.transform(offsets))
    if not chunks:
        return np.zeros((0, 2))
    xy = np.concatenate(chunks)
    return xy[np.isfinite(xy).all(axis=1)]


def _label_lines(ax: Axes, labels: Sequence[tuple[float, str, str]]) -> None:
    """Label horizontal lines (y, text, colour) just above each line, on the side of the axes
    where fewer data points sit under the label: the label must not hide a measurement. Call
    after the axes' limits are set."""
    data = _data_in_axes(ax)
    to_axes = ax.transData + ax.transAxes.inverted()
    # (anchor x, alignment, the span of the axes the label covers), in order of preference.
    spots = ((0.985, "right", 0.6, 1.0), (0.015, "left", 0.0, 0.4), (0.5, "center", 0.3, 0.7))
    for y, text, color in labels:
        ya = float(to_axes.transform([(ax.get_xlim()[0], y)])[0][1])
        near = data[(data[:, 1] > ya - 0.03) & (data[:, 1] < ya + 0.11)]
        x, ha, _, _ = min(spots, key=lambda sp: int(((near[:, 0] >= sp[2])
                                                      & (near[:, 0] <= sp[3])).sum()))
        ax.annotate(text, xy=(x, y), xycoords=ax.get_yaxis_transform(), xytext=(0, 2.5),
                    textcoords="offset points", ha=ha, va="bottom", fontsize=7.5, color=color,
                    zorder=5, bbox={"boxstyle": "square,pad=0.1", "facecolor": "white",
                                    "edgecolor": "none", "alpha": 0.8})


def _marker_key() -> list[Line2D]:
    return [Line2D([], [], color="#555555", marker="o", linestyle="none", markersize=5,
                   label="meets the tier's SLO"),
            Line2D([], [], color="#555555", marker="o", linestyle="none", markersize=5,
                   markerfacecolor=HOLLOW, label="misses it")]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "x"


def rate_figure(fig_id: str, data: Mapping[str, Any], tier: Mapping[str, Any]) -> str:
    """TTFT p95 and TPOT p95 against arrival rate for one tier: one line per config (the engine
    default dashed), markers at the median of the repeats, bars from the lowest to the highest
    repeat, markers filled where the tier's SLO is met, the tier's bounds as red lines."""
    series = {s["key"]: s for s in data["series"]}
    shown = [(ts, series[ts["key"]]) for ts in tier["series"]]
    letters = [s["key"] for s in data["series"] if not s["default"]]
    rates = [float(r) for r in data["rates"]]

    def color(s: Mapping[str, Any]) -> str:
        return DEFAULT_COLOR if s["default"] else PALETTE[letters.index(s["key"]) % len(PALETTE)]

    def draw(fig: Figure) -> None:
        axes = fig.subplots(1, len(data["panels"]), squeeze=False)[0]
        for ax, panel in zip(axes, data["panels"], strict=True):
            metric = panel["metric"]
            ax.set_gid(f"{fig_id}-{metric}")
            values: list[float] = []
            for ts, s in shown:
                pts = [(p, ok) for p, ok in zip(s["points"], ts["meets_slo"], strict=True)
                       if metric in p["median"]]
                if not pts:
                    continue
                c, key = color(s), _slug(s["key"])
                xs = [float(p["rate_rps"]) for p, _ in pts]
                ys = [float(p["median"][metric]) for p, _ in pts]
                values += ys + [float(p["high"][metric]) for p, _ in pts]
                ax.plot(xs, ys, color=c, linestyle=(0, (5, 3)) if s["default"] else "-",
                        linewidth=2.0 if ts["recommended"] else 1.4, zorder=2,
                        gid=f"{fig_id}-{metric}-curve-{key}")
                spread = [(x, p["low"][metric], p["high"][metric])
                          for x, (p, _) in zip(xs, pts, strict=True) if p["n"] > 1]
                if spread:
                    ax.vlines([x for x, _, _ in spread], [lo for _, lo, _ in spread],
                              [hi for _, _, hi in spread], color=c, linewidth=0.9, alpha=0.55,
                              zorder=1, gid=f"{fig_id}-{metric}-spread-{key}")
                for ok in (True, False):
                    sel = [(x, y) for x, y, (_, met) in zip(xs, ys, pts, strict=True)
                           if met is ok]
                    if sel:
                        ax.scatter([x for x, _ in sel], [y for _, y in sel], s=26, zorder=3,
                                   color=c if ok else HOLLOW, edgecolors=c, linewidths=1.2,
                                   gid=f"{fig_id}-{metric}-{'met' if ok else 'missed'}-{key}")
            bounds = [b for b in tier["bounds"] if b["metric"] == metric]
            for b in bounds:
                ax.axhline(b["threshold"], color=SLO_COLOR, linewidth=1.3, zorder=4,
                           gid=f"{fig_id}-{metric}-slo")
            values += [float(b["threshold"]) for b in bounds]
            positive_axis(ax, "y", values)
            positive_axis(ax, "x", [*rates, max(rates) * 1.04], log=False)
            _label_lines(ax, [(b["threshold"], "SLO " + _bound_text(
                b["op"], b["threshold"], panel.get("unit", "")), SLO_COLOR) for b in bounds])
            ax.set_xlabel(data["x_label"])
            ax.set_ylabel(panel["label"])
            name = panel["label"].split(" (")[0]
            ax.set_title(f"{name} against arrival rate"
                         + ("" if bounds else f" (no {name} bound in this tier)"))
        handles = [Line2D([], [], color=color(s), linestyle=(0, (5, 3)) if s["default"] else "-",
                          linewidth=2.0 if ts["recommended"] else 1.4, marker="o",
                          markersize=4,
                          label=("default" if s["default"] else f"config {s['key']}")
                          + (" (recommended)" if ts["recommended"] else ""))
                   for ts, s in shown]
        handles.append(Line2D([], [], color=SLO_COLOR, linewidth=1.3, label="SLO bound"))
        fig.legend(handles=handles + _marker_key(), loc="outside right upper", frameon=False)
        fig.suptitle(f"{tier['tier']} tier: {tier.get('slo_text', tier['slo'])}", fontsize=10)

    title = f"TTFT and TPOT p95 against arrival rate, {data['family']}, {tier['tier']} tier"
    return _draw(fig_id, (10.0, 3.5), title, draw)


def knob_figure(fig_id: str, data: Mapping[str, Any]) -> str:
    """For a workload measured at one rate: TTFT / TPOT p95 of every trial against one knob,
    each marker coloured by the strictest tier whose SLO the trial meets (hollow: none), the
    engine default as a diamond, every tier's bound as a line in its colour."""
    tiers = list(data["tiers"])
    tier_color = {t["tier"]: TIER_COLORS[i % len(TIER_COLORS)] for i, t in enumerate(tiers)}
    categorical = bool(data.get("categorical"))
    categories = list(data.get("categories") or [])

    def xpos(value: Any, j: int) -> float:
        if categorical:
            return categories.index(value) + ((j * 7) % 9 - 4) * 0.035  # spread repeats
        return float(value)

    def draw(fig: Figure) -> None:
        axes = fig.subplots(1, len(data["panels"]), squeeze=False)[0]
        for ax, panel in zip(axes, data["panels"], strict=True):
            metric = panel["metric"]
            ax.set_gid(f"{fig_id}-{metric}")
            pts = [p for p in data["points"] if metric in p["metrics"]]
            values = [float(p["metrics"][metric]) for p in pts]
            groups: dict[tuple[str | None, bool], list[tuple[float, float]]] = {}
            for j, p in enumerate(pts):
                groups.setdefault((p["tier"], p["default"]), []).append(
                    (xpos(p["x"], j), float(p["metrics"][metric])))
            for (tier, default), xy in sorted(groups.items(), key=lambda kv: str(kv[0])):
                c = tier_color.get(tier or "", "#777777")
                ax.scatter([x for x, _ in xy], [y for _, y in xy], s=48 if default else 26,
                           marker="D" if default else "o", zorder=3 + default,
                           color=c if tier else HOLLOW, edgecolors=DEFAULT_COLOR if default else c,
                           linewidths=1.2, gid=f"{fig_id}-{metric}-{_slug(str(tier))}"
                           + ("-default" if default else ""))
            by_value: dict[float, list[str]] = {}
            for t in tiers:
                for b in t["bounds"]:
                    if b["metric"] == metric:
                        by_value.setdefault(float(b["threshold"]), []).append(t["tier"])
            labels = []
            for value, names in sorted(by_value.items()):
                c = tier_color[names[0]]
                ax.axhline(value, color=c, linewidth=1.2, linestyle=(0, (6, 2)), zorder=2,
                           gid=f"{fig_id}-{metric}-slo-{_slug(names[0])}")
                op = next(b["op"] for t in tiers for b in t["bounds"]
                          if b["metric"] == metric and float(b["threshold"]) == value)
                labels.append((value, f"{', '.join(names)} "
                               + _bound_text(op, value, panel.get("unit", "")), c))
            positive_axis(ax, "y", values + list(by_value))
            if categorical:
                ax.set_xticks(range(len(categories)), categories)
                ax.set_xlim(-0.6, len(categories) - 0.4)
                ax.grid(False, axis="x")
            else:
                xs = [float(p["x"]) for p in pts]
                positive_axis(ax, "x", xs, log=bool(data.get("log_x")) and min(xs, default=0) > 0)
            _label_lines(ax, labels)
            ax.set_xlabel(data["x_label"])
            ax.set_ylabel(panel["label"])
            ax.set_title(f"{panel['label'].split(' (')[0]} against {data['knob']}")
        handles = [Line2D([], [], color=c, marker="o", linestyle="none", markersize=5,
                          label=f"meets the {name} SLO") for name, c in tier_color.items()]
        handles += [Line2D([], [], color="#777777", marker="o", linestyle="none", markersize=5,
                           markerfacecolor=HOLLOW, label="meets no tier's SLO"),
                    Line2D([], [], color="#777777", marker="D", linestyle="none", markersize=6,
                           markeredgecolor=DEFAULT_COLOR, label="engine default")]
        fig.legend(handles=handles, loc="outside right upper", frameon=False)
        fig.suptitle(f"{data['workload_class']}: {data['note']}", fontsize=10)

    title = f"TTFT and TPOT p95 against {data['knob']}, {data['workload_class']}"
    return _draw(fig_id, (10.0, 3.5), title, draw)


#: The zoomed panel of a recall figure starts this far below the lowest recall bound.
ZOOM_BELOW_BOUND = 0.1


def recall_qps_figure(fig_id: str, data: Mapping[str, Any]) -> str:
    """Recall against QPS (log) per index family, as ann-benchmarks draws it: every trial a faint
    marker, each family's Pareto front a line, the tiers' recall bounds as red lines. Left the
    whole range from 0; right the same zoomed to the region around the bounds, where the tiers'
    answers are."""
    bounds = [float(b["threshold"]) for b in data["bounds"]]
    floor = (math.floor((min(bounds) - ZOOM_BELOW_BOUND) * 20) / 20) if bounds else None
    name_y, name_x = data["y_label"].split(" (")[0], data["x_label"].split(" (")[0]

    def panel(ax: Axes, zoom: bool) -> None:
        xs: list[float] = []
        for i, fam in enumerate(data["families"]):
            c = PALETTE[i % len(PALETTE)]
            key = _slug(fam["name"]) + ("-zoom" if zoom else "")
            pts, front = fam["points"], fam["front"]
            xs += [float(x) for x, _ in pts]
            ax.scatter([x for x, _ in pts], [y for _, y in pts], s=9, color=c, alpha=0.25,
                       linewidths=0, zorder=2, gid=f"{fig_id}-points-{key}")
            ax.plot([x for x, _ in front], [y for _, y in front], color=c, linewidth=1.8,
                    marker="o", markersize=3.5, zorder=3, gid=f"{fig_id}-front-{key}",
                    label=None if zoom else f"{fam['name']} ({len(pts)} trials)")
        for b in data["bounds"]:
            ax.axhline(b["threshold"], color=SLO_COLOR, linewidth=1.1, zorder=4,
                       gid=f"{fig_id}-slo-{_slug(str(b['threshold']))}"
                       + ("-zoom" if zoom else ""))
        positive_axis(ax, "x", xs, log=True)
        low = floor if zoom and floor is not None else 0.0
        ax.set_ylim(low, 1.0 + (1.0 - low) * 0.02)
        if zoom or len(data["bounds"]) == 1:  # close lines' labels collide unzoomed
            _label_lines(ax, [(b["threshold"], f"{name_y} " + _bound_text(
                b["op"], b["threshold"], data.get("y_unit", "")) + f" ({', '.join(b['tiers'])})",
                SLO_COLOR) for b in data["bounds"]])
        ax.yaxis.set_major_locator(MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10]))
        ax.yaxis.set_major_formatter(FuncFormatter(tick_text))
        ax.set_xlabel(data["x_label"] + ", log scale")
        ax.set_ylabel(data["y_label"])
        ax.set_title(f"zoom: {name_y} from {tick_text(low)}" if zoom
                     else f"all trials: {name_y} from 0")

    def draw(fig: Figure) -> None:
        axes = fig.subplots(1, 2 if floor is not None and floor > 0 else 1, squeeze=False)[0]
        axes[0].set_gid(f"{fig_id}-axes")
        panel(axes[0], zoom=False)
        if len(axes) > 1:
            axes[1].set_gid(f"{fig_id}-axes-zoom")
            panel(axes[1], zoom=True)
        handles, labels = axes[0].get_legend_handles_labels()
        handles.append(Line2D([], [], color=SLO_COLOR, linewidth=1.1))
        labels.append("SLO recall bound")
        fig.legend(handles, labels, loc="outside right upper", frameon=False,
                   title=(f"Pareto front per {data['family_knob']}" if data.get("family_knob")
                          else "Pareto front"), title_fontsize=8)
        fig.suptitle(f"{name_y} against {name_x}: {data['workload_class']}", fontsize=10)

    title = f"recall against QPS, {data['workload_class']}"
    return _draw(fig_id, (10.0, 3.8), title, draw)


def scatter_figure(fig_id: str, title: str, x_label: str, y_label: str,
                   points: Sequence[Sequence[float]], line: Sequence[Sequence[float]] = (), *,
                   point_label: str = "measured trials", line_label: str = "",
                   log_x: bool | None = None, log_y: bool | None = None,
                   size: tuple[float, float] = (5.2, 3.6)) -> str:
    """Measured ``points`` with an optional ``line`` through them (a Pareto front or a fitted
    curve); each axis is log when asked, or when left None and the values span > LOG_SPAN."""
    pts = [(float(x), float(y)) for x, y in points if math.isfinite(x) and math.isfinite(y)]
    ln = [(float(x), float(y)) for x, y in line if math.isfinite(x) and math.isfinite(y)]

    def draw(fig: Figure) -> None:
        ax = fig.add_subplot()
        ax.set_gid(f"{fig_id}-axes")
        if not pts and not ln:
            ax.set_axis_off()
            ax.text(0.5, 0.5, "no measured data", ha="center", va="center",
                    transform=ax.transAxes)
            return
        ax.scatter([x for x, _ in pts], [y for _, y in pts], s=16, color=PALETTE[0],
                   alpha=0.6, linewidths=0, zorder=2, gid=f"{fig_id}-points", label=point_label)
        if ln:
            ax.plot([x for x, _ in ln], [y for _, y in ln], color=SLO_COLOR, linewidth=1.8,
                    zorder=3, gid=f"{fig_id}-line", label=line_label or None)
        every = pts + ln
        positive_axis(ax, "x", [x for x, _ in every], log=log_x)
        positive_axis(ax, "y", [y for _, y in every], log=log_y)
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        ax.set_title(title, fontsize=9)
        fig.legend(loc="outside lower center", ncols=2, frameon=False)

    return _draw(fig_id, size, title, draw)

"""The cheat-sheet's figures: latency against arrival rate for a serving context measured at
several rates (per tier, the top configs and the engine default, the SLO as a line, met points
filled), a "measured at one rate only" figure otherwise, recall against QPS on a log axis for a
vector index context, rules of thumb hidden below the R² threshold, and a page that stays
script-free with every figure an inline SVG with non-negative, nicely spaced ticks.

The SVGs are read back as XML: matplotlib writes an ``id`` per artist (ours carry gids), so the
tests find the default's curve, the SLO line and the markers by id and check their geometry."""

from __future__ import annotations

import itertools
import json
import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from typing import Any

import pytest

from advisor.cheatsheet import CheatSheet, build_cheatsheet
from advisor.sheet_figures import MAX_CURVES
from knowledge import TrialStore
from knowledge.cache import KnowledgeModels
from knowledge.render import render_html, render_markdown
from knowledge.rules import R2_MIN, fit_rules
from tests.advisor import serving_sheet_store as serving
from tests.conftest import SCRIPTED
from tests.knowledge.synthetic_trials import populate as populate_vector

SVG = "{http://www.w3.org/2000/svg}"
EXTRA = f"{SCRIPTED},{serving.REGISTRATION}"


@pytest.fixture(autouse=True)
def _serving_target(_scripted_target: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADVISOR_EXTRA_TARGETS", EXTRA)


@pytest.fixture(scope="module")
def serving_sheet(tmp_path_factory: pytest.TempPathFactory) -> CheatSheet:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ADVISOR_EXTRA_TARGETS", EXTRA)
        store = TrialStore(f"sqlite:///{tmp_path_factory.mktemp('serving') / 'k.db'}")
        serving.populate(store)
        models = KnowledgeModels.fit(store, target=serving.NAME, score=False)
        return build_cheatsheet(store, target=serving.NAME, models=models)


@pytest.fixture(scope="module")
def serving_page(serving_sheet: CheatSheet) -> str:
    return render_html(json.loads(json.dumps(serving_sheet.to_dict())))


@pytest.fixture(scope="module")
def vector_page(tmp_path_factory: pytest.TempPathFactory) -> str:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ADVISOR_EXTRA_TARGETS", EXTRA)
        store = TrialStore(f"sqlite:///{tmp_path_factory.mktemp('vector') / 'k.db'}")
        populate_vector(store, n_configs=24, sizes=(1000,), repeats=1)
        models = KnowledgeModels.fit(store, score=False)
        return build_cheatsheet(store, models=models).to_html()


# -- reading the SVGs back --------------------------------------------------------------------


def svgs(page: str) -> list[ET.Element]:
    return [ET.fromstring(s) for s in re.findall(r"<svg\b.*?</svg>", page, re.S)]


def figure(page: str, *words: str) -> ET.Element:
    """The one SVG whose title holds every word."""
    found = [s for s in svgs(page) if all(w in (s.get("aria-label") or "") for w in words)]
    assert len(found) == 1, [s.get("aria-label") for s in svgs(page)]
    return found[0]


def by_id(root: ET.Element, suffix: str) -> list[ET.Element]:
    return [el for el in root.iter() if (el.get("id") or "").endswith(suffix)]


def markers(group: ET.Element) -> list[tuple[float, float]]:
    """The (x, y) of every marker matplotlib drew in ``group`` (one <use> each)."""
    return [(float(u.get("x", "nan")), float(u.get("y", "nan"))) for u in group.iter(f"{SVG}use")]


def ticks(axes: ET.Element, axis: str) -> list[tuple[float, str]]:
    """(position, label) of each labelled major tick of one axis of ``axes``."""
    out = []
    for g in axes.iter(f"{SVG}g"):
        if f"{axis}tick_" not in (g.get("id") or ""):
            continue
        use = next(g.iter(f"{SVG}use"), None)
        text = next(g.iter(f"{SVG}text"), None)
        if use is not None and text is not None and (text.text or "").strip():
            out.append((float(use.get("x" if axis == "x" else "y", "nan")), text.text.strip()))
    return out


def tick_value(label: str) -> float | None:
    """The number a tick label shows (``2.5k`` -> 2500), None for a category."""
    m = re.fullmatch(r"([-−]?[\d.,]+)([kM]?)", label)
    if m is None:
        return None
    value = float(m[1].replace(",", "").replace("−", "-"))
    return value * {"": 1, "k": 1e3, "M": 1e6}[m[2]]


def all_texts(root: ET.Element) -> Iterator[str]:
    for t in root.iter(f"{SVG}text"):
        yield "".join(t.itertext())


# -- serving: latency against arrival rate ----------------------------------------------------


def test_rate_family_has_the_default_and_the_top_configs_per_tier(serving_sheet: CheatSheet
                                                                   ) -> None:
    (section,) = [s.to_dict() for s in serving_sheet.sections]
    assert section["kind"] == "serving"
    (fig,) = section["figures"]["rate"]
    assert fig["rates"] == list(serving.RATES) and fig["default_measured"]
    assert {t["tier"] for t in fig["tiers"]} == {"interactive", "standard", "throughput"}
    series = {s["key"]: s for s in fig["series"]}
    default = series["default"]
    assert default["default"] and default["differs"] == {}
    holds = next(s for s in fig["series"] if s["config"] == serving.HOLDS)
    # A point is the median of the repeats (x0.97 and x1.03 of the truth), with their range.
    at40 = next(p for p in default["points"] if p["rate_rps"] == 40.0)
    truth = serving.truth(serving.DEFAULT, 40.0)["ttft_p95_ms"]
    assert at40["n"] == 2 and at40["median"]["ttft_p95_ms"] == pytest.approx(truth)
    assert at40["low"]["ttft_p95_ms"] == pytest.approx(0.97 * truth)
    assert at40["high"]["ttft_p95_ms"] == pytest.approx(1.03 * truth)
    interactive = next(t for t in fig["tiers"] if t["tier"] == "interactive")
    shown = {s["key"]: s for s in interactive["series"]}
    assert len(shown) <= MAX_CURVES + 1 and "default" in shown and holds["key"] in shown
    # The default saturates past 500 ms TTFT at the highest rate; HOLDS meets the SLO there.
    assert shown["default"]["meets_slo"] == [True, True, True, False]
    assert all(shown[holds["key"]]["meets_slo"])
    assert {(b["metric"], b["threshold"]) for b in interactive["bounds"]} == {
        ("ttft_p95_ms", 500.0), ("tpot_p95_ms", 25.0)}
    # Configs measured at one rate get no curve unless a tier recommends them.
    for tier in fig["tiers"]:
        for s in tier["series"]:
            if len(series[s["key"]]["points"]) < 2:
                assert s["recommended"]


def test_rate_figure_draws_the_default_dashed_the_slo_line_and_met_points_filled(
        serving_page: str) -> None:
    svg = figure(serving_page, "arrival rate", "interactive tier")
    (curve,) = by_id(svg, "ttft_p95_ms-curve-default")
    path = next(curve.iter(f"{SVG}path"))
    assert "stroke-dasharray" in (path.get("style") or "")  # the default is dashed
    (slo,) = by_id(svg, "ttft_p95_ms-slo")
    (slo_path,) = list(slo.iter(f"{SVG}path"))
    ys = {round(float(v), 3) for v in re.findall(r"[ML] [\d.]+ ([\d.]+)", slo_path.get("d", ""))}
    assert len(ys) == 1  # horizontal
    assert "SLO ≤ 500 ms" in list(all_texts(svg))
    met = [xy for g in by_id(svg, "ttft_p95_ms-met-default") for xy in markers(g)]
    missed = [xy for g in by_id(svg, "ttft_p95_ms-missed-default") for xy in markers(g)]
    assert len(met) == 3 and len(missed) == 1
    (missed_xy,) = missed
    assert missed_xy[0] > max(x for x, _ in met)  # the highest rate missed it
    assert missed_xy[1] < min(ys)  # above the SLO line (SVG y grows downwards)
    assert all(y > min(ys) for _, y in met)
    filled = next(by_id(svg, "ttft_p95_ms-met-default")[0].iter(f"{SVG}use")).get("style", "")
    hollow = next(by_id(svg, "ttft_p95_ms-missed-default")[0].iter(f"{SVG}use")).get("style")
    assert "fill: #ffffff" in (hollow or "") and "fill: #ffffff" not in filled
    # A tier without a TTFT bound draws no TTFT line and says so.
    throughput = figure(serving_page, "arrival rate", "throughput tier")
    assert not by_id(throughput, "ttft_p95_ms-slo") and by_id(throughput, "tpot_p95_ms-slo")
    assert any("no TTFT p95 bound" in t for t in all_texts(throughput))


def test_family_measured_at_one_rate_says_so_and_plots_a_knob(serving_sheet: CheatSheet,
                                                              serving_page: str) -> None:
    (section,) = [s.to_dict() for s in serving_sheet.sections]
    (single,) = section["figures"]["single_rate"]
    assert single["note"] == f"measured at one rate only ({serving.ONE_RATE:g} req/s)"
    assert single["knob"] in ("max_batch", "chunked") and len(single["points"]) == 5
    assert sum(p["default"] for p in single["points"]) == 1
    assert "measured at one rate only (5 req/s)" in serving_page
    svg = figure(serving_page, f"against {single['knob']}")
    assert by_id(svg, "ttft_p95_ms-slo-interactive")


def test_page_is_script_free_with_inline_svgs_and_a_table_of_contents(serving_page: str
                                                                       ) -> None:
    page = serving_page
    assert "<script" not in page.lower() and not re.search(r"\bon[a-z]+=", page)
    assert not re.search(r"<(img|object|iframe|embed)\b", page)
    assert page.count("<svg") == page.count("</svg>") == len(svgs(page)) >= 4
    assert not re.search(r'(src|href)="(?!#)', page)  # only in-page references
    toc = page[page.index("<nav class='toc'>"):page.index("</nav>")]
    anchors = re.findall(r"href='#([^']+)'", toc)
    assert anchors and all(f"id='{a}'" in page for a in anchors)
    # Ids stay unique across the figures sharing the page.
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) == len(set(ids))


def test_rendering_is_deterministic(serving_sheet: CheatSheet) -> None:
    data = json.loads(json.dumps(serving_sheet.to_dict()))
    assert render_html(data) == render_html(data)


def test_markdown_stays_plot_free(serving_sheet: CheatSheet) -> None:
    md = serving_sheet.to_markdown()
    assert "<svg" not in md and "<script" not in md and "| workload | tier |" in md


@pytest.mark.parametrize("page_name", ["serving_page", "vector_page"])
def test_tick_labels_are_non_negative_and_evenly_spaced(page_name: str,
                                                        request: pytest.FixtureRequest) -> None:
    page = request.getfixturevalue(page_name)
    checked = 0
    for svg in svgs(page):
        for axes in svg.iter(f"{SVG}g"):
            if not re.fullmatch(r".*-(axes(-zoom)?|ttft_p95_ms|tpot_p95_ms)", axes.get("id", "")):
                continue
            for axis in ("x", "y"):
                labelled = ticks(axes, axis)
                values = [tick_value(text) for _, text in labelled]
                assert all(not text.startswith(("-", "−")) for _, text in labelled), labelled
                numbers = [v for v in values if v is not None]
                assert all(v >= 0 for v in numbers), labelled
                if len(numbers) == len(labelled) >= 3:
                    checked += 1
                    assert len(set(numbers)) == len(numbers)  # no repeated labels
    assert checked >= 4


# -- vector index: recall against QPS ---------------------------------------------------------


def test_recall_against_qps_has_log_x_fronts_and_the_recall_bounds(vector_page: str) -> None:
    svg = figure(vector_page, "recall against QPS")
    (axes,) = by_id(svg, "-axes")
    xt = [(pos, tick_value(text)) for pos, text in ticks(axes, "x")]
    xt = [(pos, v) for pos, v in xt if v]
    assert len(xt) >= 3, xt
    # Log axis: position is linear in log10(value), not in the value.
    slopes = [(p2 - p1) / (math.log10(v2) - math.log10(v1))
              for (p1, v1), (p2, v2) in itertools.pairwise(xt)]
    assert max(slopes) == pytest.approx(min(slopes), rel=0.01)
    assert any(t.endswith("log scale") for t in all_texts(svg))
    assert by_id(svg, "front-a") and by_id(svg, "front-b")  # one front per family (mode)
    assert by_id(svg, "slo-0-95") and by_id(svg, "slo-0-9")
    # Recall from 0, no tick above 1.
    yt = [tick_value(text) for _, text in ticks(axes, "y")]
    assert min(v for v in yt if v is not None) == 0 and max(v for v in yt if v is not None) <= 1


# -- rules of thumb -----------------------------------------------------------------------------


def _ivf_trials() -> list[dict[str, Any]]:
    """IVF-Flat trials whose recall follows nprobe/nlist closely and whose latency is noise."""
    trials = []
    noise = [0.31, 0.07, 0.29, 0.11, 0.05, 0.27, 0.09, 0.33, 0.06, 0.24, 0.12, 0.3]
    for j, nprobe in enumerate((1, 2, 4, 8, 16, 32, 1, 2, 4, 8, 16, 32)):
        nlist = 64 if j < 6 else 128
        share = nprobe / nlist
        trials.append({"config": {"index_type": "ivf_flat", "nlist": nlist, "nprobe": nprobe},
                       "metrics": {"recall_at_10": 1 - 0.6 * math.exp(-12 * share),
                                   "qps": 1000.0, "p95_latency_ms": noise[j]},
                       "features": {"n_vectors": 8000.0}})
    return trials


def test_poor_rule_fits_are_hidden_with_a_note() -> None:
    rules = {r.name: r for r in fit_rules("faiss", _ivf_trials())}
    recall = next(r for n, r in rules.items() if n.startswith("recall@10"))
    latency = next(r for n, r in rules.items() if n.startswith("p95 latency"))
    assert recall.shown and recall.r2 is not None and recall.r2 >= R2_MIN
    assert latency.status == "fitted" and latency.r2 is not None and latency.r2 < R2_MIN
    assert not latency.shown
    sheet = {"trials": 12, "note": "test", "rows": [], "contexts": [{
        "context": {"target": "faiss", "hardware_key": "h", "model": None,
                    "engine_version": None},
        "label": "faiss / h", "trials": 12, "kind": "vector_index", "model_quality": {},
        "rules_of_thumb": [r.to_dict() for r in rules.values()], "pareto": [], "figures": {}}]}
    page, md = render_html(sheet), render_markdown(sheet)
    note = f"1 fit hidden: R² below {R2_MIN:g}"
    assert note in page and note in md
    table = page[page.index("<h3 id='faiss-h-rules'>"):]
    assert f"<td>{recall.r2:.2f}</td>" in table  # the shown fit's R² in the table
    rule_figures = [s for s in svgs(page) if "R² =" in (s.get("aria-label") or "")]
    assert [s.get("aria-label") for s in rule_figures] == [
        f"{recall.name}: R² = {recall.r2:.2f}, n = {recall.n}"]
    assert latency.name not in "".join(s.get("aria-label") or "" for s in svgs(page))
    assert f"| {recall.name} |" in md and f"| {latency.name} |" not in md

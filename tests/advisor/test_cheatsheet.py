"""The cheat-sheet: tiers per workload class from the fitted models, rules of thumb with their fit
quality, and Markdown / self-contained HTML / JSON renderings."""

from __future__ import annotations

import html
import json
import re

import pytest

from advisor.answers import RecommendationRequest, plan_recommendation
from advisor.cheatsheet import build_cheatsheet, knob_value
from advisor.errors import NotFoundError
from knowledge import TrialStore
from knowledge.cache import KnowledgeModels
from knowledge.render import svg_plot
from knowledge.rules import fit_rules, pareto_front
from tests.knowledge.synthetic_trials import populate


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> TrialStore:
    s = TrialStore(f"sqlite:///{tmp_path_factory.mktemp('sheet') / 'k.db'}")
    populate(s, n_configs=30, sizes=(1000, 4000), repeats=1)
    return s


@pytest.fixture(scope="module")
def models(store: TrialStore) -> KnowledgeModels:
    return KnowledgeModels.fit(store)


def test_rows_cover_every_workload_class_and_tier(store: TrialStore, models: KnowledgeModels
                                                  ) -> None:
    sheet = build_cheatsheet(store, models=models)
    classes = {r.workload_class for r in sheet.rows}
    assert len(classes) == 2
    assert {r.tier.name for r in sheet.rows} == {"interactive", "standard", "throughput"}
    assert len(sheet.rows) == 6 and len(sheet.sections) == 1
    for r in sheet.rows:
        rec = r.answer
        if rec.config is not None:
            # Each row meets its tier's SLO by the one rule: its windows at the workload where
            # it has them, else the conservative end of every interval.
            assert rec.verdict is not None and rec.verdict.meets_slo
            if rec.verdict.basis == "predicted":
                assert all(m <= 0 for m in rec.verdict.margins.values())
            assert r.importance and math_close(sum(r.importance.values()), 1.0)
        assert r.evidence_count == 30
    only = build_cheatsheet(store, models=models, tier="standard", workload_class="N=4000")
    assert [(r.tier.name, r.workload_class) for r in only.rows] == [
        ("standard", only.rows[0].workload_class)] and "N=4000" in only.rows[0].workload_class


def math_close(a: float, b: float) -> bool:
    return abs(a - b) < 1e-3


def test_renderings_are_complete_and_offline(store: TrialStore, models: KnowledgeModels) -> None:
    sheet = build_cheatsheet(store, models=models)
    data = json.loads(json.dumps(sheet.to_dict()))
    assert data["kind"] == "slo-advisor-cheatsheet/1" and len(data["rows"]) == 6
    md = sheet.to_markdown()
    assert md.startswith("# Tuning cheat-sheet") and md.count("| scripted-") == 6
    page = sheet.to_html()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<svg" in page and "Pareto front" in page
    # Each launch command is folded in its cell (native <details>), whole when unfolded.
    launches = [r.answer.launch_command for r in sheet.rows if r.answer.launch_command]
    assert launches and page.count("<details><summary>") == len(launches)
    assert all(f"<pre>{html.escape(c)}</pre></details>" in page for c in launches)
    # self-contained: no scripts, no external resources (only in-page #fragment references;
    # the SVG and XLink namespaces are names, not fetches)
    assert "<script" not in page and not re.search(r"(src|href)=[\"'](?!#)", page)
    assert not re.findall(r"https?://(?!www\.w3\.org/(2000/svg|1999/xlink))", page)


def test_every_row_is_the_answer_recommend_gives(store: TrialStore,
                                                 models: KnowledgeModels) -> None:
    """A row is the planner's document for its question: `advisor recommend --json` asked the
    tier's SLO at the row's workload prints the same config, verdict, figures and evidence."""
    sheet = build_cheatsheet(store, models=models)
    for row in sheet.rows:
        asked = plan_recommendation(store, RecommendationRequest(
            target=row.target, slo=row.tier.slo, objective=row.tier.objective,
            hardware=row.hardware_key, model=row.model, workload=row.workload), models=models)
        assert asked.to_json_bytes() == row.answer.to_json_bytes()
        shown = row.to_dict()
        assert (shown["status"], shown["config"], shown["verdict"]) == (
            asked.status, asked.config, None if asked.verdict is None
            else asked.verdict.model_dump(mode="json"))
        assert shown["evidence_trial_ids"] == [e.trial_id for e in asked.evidence]


def test_knob_value_answers_and_not_found_is_an_error(store: TrialStore,
                                                      models: KnowledgeModels) -> None:
    sheet = build_cheatsheet(store, models=models)
    row = next(r for r in sheet.rows if r.tier.name == "throughput"
               and r.answer.config is not None)
    got = knob_value(sheet, "x", target="scripted", workload_class=row.workload_class,
                     tier="throughput")
    assert got["value"] == (row.answer.config or {})["x"]
    assert got["evidence_count"] == 30 and got["figures"]
    with pytest.raises(NotFoundError):
        knob_value(sheet, "x", target="faiss")
    with pytest.raises(NotFoundError):
        knob_value(sheet, "no_such_knob", target="scripted", tier="throughput",
                   workload_class=row.workload_class)


def test_rules_report_fit_quality_or_insufficient_data() -> None:
    trials = []
    for n in (2000, 4000, 8000, 16000):
        for nlist in (16, 32, 64, 128, 256):
            best = nlist == 2 ** round(__import__("math").log2(n ** 0.5))
            trials.append({"config": {"index_type": "ivf_flat", "nlist": nlist,
                                      "nprobe": max(1, nlist // 8)},
                           "metrics": {"recall_at_10": 0.95, "qps": 2000 if best else 1000,
                                       "p95_latency_ms": 0.1 + nlist / 1000},
                           "features": {"n_vectors": float(n)}})
    rules = {r.name: r for r in fit_rules("faiss", trials)}
    nlist_rule = rules["best nlist against sqrt(N)"]
    assert nlist_rule.status == "fitted" and nlist_rule.r2 is not None and nlist_rule.r2 > 0.8
    assert 0.5 < nlist_rule.params["c"] < 2.0 and nlist_rule.n == 4
    few = fit_rules("vllm", trials[:2])
    assert all(r.status.startswith("insufficient data") for r in few)


def test_pareto_front_and_svg() -> None:
    pts = [(1.0, 10.0), (2.0, 20.0), (2.5, 15.0), (3.0, 30.0), (0.5, 5.0)]
    assert pareto_front(pts) == [4, 0, 1, 3]
    svg = svg_plot("t", "x (s)", "y (ms)", pts, [pts[i] for i in pareto_front(pts)], log_x=True)
    # matplotlib's SVG, inlinable: no XML prolog, a title, every point a marker, the front a
    # path, ids prefixed by the figure's own id.
    assert svg.startswith("<svg") and "<title>t</title>" in svg and "<script" not in svg
    points = svg[svg.index('id="fig-t-points"'):]
    assert points[:points.index("</g>")].count("<use") == 5
    assert 'id="fig-t-line"' in svg
    assert all(i.startswith("fig-t") for i in re.findall(r'\bid="([^"]+)"', svg))


def test_workloads_that_differ_only_in_what_no_model_reads_share_one_row() -> None:
    """Stored specs that differ in a seed or a drain limit have the same class and features, so
    the same answer: one row per tier, with the evidence of them all (the shipped sheet printed
    four identical rows per tier at 60 and 75 req/s)."""
    from advisor.cheatsheet import _distinct_workloads
    from knowledge.surrogates import WorkloadPoint

    def point(spec_hash: str, rate: float, seed: int) -> WorkloadPoint:
        return WorkloadPoint("chat@60rps", spec_hash, {"seed": seed},
                             {"rate_rps": rate, "prompt_len": 256.0}, 3)

    groups = _distinct_workloads([point("a", 60.0, 1), point("b", 75.0, 1),
                                  point("c", 60.0, 2)])
    assert [(w.spec_hash, [m.spec_hash for m in members]) for w, members in groups] == [
        ("a", ["a", "c"]), ("b", ["b"])]

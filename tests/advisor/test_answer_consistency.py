"""Answers never disagree with the evidence they cite, on the shipped knowledge.

The consistency audit (advisor/answers/audit.py) plans the model-based and the measured answer
for every shipped context at every measured workload point and the midpoints between them, for
each SLO tier (and the docs' headline SLO), and checks them against the stored windows: it must
find no contradiction. Then the answers quoted in the answer-engine issue, one test each.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from advisor.answers import Answer, RecommendationRequest, plan_recommendation
from advisor.answers.audit import audit_answers
from advisor.answers.model_based import _same_config
from advisor.answers.rule import measured_verdict, windows_needed
from knowledge import TrialFilter, TrialStatus, TrialStore
from knowledge.cache import KnowledgeModels, ModelCache
from knowledge.surrogates import workload_features
from knowledge.transfer import import_shipped_knowledge
from objectives import parse_slo
from objectives.registry import get_target

ROOT = Path(__file__).resolve().parents[2]
SLO = "ttft_p95_ms<=300,tpot_p95_ms<=40"


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TrialStore, Path]]:
    tmp = tmp_path_factory.mktemp("shipped")
    store = TrialStore(f"sqlite:///{tmp / 'k.db'}")
    import_shipped_knowledge(store)
    yield store, tmp / "cache"


def _models(shipped: tuple[TrialStore, Path], target: str) -> KnowledgeModels:
    store, cache = shipped
    return ModelCache(store, cache, target=target).get()


@pytest.fixture(scope="module")
def vllm(shipped: tuple[TrialStore, Path]) -> tuple[TrialStore, KnowledgeModels]:
    return shipped[0], _models(shipped, "vllm")


def ask(store: TrialStore, models: KnowledgeModels, **fields: object) -> Answer:
    body = {"target": "vllm", "slo": SLO, "hardware": "h200", "model": "llama-3-8b", **fields}
    return plan_recommendation(store, RecommendationRequest(**body), models=models)  # type: ignore[arg-type]


def _windows(store: TrialStore, config: dict[str, object], rate: float,
             model: str = "llama-3-8b") -> list[dict[str, float]]:
    """The stored windows of ``config`` within 10 % of ``rate``, read straight from the store."""
    out = []
    same = _same_config("vllm", config)
    for t in store.list_trials(TrialFilter(target="vllm", status=TrialStatus.COMPLETE,
                                           hardware_key="h200")):
        # One config whatever form it was recorded in (a knob added later ran at its default).
        if ((t.workload_spec.get("params") or {}).get("model") != model
                or _same_config("vllm", t.config) != same):
            continue
        r = workload_features(t.workload_spec).get("rate_rps", 0.0)
        if r and max(r / rate, rate / r) <= 1.1 + 1e-9:
            out.append(t.metrics)
    return out


# -- the audit ---------------------------------------------------------------------------------

def test_no_answer_contradicts_the_shipped_vllm_evidence(
        vllm: tuple[TrialStore, KnowledgeModels]) -> None:
    store, models = vllm
    report = audit_answers(store, models, targets=["vllm"], extra_slos=[SLO, "tpot_p95_ms<=40"])
    assert report.answers > 100, report.answers
    assert not report.contradictions, "\n".join(str(c) for c in report.contradictions[:20])


def test_no_answer_contradicts_the_shipped_faiss_evidence(
        shipped: tuple[TrialStore, Path]) -> None:
    store = shipped[0]
    report = audit_answers(store, _models(shipped, "faiss"), targets=["faiss"],
                           extra_slos=["p95_latency_ms<=0.25,recall_at_10>=0.95"])
    assert report.answers > 10, report.answers
    assert not report.contradictions, "\n".join(str(c) for c in report.contradictions[:20])


# -- the answers the issue quoted --------------------------------------------------------------

@pytest.mark.parametrize("measured", [False, True])
def test_at_60_rps_the_default_verdict_agrees_with_its_measured_figures(
        vllm: tuple[TrialStore, KnowledgeModels], measured: bool) -> None:
    store, models = vllm
    answer = ask(store, models, workload={"rate_rps": 60}, measured=measured)
    assert answer.default is not None and answer.default.verdict is not None
    verdict = answer.default.verdict
    assert verdict.basis == "measured" and verdict.windows >= 2
    figures = {m: f.value for m, f in answer.default.figures.items()}
    windows = _windows(store, answer.default.config or {}, 60)
    assert verdict.windows == len(windows)
    assert verdict.meets_slo == measured_verdict(parse_slo(SLO), windows).meets
    # The median figures shown meet the SLO whenever the rule says the default does.
    if verdict.meets_slo:
        assert figures["ttft_p95_ms"] <= 300 and figures["tpot_p95_ms"] <= 40
        assert answer.comparison is None or answer.comparison.basis != "default_misses_slo"
    assert answer.status in ("recommended", "keep_defaults")
    assert answer.verdict is not None and answer.verdict.meets_slo


def test_at_65_rps_no_prediction_ignores_its_own_nearby_measurements(
        vllm: tuple[TrialStore, KnowledgeModels]) -> None:
    store, models = vllm
    answer = ask(store, models, workload={"rate_rps": 65})
    assert answer.found and answer.verdict is not None
    slo = parse_slo(SLO)
    own = _windows(store, answer.config or {}, 65)
    if own:  # measured here: the windows decide, and they met the SLO by the rule
        assert answer.verdict.basis == "measured"
        assert sum(slo.is_met(w) for w in own) >= windows_needed(len(own))
    for metric, figure in answer.figures.items():
        if figure.basis == "predicted":
            for w in _windows(store, answer.config or {}, 65 * 1.2):
                assert figure.low is not None and figure.high is not None
                assert figure.low <= w[metric] <= figure.high, (metric, w[metric], figure)


def test_measured_finds_the_default_wherever_it_has_windows(
        vllm: tuple[TrialStore, KnowledgeModels]) -> None:
    store, models = vllm
    default = get_target("vllm").space().default_config()
    for rate in (15, 30, 45, 60, 75):
        answer = ask(store, models, workload={"rate_rps": rate}, measured=True)
        windows = _windows(store, default, rate)
        if windows:
            assert answer.default is not None and answer.default.verdict is not None, rate
            assert answer.default.verdict.windows == len(windows), rate


def test_at_75_rps_measured_does_not_keep_defaults_on_one_lucky_window(
        vllm: tuple[TrialStore, KnowledgeModels]) -> None:
    store, models = vllm
    answer = ask(store, models, workload={"rate_rps": 75}, measured=True)
    default = get_target("vllm").space().default_config()
    windows = _windows(store, default, 75)
    met = sum(parse_slo(SLO).is_met(w) for w in windows)
    if windows and met < windows_needed(len(windows)):
        assert answer.status != "keep_defaults"
        assert answer.default is not None and answer.default.verdict is not None
        assert answer.default.verdict.meets_slo is False


def test_the_docs_headline_example_recommends_what_its_evidence_measured(
        vllm: tuple[TrialStore, KnowledgeModels]) -> None:
    store, models = vllm
    body = json.loads(_docs_body())
    answer = plan_recommendation(store, RecommendationRequest(**body), models=models)
    assert answer.found, answer.summary
    met = [e for e in answer.evidence if e.same_config and e.meets_slo]
    if answer.verdict is not None and answer.verdict.basis == "measured":
        assert met


def _docs_body() -> str:
    text = (ROOT / "docs" / "api.md").read_text()
    block = text.split("## Quickstart", 1)[1].split("```bash", 3)[3]
    return block.split("-d '", 1)[1].split("'", 1)[0]


def test_a_published_model_name_is_answered_and_shown_by_its_name(
        vllm: tuple[TrialStore, KnowledgeModels]) -> None:
    store, models = vllm
    answer = ask(store, models, model="llama-3.2-3b", workload={"rate_rps": 30})
    assert answer.status != "not_covered", answer.summary
    assert answer.question.model == "llama-3.2-3b"
    assert "llama-h3072" not in answer.summary
    assert answer.launch_command and "meta-llama/Llama-3.2-3B" in answer.launch_command
    assert "--load-format" not in answer.launch_command


def test_a_config_file_is_served_from_the_users_directory(
        vllm: tuple[TrialStore, KnowledgeModels]) -> None:
    store, models = vllm
    config_dir = ROOT / "docs" / "examples" / "model-configs" / "llama-3.2-3b"
    hf_config = json.loads((config_dir / "config.json").read_text())
    answer = plan_recommendation(store, RecommendationRequest(
        target="vllm", slo=SLO, hardware="h200", hf_config=hf_config,
        workload={"rate_rps": 30}), models=models, launch_model=str(config_dir))
    assert answer.found, answer.summary
    assert answer.launch_command is not None and str(config_dir) in answer.launch_command
    assert "--load-format" not in answer.launch_command

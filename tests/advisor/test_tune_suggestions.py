"""Every `advisor tune` command the recommender suggests is one `tune` accepts: each form the
builder produces is parsed by the real command line (typer's parser, the option callbacks) and its
target, SLO, objective, workload and model are resolved the way `tune` resolves them."""

from __future__ import annotations

import shlex

import pytest
import typer

from advisor.answers.model_based import _tune_command
from advisor.cli import app
from advisor.cli.context import parse_workload as _resolve_workload
from advisor.errors import AdvisorError
from advisor.objective import Objective
from advisor.presets import check_model
from objectives import parse_slo
from objectives.llm.workload import KIND as LLM_KIND
from objectives.llm.workload import LLMWorkloadSpec
from objectives.registry import get_target


def check_tune_command(command: str) -> None:
    """Raise if ``advisor tune`` would refuse ``command`` before running its first trial."""
    words = shlex.split(command, comments=True)
    assert words[:2] == ["advisor", "tune"], command
    group = typer.main.get_command(app)
    parent = group.make_context("advisor", ["tune"], resilient_parsing=True)
    tune = group.get_command(parent, "tune")  # type: ignore[attr-defined]
    ctx = tune.make_context("tune", words[2:], parent=parent)  # parses and runs the callbacks
    p = ctx.params
    target = get_target(p["target"])
    parse_slo(p["slo"]).check_metrics(p["target"], target.reported_metrics())
    Objective.parse(p["objective"])
    if p["model"] is not None:
        check_model(p["model"])
    params = [*(p["workload_param"] or []), *([f"model={p['model']}"] if p["model"] else [])]
    workload = _resolve_workload(target, p["workload"], params)
    if workload.kind == LLM_KIND:
        LLMWorkloadSpec.from_workload(workload)  # every LLM workload field checked


SLOS = {"faiss": "p95_latency_ms<=1,recall_at_10>=0.95", "vllm": "ttft_p95_ms<=300,tpot_p95_ms<=40",
        "transformers": "ttft_p95_ms<=300", "rag": "e2e_p95_ms<=300,recall_at_5>=0.9"}
FORMS = [
    ("faiss", {}),
    ("faiss", {"workload": "stdlib-docs-8k", "features": {"n_vectors": 6000.0, "dim": 384.0}}),
    ("faiss", {"workload": "synthetic-1m", "features": {"n_vectors": 50000.0, "dim": 128.0},
               "hardware": "cpu"}),
    ("vllm", {"model": "llama-3-8b", "features": {"rate_rps": 60.0}, "hardware": "h200"}),
    ("vllm", {"model": "llama-3-8b", "workload": "chat@60rps",
              "features": {"rate_rps": 100.0, "prompt_len": 256.0, "output_len": 128.0}}),
    ("vllm", {"model": "llama-3.2-1b", "workload": "chat", "features": {"rate_rps": 7.5}}),
    ("transformers", {"model": "tiny-llama", "features": {"rate_rps": 2.0}}),
    ("rag", {"model": "llama-3.2-1b", "workload": "rag", "features": {"rate_rps": 8.0}}),
]


@pytest.mark.parametrize(("target", "form"), FORMS, ids=lambda v: str(v)[:40])
def test_suggested_tune_commands_parse(target: str, form: dict) -> None:
    command = _tune_command(target, parse_slo(SLOS[target]),
                            Objective.parse(get_target(target).default_objective), **form)
    assert command is not None
    check_tune_command(command)


def test_no_command_is_suggested_for_a_model_tune_cannot_run() -> None:
    assert _tune_command("vllm", parse_slo(SLOS["vllm"]), Objective.parse("maximize:qps"),
                         model="qwen2.5-7b") is None
    with pytest.raises(AdvisorError, match=r"unknown model 'qwen2\.5-7b'"):
        check_model("qwen2.5-7b")


def test_the_checker_itself_refuses_what_tune_refuses() -> None:
    """The check above can fail: commands `tune` would reject are rejected here too."""
    for bad in ("advisor tune --target faiss --trials 0",
                "advisor tune --target faiss --sampler annealing",
                "advisor tune --target vllm --model qwen2.5-7b",
                "advisor tune --target vllm --workload-param 'arrival={process: poisson}'"):
        with pytest.raises((typer.TyperException, AdvisorError)):
            check_tune_command(bad)

"""`suggested_tune_command` builds an `advisor tune` line that `tune` itself accepts: the line is
read back as `tune` reads it and planned by the same planner, so a workload parameter `tune`
would refuse (unknown, mistyped, a dataset larger than its corpus) raises instead of being
suggested."""

from __future__ import annotations

import shlex

import pytest

from advisor.cli.context import workload_overrides
from advisor.errors import AdvisorError
from advisor.study_request import StudyRequest, plan_study, suggested_tune_command


def _params(line: str) -> list[str]:
    words = shlex.split(line)
    return [words[i + 1] for i, w in enumerate(words) if w == "--workload-param"]


def test_a_suggestion_reads_back_as_the_workload_it_names() -> None:
    line = suggested_tune_command(
        "faiss", slo="p95_latency_ms<=5,recall_at_10>=0.9", objective="maximize:qps",
        workload_params={"n_base": 3000, "k": 10, "dataset": "stdlib-docs"})
    words = shlex.split(line)
    assert words[:4] == ["advisor", "tune", "--target", "faiss"]
    assert words[words.index("--slo") + 1] == "p95_latency_ms<=5,recall_at_10>=0.9"
    read = workload_overrides(_params(line))  # as `advisor tune` reads them
    assert read == {"n_base": 3000, "k": 10, "dataset": "stdlib-docs"}
    plan = plan_study(StudyRequest(target="faiss", slo="p95_latency_ms<=5,recall_at_10>=0.9",
                                   objective="maximize:qps", workload_params=read))
    assert plan.spec.workload.params["n_base"] == 3000


def test_a_string_yaml_would_misread_is_quoted() -> None:
    line = suggested_tune_command("faiss", workload_params={"dataset": "stdlib-docs"})
    assert workload_overrides(_params(line)) == {"dataset": "stdlib-docs"}
    # A YAML keyword as a value stays a string when read back, so `tune` names it as such.
    with pytest.raises(AdvisorError, match="unknown dataset 'yes'"):
        suggested_tune_command("faiss", workload_params={"dataset": "yes"})


@pytest.mark.parametrize(("params", "needle"), [
    ({"dim": 768}, "unknown vector-search parameters ['dim']"),
    ({"n_base": 50000}, "passages asked for, but the corpus has only"),
    ({"k": "ten"}, "'k' must be an integer"),
    ({"bogus": 1}, "unknown vector-search parameters ['bogus']"),
])
def test_what_tune_refuses_is_never_suggested(params: dict[str, object], needle: str) -> None:
    with pytest.raises(AdvisorError) as exc:
        suggested_tune_command("faiss", workload_params=params)
    assert needle in str(exc.value)


def test_an_unknown_target_or_slo_metric_is_refused() -> None:
    with pytest.raises(AdvisorError):
        suggested_tune_command("no-such-target")
    with pytest.raises(AdvisorError):
        suggested_tune_command("faiss", slo="ttft_p95_ms<=300")

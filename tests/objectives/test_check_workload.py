"""Every target's own presets pass its cheap workload check (what the CLI and the API run before
a study exists), and each check refuses an absurd size in one line without building anything."""

from __future__ import annotations

import pytest

from advisor.errors import WorkloadError
from objectives.registry import get_target

TARGETS = ["faiss", "rag", "transformers", "vllm", "tensorrt-llm", "tgi", "ollama", "openai",
           "scripted"]


@pytest.mark.parametrize("name", TARGETS)
def test_every_preset_passes_its_targets_check(name: str) -> None:
    target = get_target(name)
    for preset, workload in target.named_workloads().items():
        target.check_workload(workload)  # raises naming the field if a preset were broken
        assert preset


@pytest.mark.parametrize(("name", "change"), [
    ("faiss", {"n_base": 10**12}),
    ("rag", {"corpus_passages": 10**9}),
    ("transformers", {"n_requests": 10**12}),
    ("vllm", {"n_requests": int("9" * 400)}),
])
def test_an_absurd_size_is_refused_in_one_line(name: str, change: dict[str, int]) -> None:
    target = get_target(name)
    with pytest.raises(WorkloadError) as refused:
        target.check_workload(target.default_workload().with_params(**change))
    assert "\n" not in str(refused.value) and len(str(refused.value)) < 300

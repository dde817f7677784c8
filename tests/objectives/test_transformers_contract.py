"""The transformers target passes the shared target contract with the tiny model on a tiny
workload (a few requests of a few tokens, so each sampled config runs in seconds on a CPU)."""

from __future__ import annotations

import pytest

from advisor.testing import TargetContract
from objectives import Target, Workload
from objectives.llm.workload import KIND

pytest.importorskip("torch")
pytest.importorskip("transformers")
from objectives.targets.transformers_target import TransformersTarget


class TestTransformersTarget(TargetContract):
    # Each sampled config builds its own engine (a few seconds on 2 cores; torch.compile is not
    # sampled on CPU).
    n_sampled = 2

    @pytest.fixture
    def target(self) -> Target:
        return TransformersTarget()

    @pytest.fixture
    def workload(self) -> Workload:
        return Workload(KIND, "tiny-contract", {
            "model": "tiny-llama", "n_requests": 6, "warmup_requests": 2, "seed": 0,
            "arrival": {"process": "poisson", "rate_rps": 12.0},
            "prompt_len": {"dist": "uniform", "low": 8, "high": 32}, "output_len": 6,
        })

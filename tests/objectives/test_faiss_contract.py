"""The faiss target passes the shared target contract on a small real corpus."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.testing import TargetContract
from objectives import Target, Workload

pytest.importorskip("faiss")
from objectives.targets.faiss_target import FaissTarget


class TestFaissTarget(TargetContract):
    n_sampled = 6

    @pytest.fixture
    def target(self) -> Target:
        return FaissTarget()

    @pytest.fixture
    def workload(self) -> Workload:
        return FaissTarget().named_workloads()["stdlib-docs-2k"]

    @pytest.fixture
    def cache_dir(self, faiss_cache: Path) -> Path:
        return faiss_cache

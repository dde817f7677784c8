"""The scripted test target passes the same contract as real engines."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.errors import ConfigRejectedError
from advisor.testing import TargetContract
from objectives import Measurement, Target, Workload
from tests.scripted_target import HANG_X, ScriptedTarget


class TestScriptedTarget(TargetContract):
    @pytest.fixture
    def target(self) -> Target:
        return ScriptedTarget()

    @pytest.fixture
    def workload(self) -> Workload:
        return ScriptedTarget().default_workload()

    def _run(self, target: Target, config: dict, workload: Workload, cache_dir: Path
             ) -> Measurement:
        # In-process, the scripted crash/hang region would take the test runner down with it;
        # those configs are exercised through isolation in tests/advisor.
        if config["x"] >= HANG_X:
            raise ConfigRejectedError("crash/hang region: covered by the isolation tests")
        return target.run(config, workload, cache_dir)

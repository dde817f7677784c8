"""The contract every Target must pass. A new engine adds one subclass with its fixtures, in this
repository's tests or in its own package's (an out-of-tree target registered through
``ADVISOR_EXTRA_TARGETS`` passes the same suite the shipped ones do).

Subclasses provide ``target`` and ``workload`` fixtures (a small real workload) and may override
``n_sampled`` (how many random configs to try), ``cache_dir`` (where ``prepare`` builds what it
needs) and ``_run`` (how one config is measured). Tests run the target in-process; isolation is
tested separately.
"""

from __future__ import annotations

import re
from pathlib import Path

import optuna
import pytest

from advisor.errors import ConfigRejectedError
from advisor.sampling import suggest_config
from objectives import Measurement, Target, Workload, parse_slo
from objectives.metrics import METRICS

_PCT = re.compile(r"^(?P<family>.*?)_?p(?P<q>50|90|95|99)(?P<rest>_.*)$")


def _percentile_families(metrics: dict[str, float]) -> dict[str, dict[int, float]]:
    families: dict[str, dict[int, float]] = {}
    for name, value in metrics.items():
        m = _PCT.match(name)
        if m:
            families.setdefault(m["family"] + "|" + m["rest"], {})[int(m["q"])] = value
    return families


class TargetContract:
    """Subclass it as ``class TestMyTarget(TargetContract)`` beside ``target`` and ``workload``
    fixtures; every test below then runs against that target."""

    #: How many configs a random sampler draws from the target's space and runs.
    n_sampled = 4

    @pytest.fixture
    def cache_dir(self, tmp_path_factory: pytest.TempPathFactory) -> Path:
        return tmp_path_factory.getbasetemp() / "contract-cache"

    def _run(self, target: Target, config: dict, workload: Workload, cache_dir: Path
             ) -> Measurement:
        return target.run(config, workload, cache_dir)

    def test_identity_and_space(self, target: Target) -> None:
        space = target.space()
        assert space.target == target.name
        assert target.engine_versions()
        target.check_available()

    def test_defaults_parse_and_are_reported(self, target: Target) -> None:
        reported = target.reported_metrics()
        assert reported <= set(METRICS)
        slo = parse_slo(target.default_slo)
        slo.check_metrics(target.name, reported)
        assert target.default_objective.split(":")[1] in reported

    def test_default_config_measures_catalogued_ordered_metrics(
            self, target: Target, workload: Workload, cache_dir: Path) -> None:
        target.prepare(workload, cache_dir)
        m = self._run(target, target.space().default_config(), workload, cache_dir)
        assert set(m.metrics) <= target.reported_metrics()
        assert all(v == v for v in m.metrics.values())  # no NaN
        for family, qs in _percentile_families(dict(m.metrics)).items():
            ordered = [qs[q] for q in sorted(qs)]
            assert ordered == sorted(ordered), (family, qs)
        assert m.engine_versions

    def test_sampled_configs_run_or_are_rejected_with_a_reason(
            self, target: Target, workload: Workload, cache_dir: Path) -> None:
        target.prepare(workload, cache_dir)
        space = target.space()
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=7))
        for _ in range(self.n_sampled):
            config = suggest_config(study.ask(), space)
            try:
                m = self._run(target, config, workload, cache_dir)
            except ConfigRejectedError as exc:
                assert str(exc)
                continue
            assert m.metrics

    def test_launch_command_names_the_config(self, target: Target, workload: Workload) -> None:
        config = target.space().default_config()
        command = target.launch_command(config, workload)
        assert command.strip()

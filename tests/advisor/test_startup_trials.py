"""The random start-up of a study's model-based sampler: 5 by default, set per study, kept by the
study for --resume, bounded."""

from __future__ import annotations

import optuna
import pytest

from advisor.driver import StudyDriver, StudySpec, optuna_storage
from advisor.errors import StudyError
from advisor.objective import Objective
from advisor.samplers import STARTUP_TRIALS
from advisor.settings import Settings
from knowledge import TrialStore
from objectives import parse_slo
from objectives.workload import Workload


def _spec(name: str, n: int, **kw: object) -> StudySpec:
    return StudySpec(name=name, target="scripted", slo=parse_slo("recall_at_10>=0.8"),
                     objective=Objective.parse("maximize:qps"),
                     workload=Workload("scripted", "base", {"delay_s": 0.0}), n_trials=n,
                     seed=0, paired_repeats=0, **kw)  # type: ignore[arg-type]


def _startup(settings: Settings, name: str) -> int:
    study = optuna.load_study(study_name=name, storage=optuna_storage(settings.db_url))
    return int(study.user_attrs["advisor_startup_trials"])


def test_a_study_keeps_its_start_up_length_across_a_resume(settings: Settings) -> None:
    driver = StudyDriver(TrialStore(settings.db_url), settings)
    driver.run(_spec("short", 2, startup_trials=2))
    assert _startup(settings, "short") == 2
    driver.resume("short", 3)
    assert _startup(settings, "short") == 2
    driver.run(_spec("plain", 1))
    assert _startup(settings, "plain") == STARTUP_TRIALS == 5


@pytest.mark.parametrize("bad", [0, -1, 1001])
def test_a_start_up_length_out_of_range_is_refused(bad: int) -> None:
    with pytest.raises(StudyError, match="startup_trials"):
        _spec("bad", 1, startup_trials=bad)

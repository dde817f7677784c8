"""`advisor store check`: exit 0 on a sound store whose Optuna tables agree with it; exit 1 naming
the study and trial when they disagree (a trial complete in the store but still RUNNING in
Optuna, as a worker restart leaves it), on a real store written by a real study."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sqlalchemy import text

from advisor.driver import StudyDriver, StudySpec
from advisor.objective import Objective
from advisor.settings import Settings
from advisor.store_check import check_consistency
from knowledge import TrialStore
from objectives import parse_slo
from tests.scripted_target import ScriptedTarget

ROOT = Path(__file__).resolve().parents[2]


def _check(db: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ADVISOR_DB_URL": f"sqlite:///{db}",
           "ADVISOR_CACHE_DIR": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, "-m", "advisor", "store", "check"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)


def test_store_check_reports_trials_optuna_and_the_store_disagree_on(settings: Settings,
                                                                     tmp_path: Path) -> None:
    store = TrialStore(settings.db_url)
    target = ScriptedTarget()
    StudyDriver(store, settings).run(StudySpec(
        name="checked", target="scripted", slo=parse_slo(target.default_slo),
        objective=Objective.parse(target.default_objective), workload=target.default_workload(),
        n_trials=3))
    assert check_consistency(store) == {}
    db = Path(settings.db_url.split("///", 1)[1])
    store.close()
    sound = _check(db, tmp_path)
    assert sound.returncode == 0, sound.stderr
    assert "integrity: ok" in sound.stdout and "consistency: ok" in sound.stdout

    store = TrialStore(settings.db_url)
    # Trial 1 as the store holds it: a scripted config can fail (or time out on a loaded
    # machine), and the report names the store's status whatever it is.
    with store.engine.begin() as conn:  # a worker restart left trial 1 RUNNING in Optuna
        number, status = conn.execute(text(
            "SELECT t.number, t.status FROM advisor_trial t JOIN trials o "
            "ON o.trial_id = t.optuna_trial_id WHERE o.number = 1")).one()
        conn.execute(text("UPDATE trials SET state = 'RUNNING' WHERE number = 1"))
    found = check_consistency(store)
    store.close()
    assert found == {"checked": [f"trial {number}: {status} in the store, RUNNING in Optuna"]}
    broken = _check(db, tmp_path)
    assert broken.returncode == 1, (broken.stdout, broken.stderr)
    assert "study checked" in broken.stderr and "RUNNING in Optuna" in broken.stderr
    assert "--resume" in broken.stderr

"""`advisor tune` stopped by SIGTERM (a scheduler, a deadline, `kill`) records its running trial as
interrupted, stops the trial's process and exits, so nothing is left "running" in the store."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil


def test_sigterm_records_the_running_trial_as_interrupted(tmp_path: Path) -> None:
    env = {**os.environ, "ADVISOR_DB_URL": f"sqlite:///{tmp_path / 'a.db'}",
           "ADVISOR_CACHE_DIR": str(tmp_path / "cache"), "ADVISOR_IMPORT_SHIPPED": "false"}
    tune = subprocess.Popen(
        [sys.executable, "-m", "advisor", "tune", "--target", "scripted", "--trials", "3",
         "--name", "term", "--timeout", "60", "--workload-param", "delay_s=30"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    driver = psutil.Process(tune.pid)
    deadline = time.monotonic() + 60
    while not driver.children(recursive=True):  # the trial's process has started
        assert tune.poll() is None and time.monotonic() < deadline, tune.communicate()
        time.sleep(0.2)
    time.sleep(1.0)
    trial_procs = driver.children(recursive=True)
    tune.send_signal(signal.SIGTERM)
    _, err = tune.communicate(timeout=60)
    assert tune.returncode == 130, err
    assert "interrupted; continue with" in err and "--resume" in err
    _, alive = psutil.wait_procs(trial_procs, timeout=15)
    assert not alive, f"trial processes left running: {alive}"
    listed = subprocess.run([sys.executable, "-m", "advisor", "trials", "--study", "term",
                             "--json"], env=env, capture_output=True, text=True, timeout=120)
    trials = json.loads(listed.stdout)
    assert [t["status"] for t in trials] == ["interrupted"]
    assert trials[0]["error"] == "stopped by SIGTERM"

"""`advisor sweep --backend ray` end to end on a real local Ray head: a SIGKILLed driver whose
rerun restores the Tune experiment, and the shipped nightly matrix's FAISS cells as Tune trials.
One head serves the module (pytest-xdist keeps a file on one worker, so one head per run)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from knowledge import TrialStatus, TrialStore
from tests.e2e.sweep_helpers import (
    ROOT,
    advisor,
    assert_consistent,
    run_nightly_cpu_sweep,
    scripted_cell,
    study_trials,
    summary_of,
    sweep_file,
)


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real local Ray head (CPU only) of this module's tests: ``ray start --block`` in its own
    process group and temp dir, so stopping it never touches another Ray on the machine. One
    head serves every Ray test here (a driver that dies is cleaned up by the head, as in a real
    cluster); it is stopped by SIGTERM, then SIGKILL after 5 s (``ray start --block`` does not
    exit on SIGTERM within 30 s, and its temp dir is this fixture's own)."""
    pytest.importorskip("ray")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ray = str(Path(sys.executable).with_name("ray"))
    temp_dir = tmp_path_factory.mktemp("ray", numbered=True)
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    head = subprocess.Popen([ray, "start", "--head", "--block", f"--port={port}",
                             "--num-cpus=2", "--include-dashboard=false",
                             "--disable-usage-stats", f"--temp-dir={temp_dir}"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while subprocess.run([ray, "status", f"--address={address}"], env=env,
                             capture_output=True, timeout=60).returncode != 0:
            if head.poll() is not None or time.monotonic() > deadline:
                why = head.stderr.read() if head.stderr else b""
                pytest.fail(f"the Ray head did not start: {why!r}")
            time.sleep(1)
        yield address
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait(timeout=30)


@pytest.mark.ray
def test_ray_sweep_sigkilled_then_restored(ray_head: str, tmp_path: Path) -> None:
    """SIGKILL the driver of a Ray sweep; the rerun resumes the Tune experiment with
    Tuner.restore, fails the cut-short trial as interrupted, measures its config again and fills
    the budget without replaying the configs measured before the kill."""
    db = f"sqlite:///{tmp_path / 'ray.db'}"
    env = {**os.environ, "ADVISOR_DB_URL": db, "ADVISOR_CACHE_DIR": str(tmp_path / "cache"),
           "ADVISOR_IMPORT_SHIPPED": "false", "ADVISOR_HEARTBEAT_INTERVAL_S": "1",
           "COLUMNS": "200"}
    name = f"raykill{uuid.uuid4().hex[:6]}"
    path = sweep_file(tmp_path, name, [scripted_cell(delay_s=1.5)], trials=7, repeats=1,
                      backend="ray")
    args = ["sweep", "run", str(path), "--ray-address", ray_head, "--json", "--no-refit"]
    proc = subprocess.Popen([sys.executable, "-m", "advisor", *args], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    store = TrialStore(db)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        trials = [t for s in store.list_studies("scripted") for t in
                  store.trials_of_study(s.id or 0)]
        if sum(t.status in TrialStatus.FINISHED for t in trials) >= 3:
            break
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("the Ray sweep never finished 3 trials")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    before = {t.number: t.config for t in trials if t.status == TrialStatus.COMPLETE}

    rerun = advisor(*args, env=env)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    cell = summary_of(rerun)["cells"][0]
    assert_consistent(store, cell["study"], 8)  # budget 7 + 1 repeat
    after = study_trials(store, cell["study"])
    sampled_after = [t.config for t in after if t.number not in before
                     and t.status == TrialStatus.COMPLETE and not t.details.get("role")
                     and t.details.get("requeued_from_trial") is None]
    assert not [c for c in sampled_after if c in before.values()], "the sampler replayed configs"
    # The budget held through the restore (Tune's saved state lags the kill; the store decides)
    # and the repeat of the best ran in an experiment of its own.
    searched = [t for t in after if t.status in TrialStatus.FINISHED
                and t.details.get("role") != "repeat"]
    assert len(searched) == 7, [(t.number, t.status, t.details.get("role")) for t in after]
    assert len([t for t in after if t.details.get("role") == "repeat"]) == 1
    cache = Path(env["ADVISOR_CACHE_DIR"]) / "ray-tune"
    assert len(list(cache.iterdir())) >= 2, "the restored experiment, then the repeats'"


@pytest.mark.slow
@pytest.mark.ray
def test_nightly_cpu_sweep_runs_on_ray(ray_head: str, tmp_path: Path, faiss_cache: Path) -> None:
    run_nightly_cpu_sweep("ray", tmp_path, faiss_cache, ray_head)

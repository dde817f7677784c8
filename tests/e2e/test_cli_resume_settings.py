"""A study's settings are part of the study: `advisor tune --resume` with no options continues it
with its own budget, paired repeats and sampler; an option given on resume is an explicit change
said in one line (the budget, the repeats) or refused (the sampler); the resume command printed
after SIGTERM is the shortest one that continues the same study; the progress bar and the summary
count search trials against the budget and the closing paired repeats apart."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from advisor.cli.tune import resume_hint
from advisor.pairing import is_paired
from knowledge import TrialRecord, TrialStatus, TrialStore

#: Better than the scripted engine default (x=0.5, y=8) and inside its default SLO.
GOOD = "{x: 0.6, y: 16, mode: a}"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "ADVISOR_DB_URL": f"sqlite:///{tmp_path / 'a.db'}",
            "ADVISOR_CACHE_DIR": str(tmp_path / "cache"), "ADVISOR_IMPORT_SHIPPED": "false",
            "COLUMNS": "250", **extra}


def _tune(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "advisor", "tune", "--target", "scripted",
                           *args], env=env, capture_output=True, text=True, timeout=300)


def _trials(tmp_path: Path, name: str) -> list[TrialRecord]:
    store = TrialStore(f"sqlite:///{tmp_path / 'a.db'}")
    study = store.get_study(name)
    assert study is not None
    trials = sorted(store.trials_of_study(study.id or 0), key=lambda t: t.number)
    store.close()
    return trials


def test_a_resume_keeps_the_study_s_settings_and_names_each_change(tmp_path: Path) -> None:
    # The environment's default would pair 3 repeats: the study asked for none.
    env = _env(tmp_path, ADVISOR_PAIRED_REPEATS="3")
    first = _tune(env, "--trials", "3", "--paired-repeats", "0", "--name", "kept", "--seed",
                  "0", "--enqueue", GOOD, "--no-warm-start")
    assert first.returncode == 0, first.stderr
    assert len(_trials(tmp_path, "kept")) == 3

    again = _tune(env, "--name", "kept", "--resume")
    assert again.returncode == 0, again.stderr
    assert len(_trials(tmp_path, "kept")) == 3  # not the default 30, and no repeats
    assert "3/3 search trials already done" in again.stderr

    longer = _tune(env, "--name", "kept", "--resume", "--trials", "5")
    assert longer.returncode == 0, longer.stderr
    assert "study 'kept': search budget 3 -> 5 trials (--trials)" in longer.stderr
    assert len(_trials(tmp_path, "kept")) == 5
    assert not any(is_paired(t) for t in _trials(tmp_path, "kept"))

    other = _tune(env, "--name", "kept", "--resume", "--sampler", "random")
    assert other.returncode == 2
    lines = other.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --resume of study 'kept' with "
                                                   "different settings: --sampler 'tpe' != "
                                                   "'random'"), lines

    paired = _tune(env, "--name", "kept", "--resume", "--paired-repeats", "3", "--json")
    assert paired.returncode == 0, paired.stderr
    assert "study 'kept': paired repeats 0 -> 3 (--paired-repeats)" in paired.stderr
    trials = _trials(tmp_path, "kept")
    assert sum(is_paired(t) for t in trials) == 6 and len(trials) == 11
    summary = json.loads(paired.stdout)
    assert summary["budget"]["search_trials"] == 5 and summary["budget"]["paired_repeats"] == 6
    # Resumed once more with nothing: the study is done, nothing runs again.
    assert _tune(env, "--name", "kept", "--resume").returncode == 0
    assert len(_trials(tmp_path, "kept")) == 11


def test_the_bar_and_summary_count_search_trials_and_repeats_apart(tmp_path: Path) -> None:
    env = _env(tmp_path)
    run = _tune(env, "--trials", "3", "--paired-repeats", "3", "--name", "pb", "--seed", "0",
                "--enqueue", GOOD, "--no-warm-start")
    assert run.returncode == 0, run.stderr
    bars = [line for line in run.stderr.splitlines() if "━" in line]
    assert any(line.startswith("search trials") and " 3/3 " in line for line in bars), bars
    assert any(line.startswith("paired repeats") and " 6/6 " in line for line in bars), bars
    assert "budget: search 3/3 trials, 6 closing paired repeats" in run.stdout
    trials = _trials(tmp_path, "pb")
    best = next(t for t in trials if t.details.get("role") == "enqueued")
    assert f"best (search trial #{best.number})" in run.stdout
    assert "its 3 repeats: mean [95% interval]" in run.stdout
    shown = json.loads(_tune(env, "--name", "pb", "--resume", "--json").stdout)
    assert shown["best"]["number"] == best.number and not is_paired(best)
    assert shown["best_repeats"]["n"] == 3
    assert all(not is_paired(t) for t in trials if t.number == best.number)


def test_the_printed_resume_command_continues_the_same_study(tmp_path: Path) -> None:
    env = _env(tmp_path)
    # The limit is a setting the hint must carry; 15 s, not 60: unseeded, the resumed trials
    # may draw a config the scripted engine hangs on, which then waits out the whole limit.
    tune = subprocess.Popen(
        [sys.executable, "-m", "advisor", "tune", "--target", "scripted", "--trials", "2",
         "--paired-repeats", "0", "--name", "term", "--trial-timeout", "15", "--no-warm-start",
         "--workload-param", "delay_s=2"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    driver = psutil.Process(tune.pid)
    while not driver.children(recursive=True):  # the first trial's process has started
        assert tune.poll() is None, tune.communicate()
        time.sleep(0.1)
    tune.send_signal(signal.SIGTERM)
    _, err = tune.communicate(timeout=60)
    assert tune.returncode == 130, err
    hint = err.split("continue with: ", 1)[1].strip()
    assert hint == "advisor tune --target scripted --name term --resume --trial-timeout 15"
    args = shlex.split(hint)[1:]
    resumed = subprocess.run([sys.executable, "-m", "advisor", *args], env=env,
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    statuses = [t.status for t in _trials(tmp_path, "term")]
    # The study's own 2 trials finished (measured or failed), not the default 30.
    assert sum(s in TrialStatus.FINISHED for s in statuses) == 2
    assert statuses.count(TrialStatus.INTERRUPTED) == 1 and len(statuses) == 3


def test_before_the_study_exists_the_hint_is_the_command_as_given(tmp_path: Path) -> None:
    store = TrialStore(f"sqlite:///{tmp_path / 'a.db'}")
    given = ["tune", "--target", "scripted", "--trials", "8", "--paired-repeats", "0"]
    assert resume_hint(store, "scripted", "scripted-x", None, None, given) == (
        "advisor tune --target scripted --trials 8 --paired-repeats 0 --name scripted-x "
        "--resume")
    store.close()

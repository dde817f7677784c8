"""Output a person can read and a script can parse: sampled floats short and identical in the
store and the launch command; `advisor trials` whole words at 120 columns, one line per row with
`--wide`, CSV with `--csv`."""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from advisor.sampling import round_float, suggest_config
from knowledge import TrialRecord, TrialStore
from objectives.registry import get_target
from tests.knowledge.synthetic_trials import populate

ROOT = Path(__file__).resolve().parents[2]


def test_sampled_floats_are_short_inside_the_range_and_launched_as_stored() -> None:
    target = get_target("vllm")
    space = target.space()
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    floats = [k for k in space if k.type == "float"]
    assert floats
    seen = 0
    for _ in range(40):
        config = suggest_config(study.ask(), space)
        for knob in floats:
            if knob.name not in config:
                continue
            value = config[knob.name]
            assert float(f"{value:.4g}") == value  # 4 significant digits at most
            assert knob.low is not None and knob.high is not None
            assert knob.low <= value <= knob.high
            seen += 1
        command = target.launch_command(config)
        assert f"--gpu-memory-utilization {config['gpu_memory_utilization']}" in command
    assert seen >= 40


def test_round_float_keeps_bounds_and_small_values() -> None:
    assert round_float(0.7384722744215538, 0.5, 0.96) == 0.7385
    assert round_float(63.99999, 2, 64) == 64
    assert round_float(0.50000004, 0.5000001, 1) == 0.5000001  # never below the range
    assert round_float(0.000123456, 0.0, 1.0) == 0.0001235


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("tables")
    url = f"sqlite:///{tmp / 'a.db'}"
    store = TrialStore(url)
    for trial in populate(store, n_configs=6, sizes=(1000,), repeats=1,
                          study_prefix="a-study-name-long-enough-to-need-folding"):
        # Knob names as long as vLLM's, where rich's own layout cut words in two.
        with store.session() as s:
            rec = s.get(TrialRecord, trial.id)
            assert rec is not None
            rec.config = {**rec.config, "enable_chunked_prefill": True,
                          "gpu_memory_utilization": 0.7385, "max_num_batched_tokens": 21043,
                          "kv_offloading_backend": "native", "kv_offloading_size": 5.171}
            s.add(rec)
            s.commit()
    store.close()
    return {**os.environ, "ADVISOR_DB_URL": url, "ADVISOR_CACHE_DIR": str(tmp / "cache"),
            "ADVISOR_IMPORT_SHIPPED": "false"}


def _trials(env: dict[str, str], *args: str, columns: int = 120) -> str:
    done = subprocess.run([sys.executable, "-m", "advisor", "trials", *args],
                          env={**env, "COLUMNS": str(columns)}, cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_csv_has_a_header_and_a_row_per_trial(env: dict[str, str]) -> None:
    rows = list(csv.reader(io.StringIO(_trials(env, "--csv"))))
    assert rows[0] == ["id", "study", "#", "status", "SLO", "objective", "metrics",
                       "config / error"]
    assert len(rows) == 7 and all(len(r) == 8 for r in rows)
    assert all(r[1] == "a-study-name-long-enough-to-need-folding-1000" for r in rows[1:])
    assert all("x=" in r[7] and "mode=" in r[7] for r in rows[1:])


def test_wide_puts_every_row_on_one_line(env: dict[str, str]) -> None:
    lines = _trials(env, "--wide", columns=80).splitlines()
    body = [line for line in lines if "a-study-name-long-enough-to-need-folding-1000" in line]
    assert len(body) == 6
    assert all("x=" in line and "mode=" in line for line in body)


def test_a_120_column_table_never_cuts_a_config_word(env: dict[str, str]) -> None:
    text = _trials(env, columns=120)
    assert max(len(line) for line in text.splitlines()) <= 120
    rows = list(csv.reader(io.StringIO(_trials(env, "--csv"))))
    words = {w for r in rows[1:] for w in r[7].split()}
    for word in words:  # every knob=value of every config appears whole in the table
        assert word in text, word

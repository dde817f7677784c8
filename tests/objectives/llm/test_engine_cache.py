"""The engine cache: every trial's server finds its compile and kernel caches in one shared
directory (so a second start reuses what the first compiled), unless per-trial caches are asked
for; everything else of a trial stays its own."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from advisor.isolation import run_isolated
from objectives.llm.engine_cache import (
    ENGINE_CACHE_ENV,
    PER_TRIAL,
    engine_cache_env,
    engine_cache_root,
)
from objectives.llm.workload import load_preset
from objectives.targets.vllm_target import CACHE_ENV, COMMAND_ENV, VllmTarget
from objectives.workload import Workload

FAKE = Path(__file__).with_name("fake_openai_server.py")
NAMES = [name for name, _ in CACHE_ENV]


def small_workload() -> Workload:
    return load_preset(
        "chat", model="tiny-llama", n_requests=3, warmup_requests=1,
        arrival={"process": "poisson", "rate_rps": 50.0},
        prompt_len={"dist": "uniform", "low": 8, "high": 16},
        output_len={"dist": "uniform", "low": 2, "high": 4})


def test_vllm_declares_its_compile_and_kernel_caches() -> None:
    assert NAMES == ["VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"]
    assert VllmTarget.engine_server.cache_env == CACHE_ENV


def test_the_root_is_the_variable_else_under_the_cache_dir(tmp_path: Path) -> None:
    assert engine_cache_root(tmp_path / "c", {}) == tmp_path / "c" / "engine-cache"
    assert engine_cache_root(tmp_path / "c", {ENGINE_CACHE_ENV: ""}) == \
        tmp_path / "c" / "engine-cache"
    assert engine_cache_root(tmp_path / "c", {ENGINE_CACHE_ENV: str(tmp_path / "x")}) == \
        tmp_path / "x"
    assert engine_cache_root(tmp_path / "c", {ENGINE_CACHE_ENV: PER_TRIAL}) is None
    relative = engine_cache_root(tmp_path, {ENGINE_CACHE_ENV: "rel/dir"})
    assert relative is not None and relative.is_absolute()


def test_two_starts_get_the_same_directories_and_the_second_is_warm(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first, facts1 = engine_cache_env(CACHE_ENV, cache_dir=cache, scratch=tmp_path / "t1", env={})
    assert first == {name: str(cache / "engine-cache" / sub) for name, sub in CACHE_ENV}
    assert all(Path(p).is_dir() for p in first.values())
    assert facts1 == {"engine_cache_dir": str(cache / "engine-cache"), "engine_cache_warm": False}
    (Path(first["VLLM_CACHE_ROOT"]) / "torch_compile_cache").mkdir()  # what a start compiled
    second, facts2 = engine_cache_env(CACHE_ENV, cache_dir=cache, scratch=tmp_path / "t2", env={})
    assert second == first
    assert facts2["engine_cache_warm"] is True
    assert not (tmp_path / "t1").exists() and not (tmp_path / "t2").exists()


def test_a_variable_the_user_set_is_kept(tmp_path: Path) -> None:
    mine = tmp_path / "my-vllm-cache"
    out, _ = engine_cache_env(CACHE_ENV, cache_dir=tmp_path, scratch=tmp_path / "t",
                              env={"VLLM_CACHE_ROOT": str(mine)})
    assert "VLLM_CACHE_ROOT" not in out  # the server's environment already says where
    assert set(out) == {"TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"}
    assert not mine.exists()  # the user's directory is left to the engine


def test_per_trial_caches_live_in_the_trials_scratch(tmp_path: Path) -> None:
    env = {ENGINE_CACHE_ENV: PER_TRIAL, "VLLM_CACHE_ROOT": str(tmp_path / "mine")}
    one, facts = engine_cache_env(CACHE_ENV, cache_dir=tmp_path / "c", scratch=tmp_path / "t1",
                                  env=env)
    two, _ = engine_cache_env(CACHE_ENV, cache_dir=tmp_path / "c", scratch=tmp_path / "t2",
                              env=env)
    assert set(one) == set(NAMES) and one["VLLM_CACHE_ROOT"] != two["VLLM_CACHE_ROOT"]
    assert all(Path(p).is_relative_to(tmp_path / "t1") for p in one.values())
    assert facts == {"engine_cache_dir": PER_TRIAL, "engine_cache_warm": False}
    assert not (tmp_path / "c").exists()


def test_no_variables_no_change(tmp_path: Path) -> None:
    assert engine_cache_env((), cache_dir=tmp_path, scratch=tmp_path, env={}) == ({}, {})
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    record = tmp_path / "env.jsonl"
    monkeypatch.setenv(COMMAND_ENV, json.dumps([sys.executable, str(FAKE)]))
    monkeypatch.setenv("FAKE_SERVER_ENV_RECORD", str(record))
    monkeypatch.setenv("FAKE_SERVER_COMPILE", "1")
    for name in NAMES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv(ENGINE_CACHE_ENV, raising=False)
    return record


def started_envs(record: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in record.read_text().splitlines()]


def test_two_isolated_trials_of_a_study_share_one_engine_cache(fake_vllm: Path,
                                                               tmp_path: Path) -> None:
    """Each trial runs in its own process, as a study's do: both servers are started with the
    same cache directories, under the advisor's cache dir, which outlive the trials; the second
    trial records that it found the first one's compile output."""
    cache = tmp_path / "cache"
    outcomes = [run_isolated("vllm", config, small_workload(), cache, timeout_s=120)
                for config in ({}, {"block_size": 32})]
    assert all(o.ok for o in outcomes), [o.reason for o in outcomes]
    envs = started_envs(fake_vllm)
    assert len(envs) == 2
    shared = cache / "engine-cache"
    for name, sub in CACHE_ENV:
        assert envs[0][name] == envs[1][name] == str(shared / sub)
    details = [o.measurement.details for o in outcomes if o.measurement is not None]
    assert [d["engine_cache_dir"] for d in details] == [str(shared)] * 2
    assert [d["engine_cache_warm"] for d in details] == [False, True]
    # One directory per cache variable, none per trial; the compile output of both starts is kept.
    assert sorted(p.name for p in shared.iterdir()) == sorted(sub for _, sub in CACHE_ENV)
    assert len(list((shared / "vllm" / "torch_compile_cache").iterdir())) == 2


def test_per_trial_mode_gives_each_start_a_cold_cache_that_goes_with_it(
        fake_vllm: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(ENGINE_CACHE_ENV, PER_TRIAL)
    target = VllmTarget()
    cache = tmp_path / "cache"
    measured = [target.run({}, small_workload(), cache) for _ in range(2)]
    envs = started_envs(fake_vllm)
    roots = [Path(env["VLLM_CACHE_ROOT"]) for env in envs]
    assert roots[0] != roots[1]
    assert not any(root.exists() for root in roots)  # removed with the trial's scratch
    assert not (cache / "engine-cache").exists()
    assert [m.details["engine_cache_warm"] for m in measured] == [False, False]
    assert {m.details["engine_cache_dir"] for m in measured} == {PER_TRIAL}

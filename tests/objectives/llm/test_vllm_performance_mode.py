"""vLLM's ``--performance-mode`` (new in the 0.26 releases read): each mode becomes the flag on a
release that has it; on an older release the default runs with the flag left out and another
mode is a rejected config, recorded as a failed trial with the reason, never a crash."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from advisor.errors import ConfigRejectedError, SearchSpaceError
from objectives import runner
from objectives.targets.vllm_target import COMMAND_ENV, VllmTarget, build_argv
from search_spaces import SearchSpace, load_space

SPACE = load_space("vllm")
MODES = ("balanced", "interactivity", "throughput")
FLAG = "--performance-mode"


def argv(config: dict[str, Any], version: str | None) -> list[str]:
    return build_argv(config, model_dir="/models/tiny-llama", port=8123, engine_version=version,
                      max_model_len=4096, seed=7)


def mode_values(args: list[str]) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args[:-1]) if a == FLAG]


def test_the_knob_is_declared_with_vllms_choices_and_default() -> None:
    knob = SPACE.knob("performance_mode")
    assert knob.type == "categorical" and knob.choices == MODES
    assert knob.default == "balanced" and SPACE.default_config()["performance_mode"] == "balanced"
    assert knob.default_without_flag is True
    assert knob.flag_for("0.26.0") == FLAG and knob.flag_for("0.25.1") is None


@pytest.mark.parametrize("version", ["0.26.0", "0.26.1", "0.27.0"])
@pytest.mark.parametrize("mode", MODES)
def test_each_mode_becomes_the_flag_on_a_release_that_has_it(mode: str, version: str) -> None:
    assert mode_values(argv({"performance_mode": mode}, version)) == [mode]


def test_the_default_config_passes_balanced_explicitly_on_026() -> None:
    assert mode_values(argv({}, "0.26.0")) == ["balanced"]


@pytest.mark.parametrize("version", ["0.11.0", "0.17.1", "0.25.9"])
def test_an_older_release_runs_the_default_without_the_flag(version: str) -> None:
    for config in ({}, {"performance_mode": "balanced"}):
        args = argv(config, version)
        assert FLAG not in args
        # The rest of the config is still passed in full.
        assert "--max-num-seqs" in args and "--block-size" in args
    assert argv({}, version) == argv({"performance_mode": "balanced"}, version)


@pytest.mark.parametrize("mode", ["interactivity", "throughput"])
def test_another_mode_on_an_older_release_is_a_rejected_config(mode: str) -> None:
    with pytest.raises(ConfigRejectedError) as info:
        argv({"performance_mode": mode}, "0.11.0")
    reason = str(info.value)
    assert f"performance_mode={mode!r}" in reason
    assert "--performance-mode (>=0.26)" in reason and "vLLM 0.11.0 lacks" in reason
    assert "only its default ('balanced') runs" in reason


def test_an_unknown_release_leaves_the_default_out_and_passes_a_chosen_mode() -> None:
    """A wrapper command (no local vLLM) or a pasted launch command may run any release: the
    default means the same without the flag everywhere; a chosen mode is passed and the engine
    itself refuses it if it cannot."""
    assert FLAG not in argv({}, None)
    assert mode_values(argv({"performance_mode": "interactivity"}, None)) == ["interactivity"]


def test_the_launch_command_follows_the_same_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    target = VllmTarget()
    monkeypatch.setattr("objectives.targets.vllm_target.installed_version", lambda: "0.26.0")
    assert mode_values(shlex.split(target.launch_command({}))) == ["balanced"]
    monkeypatch.setattr("objectives.targets.vllm_target.installed_version", lambda: "0.12.0")
    assert FLAG not in shlex.split(target.launch_command({}))
    with pytest.raises(ConfigRejectedError, match=r"vLLM 0\.12\.0 lacks"):
        target.launch_command({"performance_mode": "throughput"})


def test_a_rejected_mode_is_a_failed_trial_with_the_reason(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The trial process (objectives.runner) records the refusal as a ``rejected`` trial, before
    any server is started."""
    monkeypatch.setenv(COMMAND_ENV, json.dumps(["/bin/false"]))  # never started
    monkeypatch.setattr(VllmTarget, "installed_version", lambda self: "0.11.0")
    def no_server(*args: Any, **kwargs: Any) -> Any:
        pytest.fail(f"a server was started for a rejected config: {args}")

    monkeypatch.setattr("objectives.llm.serving_target.ManagedServer", no_server)
    workload = VllmTarget().default_workload().with_params(model="tiny-llama")
    request, result = tmp_path / "request.json", tmp_path / "result.json"
    request.write_text(json.dumps({
        "target": "vllm", "config": {"performance_mode": "interactivity"},
        "workload": workload.spec, "cache_dir": str(tmp_path / "cache")}))
    assert runner.main([str(request), str(result)]) == 0
    outcome = json.loads(result.read_text())
    assert outcome["status"] == "failed" and outcome["error_type"] == "rejected"
    assert "performance_mode='interactivity' needs --performance-mode (>=0.26)" in \
        outcome["reason"]


def test_default_without_flag_needs_a_versioned_mapping() -> None:
    def space(**extra: Any) -> SearchSpace:
        return SearchSpace.from_dict({"target": "t", "engine": "e", "knobs": [
            {"name": "k", "type": "categorical", "choices": ["a", "b"], "default": "a", **extra}]})

    assert space(flags=[{"flag": "--k", "versions": ">=2"}],
                 default_without_flag=True).knob("k").default_without_flag
    with pytest.raises(SearchSpaceError, match="needs a flag mapping with `versions`"):
        space(flag="--k", default_without_flag=True)
    with pytest.raises(SearchSpaceError, match="must be true or false"):
        space(flags=[{"flag": "--k", "versions": ">=2"}], default_without_flag="yes")
    # Without the declaration a release lacking the flag rejects every value, the default too.
    knob = space(flags=[{"flag": "--k", "versions": ">=2"}]).knob("k")
    with pytest.raises(ConfigRejectedError, match="has no"):
        knob.flag_for_value("a", "1.0", flag_kind="flag", release="e")

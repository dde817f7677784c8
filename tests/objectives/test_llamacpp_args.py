"""The knob -> flag table of search_spaces/llamacpp.yaml against the installed llama-server's own
argument parser: every flag (and the negative form of every bool) is one it lists in ``--help``,
every categorical choice is a value it accepts, and the YAML's defaults are the ones it prints."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from advisor.errors import EngineUnavailableError

if os.environ.get("CI") != "true":  # CI installs the llamacpp extra (quickstart --setup-only)
    pytest.importorskip("llama_cpp")
from objectives.llm.serving_target import shared_space
from objectives.targets.llamacpp_target import (
    LlamaCppTarget,
    build_argv,
    fixed_argv,
    server_binary,
    server_environment,
)

if os.environ.get("CI") != "true":
    try:
        server_binary()
    except EngineUnavailableError as exc:
        pytest.skip(str(exc), allow_module_level=True)

_OPTION = re.compile(r"(?<![\w-])(--?[a-zA-Z][\w-]*)")


@pytest.fixture(scope="module")
def help_text() -> str:
    env = server_environment()
    done = subprocess.run([str(server_binary()), "--help"], capture_output=True, text=True,
                          timeout=60, env=env, check=True)
    return done.stdout + done.stderr


def _option_line(help_text: str, flag: str) -> str:
    """The help entry of ``flag``: its line and the continuation lines after it."""
    lines = help_text.splitlines()
    for i, line in enumerate(lines):
        if re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", line) and line.lstrip().startswith(
                "-"):
            entry = [line]
            for more in lines[i + 1:]:
                if more.lstrip().startswith("-") or not more.strip():
                    break
                entry.append(more)
            return "\n".join(entry)
    raise AssertionError(f"{flag} is not in llama-server --help")


def test_every_flag_the_target_passes_is_one_the_server_lists(help_text: str) -> None:
    listed = set(_OPTION.findall(help_text))
    space = shared_space("llamacpp")
    config = space.default_config()
    argv = build_argv({**config, "kv_unified": False}, model_path="m.gguf", port=1,
                      engine_version=LlamaCppTarget().installed_version(),
                      served_model_name="m")
    passed = {a for a in argv if a.startswith("-")}
    passed |= {a for a in fixed_argv(model_path="m", port=1, served_model_name="m", seed=0)
               if a.startswith("-")}
    for knob in space.knobs:
        flag = knob.flag_for(LlamaCppTarget().installed_version())
        assert flag is not None
        passed.add(flag)
        if knob.type == "bool":
            passed |= {flag, f"--no-{flag[2:]}"}
    missing = sorted(passed - listed)
    assert not missing, f"not in llama-server --help: {missing}"


def test_categorical_choices_are_values_the_server_accepts(help_text: str) -> None:
    space = shared_space("llamacpp")
    for flag, knob in (("--cache-type-k", "cache_type_k"), ("--cache-type-v", "cache_type_v")):
        entry = _option_line(help_text, flag)
        allowed = re.search(r"allowed values: ([\w, ]+)", entry)
        assert allowed is not None, entry
        accepted = {v.strip() for v in allowed.group(1).split(",")}
        assert set(space.knob(knob).choices) <= accepted, (knob, accepted)
        assert "(default: f16)" in entry
    entry = _option_line(help_text, "--flash-attn")
    assert "[on|off|auto]" in entry and "default: 'auto'" in entry
    assert set(space.knob("flash_attn").choices) == {"on", "off", "auto"}


def test_the_yaml_defaults_are_the_servers(help_text: str) -> None:
    space = shared_space("llamacpp")
    assert f"(default: {space.knob('batch_size').default})" in _option_line(help_text,
                                                                             "--batch-size")
    assert f"(default: {space.knob('ubatch_size').default})" in _option_line(help_text,
                                                                              "--ubatch-size")
    # -1 = auto: 4 slots with a unified KV cache (tools/server/server.cpp), the YAML's default.
    assert "(default: -1, -1 = auto)" in _option_line(help_text, "--parallel")
    assert space.knob("parallel").default == 4 and space.knob("kv_unified").default is True
    assert "(default: 0, 0 = loaded from model)" in _option_line(help_text, "--ctx-size")

"""TensorRT-LLM launch: every knob of search_spaces/tensorrt-llm.yaml becomes a trtllm-serve option
or a field of the --extra_llm_api_options YAML, with TensorRT-LLM's own names and units."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from advisor.errors import ConfigRejectedError
from objectives.targets.tensorrt_llm_target import (
    DEFAULT_COMMAND,
    OPTIONS_FLAG,
    TensorRTLLMTarget,
    build_argv,
    build_launch,
    check_feasible,
    rejection_reason,
)
from search_spaces import load_space
from search_spaces.knobs import Knob

SPACE = load_space("tensorrt-llm")
#: trtllm-serve options (tensorrt_llm/commands/serve.py) and KvCacheConfig fields
#: (tensorrt_llm/llmapi/llm_args.py) the YAML maps to; see docs/engines.md for where each was read.
CLI_FLAGS = {"--max_batch_size", "--max_num_tokens", "--enable_chunked_prefill"}
YAML_FIELDS = {"kv_cache_config.tokens_per_block", "kv_cache_config.free_gpu_memory_fraction",
               "kv_cache_config.dtype", "kv_cache_config.host_cache_size",
               "kv_cache_config.enable_block_reuse"}


def launch(config: dict[str, Any], **kw: Any) -> Any:
    defaults: dict[str, Any] = dict(model_dir="/models/tiny-llama", port=8123,
                                    engine_version=None, max_model_len=4096)
    return build_launch(config, **{**defaults, **kw})


def field(options: dict[str, Any], dotted: str) -> Any:
    node: Any = options
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def enabling(knob: Knob) -> dict[str, Any]:
    return {name: allowed[0] for name, allowed in knob.when.items()}


def values(knob: Knob) -> list[Any]:
    if knob.type == "categorical":
        return list(knob.choices)
    if knob.type == "bool":
        return [False, True]
    assert knob.low is not None and knob.high is not None
    vals = [knob.low, knob.high, knob.default]
    return [int(v) for v in vals] if knob.type == "int" else [float(v) for v in vals]


def test_yaml_maps_exactly_the_checked_names() -> None:
    flags = {k.flag_for(None) for k in SPACE if k.flags}
    assert flags == CLI_FLAGS | YAML_FIELDS


@pytest.mark.parametrize("knob", [k for k in SPACE if k.flags], ids=lambda k: k.name)
def test_every_knob_value_lands_in_its_option(knob: Knob) -> None:
    flag = knob.flag_for(None)
    assert flag is not None
    for value in values(knob):
        result = launch({**enabling(knob), knob.name: value})
        if flag.startswith("--"):
            if knob.type == "bool":
                # click is_flag: present when true, absent when false (no --no-x form).
                assert (flag in result.argv) == bool(value)
            else:
                i = result.argv.index(flag)
                expected = str(int(value)) if knob.type == "int" else str(value)
                assert result.argv[i + 1] == expected
        else:
            got = field(result.extra_options, flag)
            if knob.name == "host_cache_size":
                assert got == round(value * 2**30)  # GiB knob, bytes field
                assert isinstance(got, int)
            else:
                assert got == value
            assert not any(a == flag or a == f"--{flag}" for a in result.argv)


def test_defaults_and_fixed_arguments() -> None:
    result = launch({})
    argv = result.argv
    assert argv[0] == "/models/tiny-llama"
    assert argv[argv.index("--port") + 1] == "8123"
    assert argv[argv.index("--backend") + 1] == "pytorch"
    assert argv[argv.index("--max_seq_len") + 1] == "4096"
    assert "--enable_chunked_prefill" not in argv
    assert result.extra_options == {
        "load_format": "dummy",
        "kv_cache_config": {"tokens_per_block": 32, "free_gpu_memory_fraction": 0.9,
                            "dtype": "auto", "enable_block_reuse": True},
    }
    assert "load_format" not in launch({}, dummy_weights=False).extra_options
    assert "--tokenizer" not in argv
    tok = launch({}, tokenizer="/models/tiny-llama/tokenizer").argv
    assert tok[tok.index("--tokenizer") + 1] == "/models/tiny-llama/tokenizer"


def test_host_cache_only_when_offloading() -> None:
    assert field(launch({}).extra_options, "kv_cache_config.host_cache_size") is None
    on = launch({"host_offload": True, "host_cache_size": 4.0})
    assert field(on.extra_options, "kv_cache_config.host_cache_size") == 4 * 2**30
    with pytest.raises(ConfigRejectedError, match="only applies when"):
        launch({"host_cache_size": 4.0})


def test_options_file_round_trips_and_is_passed(tmp_path: Path) -> None:
    result = launch({"host_offload": True, "kv_cache_dtype": "fp8"})
    assert yaml.safe_load(result.options_yaml()) == result.extra_options
    path = tmp_path / "opts.yaml"
    argv = build_argv({"host_offload": True}, model_dir="/m", port=1, engine_version=None,
                      max_model_len=2048, options_path=path)
    assert argv[-2:] == [OPTIONS_FLAG, str(path)]
    assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
    full = [*DEFAULT_COMMAND, *argv]
    assert shlex.split(shlex.join(full)) == full


def test_invalid_configs_are_rejected() -> None:
    with pytest.raises(ConfigRejectedError, match="tokens_per_block: must be one of"):
        launch({"tokens_per_block": 24})
    with pytest.raises(ConfigRejectedError, match="max_num_tokens"):
        check_feasible({"max_batch_size": 1024, "max_num_tokens": 512})
    assert rejection_reason("Usage: ...\nError: Invalid value for '--max_batch_size': 'x'\n",
                            2) == "Invalid value for '--max_batch_size': 'x'"
    assert rejection_reason("1 validation error for KvCacheConfig\ndtype\n  bad\n", 1)


def test_launch_command_writes_the_options_file_then_serves() -> None:
    target = TensorRTLLMTarget()
    text = target.launch_command({"enable_chunked_prefill": True}, target.default_workload())
    lines = text.splitlines()
    assert lines[0] == "cat > extra_llm_api_options.yaml <<'EOF'"
    end = lines.index("EOF")
    assert yaml.safe_load("\n".join(lines[1:end]))["kv_cache_config"]["tokens_per_block"] == 32
    command = shlex.split(lines[end + 1])
    assert command[0] == "trtllm-serve"
    assert "--enable_chunked_prefill" in command
    assert command[-2:] == [OPTIONS_FLAG, "extra_llm_api_options.yaml"]
    # A random-weight shape reads its tokenizer from the tokenizer-only directory.
    assert command[command.index("--tokenizer") + 1] == f"{command[1]}/tokenizer"

"""Our vLLM argv against vLLM's own argument parser: every flag the YAML maps to exists in the
installed vLLM, and the argv of sampled configs parses to the values we meant.

Needs vLLM importable (on the H200 device machine: the carried payload on PYTHONPATH); skipped
elsewhere, since only vLLM's parser can say what vLLM accepts.
"""

from __future__ import annotations

import importlib.util
import random
from typing import Any

import pytest

from objectives.targets.vllm_target import build_argv, installed_version
from search_spaces import load_space

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vLLM is not importable here; run on a machine with vLLM (e.g. the H200 payload) to "
           "check the flags against vLLM's own parser")

SPACE = load_space("vllm")


@pytest.fixture(scope="module")
def parser() -> Any:
    try:  # vLLM >= 0.11 keeps FlexibleArgumentParser in vllm.utils.argparse_utils
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser
    from vllm.entrypoints.openai.cli_args import make_arg_parser

    # `vllm serve`'s parser: the model positional, the frontend (host, port, ...) and
    # AsyncEngineArgs.add_cli_args (every engine flag).
    return make_arg_parser(FlexibleArgumentParser())


def sampled_configs(n: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    configs: list[dict[str, Any]] = [SPACE.default_config()]
    for _ in range(n):
        config: dict[str, Any] = {}
        for knob in SPACE.knobs:
            if not knob.is_active(config):
                continue
            if knob.type == "categorical":
                config[knob.name] = rng.choice(knob.choices)
            elif knob.type == "bool":
                config[knob.name] = rng.random() < 0.5
            else:
                low, high = knob.bounds(config)
                value = rng.uniform(low, high)
                config[knob.name] = round(value) if knob.type == "int" else round(value, 3)
        configs.append(config)
    return configs


def test_every_argv_flag_exists_in_the_installed_vllm(parser: Any) -> None:
    version = installed_version()
    options = set(parser._option_string_actions)
    missing = []
    for knob in SPACE:
        flag = knob.flag_for(version) if knob.flags else None
        if flag is None:
            continue
        base = flag.split(".", 1)[0]  # --compilation-config.cudagraph_mode -> --compilation-config
        if base not in options:
            missing.append(f"{knob.name}: {flag}")
        if knob.type == "bool" and f"--no-{flag[2:]}" not in options:
            missing.append(f"{knob.name}: --no-{flag[2:]} (BooleanOptionalAction expected)")
    assert not missing, f"flags unknown to vLLM {version}: {missing}"


@pytest.mark.parametrize("config", sampled_configs(12), ids=lambda c: str(len(c)))
def test_sampled_argv_parses_to_the_intended_values(parser: Any, config: dict[str, Any]) -> None:
    version = installed_version()
    # A knob newer than this release runs only at its default here (its other values are
    # rejected configs, tests/objectives/llm/test_vllm_performance_mode.py).
    config = {k: (SPACE.knob(k).default if SPACE.knob(k).flag_for(version) is None
                  and SPACE.knob(k).default_without_flag else v) for k, v in config.items()}
    args = build_argv(config, model_dir="/models/m", port=8123, engine_version=version,
                      max_model_len=4096, seed=3, served_model_name="m")
    ns = parser.parse_args(args)
    assert ns.model_tag == "/models/m"
    assert (ns.port, ns.max_model_len, ns.seed, ns.load_format) == (8123, 4096, 3, "dummy")
    clean = SPACE.validate_config(config, fill_defaults=True)
    assert ns.block_size == clean["block_size"]
    assert ns.max_num_seqs == clean["max_num_seqs"]
    assert ns.max_num_batched_tokens == clean["max_num_batched_tokens"]
    assert ns.gpu_memory_utilization == pytest.approx(clean["gpu_memory_utilization"])
    assert ns.quantization == (None if clean["quantization"] == "none" else clean["quantization"])
    assert ns.kv_cache_dtype == clean["kv_cache_dtype"]
    assert ns.enable_chunked_prefill is clean["enable_chunked_prefill"]
    assert ns.enable_prefix_caching is clean["enable_prefix_caching"]
    assert ns.enforce_eager is clean["enforce_eager"]
    if clean["kv_offloading"]:
        assert ns.kv_offloading_size == pytest.approx(clean["kv_offloading_size"])
        assert ns.kv_offloading_backend == clean["kv_offloading_backend"]
    else:
        assert ns.kv_offloading_size is None
    mode = ns.compilation_config.cudagraph_mode
    if not clean["enforce_eager"]:
        assert getattr(mode, "name", mode) == clean["cudagraph_mode"]
    if SPACE.knob("performance_mode").flag_for(version) is not None:
        assert ns.performance_mode == clean["performance_mode"]
    else:  # left out: the release has no such flag and runs as the default
        assert "--performance-mode" not in args

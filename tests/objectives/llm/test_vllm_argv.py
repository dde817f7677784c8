"""vLLM argv: every knob of search_spaces/vllm.yaml becomes vLLM's own flag (value and boolean
forms, version-dependent flags, gates), and the whole command is an argv list, never a shell
string."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest

from advisor.errors import ConfigRejectedError
from objectives.targets.vllm_target import (
    COMMAND_ENV,
    DEFAULT_COMMAND,
    VllmTarget,
    build_argv,
    check_feasible,
    check_parallel,
    gpus_needed,
    rejection_reason,
    server_command,
)
from search_spaces import load_space
from search_spaces.knobs import Knob

SPACE = load_space("vllm")
V = "0.26.0"
#: Every flag the YAML maps to, as read in vLLM 0.26.0's arg_utils.py and, for the API server's
#: own ``--api-server-count``, entrypoints/openai/cli_args.py (see docs/engines.md).
VERIFIED_FLAGS_0_26 = {
    "--block-size", "--max-num-seqs", "--max-num-batched-tokens", "--gpu-memory-utilization",
    "--quantization", "--kv-cache-dtype", "--kv-offloading-size", "--kv-offloading-backend",
    "--enable-chunked-prefill", "--enable-prefix-caching", "--enforce-eager",
    "--compilation-config.cudagraph_mode", "--tensor-parallel-size", "--data-parallel-size",
    "--performance-mode", "--api-server-count",
}
BOOL_FLAGS = {"--enable-chunked-prefill", "--enable-prefix-caching", "--enforce-eager"}


def argv(config: dict[str, Any], version: str | None = V, **kw: Any) -> list[str]:
    defaults: dict[str, Any] = dict(model_dir="/models/tiny-llama", port=8123,
                                    engine_version=version, max_model_len=4096, seed=7)
    return build_argv(config, **{**defaults, **kw})


def config_enabling(knob: Knob) -> dict[str, Any]:
    """A config under which ``knob`` is active (its gates switched on)."""
    config: dict[str, Any] = {}
    for name, allowed in knob.when.items():
        config[name] = allowed[0]
    return config


def flag_values(args: list[str], flag: str) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args[:-1]) if a == flag]


def knob_values(knob: Knob) -> list[Any]:
    if knob.type == "categorical":
        return list(knob.choices)
    if knob.type == "bool":
        return [False, True]
    assert knob.low is not None and knob.high is not None
    values = [knob.low, knob.high, knob.default]
    return [int(v) for v in values] if knob.type == "int" else [float(v) for v in values]


def test_yaml_maps_exactly_the_verified_flags() -> None:
    flags = {k.flag_for(V) for k in SPACE if k.flags}
    assert flags == VERIFIED_FLAGS_0_26
    assert {k.flag_for(V) for k in SPACE if k.type == "bool" and k.flags} == BOOL_FLAGS


@pytest.mark.parametrize("knob", [k for k in SPACE if k.flags], ids=lambda k: k.name)
def test_every_knob_value_becomes_its_flag(knob: Knob) -> None:
    flag = knob.flag_for(V)
    assert flag is not None
    for value in knob_values(knob):
        args = argv({**config_enabling(knob), knob.name: value})
        if knob.type == "bool":
            positive, negative = flag, "--no-" + flag[2:]
            assert (positive in args, negative in args) == (bool(value), not value)
        elif value == "none":
            assert flag not in args  # vLLM's own default: the flag is left out
        else:
            expected = str(int(value)) if knob.type == "int" else str(value)
            assert flag_values(args, flag) == [expected], (knob.name, value, args)


def test_default_config_passes_every_active_knob_explicitly() -> None:
    args = argv({})
    assert args[:1] == ["/models/tiny-llama"]
    for knob in SPACE.active_knobs(SPACE.default_config()):
        if not knob.flags or SPACE.default_config()[knob.name] == "none":
            continue
        flag = knob.flag_for(V)
        assert flag is not None
        assert flag in args or (knob.type == "bool" and f"--no-{flag[2:]}" in args), knob.name
    # The inactive knobs (offloading off, CUDA graphs on) are absent.
    assert "--kv-offloading-size" not in args and "--enforce-eager" not in args
    assert "--no-enforce-eager" in args
    assert flag_values(args, "--compilation-config.cudagraph_mode") == ["FULL_AND_PIECEWISE"]


def test_fixed_arguments() -> None:
    args = argv({}, served_model_name="tiny-llama")
    assert flag_values(args, "--port") == ["8123"]
    assert flag_values(args, "--host") == ["127.0.0.1"]
    assert flag_values(args, "--max-model-len") == ["4096"]
    assert flag_values(args, "--seed") == ["7"]
    assert flag_values(args, "--load-format") == ["dummy"]
    assert flag_values(args, "--served-model-name") == ["tiny-llama"]
    assert "--disable-uvicorn-access-log" in args
    assert "--load-format" not in argv({}, dummy_weights=False)
    assert "--tokenizer" not in args
    assert flag_values(argv({}, tokenizer="/m/tokenizer"), "--tokenizer") == ["/m/tokenizer"]


def test_gates_switch_dependent_knobs() -> None:
    off = argv({"kv_offloading": False})
    assert "--kv-offloading-size" not in off and "--kv-offloading-backend" not in off
    on = argv({"kv_offloading": True, "kv_offloading_size": 8.5})
    assert flag_values(on, "--kv-offloading-size") == ["8.5"]
    assert flag_values(on, "--kv-offloading-backend") == ["native"]
    eager = argv({"enforce_eager": True})
    assert "--enforce-eager" in eager
    assert not any(a.startswith("--compilation-config") for a in eager)
    with pytest.raises(ConfigRejectedError, match="only applies when"):
        argv({"enforce_eager": True, "cudagraph_mode": "FULL"})
    with pytest.raises(ConfigRejectedError, match="only applies when"):
        argv({"kv_offloading_size": 4.0})


def test_version_dependent_flags() -> None:
    # --kv-offloading-size exists from vLLM 0.12 (checked: absent in 0.11.0, present in 0.12.0).
    assert "--kv-offloading-size" in argv({"kv_offloading": True}, version="0.12.0")
    with pytest.raises(ConfigRejectedError, match=r"kv_offloading_size has no vLLM flag in "
                                                  r"vLLM 0\.11\.0"):
        argv({"kv_offloading": True}, version="0.11.0")
    # cudagraph_mode via --compilation-config exists from 0.11.
    with pytest.raises(ConfigRejectedError, match="cudagraph_mode"):
        argv({}, version="0.10.2")
    assert "--enforce-eager" in argv({"enforce_eager": True}, version="0.10.2")
    # Unknown version (e.g. a wrapper command): the unversioned or first mapping.
    assert "--kv-offloading-size" in argv({"kv_offloading": True}, version=None)


def test_invalid_configs_are_rejected_with_the_reason() -> None:
    with pytest.raises(ConfigRejectedError, match="block_size: must be one of"):
        argv({"block_size": 24})
    with pytest.raises(ConfigRejectedError, match="unknown knob 'swap_space'"):
        argv({"swap_space": 4})
    with pytest.raises(ConfigRejectedError, match=r"must be greater than or equal to max_num_seqs"):
        check_feasible({"max_num_seqs": 512, "max_num_batched_tokens": 256}, 4096)
    with pytest.raises(ConfigRejectedError, match="smaller than max_model_len"):
        check_feasible({"max_num_seqs": 8, "max_num_batched_tokens": 2048,
                        "enable_chunked_prefill": False}, 4096)
    check_feasible({"max_num_seqs": 8, "max_num_batched_tokens": 2048,
                    "enable_chunked_prefill": True}, 4096)
    with pytest.raises(ConfigRejectedError, match="fp8_e5m2 is not supported with fp8 weights"):
        check_feasible({"quantization": "fp8", "kv_cache_dtype": "fp8_e5m2"}, 4096)
    check_feasible({"quantization": "fp8", "kv_cache_dtype": "fp8"}, 4096)
    check_feasible({"quantization": "none", "kv_cache_dtype": "fp8_e5m2"}, 4096)


def test_argv_is_a_list_of_strings_that_survives_any_path() -> None:
    odd = "/tmp/my models/$(rm -rf ~);`x` 'q'"
    args = [*DEFAULT_COMMAND, *argv({"kv_offloading": True}, model_dir=odd)]
    assert isinstance(args, list) and all(isinstance(a, str) for a in args)
    assert odd in args  # one element, never split or interpreted
    assert shlex.split(shlex.join(args)) == args


def test_server_command_honours_the_override(monkeypatch: pytest.MonkeyPatch) -> None:
    assert server_command({}) == list(DEFAULT_COMMAND)
    assert server_command({COMMAND_ENV: '["docker", "run", "img"]'}) == ["docker", "run", "img"]
    from advisor.errors import EngineUnavailableError
    for bad in ('"vllm serve"', "[]", "[1]", "not json"):
        with pytest.raises(EngineUnavailableError, match=COMMAND_ENV):
            server_command({COMMAND_ENV: bad})


def test_launch_command_is_pasteable_vllm_serve() -> None:
    target = VllmTarget()
    line = target.launch_command({"block_size": 32, "enable_prefix_caching": False},
                                 target.default_workload())
    args = shlex.split(line)
    assert args[:3] == ["vllm", "serve", "meta-llama/Meta-Llama-3-8B"]
    assert flag_values(args, "--block-size") == ["32"]
    assert "--no-enable-prefix-caching" in args
    assert "--max-model-len" in args
    tiny = target.launch_command({}, target.default_workload().with_params(model="tiny-llama"))
    assert "--load-format dummy" in tiny and "--tokenizer models/tiny-llama/tokenizer" in tiny
    assert shlex.split(target.launch_command({}))[:3] == ["vllm", "serve", "MODEL"]


def test_launch_command_writes_nothing_and_names_the_trials_context_length(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command's --max-model-len is the one a trial of the workload starts the engine with,
    computed without writing a model directory (a recommender asks for hundreds)."""
    target = VllmTarget()
    workload = target.default_workload()
    served = target.load_served(workload, tmp_path / "cache")
    monkeypatch.chdir(tmp_path)
    written = sorted(tmp_path.rglob("*"))
    monkeypatch.setattr("objectives.llm.server.write_model_dir",
                        lambda *a, **k: pytest.fail("launch_command wrote a model directory"))
    args = shlex.split(target.launch_command({}, workload))
    assert flag_values(args, "--max-model-len") == [str(served.max_model_len())]
    again = target.launch_command({}, workload.with_params(max_model_len=4096))
    assert flag_values(shlex.split(again), "--max-model-len") == ["4096"]
    assert sorted(tmp_path.rglob("*")) == written


def test_rejection_reason_reads_vllm_messages() -> None:
    argparse_log = ("usage: vllm serve [model_tag] [options]\n"
                    "vllm serve: error: argument --block-size: invalid int value: 'x'\n")
    assert rejection_reason(argparse_log, 2) == "argument --block-size: invalid int value: 'x'"
    pydantic_log = ("Traceback (most recent call last):\n"
                    "pydantic_core._pydantic_core.ValidationError: 1 validation error for "
                    "CacheConfig\ngpu_memory_utilization\n"
                    "  Input should be less than or equal to 1 [type=less_than_equal]\n"
                    "INFO shutting down\n")
    reason = rejection_reason(pydantic_log, 1)
    assert reason is not None and "validation error for CacheConfig" in reason
    assert rejection_reason("RuntimeError: CUDA out of memory\n", 1) is None


def test_paths_are_strings(tmp_path: Path) -> None:
    args = argv({}, model_dir=tmp_path / "m")
    assert args[0] == str(tmp_path / "m")


def test_engine_facts_and_log_excerpt_read_vllm_startup_lines() -> None:
    from objectives.targets.vllm_target import engine_facts, log_excerpt

    log = "\n".join([
        "(APIServer pid=7) INFO 11-30 10:50:01 [api_utils.py:325] vLLM server version 0.26.0, "
        "serving model /tmp/m",
        "(EngineCore pid=9) INFO [gpu_worker.py:561] Available KV cache memory: 112.31 GiB",
        "(EngineCore pid=9) INFO [kv_cache_utils.py:2177] GPU KV cache size: 920,144 tokens",
        "(EngineCore pid=9) INFO [kv_cache_utils.py:2178] Maximum concurrency for 4,096 tokens "
        "per request: 224.64x",
        *[f"(APIServer pid=7) INFO [launcher.py:46] Route: /v1/r{i}, Methods: GET"
          for i in range(50)],
        "(APIServer pid=7) INFO:     Application startup complete.",
    ])
    assert engine_facts(log) == {"engine_version_reported": "0.26.0",
                                 "kv_cache_memory_gib": 112.31, "kv_cache_tokens": 920144,
                                 "kv_cache_max_concurrency": 224.64}
    excerpt = log_excerpt(log)
    assert "Route:" not in excerpt and excerpt.endswith("Application startup complete.")
    assert len(log_excerpt(log, 40)) == 40


def test_engine_facts_read_where_the_start_up_time_went() -> None:
    """The lines vLLM 0.26.0 logged on the H100 (docs/benchmarks/h100-heldout-2026-12-06/
    vllm-8b-defaults.log): each phase's own figure, and the seconds between the landmarks."""
    from objectives.targets.vllm_target import engine_facts

    log = "\n".join([
        "(APIServer pid=707) INFO 12-06 15:21:00 [api_utils.py:345]  version 0.26.0",
        "(APIServer pid=707) INFO 12-06 15:21:23 [model.py:623] Resolved architecture: Llama",
        "(EngineCore pid=895) INFO 12-06 15:21:44 [core.py:116] Initializing a V1 LLM engine "
        "(v0.26.0) with config: model='/tmp/m'",
        "(EngineCore pid=895) INFO 12-06 15:21:48 [model_runner.py:305] Model loading took "
        "14.96 GiB and 2.157410 seconds",
        "(EngineCore pid=895) INFO 12-06 15:22:14 [monitor.py:53] torch.compile took 25.50 s in "
        "total",
        "(EngineCore pid=895) INFO 12-06 15:22:22 [model_runner.py:747] Graph capturing finished "
        "in 5 secs, took 0.98 GiB",
        "(EngineCore pid=895) INFO 12-06 15:22:40 [core.py:340] init engine (profile, create kv "
        "cache, warmup model) took 51.07 s (compilation: 25.50 s)",
        "(APIServer pid=707) INFO 12-06 15:22:41 [api_server.py:677] Starting vLLM server on "
        "http://127.0.0.1:46923",
    ])
    facts = engine_facts(log)
    assert {k: facts[k] for k in ("weights_load_s", "torch_compile_s", "cuda_graphs_s",
                                  "engine_init_s")} == {
        "weights_load_s": 2.15741, "torch_compile_s": 25.5, "cuda_graphs_s": 5.0,
        "engine_init_s": 51.07}
    assert facts["startup_phases_s"] == {"api_to_engine_core": 44.0, "engine_core_init": 56.0,
                                         "init_to_serving": 1.0}
    # A start that never got to serving has no phases (and no made-up ones).
    assert "startup_phases_s" not in engine_facts(log.rsplit("\n", 1)[0])


@pytest.mark.parametrize("line", [
    # Both forms vLLM's model runners have logged (gpu_model_runner.py).
    "(EngineCore pid=9) INFO [gpu_model_runner.py:3110] Model loading took 14.9889 GiB memory "
    "and 3.812 seconds",
    "(EngineCore pid=9) INFO [gpu_model_runner.py:3110] Model loading took 14.9889 GiB and "
    "3.812 seconds",
])
def test_the_weights_vllm_loaded_become_weights_and_bits_per_weight(line: str) -> None:
    from objectives.llm.models import model_config, parameter_count
    from objectives.llm.server import weight_metrics
    from objectives.targets.vllm_target import engine_facts

    facts = engine_facts(line)
    assert facts["weights_gib"] == 14.9889
    metrics = weight_metrics(facts["weights_gib"] * 2**30,
                             parameter_count(model_config("llama-3-8b")))
    assert metrics["weights_mb"] == pytest.approx(14.9889 * 1024)
    assert metrics["bits_per_weight"] == pytest.approx(16.0, abs=0.05)  # bf16 weights


@pytest.mark.parametrize("line", [
    "INFO [api_utils.py:325] vLLM server version 0.26.0, serving model /tmp/m",
    " \x1b[93m▄▄\x1b[0m \x1b[94m▄█\x1b[0m \x1b[97;1m█     █     █ ▀▄▀ █\x1b[0m  version "
    "\x1b[97;1m0.26.0\x1b[0m",
    " ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.26.0",
])
def test_engine_version_is_read_from_either_startup_banner(line: str) -> None:
    from objectives.targets.vllm_target import engine_facts

    assert engine_facts(line)["engine_version_reported"] == "0.26.0"


# -- parallel layouts: knobs bounded by the GPUs this process may use -----------------------------


@pytest.mark.parametrize(("visible", "high"), [("0,1", 2), ("3", 1), ("", 1), ("0,1,2,3", 4)])
def test_parallel_knobs_are_bounded_by_the_visible_gpus(monkeypatch: pytest.MonkeyPatch,
                                                        visible: str, high: int) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    space = load_space("vllm")
    for name in ("tensor_parallel_size", "data_parallel_size"):
        knob = space.knob(name)
        assert (knob.low, knob.high, knob.default) == (1, high, 1)


def test_parallel_sizes_become_vllms_flags() -> None:
    args = argv({"tensor_parallel_size": 1, "data_parallel_size": 1})
    assert flag_values(args, "--tensor-parallel-size") == ["1"]
    assert flag_values(args, "--data-parallel-size") == ["1"]


def test_a_layout_needing_more_gpus_than_visible_is_refused_before_a_start() -> None:
    llama_8b = {"num_attention_heads": 32}
    check_parallel({"tensor_parallel_size": 2, "data_parallel_size": 1}, gpus=2,
                   model_config=llama_8b)
    assert gpus_needed({"tensor_parallel_size": 2, "data_parallel_size": 2}) == 4
    with pytest.raises(ConfigRejectedError, match="needs 4 GPUs, but this process may use 2"):
        check_parallel({"tensor_parallel_size": 2, "data_parallel_size": 2}, gpus=2,
                       model_config=llama_8b)
    with pytest.raises(ConfigRejectedError, match="does not divide the model's 32 attention"):
        check_parallel({"tensor_parallel_size": 3}, gpus=4, model_config=llama_8b)
    # Unknown GPU count (no nvidia-smi): only the model's own rule is checked.
    check_parallel({"tensor_parallel_size": 8}, gpus=None, model_config=llama_8b)


def test_api_server_count_is_passed_with_one_engine_core_only() -> None:
    """`--api-server-count` (vLLM 0.26's cli_args.py): with data parallelism 1 an explicit 1
    starts the same single-process server as vLLM's default (the default is the data-parallel
    size); with more engine cores the knob is inactive, so vLLM's own default applies there.
    On a release not read the default is left out and another count is a rejected config."""
    knob = SPACE.knob("api_server_count")
    assert (knob.role, knob.default, knob.low, knob.high) == ("frontend_processes", 1, 1, 4)
    assert flag_values(argv({}), "--api-server-count") == ["1"]
    assert flag_values(argv({"api_server_count": 2}), "--api-server-count") == ["2"]
    assert knob.is_active({"data_parallel_size": 1})
    assert not knob.is_active({"data_parallel_size": 2})
    assert "--api-server-count" not in argv({}, version="0.17.1")
    with pytest.raises(ConfigRejectedError, match="api-server-count"):
        argv({"api_server_count": 2}, version="0.17.1")

"""The sglang target on CPU: its flags against SGLang 0.5.23's own ``ServerArgs`` (copied below
from the release's parser), and whole trials against a stand-in ``sglang.launch_server``.

The stand-in is a ``sglang`` package written to a temporary directory and put on ``PYTHONPATH``,
so the target runs its real default command (``python -m sglang.launch_server``): it parses the
argv with the copied flag table (an unknown flag exits 2 with argparse's message, as SGLang
does), prints SGLang's start-up lines, and serves fake_openai_server's API with SGLang's
Prometheus series on ``/metrics``, ``GET /server_info`` and ``POST /flush_cache``. SGLang itself
is not installed here; with it importable, one more test parses sampled argvs with its parser.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import re
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from advisor.errors import ConfigRejectedError
from advisor.isolation import run_isolated
from advisor.testing import TargetContract
from objectives.llm.workload import load_preset
from objectives.registry import get_target
from objectives.target import Target
from objectives.targets import sglang_target
from objectives.targets.sglang_target import (
    SGLANG_METRICS,
    SglangTarget,
    build_argv,
    check_feasible,
    engine_facts,
    rejection_reason,
)
from objectives.workload import Workload
from search_spaces import load_space
from search_spaces.knobs import Knob

HERE = Path(__file__).resolve().parent
SPACE = load_space("sglang")
#: What a trial may be judged when the server's metrics were read (never "unchecked"): a loaded
#: 2-core machine can make the one-process client lag.
CHECKED = {"valid", "frontend_delay", "client_bound", "server_disagrees"}

# -- SGLang 0.5.23, as read from its wheel -------------------------------------------------------

#: The release the tables below were copied from.
RELEASE = "0.5.23"
#: Every flag the target passes, as ``argparse.ArgumentParser`` holds it after SGLang 0.5.23's
#: ``ServerArgs.add_cli_args`` (sglang/srt/server_args.py; the fields in
#: sglang/srt/arg_groups/fields/*.py): ``store_true`` or the value type, the choices and the
#: default. The parser has 532 actions; these are the ones the target uses. (It has no
#: ``--cuda-graph-max-bs`` of older releases: CUDA graphs are set per phase since.)
SERVER_ARGS: dict[str, dict[str, Any]] = {
    "--model-path": {"type": "str", "default": None},
    "--tokenizer-path": {"type": "str", "default": None},
    "--load-format": {"type": "str", "default": "auto", "choices": [
        "auto", "pt", "safetensors", "instanttensor", "npcache", "dummy", "sharded_state",
        "presharded", "gguf", "expert_pack", "bitsandbytes", "mistral", "layered", "flash_rl",
        "remote", "remote_instance", "fastsafetensors", "private", "runai_streamer"]},
    "--context-length": {"type": "int", "default": None},  # human_readable_int
    "--random-seed": {"type": "int", "default": None},
    "--host": {"type": "str", "default": "127.0.0.1"},
    "--port": {"type": "int", "default": 30000},
    "--served-model-name": {"type": "str", "default": None},
    "--enable-metrics": {"type": "store_true", "default": False},
    "--page-size": {"type": "int", "default": None},
    "--max-running-requests": {"type": "int", "default": None},
    "--chunked-prefill-size": {"type": "int", "default": None},
    "--mem-fraction-static": {"type": "float", "default": None},
    "--max-total-tokens": {"type": "int", "default": None},  # human_readable_int
    "--schedule-policy": {"type": "str", "default": "fcfs", "choices": [
        "lpm", "random", "fcfs", "dfs-weight", "lof", "priority", "routing-key", "hrrn",
        "shortest-prefill-first"]},
    "--schedule-conservativeness": {"type": "float", "default": 1.0},
    "--disable-radix-cache": {"type": "store_true", "default": False},
    "--kv-cache-dtype": {"type": "str", "default": "auto", "choices": [
        "auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16"]},
    "--quantization": {"type": "str", "default": None, "choices": [
        "awq", "fp8", "mxfp8", "gptq", "gptq_marlin", "awq_marlin", "bitsandbytes", "gguf",
        "modelopt", "modelopt_fp8", "modelopt_fp4", "nvfp4_online", "modelopt_mixed",
        "petit_nvfp4", "w8a8_int8", "w8a8_fp8", "moe_wna16", "w4afp8", "mxfp4", "auto-round",
        "auto-round-int8", "compressed-tensors", "modelslim", "mxfp_w4a8", "quark",
        "quark_int4fp8_moe", "quark_mxfp4", "mlx_q4", "mlx_q8", "unquant", "humming"]},
    "--dtype": {"type": "str", "default": "auto", "choices": [
        "auto", "half", "float16", "bfloat16", "float", "float32"]},
    "--disable-decode-cuda-graph": {"type": "store_true", "default": False},
    "--cuda-graph-max-bs-decode": {"type": "int", "default": None},
    "--disable-overlap-schedule": {"type": "store_true", "default": False},
    "--enable-mixed-chunk": {"type": "store_true", "default": False},
    "--enable-torch-compile": {"type": "store_true", "default": False},
    "--tp-size": {"type": "int", "default": 1},  # alias --tensor-parallel-size
    "--dp-size": {"type": "int", "default": 1},  # alias --data-parallel-size
}
#: Series of 0.5.23's sglang/srt/observability/metrics_collector.py the vocabulary may name, by
#: prometheus_client type (a counter's sample name carries ``_total``).
METRIC_SERIES: dict[str, str] = {
    "sglang:time_to_first_token_seconds": "histogram",
    "sglang:request_time_per_output_token_seconds": "histogram",
    "sglang:inter_token_latency_seconds": "histogram",
    "sglang:e2e_request_latency_seconds": "histogram",
    "sglang:queue_time_seconds": "histogram",
    "sglang:generation_tokens_total": "counter",
    "sglang:num_requests_total": "counter",
    "sglang:num_retracted_requests_total": "counter",
    "sglang:num_running_reqs": "gauge",
    "sglang:num_queue_reqs": "gauge",
    "sglang:token_usage": "gauge",
}
#: Bucket bounds of 0.5.23's latency histograms (seconds).
TTFT_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400]
E2E_BUCKETS = [*TTFT_BUCKETS, 600, 1200, 1800, 2400]
ITL_BUCKETS = [0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040,
               0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0]
QUEUE_BUCKETS = [0.0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10]
#: Start-up lines as 0.5.23 logs them (model_runner.py, scheduler.py), with its log prefix.
STARTUP_LOG = (
    "[2026-01-01 00:00:00 TP0] Load weight end. elapsed=0.41 s, type=LlamaForCausalLM, "
    "avail mem=120.00 GB, mem usage=0.01 GB.\n"
    "[2026-01-01 00:00:01 TP0] max_total_num_tokens=12345, chunked_prefill_size=8192, "
    "max_prefill_tokens=16384, max_running_requests=4096, context_len=256, "
    "available_gpu_mem=110.00 GB\n")


def server_args_parser(left_out: str | None = None) -> argparse.ArgumentParser:
    """A parser holding :data:`SERVER_ARGS` the way SGLang's does (``left_out``: one flag to
    leave out, as an older or newer release would)."""
    parser = argparse.ArgumentParser(prog="launch_server.py")
    types = {"str": str, "int": int, "float": float}
    for flag, spec in SERVER_ARGS.items():
        if flag == left_out:
            continue
        if spec["type"] == "store_true":
            parser.add_argument(flag, action="store_true")
        else:
            parser.add_argument(flag, type=types[spec["type"]], choices=spec.get("choices"),
                                default=spec["default"], required=flag == "--model-path")
    return parser


def every_knob_off_default() -> dict[str, Any]:
    """A config that takes every knob away from its default (gates opened), within the space."""
    config: dict[str, Any] = {}
    for knob in SPACE:
        if knob.type == "bool":
            config[knob.name] = not knob.default
        elif knob.type == "categorical":
            config[knob.name] = next(c for c in knob.choices if c != knob.default)
        elif not knob.name.endswith("parallel_size"):  # those are capped by the GPUs here
            assert knob.high is not None and knob.high != knob.default, knob.name
            config[knob.name] = int(knob.high) if knob.type == "int" else knob.high
    # Open the gates of the knobs the flipped booleans closed (CUDA graphs on, radix cache on).
    config.update(disable_decode_cuda_graph=False, disable_radix_cache=False)
    return config


# -- flags and defaults ---------------------------------------------------------------------------

def test_every_knob_maps_to_the_flag_serverargs_defines() -> None:
    for knob in SPACE:
        flag = knob.flag_for(RELEASE)
        if not knob.flags:
            assert knob.name.endswith("_auto") and knob.type == "bool", knob.name  # a gate
            continue
        assert flag in SERVER_ARGS, (knob.name, flag)
        spec = SERVER_ARGS[flag]
        expected = {"bool": "store_true", "int": "int", "float": "float"}.get(knob.type)
        if expected is not None:
            assert spec["type"] == expected, (knob.name, spec)
        elif knob.type == "categorical":
            values = [c for c in knob.choices if c != sglang_target.NONE_CHOICE]
            if "choices" in spec:
                assert {str(v) for v in values} <= set(spec["choices"]), knob.name
            else:
                assert all(isinstance(v, int) for v in values) and spec["type"] == "int"


def test_defaults_are_sglangs_where_sglang_fixes_one() -> None:
    """A knob without a gate is passed at its default: it must be the value ServerArgs holds
    (page_size is resolved from None to 1 on CUDA; a bool's default is its flag left out)."""
    resolved_on_cuda = {"--page-size": 1}
    for knob in SPACE:
        if not knob.flags or knob.when or knob.name.endswith("parallel_size"):
            continue
        spec = SERVER_ARGS[knob.flag_for(RELEASE) or ""]
        default = resolved_on_cuda.get(knob.flag_for(RELEASE) or "", spec["default"])
        if knob.default == sglang_target.NONE_CHOICE:
            assert default is None, knob.name
        else:
            assert knob.default == default, (knob.name, knob.default, default)
    assert SPACE.knob("tensor_parallel_size").default == SERVER_ARGS["--tp-size"]["default"]
    assert SPACE.knob("data_parallel_size").default == SERVER_ARGS["--dp-size"]["default"]


def test_default_argv_leaves_sglangs_own_sizing_alone() -> None:
    argv = build_argv({}, model_dir="/m", port=30001, engine_version=RELEASE,
                      max_model_len=256, seed=3, served_model_name="tiny-llama",
                      tokenizer="/tok")
    assert argv[:10] == ["--model-path", "/m", "--host", "127.0.0.1", "--port", "30001",
                         "--context-length", "256", "--random-seed", "3"]
    for flag in ("--max-running-requests", "--chunked-prefill-size", "--mem-fraction-static",
                 "--max-total-tokens", "--cuda-graph-max-bs-decode", "--quantization",
                 "--disable-radix-cache", "--enable-torch-compile"):
        assert flag not in argv
    assert argv[argv.index("--load-format") + 1] == "dummy"
    assert argv[argv.index("--tokenizer-path") + 1] == "/tok"
    parsed = server_args_parser().parse_args(argv)
    assert parsed.page_size == 1 and parsed.schedule_policy == "fcfs"


@pytest.mark.parametrize("knob", [k for k in SPACE if k.flags], ids=lambda k: k.name)
def test_every_knob_value_lands_in_its_flag(knob: Knob) -> None:
    config = every_knob_off_default()
    if knob.name in ("tensor_parallel_size", "data_parallel_size"):
        config[knob.name] = 1
    elif knob.type == "bool":
        config[knob.name] = not knob.default
    config = {k.name: config[k.name] for k in SPACE.active_knobs(config) if k.name in config}
    assert knob.is_active(config), knob.name
    argv = build_argv(config, model_dir="/m", port=1, engine_version=RELEASE,
                      max_model_len=256, seed=0)
    parsed = vars(server_args_parser().parse_args(argv))
    flag = knob.flag_for(RELEASE) or ""
    dest = flag[2:].replace("-", "_")
    value = config[knob.name]
    assert parsed[dest] == (value if knob.type != "categorical" else
                            type(parsed[dest])(value)), (knob.name, argv)


def test_false_bools_and_none_leave_their_flags_out() -> None:
    argv = build_argv({"disable_radix_cache": False, "enable_mixed_chunk": False,
                       "quantization": "none"}, model_dir="/m", port=1, engine_version=RELEASE,
                      max_model_len=256, seed=0)
    assert not {"--disable-radix-cache", "--enable-mixed-chunk", "--quantization"} & set(argv)


def test_a_knob_is_refused_in_a_release_that_was_not_checked() -> None:
    config = {"cuda_graph_max_bs_auto": False, "cuda_graph_max_bs": 64}
    argv = build_argv(config, model_dir="/m", port=1, engine_version=RELEASE,
                      max_model_len=256, seed=0)
    assert argv[argv.index("--cuda-graph-max-bs-decode") + 1] == "64"
    with pytest.raises(ConfigRejectedError, match=r"no SGLang flag in SGLang 0\.5\.9"):
        build_argv(config, model_dir="/m", port=1, engine_version="0.5.9", max_model_len=256,
                   seed=0)
    # Left to SGLang, the knob needs no flag: the default config runs on any release.
    build_argv({}, model_dir="/m", port=1, engine_version="0.5.9", max_model_len=256, seed=0)


def test_a_config_outside_the_space_is_rejected() -> None:
    with pytest.raises(ConfigRejectedError):
        build_argv({"page_size": 3}, model_dir="/m", port=1, engine_version=None,
                   max_model_len=256, seed=0)


@pytest.mark.parametrize(("config", "reason"), [
    ({"chunked_prefill_size": 3000, "page_size": 64}, "must be divisible by page_size"),
    ({"disable_radix_cache": True, "schedule_policy": "lpm"}, "runs fcfs instead"),
    ({"disable_radix_cache": True, "schedule_policy": "dfs-weight"}, "runs fcfs instead"),
    ({"max_total_tokens": 4096}, r"must hold the workload's context \(8192 tokens\)"),
])
def test_what_sglang_refuses_or_overrides_is_rejected_before_a_start(
        config: dict[str, Any], reason: str) -> None:
    with pytest.raises(ConfigRejectedError, match=reason):
        check_feasible(config, 8192)


def test_what_sglang_accepts_is_not_rejected() -> None:
    check_feasible(SPACE.default_config(), 8192)
    check_feasible({"disable_radix_cache": True, "schedule_policy": "lof",
                    "chunked_prefill_size": 8192, "page_size": 128, "max_total_tokens": 8192},
                   8192)


def test_parallel_layouts_beyond_the_machine_or_the_model_are_rejected() -> None:
    with pytest.raises(ConfigRejectedError, match="needs 4 GPUs"):
        sglang_target.check_parallel({"tensor_parallel_size": 2, "data_parallel_size": 2},
                                     gpus=2, model_config=None)
    with pytest.raises(ConfigRejectedError, match="does not divide"):
        sglang_target.check_parallel({"tensor_parallel_size": 3}, gpus=None,
                                     model_config={"num_attention_heads": 32})


def test_with_memory_share_opens_the_memory_gate() -> None:
    config = SglangTarget().with_memory_share({}, 0.3)
    assert config["mem_fraction_static_auto"] is False and config["mem_fraction_static"] == 0.3
    argv = build_argv(config, model_dir="/m", port=1, engine_version=RELEASE,
                      max_model_len=256, seed=0)
    assert argv[argv.index("--mem-fraction-static") + 1] == "0.3"
    with pytest.raises(ConfigRejectedError):
        SglangTarget().with_memory_share({}, 1.0)


def test_launch_command_deploys_the_real_checkpoint() -> None:
    target = SglangTarget()
    workload = load_preset("chat", model="llama-3-8b")
    command = target.launch_command({"page_size": 16, "disable_radix_cache": True}, workload)
    assert command.startswith("python -m sglang.launch_server --model-path "
                              "meta-llama/Meta-Llama-3-8B --context-length ")
    assert "--page-size 16" in command and "--disable-radix-cache" in command
    assert "--enable-metrics" not in command and "--load-format" not in command
    tiny = target.launch_command({}, load_preset("chat", model="tiny-llama"))
    assert "--model-path models/tiny-llama --load-format dummy --tokenizer-path" in tiny


@pytest.mark.skipif(importlib.util.find_spec("sglang") is None
                    or importlib.util.find_spec("sglang.srt.server_args") is None,
                    reason="SGLang is not importable here; with it, sampled argvs are parsed "
                           "by its own ServerArgs parser")
def test_sampled_argv_parses_with_the_installed_sglangs_parser() -> None:
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    rng = random.Random(0)
    version = sglang_target.SglangTarget().installed_version()
    for _ in range(20):
        config: dict[str, Any] = {}
        for knob in SPACE:
            if not knob.is_active(config):
                continue
            if knob.type == "categorical":
                config[knob.name] = rng.choice(knob.choices)
            elif knob.type == "bool":
                config[knob.name] = rng.random() < 0.5
            elif knob.name.endswith("parallel_size"):
                config[knob.name] = 1
            else:
                low, high = knob.bounds(config)
                value = rng.uniform(low, high)
                config[knob.name] = round(value) if knob.type == "int" else round(value, 3)
        argv = build_argv(config, model_dir="/m", port=1, engine_version=version,
                          max_model_len=256, seed=0)
        parsed = vars(parser.parse_args(argv))
        for knob in SPACE.active_knobs(config):
            if knob.flags and knob.type != "bool" and config[knob.name] != "none":
                field = {"tensor_parallel_size": "tp_size", "data_parallel_size": "dp_size",
                         "cuda_graph_max_bs": "cuda_graph_max_bs_decode"}.get(knob.name,
                                                                             knob.name)
                assert str(parsed[field]) == str(config[knob.name]), knob.name


# -- SGLang's own words ---------------------------------------------------------------------------

def test_the_vocabulary_names_sglangs_series() -> None:
    named = {**SGLANG_METRICS.histograms(), **SGLANG_METRICS.counters(),
             **SGLANG_METRICS.gauges()}
    assert set(SGLANG_METRICS.histograms()) == {"ttft", "tpot", "itl", "e2e", "queue"}
    for key, name in named.items():
        kind = {**dict.fromkeys(SGLANG_METRICS.histograms(), "histogram"),
                **dict.fromkeys(SGLANG_METRICS.counters(), "counter"),
                **dict.fromkeys(SGLANG_METRICS.gauges(), "gauge")}[key]
        assert METRIC_SERIES.get(name) == kind, (key, name)


def test_start_up_facts_name_what_sglang_resolved() -> None:
    facts = engine_facts(STARTUP_LOG)
    assert facts == {"weights_gib": 0.01, "kv_cache_tokens": 12345,
                     "chunked_prefill_size_resolved": 8192, "max_prefill_tokens_resolved": 16384,
                     "max_running_requests_resolved": 4096}
    assert engine_facts("nothing here") == {}


def test_argparse_refusals_are_read_and_other_failures_are_not() -> None:
    log = ("usage: launch_server.py [-h] --model-path MODEL_PATH ...\n"
           "launch_server.py: error: argument --page-size: invalid int value: 'x'\n")
    assert rejection_reason(log, 2) == "argument --page-size: invalid int value: 'x'"
    assert rejection_reason("AssertionError: chunked_prefill_size must be divisible by "
                            "page_size", 1) is None


def test_registered_and_reports_the_llm_metrics() -> None:
    target = get_target("sglang")
    assert isinstance(target, SglangTarget)
    assert {"ttft_p95_ms", "tpot_p95_ms", "output_tokens_per_s", "weights_mb"} <= \
        target.reported_metrics()


# -- the stand-in sglang.launch_server ------------------------------------------------------------

#: ``sglang/launch_server.py`` of the stand-in package. ``stand_in.json`` next to it holds
#: :data:`SERVER_ARGS`, SGLang's bucket bounds and where fake_openai_server lives.
#: ``$FAKE_SGLANG_RECORD``: where to write the argv it got; ``$FAKE_SGLANG_UNKNOWN_FLAG``: a flag
#: its parser lacks (argparse's usage error, exit 2, as SGLang answers a flag it does not know).
LAUNCH_SERVER = '''"""Stand-in for SGLang's launch_server (see test_sglang_fake_engine.py)."""
import argparse
import json
import os
import sys
from pathlib import Path

STAND_IN = json.loads((Path(__file__).resolve().parent / "stand_in.json").read_text())
sys.path.insert(0, STAND_IN["fake_dir"])
import fake_openai_server as fake  # noqa: E402

BUCKETS = STAND_IN["buckets"]
LABELS = 'model_name="{model}",engine_type="unified",tp_rank="0",pp_rank="0"'


def parser():
    p = argparse.ArgumentParser(prog="launch_server.py")
    types = {"str": str, "int": int, "float": float}
    for flag, spec in STAND_IN["flags"].items():
        if flag == os.environ.get("FAKE_SGLANG_UNKNOWN_FLAG"):
            continue
        if spec["type"] == "store_true":
            p.add_argument(flag, action="store_true")
        else:
            p.add_argument(flag, type=types[spec["type"]], choices=spec.get("choices"),
                           default=spec["default"], required=flag == "--model-path")
    return p


def render(cls, model):
    """SGLang's exposition of what the stand-in observed (prometheus_client style labels)."""
    labels = LABELS.format(model=model)
    streaming = labels + ',is_streaming="true"'
    with fake.Metrics.lock:
        done = sum(fake.Metrics.e2e.counts)
        queue = fake.Hist("sglang:queue_time_seconds", BUCKETS["queue"])
        queue.counts[0] = done  # the stand-in never queues a request
        lines = [
            "# TYPE sglang:num_running_reqs gauge",
            f"sglang:num_running_reqs{{{labels}}} {float(fake.Metrics.running)}",
            f"sglang:num_queue_reqs{{{labels}}} 0.0",
            f"sglang:token_usage{{{labels}}} {min(1.0, fake.Metrics.running / 100)}",
            "# TYPE sglang:generation_tokens_total counter",
            f"sglang:generation_tokens_total{{{streaming}}} {float(fake.Metrics.tokens)}",
            f"sglang:num_requests_total{{{streaming}}} {float(done)}",
            f"sglang:num_retracted_requests_total{{{labels}}} 0.0",
        ]
        lines += fake.Metrics.ttft.render(streaming) + fake.Metrics.tpot.render(streaming)
        lines += fake.Metrics.itl.render(labels) + fake.Metrics.e2e.render(streaming)
        lines += queue.render(labels)
    return "\\n".join(lines) + "\\n"


class Handler(fake.Handler):
    info = {}

    def do_GET(self):
        if self.path == "/server_info":
            body = json.dumps(self.info).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_GET()

    def do_POST(self):
        if self.path == "/flush_cache":
            self.send_response(200)
            self.end_headers()
            return
        super().do_POST()


def main():
    args = parser().parse_args(sys.argv[1:])
    record = os.environ.get("FAKE_SGLANG_RECORD")
    if record:
        Path(record).write_text(json.dumps(sys.argv[1:]))
    if not (Path(args.model_path) / "config.json").is_file():
        sys.exit(f"FileNotFoundError: no config.json in {args.model_path}")
    running = args.max_running_requests or 4096
    chunk = args.chunked_prefill_size or 8192
    print("[TP0] Load weight end. elapsed=0.01 s, type=LlamaForCausalLM, avail mem=0.00 GB, "
          "mem usage=0.01 GB.", flush=True)
    print(f"[TP0] max_total_num_tokens=12345, chunked_prefill_size={chunk}, "
          f"max_prefill_tokens=16384, max_running_requests={running}, "
          f"context_len={args.context_length}, available_gpu_mem=0.00 GB", flush=True)
    Handler.info = {"version": "0.0.0-fake-sglang", "page_size": args.page_size or 1,
                    "max_running_requests": running, "chunked_prefill_size": chunk,
                    "schedule_policy": args.schedule_policy, "max_total_num_tokens": 12345,
                    "model_path": args.model_path}
    fake.Metrics.ttft = fake.Hist("sglang:time_to_first_token_seconds", BUCKETS["ttft"])
    fake.Metrics.tpot = fake.Hist("sglang:request_time_per_output_token_seconds", BUCKETS["itl"])
    fake.Metrics.itl = fake.Hist("sglang:inter_token_latency_seconds", BUCKETS["itl"])
    fake.Metrics.e2e = fake.Hist("sglang:e2e_request_latency_seconds", BUCKETS["e2e"])
    fake.Metrics.render = classmethod(render)
    fake.Handler = Handler
    if not args.enable_metrics:  # SGLang serves no series without --enable-metrics
        os.environ["FAKE_SERVER_NO_METRICS"] = "1"
    sys.argv = [sys.argv[0], args.model_path, "--port", str(args.port), "--host", args.host,
                "--served-model-name", args.served_model_name or args.model_path]
    fake.main()


if __name__ == "__main__":
    main()
'''


@pytest.fixture(scope="module")
def sglang_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the stand-in ``sglang`` package (to put on ``PYTHONPATH``)."""
    root = tmp_path_factory.mktemp("fake-sglang")
    package = root / "sglang"
    package.mkdir()
    (package / "__init__.py").write_text('"""Stand-in SGLang package for CPU tests."""\n')
    (package / "launch_server.py").write_text(LAUNCH_SERVER)
    (package / "stand_in.json").write_text(json.dumps({
        "fake_dir": str(HERE), "flags": SERVER_ARGS,
        "buckets": {"ttft": TTFT_BUCKETS, "e2e": E2E_BUCKETS, "itl": ITL_BUCKETS,
                    "queue": QUEUE_BUCKETS}}))
    return root


@pytest.fixture
def fake_sglang(sglang_package: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-in importable here (``check_available``) and in every child process (the
    server, an isolated trial), started by the target's default command."""
    monkeypatch.delenv(sglang_target.COMMAND_ENV, raising=False)
    monkeypatch.syspath_prepend(str(sglang_package))
    inherited = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(sglang_package), *([inherited] if inherited else [])]))
    return sglang_package


def small_workload(**target_params: Any) -> Workload:
    return load_preset(
        "chat", model="tiny-llama", n_requests=6, warmup_requests=2,
        arrival={"process": "poisson", "rate_rps": 50.0},
        prompt_len={"dist": "uniform", "low": 8, "high": 32},
        output_len={"dist": "uniform", "low": 4, "high": 12}).with_params(**target_params)


def no_leftovers(marker: str) -> bool:
    return not [p for p in psutil.process_iter(["cmdline"])
                if marker in " ".join(p.info["cmdline"] or [])]


def test_sglang_target_runs_a_whole_trial(fake_sglang: Path, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    record, requests = tmp_path / "argv.json", tmp_path / "requests.jsonl"
    monkeypatch.setenv("FAKE_SGLANG_RECORD", str(record))
    monkeypatch.setenv("FAKE_SERVER_RECORD", str(requests))
    target = SglangTarget()
    target.check_available()  # the stand-in package is importable
    config = {"page_size": 16, "max_running_requests_auto": False, "max_running_requests": 64,
              "schedule_policy": "lpm", "kv_cache_dtype": "fp8_e4m3"}
    m = target.run(config, small_workload(), tmp_path / "cache")
    assert m.metrics["failed_requests"] == 0 and m.metrics["output_tokens_per_s"] > 0
    assert m.metrics["ttft_p95_ms"] > 0 and m.metrics["e2e_p50_ms"] >= m.metrics["ttft_p50_ms"]
    argv = m.details["argv"]
    assert argv[:3] == [sys.executable, "-m", "sglang.launch_server"]
    assert json.loads(record.read_text()) == argv[3:]
    model_dir = tmp_path / "cache" / "models" / "tiny-llama"
    assert argv[argv.index("--model-path") + 1] == str(model_dir)
    assert argv[argv.index("--context-length") + 1] == "256"
    assert argv[argv.index("--max-running-requests") + 1] == "64"
    assert argv[argv.index("--page-size") + 1] == "16"
    assert argv[argv.index("--schedule-policy") + 1] == "lpm"
    assert "--enable-metrics" in argv and argv[argv.index("--load-format") + 1] == "dummy"
    # SGLang's own series were scraped and the gate compared them with the client.
    server = m.details["server_metrics"]
    assert server["source"] == "sglang" and server["ttft"]["count"] == 6
    assert server["e2e"]["count"] == 6 and server["generation_tokens_delta"] > 0
    assert server["finished_requests_delta"] == 6
    assert server["buckets_s"]["ttft"] == [float(b) for b in TTFT_BUCKETS]
    assert set(server["gauges"]) >= {"running", "waiting", "kv_cache_usage"}
    assert m.details["validity"] in CHECKED and m.details["prefix_cache_reset"] is True
    # What SGLang resolved and reported about itself is kept with the trial.
    assert m.details["engine_resolved"]["max_running_requests"] == 64
    assert m.details["engine_resolved"]["max_total_num_tokens"] == 12345
    assert m.details["kv_cache_tokens"] == 12345
    assert m.details["max_running_requests_resolved"] == 64
    assert m.details["engine_version_reported"] == "0.0.0-fake-sglang"
    assert m.engine_versions["sglang"] == "0.0.0-fake-sglang"
    assert m.metrics["weights_mb"] == pytest.approx(0.01 * 1024)
    assert "mem usage=0.01 GB" in m.details["engine_log_tail"]
    bodies = [json.loads(line)["body"] for line in requests.read_text().splitlines()]
    assert len(bodies) == 8 and all(b["ignore_eos"] is True and b["model"] == "tiny-llama"
                                    for b in bodies)
    json.dumps(m.to_dict())  # storable


def test_sglang_trial_runs_isolated_and_leaves_no_server(fake_sglang: Path,
                                                         tmp_path: Path) -> None:
    outcome = run_isolated("sglang", {}, small_workload(), tmp_path / "cache", timeout_s=120)
    assert outcome.ok, outcome.reason
    assert outcome.measurement is not None and outcome.measurement.metrics["requests_per_s"] > 0
    assert no_leftovers(str(fake_sglang))
    assert no_leftovers("sglang.launch_server")


def test_a_flag_sglang_lacks_is_a_rejected_config_in_its_words(
        fake_sglang: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_SGLANG_UNKNOWN_FLAG", "--page-size")
    outcome = run_isolated("sglang", {}, small_workload(), tmp_path / "cache", timeout_s=120)
    assert outcome.error_type == "rejected"
    assert re.fullmatch(r"SGLang rejected the configuration: unrecognized arguments: "
                        r"--page-size 1", outcome.reason or ""), outcome.reason


def test_an_infeasible_sglang_config_never_starts_it(fake_sglang: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    record = tmp_path / "argv.json"
    monkeypatch.setenv("FAKE_SGLANG_RECORD", str(record))
    outcome = run_isolated("sglang", {"disable_radix_cache": True, "schedule_policy": "lpm"},
                           small_workload(), tmp_path / "cache", timeout_s=120)
    assert outcome.error_type == "rejected" and "runs fcfs instead" in (outcome.reason or "")
    assert not record.exists()


def test_a_failed_start_names_its_root_cause(fake_sglang: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_SERVER_CRASH", "Not enough memory. Please try to increase "
                                            "--mem-fraction-static.")
    outcome = run_isolated("sglang", {}, small_workload(), tmp_path / "cache", timeout_s=120)
    assert outcome.error_type == "engine_start"
    assert (outcome.reason or "").startswith(
        "SGLang failed to start: ValueError: Not enough memory.")


# -- the Target contract, on the stand-in server ------------------------------------------------

class TestSglangTargetOnFakeEngine(TargetContract):
    @pytest.fixture
    def target(self, fake_sglang: Path) -> Target:
        return SglangTarget()

    @pytest.fixture
    def workload(self) -> Workload:
        return small_workload()

"""TGI launch: every knob of search_spaces/tgi.yaml becomes a text-generation-launcher option or
an environment variable TGI reads, with TGI's own names, values and defaults as read in its
source; what TGI refuses is refused before a start with TGI's reason; its refusals, start-up
facts and Prometheus series are read in TGI's own formats."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest

from advisor.errors import ConfigRejectedError, EngineUnavailableError
from objectives.llm.server_metrics import snapshot_from_text
from objectives.registry import get_target, metrics_for_target
from objectives.targets.openai_target import KNOWN_VOCABULARIES
from objectives.targets.tgi_target import (
    COMMAND_ENV,
    DEFAULT_COMMAND,
    TGI_METRICS,
    TGITarget,
    build_launch,
    check_feasible,
    engine_env_names,
    launch_env,
    rejection_reason,
    startup_facts,
)
from search_spaces import load_space
from search_spaces.knobs import Knob

SPACE = load_space("tgi")

# -- names copied from TGI v3.3.7 (commit dfb3fbe78e0d1d69251bd33065591c61bafdfaa8) -------------

#: launcher/src/main.rs, `struct Args`, field by field. clap derive's `long` turns a field into
#: `--field-name`; `env` makes it readable from `FIELD_NAME` too.
ARGS_FIELDS = (
    "model_id", "revision", "validation_workers", "sharded", "num_shard", "quantize", "speculate",
    "dtype", "kv_cache_dtype", "trust_remote_code", "max_concurrent_requests", "max_best_of",
    "max_stop_sequences", "max_top_n_tokens", "max_input_tokens", "max_input_length",
    "max_total_tokens", "waiting_served_ratio", "max_batch_prefill_tokens",
    "max_batch_total_tokens", "max_waiting_tokens", "max_batch_size", "cuda_graphs", "hostname",
    "port", "prometheus_port", "shard_uds_path", "master_addr", "master_port",
    "huggingface_hub_cache", "weights_cache_override", "disable_custom_kernels",
    "cuda_memory_fraction", "rope_scaling", "rope_factor", "json_output", "otlp_endpoint",
    "otlp_service_name", "cors_allow_origin", "api_key", "watermark_gamma", "watermark_delta",
    "ngrok", "ngrok_authtoken", "ngrok_edge", "tokenizer_config_path", "disable_grammar_support",
    "env", "max_client_batch_size", "lora_adapters", "usage_stats", "payload_limit",
    "enable_prefill_logprobs", "graceful_termination_timeout",
)
LAUNCHER_FLAGS = {"--" + name.replace("_", "-") for name in ARGS_FIELDS}
#: The value enums as clap names them (ValueEnum: kebab-case variants, or #[clap(name = ...)]).
QUANTIZATION = {"awq", "compressed-tensors", "eetq", "exl2", "gptq", "marlin", "bitsandbytes",
                "bitsandbytes-nf4", "bitsandbytes-fp4", "fp8"}
DTYPE = {"float16", "bfloat16"}
KV_CACHE_DTYPE = {"fp8_e4m3fn", "fp8_e5m2"}
USAGE_STATS = {"on", "off", "no-stack"}
#: Variables the launcher or the shards read (main.rs resolve_attention; models/globals.py),
#: with the ATTENTION values globals.py accepts (`_expected`).
ENV_VARIABLES = {"ATTENTION", "PREFIX_CACHING", "PREFILL_CHUNKING"}
ATTENTION = {"paged", "flashdecoding", "flashdecoding-ipex", "flashinfer"}
#: `#[clap(default_value = ...)]` of the mapped options, the cuda-graphs list `main` uses when
#: the option is absent, and PREFILL_CHUNKING's os.getenv default.
SOURCE_DEFAULTS: dict[str, Any] = {
    "--max-concurrent-requests": 128, "--waiting-served-ratio": 0.3,
    "--max-waiting-tokens": 20, "--cuda-memory-fraction": 1.0,
    "--cuda-graphs": "1,2,4,8,16,32", "PREFILL_CHUNKING": True,
}
#: Options whose Args type is Option<...> without a default: TGI picks when they are absent.
NO_DEFAULT = {"--max-batch-total-tokens", "--max-batch-prefill-tokens", "--quantize", "--dtype",
              "--kv-cache-dtype", "--num-shard", "ATTENTION", "PREFIX_CACHING"}
#: backends/v3/src/lib.rs and router/src/server.rs: the series the vocabulary names.
TGI_SERIES = {"tgi_request_duration", "tgi_request_queue_duration",
              "tgi_request_generated_tokens", "tgi_request_success", "tgi_batch_current_size",
              "tgi_queue_size"}


def launch(config: dict[str, Any], **kw: Any) -> Any:
    defaults: dict[str, Any] = dict(model_id="/models/tiny-llama", port=8123, max_model_len=2048)
    return build_launch(config, **{**defaults, **kw})


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


def mapped(knob: Knob) -> str:
    flag = knob.flag_for(None)
    assert flag is not None
    return flag


def test_every_mapped_name_exists_in_the_source() -> None:
    flags = {mapped(k) for k in SPACE if k.flags}
    assert flags <= LAUNCHER_FLAGS | ENV_VARIABLES, flags - LAUNCHER_FLAGS - ENV_VARIABLES
    for knob in SPACE:
        if knob.name == "quantize":
            assert set(knob.choices) - {"none"} <= QUANTIZATION
        elif knob.name == "dtype":
            assert set(knob.choices) - {"auto"} <= DTYPE
        elif knob.name == "kv_cache_dtype":
            assert set(knob.choices) - {"auto"} <= KV_CACHE_DTYPE
        elif knob.name == "attention":
            assert set(knob.choices) - {"auto"} <= ATTENTION
    fixed = [a for a in launch({}).argv if a.startswith("--")]
    assert set(fixed) <= LAUNCHER_FLAGS


def test_defaults_are_the_engines() -> None:
    for knob in SPACE:
        if not knob.flags:
            assert knob.default is True, knob.name  # every gate leaves the value to TGI
            continue
        flag = mapped(knob)
        if flag in SOURCE_DEFAULTS:
            assert knob.default == SOURCE_DEFAULTS[flag], knob.name
        elif knob.when:
            pass  # behind a gate that defaults to "TGI picks"
        elif flag in NO_DEFAULT and knob.name != "num_shard":
            assert knob.default in ("auto", "none"), knob.name
    # Left to TGI by default: none of those options or variables is set.
    argv, env = launch({}).argv, launch({}).env
    assert not {"--max-batch-total-tokens", "--max-batch-prefill-tokens", "--quantize", "--dtype",
                "--kv-cache-dtype"} & set(argv)
    assert env == {"PREFILL_CHUNKING": "1"}


@pytest.mark.parametrize("knob", [k for k in SPACE if k.flags], ids=lambda k: k.name)
def test_every_knob_value_lands_in_its_option_or_variable(knob: Knob) -> None:
    flag = mapped(knob)
    for value in values(knob):
        result = launch({**enabling(knob), knob.name: value})
        left_out = knob.type == "categorical" and value in ("auto", "none")
        if flag.startswith("--"):
            if left_out:
                assert flag not in result.argv
                continue
            assert result.argv.count(flag) == 1
            got = result.argv[result.argv.index(flag) + 1]
            if knob.type == "float":
                assert float(got) == pytest.approx(value)
            else:
                assert got == str(int(value) if knob.type == "int" else value)
        elif left_out:
            assert flag not in result.env
        elif knob.type == "bool" or value in ("on", "off"):
            # TGI tests these against {"1", "true"} (globals.py).
            assert result.env[flag] == ("1" if value in (True, "on") else "0")
        else:
            assert result.env[flag] == str(value)


def test_fixed_arguments_follow_the_workload_context() -> None:
    argv = launch({}, max_model_len=4096).argv
    assert argv[argv.index("--model-id") + 1] == "/models/tiny-llama"
    assert argv[argv.index("--port") + 1] == "8123"
    assert argv[argv.index("--hostname") + 1] == "127.0.0.1"
    # main.rs refuses max_input_tokens >= max_total_tokens.
    assert argv[argv.index("--max-input-tokens") + 1] == "4095"
    assert argv[argv.index("--max-total-tokens") + 1] == "4096"


def test_gates_turn_the_budgets_on() -> None:
    assert "--max-batch-total-tokens" not in launch({}).argv
    on = launch({"max_batch_total_tokens_auto": False, "max_batch_total_tokens": 100000}).argv
    assert on[on.index("--max-batch-total-tokens") + 1] == "100000"
    with pytest.raises(ConfigRejectedError, match="only applies when"):
        launch({"max_batch_total_tokens": 100000})
    with pytest.raises(ConfigRejectedError, match="only applies when"):
        launch({"waiting_served_ratio": 1.0})  # ignored by TGI with prefill chunking on
    off = launch({"prefill_chunking": False, "waiting_served_ratio": 1.2}).argv
    assert off[off.index("--waiting-served-ratio") + 1] == "1.2"


def test_inherited_tgi_variables_are_cleared(monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    names = engine_env_names()
    assert {"MAX_BATCH_TOTAL_TOKENS", "MAX_BATCH_PREFILL_TOKENS", "QUANTIZE", "DTYPE",
            "KV_CACHE_DTYPE", "ATTENTION", "PREFIX_CACHING", "PREFILL_CHUNKING"} <= names
    assert {name.upper() for name in ARGS_FIELDS} | ENV_VARIABLES >= names
    monkeypatch.setenv("MAX_BATCH_TOTAL_TOKENS", "1")
    monkeypatch.setenv("ATTENTION", "paged")
    monkeypatch.setenv("KEEP_ME", "yes")
    target = TGITarget()
    served = target.load_served(target.default_workload().with_params(model="tiny-llama"),
                                tmp_path)
    env = target.server_env(served)
    assert env is not None
    assert "MAX_BATCH_TOTAL_TOKENS" not in env and "ATTENTION" not in env
    assert env["KEEP_ME"] == "yes" and env["HF_HUB_OFFLINE"] == "1"


@pytest.mark.parametrize(("config", "max_model_len", "reason"), [
    ({"attention": "paged", "prefix_caching": "on", "prefill_chunking": False}, 2048,
     "Prefix caching is only supported with flashinfer"),
    ({"attention": "paged"}, 2048, "with paged attention TGI turns it off"),
    ({"dtype": "float16", "quantize": "fp8"}, 2048, "Only 1 can be set between"),
    ({"max_batch_total_tokens_auto": False, "max_batch_total_tokens": 4096}, 8192,
     "`max_total_tokens` > `max_batch_total_tokens`"),
    ({"max_batch_total_tokens_auto": False, "max_batch_total_tokens": 8192,
      "max_batch_prefill_tokens_auto": False, "max_batch_prefill_tokens": 16384}, 2048,
     "must be at most max_batch_total_tokens"),
    ({"prefill_chunking": False, "max_batch_prefill_tokens_auto": False,
      "max_batch_prefill_tokens": 1024}, 2048, r"at least max_input_tokens \(2047\)"),
])
def test_what_tgi_refuses_is_rejected_before_a_start(config: dict[str, Any], max_model_len: int,
                                                     reason: str) -> None:
    clean = SPACE.validate_config(config, fill_defaults=True)
    with pytest.raises(ConfigRejectedError, match=reason):
        check_feasible(clean, max_model_len)


def test_what_tgi_accepts_is_not_rejected() -> None:
    for config in ({}, {"dtype": "bfloat16", "quantize": "bitsandbytes-nf4"},
                   {"max_batch_prefill_tokens_auto": False, "max_batch_prefill_tokens": 512},
                   {"attention": "paged", "prefix_caching": "off", "prefill_chunking": False}):
        check_feasible(SPACE.validate_config(config, fill_defaults=True), 2048)


def test_tgis_own_refusals_are_read() -> None:
    clap = ("error: invalid value 'abc' for '--max-concurrent-requests "
            "<MAX_CONCURRENT_REQUESTS>': invalid digit found in string\n\n"
            "For more information, try '--help'.\n")
    assert rejection_reason(clap, 2) == ("invalid value 'abc' for '--max-concurrent-requests "
                                         "<MAX_CONCURRENT_REQUESTS>': invalid digit found in "
                                         "string")
    launcher = ('2025-12-18T10:00:00Z  INFO text_generation_launcher: Args { .. }\n'
                'Error: ArgumentValidation("`max_input_tokens`(4095) must be < '
                '`max_total_tokens`(2048)")\n')
    assert rejection_reason(launcher, 1) == ("`max_input_tokens`(4095) must be < "
                                             "`max_total_tokens`(2048)")
    router = ("Error: ArgumentValidation(\"`max_batch_prefill_tokens` must be >= "
              "`max_input_tokens`. Given: 1024 and 2047\")\n"
              "2025-12-18T10:00:01Z ERROR text_generation_launcher: Webserver Crashed\n"
              "Error: WebserverFailed\n")
    assert rejection_reason(router, 1) == ("`max_batch_prefill_tokens` must be >= "
                                           "`max_input_tokens`. Given: 1024 and 2047")
    shard = ('  File "/opt/conda/lib/python3.11/site-packages/text_generation_server/cli.py"\n'
             "RuntimeError: Only 1 can be set between `dtype` and `quantize`, as they both "
             "decide how goes the final model.\n"
             "ERROR text_generation_launcher: Shard 0 failed to start\nError: ShardCannotStart\n")
    reason = rejection_reason(shard, 1)
    assert reason is not None and reason.startswith("Only 1 can be set between `dtype`")
    assert rejection_reason("torch.OutOfMemoryError: CUDA out of memory.\n"
                            "Error: ShardCannotStart\n", 1) is None
    assert rejection_reason(clap, 1) is None  # "error:" without clap's exit code 2


def test_start_up_facts_name_what_tgi_chose() -> None:
    log = ("2025-12-18T10:00:00Z  INFO text_generation_launcher: Default `max_batch_prefill_tokens`"
           " to 4096\n"
           "2025-12-18T10:00:00Z  INFO text_generation_launcher: Using attention flashinfer - "
           "Prefix caching true\n"
           "2025-12-18T10:00:05Z  INFO text_generation_launcher: Using prefill chunking = True\n"
           "2025-12-18T10:00:09Z  INFO text_generation_router_v3: backends/v3/src/lib.rs:137: "
           "Setting max batch total tokens to 311024\n")
    assert startup_facts(log) == {
        "attention_resolved": "flashinfer", "prefix_caching_resolved": "true",
        "prefill_chunking_resolved": "True", "max_batch_prefill_tokens_resolved": 4096,
        "max_batch_total_tokens_resolved": 311024}


def test_the_vocabulary_reads_tgis_exposition() -> None:
    names = {TGI_METRICS.e2e, TGI_METRICS.queue, TGI_METRICS.finished_requests,
             TGI_METRICS.running, TGI_METRICS.waiting}
    assert names <= TGI_SERIES
    assert TGI_METRICS.generation_tokens == "tgi_request_generated_tokens_sum"
    assert TGI_METRICS.ttft is None and TGI_METRICS.tpot is None  # TGI has neither
    # metrics-exporter-prometheus's rendering: no labels, buckets 0.0001 * 1.5^k.
    text = "\n".join([
        "# TYPE tgi_request_duration histogram",
        'tgi_request_duration_bucket{le="0.00015"} 0', 'tgi_request_duration_bucket{le="0.5"} 3',
        'tgi_request_duration_bucket{le="+Inf"} 4', "tgi_request_duration_sum 2.5",
        "tgi_request_duration_count 4",
        'tgi_request_generated_tokens_bucket{le="+Inf"} 4', "tgi_request_generated_tokens_sum 64",
        "tgi_request_generated_tokens_count 4", "tgi_request_success 4",
        "tgi_batch_current_size 2", "tgi_queue_size 1", ""])
    snapshot = snapshot_from_text(text, TGI_METRICS, taken_s=0.0)
    assert snapshot.histograms["e2e"].count == 4 and snapshot.histograms["e2e"].mean == 0.625
    assert snapshot.counters == {"generation_tokens": 64.0, "finished_requests": 4.0}
    assert snapshot.gauges == {"running": 2.0, "waiting": 1.0}
    assert KNOWN_VOCABULARIES["tgi"] is TGI_METRICS  # the openai target can name it


def test_launch_command_is_one_paste_ready_line() -> None:
    target = TGITarget()
    workload = target.default_workload().with_params(model="llama-3-8b")
    text = target.launch_command({"attention": "flashdecoding", "prefill_chunking": False},
                                 workload)
    assert "\n" not in text
    words = shlex.split(text)
    assert words[:2] == ["ATTENTION=flashdecoding", "PREFILL_CHUNKING=0"]
    assert words[2] == "text-generation-launcher"
    assert words[words.index("--model-id") + 1] == "meta-llama/Meta-Llama-3-8B"
    assert "--usage-stats" not in words  # the trials' plumbing is not part of a deployment
    assert launch_env({"prefix_caching": "off"}) == {"PREFIX_CACHING": "0",
                                                     "PREFILL_CHUNKING": "1"}


def test_registered_unavailable_in_one_line_and_catalogued(
        monkeypatch: pytest.MonkeyPatch) -> None:
    target = get_target("tgi")
    assert isinstance(target, TGITarget) and target.space().target == "tgi"
    assert metrics_for_target("tgi") and target.reported_metrics()
    monkeypatch.delenv(COMMAND_ENV, raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(EngineUnavailableError) as missing:
        target.check_available()
    message = str(missing.value)
    assert "\n" not in message
    assert "not installable from the package registries this project reaches" in message
    assert DEFAULT_COMMAND == ("text-generation-launcher",)
    monkeypatch.setenv(COMMAND_ENV, '["docker", "run", "tgi"]')
    target.check_available()  # a wrapper is enough
    assert target.engine_versions() == {"tgi": "unknown"}
    assert target.with_memory_share({}, 0.5)["cuda_memory_fraction"] == 0.5

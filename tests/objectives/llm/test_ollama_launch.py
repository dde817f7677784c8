"""Ollama launch: every knob of search_spaces/ollama.yaml becomes an OLLAMA_* variable of
`ollama serve`, a PARAMETER line of the Modelfile or an `ollama create` option, with Ollama's own
names, values and defaults as read in its source; what Ollama (or its llama.cpp) refuses or
silently changes is refused before a start; its refusals are read in its own format."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest

from advisor.errors import ConfigRejectedError, EngineUnavailableError
from objectives.llm.server import ModelSource
from objectives.registry import get_target
from objectives.targets.ollama_target import (
    COMMAND_ENV,
    FIXED_ENV,
    OllamaTarget,
    build_launch,
    check_feasible,
    model_name_for,
    model_source,
    rejection_reason,
    server_environment,
)
from search_spaces import load_space
from search_spaces.knobs import Knob

SPACE = load_space("ollama")

# -- names copied from Ollama v0.32.15 (commit b7871fc0d1d82fe109536efa3e0e8e411c766c75) --------

#: envconfig/config.go: every OLLAMA_* variable it reads.
ENVCONFIG = {
    "OLLAMA_AUTH", "OLLAMA_CONTEXT_LENGTH", "OLLAMA_DEBUG", "OLLAMA_DEBUG_LOG_REQUESTS",
    "OLLAMA_EDITOR", "OLLAMA_FLASH_ATTENTION", "OLLAMA_GO_TEMPLATE", "OLLAMA_GPU_OVERHEAD",
    "OLLAMA_HOST", "OLLAMA_IGPU_ENABLE", "OLLAMA_KEEP_ALIVE", "OLLAMA_KV_CACHE_TYPE",
    "OLLAMA_LLM_LIBRARY", "OLLAMA_LOAD_TIMEOUT", "OLLAMA_MAX_LOADED_MODELS", "OLLAMA_MAX_QUEUE",
    "OLLAMA_MAX_TRANSFER_STREAMS", "OLLAMA_MODELS", "OLLAMA_NOHISTORY", "OLLAMA_NOPRUNE",
    "OLLAMA_NO_CLOUD", "OLLAMA_NUM_PARALLEL", "OLLAMA_ORIGINS", "OLLAMA_REMOTES",
    "OLLAMA_SCHED_SPREAD", "OLLAMA_VULKAN",
}
#: envconfig defaults: NumParallel = Uint(..., 1), MaxQueue = Uint(..., 512); FlashAttention
#: unset = the device decides; KvCacheType "" = llama-server's f16.
ENV_DEFAULTS: dict[str, Any] = {"OLLAMA_NUM_PARALLEL": 1, "OLLAMA_MAX_QUEUE": 512,
                                "OLLAMA_FLASH_ATTENTION": "auto", "OLLAMA_KV_CACHE_TYPE": "f16"}
#: api/types.go: the json tags of `Runner` and `Options` (a Modelfile PARAMETER is one of them).
RUNNER = {"num_ctx", "num_batch", "num_gpu", "main_gpu", "use_mmap", "num_thread",
          "draft_num_predict"}
OPTIONS = {"num_keep", "seed", "num_predict", "top_k", "top_p", "min_p", "typical_p",
           "repeat_last_n", "temperature", "repeat_penalty", "presence_penalty",
           "frequency_penalty", "stop"}
#: api.DefaultOptions: NumBatch 512, NumThread 0 (num_ctx's default is the VRAM tier's).
PARAMETER_DEFAULTS = {"num_batch": 512, "num_thread": 0}
#: Go's strconv.ParseBool (how envconfig reads OLLAMA_FLASH_ATTENTION).
PARSE_BOOL = {"1", "t", "T", "TRUE", "true", "True", "0", "f", "F", "FALSE", "false", "False"}
#: fs/ggml/type.go ParseFileType (`ollama create --quantize`; the server upper-cases it).
FILE_TYPES = {"F32", "F16", "Q8_0", "Q4_K_S", "Q4_K_M", "Q4_K", "BF16"}
#: docs/faq.mdx: the K/V cache types.
KV_CACHE_TYPES = {"f16", "q8_0", "q4_0"}
#: cmd/cmd.go: the options of `ollama create`.
CREATE_OPTIONS = {"--file", "-f", "--quantize", "-q", "--draft-quantize"}


def launch(config: dict[str, Any], **kw: Any) -> Any:
    defaults: dict[str, Any] = dict(source="/models/tiny-llama.gguf",
                                    model_name="advisor-tiny-llama")
    return build_launch(config, **{**defaults, **kw})


def enabling(knob: Knob) -> dict[str, Any]:
    return {name: allowed[0] for name, allowed in knob.when.items()}


def values(knob: Knob) -> list[Any]:
    if knob.type == "categorical":
        return list(knob.choices)
    if knob.type == "bool":
        return [False, True]
    low, high = knob.bounds({})
    return [int(low), int(high), int(knob.default)]


def mapped(knob: Knob) -> str:
    flag = knob.flag_for(None)
    assert flag is not None
    return flag


def test_every_mapped_name_exists_in_the_source() -> None:
    for knob in SPACE:
        if not knob.flags:
            continue
        flag = mapped(knob)
        if flag.startswith("OLLAMA_"):
            assert flag in ENVCONFIG, flag
        elif flag.startswith("PARAMETER "):
            assert flag.split(" ", 1)[1] in RUNNER | OPTIONS, flag
        else:
            assert flag in CREATE_OPTIONS, flag
    assert set(FIXED_ENV) <= ENVCONFIG
    assert set(SPACE.knob("quantize").choices) - {"none"} <= FILE_TYPES
    assert set(SPACE.knob("kv_cache_type").choices) <= KV_CACHE_TYPES


def test_defaults_are_the_engines() -> None:
    for knob in SPACE:
        if not knob.flags:
            assert knob.default is True, knob.name  # every gate leaves the value to Ollama
            continue
        flag = mapped(knob)
        if flag in ENV_DEFAULTS:
            assert knob.default == ENV_DEFAULTS[flag], knob.name
        elif flag.startswith("PARAMETER ") and flag[10:] in PARAMETER_DEFAULTS:
            assert knob.default == PARAMETER_DEFAULTS[flag[10:]], knob.name
    default = launch({})
    assert "OLLAMA_FLASH_ATTENTION" not in default.env  # auto: unset
    assert "num_batch" not in default.parameters  # automatic batch: not written
    assert default.create_options == []  # the F16 source is kept


@pytest.mark.parametrize("knob", [k for k in SPACE if k.flags], ids=lambda k: k.name)
def test_every_knob_value_lands_in_its_place(knob: Knob) -> None:
    flag = mapped(knob)
    for value in values(knob):
        result = launch({**enabling(knob), knob.name: value})
        left_out = knob.type == "categorical" and value in ("auto", "none")
        if flag.startswith("OLLAMA_"):
            if left_out:
                assert flag not in result.env
            elif value in ("on", "off"):
                assert result.env[flag] == {"on": "1", "off": "0"}[value]
                assert result.env[flag] in PARSE_BOOL  # "on"/"off" would not parse: true
            else:
                assert result.env[flag] == str(value)
        elif flag.startswith("PARAMETER "):
            name = flag.split(" ", 1)[1]
            assert f"PARAMETER {name} {value}\n" in result.modelfile()
            assert result.parameters[name] == str(value)
        else:
            if left_out:
                assert flag not in result.create_options
                continue
            i = result.create_options.index(flag)
            assert result.create_options[i + 1] == value


def test_the_modelfile_and_commands(tmp_path: Path) -> None:
    result = launch({"num_ctx": 8192, "num_batch_auto": False, "num_batch": 256,
                     "quantize": "Q8_0"})
    assert result.modelfile() == ("FROM /models/tiny-llama.gguf\nPARAMETER num_ctx 8192\n"
                                  "PARAMETER num_batch 256\nPARAMETER num_thread 0\n")
    assert result.create_args(tmp_path / "Modelfile") == [
        "create", "advisor-tiny-llama", "-f", str(tmp_path / "Modelfile"), "--quantize", "Q8_0"]
    with pytest.raises(ConfigRejectedError, match="only applies when"):
        launch({"num_batch": 256})  # the gate is off by default
    assert model_name_for("My Model/v2") == "advisor-my-model-v2"


def test_server_environment_clears_inherited_ollama_variables() -> None:
    result = launch({"num_parallel": 4, "flash_attention": "on"})
    env = server_environment(result, host="127.0.0.1:5555", models_dir="/tmp/m",
                             base={"OLLAMA_NUM_PARALLEL": "99", "OLLAMA_CONTEXT_LENGTH": "2048",
                                   "PATH": "/usr/bin"})
    assert env["OLLAMA_NUM_PARALLEL"] == "4" and env["OLLAMA_FLASH_ATTENTION"] == "1"
    assert "OLLAMA_CONTEXT_LENGTH" not in env  # num_ctx in the Modelfile is the context
    assert env["OLLAMA_HOST"] == "127.0.0.1:5555" and env["OLLAMA_MODELS"] == "/tmp/m"
    assert env["OLLAMA_KEEP_ALIVE"] == "-1" and env["PATH"] == "/usr/bin"
    assert {k for k in env if k.startswith("OLLAMA_")} <= ENVCONFIG


@pytest.mark.parametrize(("config", "kwargs", "reason"), [
    ({"num_ctx": 1024}, {}, r"num_ctx \(1024\) must hold the workload's longest request"),
    ({"num_ctx": 16384}, {"model_context": 4096}, "training context"),
    ({"kv_cache_type": "q8_0", "flash_attention": "off"}, {}, "needs flash attention"),
])
def test_what_ollama_refuses_or_changes_is_rejected(config: dict[str, Any],
                                                    kwargs: dict[str, Any], reason: str) -> None:
    clean = SPACE.validate_config(config, fill_defaults=True)
    with pytest.raises(ConfigRejectedError, match=reason):
        check_feasible(clean, 2048, **kwargs)
    for fine in ({}, {"kv_cache_type": "q4_0"}, {"kv_cache_type": "f16", "flash_attention": "off"}):
        check_feasible(SPACE.validate_config(fine, fill_defaults=True), 2048, model_context=4096)


def test_ollamas_own_refusals_are_read() -> None:
    for message in ("unknown parameter 'num_ctxx'", "invalid int value [abc]",
                    "unsupported quantization type Q3 - supported types are F32, F16, Q4_K_S, "
                    "Q4_K_M, Q8_0"):
        output = f"gathering model components\nError: {message}\n"
        assert rejection_reason(output, 1) == message
    assert rejection_reason("Error: open /m.gguf: no such file or directory\n", 1) is None
    load = ("llama runner process has terminated: llama_init_from_model: V cache quantization "
            "requires flash_attn")
    assert rejection_reason(load, None) == "V cache quantization requires flash_attn"
    assert rejection_reason("quantized V cache was requested, but this requires Flash Attention",
                            None)


@pytest.mark.usefixtures("needs_gguf")
def test_a_shape_is_served_from_its_random_weight_gguf(tmp_path: Path) -> None:
    target = OllamaTarget()
    served = target.load_served(target.default_workload().with_params(model="tiny-llama"),
                                tmp_path)
    path = model_source(served.model)
    assert path.suffix == ".gguf" and path.parent == served.model.path and path.is_file()
    local = tmp_path / "local"
    local.mkdir()
    (local / "only.gguf").write_bytes(b"GGUF")
    assert model_source(ModelSource(local, None, 10, None)) == local / "only.gguf"
    (local / "other.gguf").write_bytes(b"GGUF")
    assert model_source(ModelSource(local, None, 10, None)) == local  # Ollama picks from a dir


def test_launch_command_is_paste_ready() -> None:
    target = OllamaTarget()
    text = target.launch_command({"num_parallel": 4, "quantize": "Q4_K_M"},
                                 target.default_workload().with_params(model="tiny-llama"))
    lines = text.splitlines()
    assert lines[0] == "cat > Modelfile <<'EOF'"
    end = lines.index("EOF")
    assert lines[1].startswith("FROM ./tiny-llama.gguf")
    assert "PARAMETER num_ctx 4096" in lines[1:end]
    serve = shlex.split(lines[end + 1].rstrip("&"))
    assert "OLLAMA_NUM_PARALLEL=4" in serve and "OLLAMA_KEEP_ALIVE=-1" in serve
    assert serve[-2:] == ["ollama", "serve"]
    assert shlex.split(lines[-1]) == ["ollama", "create", "advisor-tiny-llama", "-f", "Modelfile",
                                      "--quantize", "Q4_K_M"]


def test_registered_unavailable_in_one_line_and_unchecked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    target = get_target("ollama")
    assert isinstance(target, OllamaTarget) and target.server_metrics is None
    assert target.reported_metrics()
    monkeypatch.delenv(COMMAND_ENV, raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(EngineUnavailableError) as missing:
        target.check_available()
    message = str(missing.value)
    assert "\n" not in message
    assert "not installable from the package registries this project reaches" in message
    monkeypatch.setenv(COMMAND_ENV, "not json")
    with pytest.raises(EngineUnavailableError, match="JSON list"):
        target.check_available()
    assert target.engine_versions() == {"ollama": "unknown"}

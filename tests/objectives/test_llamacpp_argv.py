"""The llamacpp target without a server: knobs to llama-server flags, what is refused before a
start, what is read from the server's log, and the random-weight GGUF files (written with the
gguf package and read back)."""

from __future__ import annotations

import itertools
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from advisor.errors import ConfigRejectedError, WorkloadError
from advisor.objective import Objective
from objectives.llm.gguf_model import (
    SPECIAL_TOKENS,
    TOKENIZER,
    fingerprint,
    merges,
    source_gguf_path,
    tensor_specs,
    vocabulary,
    write_source_gguf,
)
from objectives.llm.models import MODEL_SHAPES
from objectives.llm.serving_target import shared_space
from objectives.llm.workload import CPU_PRESETS, load_preset
from objectives.registry import get_target
from objectives.slo import parse_slo
from objectives.targets.llamacpp_target import (
    CMAKE_ARGS,
    LlamaCppTarget,
    build_argv,
    check_feasible,
    check_kv_types,
    engine_facts,
    rejection_reason,
    server_facts,
)

ROOT = Path(__file__).resolve().parents[2]


def _gguf() -> Any:
    """The gguf package: skipped where it is missing, except in CI, which installs it."""
    if os.environ.get("CI") == "true":
        import gguf

        return gguf
    return pytest.importorskip("gguf")


def _argv(**config: object) -> list[str]:
    return build_argv(config, model_path="/m/tiny.gguf", port=8123, engine_version="0.3.36",
                      served_model_name="tiny-llama", seed=3)


def _value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_the_default_argv_passes_every_knob_but_quant_as_its_flag() -> None:
    space = shared_space("llamacpp")
    argv = _argv()
    defaults = space.default_config()
    for knob in space.knobs:
        flag = knob.flag_for("0.3.36")
        assert flag is not None, knob.name
        if knob.name == "quant":
            continue  # picks the --model file
        if knob.type == "bool":
            assert (flag if defaults[knob.name] else f"--no-{flag[2:]}") in argv
        else:
            assert _value(argv, flag) == str(defaults[knob.name]), knob.name
    assert _value(argv, "--model") == "/m/tiny.gguf"
    assert argv.count("--model") == 1
    assert _value(argv, "--host") == "127.0.0.1" and _value(argv, "--port") == "8123"
    assert _value(argv, "--alias") == "tiny-llama" and _value(argv, "--seed") == "3"
    assert "--metrics" in argv and _value(argv, "--fit") == "off"


def test_sampled_values_reach_their_flags() -> None:
    argv = _argv(quant="Q4_K_M", cache_type_k="q8_0", cache_type_v="bf16", flash_attn="on",
                 ctx_size=2048, parallel=8, kv_unified=False, batch_size=256, ubatch_size=128,
                 threads=1, threads_batch=2)
    assert _value(argv, "--cache-type-k") == "q8_0"
    assert _value(argv, "--cache-type-v") == "bf16"
    assert _value(argv, "--flash-attn") == "on"
    assert _value(argv, "--ctx-size") == "2048" and _value(argv, "--parallel") == "8"
    assert "--no-kv-unified" in argv and "--kv-unified" not in argv
    assert _value(argv, "--batch-size") == "256" and _value(argv, "--ubatch-size") == "128"
    assert _value(argv, "--threads") == "1" and _value(argv, "--threads-batch") == "2"
    assert "Q4_K_M" not in argv  # the type is the file, not a flag


def test_configs_outside_the_space_are_rejected_in_one_line() -> None:
    for bad in ({"quant": "Q3_XYZ"}, {"parallel": 0}, {"batch_size": 256, "ubatch_size": 512},
                {"flash_attn": True}):
        with pytest.raises(ConfigRejectedError) as refused:
            _argv(**bad)
        assert "\n" not in str(refused.value)


def test_a_slot_smaller_than_the_longest_request_is_refused_before_a_start() -> None:
    clean = shared_space("llamacpp").validate_config(
        {"ctx_size": 1024, "parallel": 8, "kv_unified": False}, fill_defaults=True)
    with pytest.raises(ConfigRejectedError, match="at most 128 tokens, fewer than the 256"):
        check_feasible(clean, 256)
    check_feasible({**clean, "kv_unified": True}, 256)  # one shared pool: each may use 1024
    check_feasible({**clean, "parallel": 4}, 256)        # 1024 / 4 = 256 is enough
    with pytest.raises(ConfigRejectedError):
        check_feasible({**clean, "kv_unified": True, "ctx_size": 512}, 768)


def test_a_quantized_v_cache_needs_flash_attention() -> None:
    clean = shared_space("llamacpp").default_config()
    with pytest.raises(ConfigRejectedError, match="needs flash attention"):
        check_feasible({**clean, "cache_type_v": "q8_0", "flash_attn": "off"}, 256)
    check_feasible({**clean, "cache_type_v": "q8_0", "flash_attn": "auto"}, 256)
    check_feasible({**clean, "cache_type_v": "bf16", "flash_attn": "off"}, 256)


def test_quantized_kv_types_must_divide_the_head_dimension() -> None:
    # tiny-llama's heads are 16 wide, llama.cpp's quantized KV blocks 32.
    with pytest.raises(ConfigRejectedError, match="head dimension 16"):
        check_kv_types({"cache_type_k": "q8_0", "cache_type_v": "f16"}, "tiny-llama")
    check_kv_types({"cache_type_k": "bf16", "cache_type_v": "f16"}, "tiny-llama")
    check_kv_types({"cache_type_k": "q4_0", "cache_type_v": "q5_1"}, "llama-3.2-1b")


def test_the_engines_refusals_are_recognised_and_other_failures_are_not() -> None:
    assert rejection_reason("error: invalid argument: --bogus\n", 1) == \
        "invalid argument: --bogus"
    assert rejection_reason('error while handling argument "--flash-attn": error: unknown value '
                            "for --flash-attn: 'maybe'\n", 1).startswith("error: unknown value")
    log = ("llama_init_from_model: K cache type q8_0 with block size 32 does not divide "
           "n_embd_head_k=16\ncommon_init_from_params: failed to create context\n")
    assert rejection_reason(log, 1) == \
        "K cache type q8_0 with block size 32 does not divide n_embd_head_k=16"
    assert rejection_reason("llama_model_load: error loading model: tensor data is not "
                            "within the file bounds\n", 1) is None
    assert rejection_reason("", -9) is None


def test_start_up_facts_are_read_from_the_log_and_the_servers_description() -> None:
    log = ("0.00.020.221 I srv    load_model: initializing, n_slots = 4, n_ctx_slot = 1024, "
           "kv_unified = 'false'\n0.00.024.606 I srv  llama_server: model loaded\n")
    assert engine_facts(log) == {"slots": 4, "ctx_per_slot": 1024, "kv_unified_reported": False}
    assert engine_facts("nothing here") == {}
    # The parts of llama-server's /props and /v1/models answers that are kept (their layout as
    # the server answered on 2026-12-02, abridged).
    props = {"total_slots": 4, "model_ftype": "Q4_K - Medium", "build_info": "b1-0c1e570",
             "default_generation_settings": {"n_ctx": 1024}}
    models = {"object": "list", "data": [{"id": "tiny-llama", "meta": {
        "vocab_type": 3, "n_vocab": 2048, "n_ctx": 1024, "n_ctx_train": 4096, "n_embd": 64,
        "n_params": 205120, "size": 195072, "ftype": "Q4_K - Medium"}}]}
    assert server_facts(props, models) == {
        "llama_cpp_build": "b1-0c1e570", "gguf_file_type": "Q4_K - Medium",
        "model_params": 205120, "model_bytes": 195072, "model_ctx_train": 4096}
    assert server_facts({}, {"data": []}) == {}


def test_the_target_is_registered_and_runs_named_shapes_only(tmp_path: Path) -> None:
    target = get_target("llamacpp")
    assert isinstance(target, LlamaCppTarget)
    assert target.space().target == "llamacpp"
    assert {"ttft_p95_ms", "tpot_p95_ms", "output_tokens_per_s", "weights_mb",
            "bits_per_weight", "peak_memory_mb"} <= target.reported_metrics()
    named = target.named_workloads()
    for name, workload in named.items():
        target.check_workload(workload)
        # The GPU presets shrink to tiny-llama; the CPU presets are sized for the 1B shape.
        expected = "llama-3.2-1b" if name in CPU_PRESETS else "tiny-llama"
        assert workload.params["model"] == expected, name
    assert target.default_workload().name == "chat-1b-cpu" and "chat-1b-cpu" in named
    # The default SLO and objective name metrics the target reports.
    parse_slo(target.default_slo).check_metrics("llamacpp", target.reported_metrics())
    assert Objective.parse(target.default_objective).metric in target.reported_metrics()
    with pytest.raises(WorkloadError, match="named shapes"):
        target.check_workload(target.default_workload().with_params(model=str(tmp_path)))
    command = target.launch_command({"quant": "Q8_0", "parallel": 2},
                                    load_preset("chat", model="llama-3.2-1b"))
    assert command.startswith("llama-server --model models/llama-3.2-1b-Q8_0.gguf ")
    assert "--parallel 2" in command and "--host 0.0.0.0" in command


def test_the_quickstart_builds_llama_cpp_python_with_the_targets_cmake_args() -> None:
    script = (ROOT / "scripts" / "quickstart.sh").read_text()
    match = re.search(r'^LLAMACPP_CMAKE_ARGS="([^"]+)"$', script, re.MULTILINE)
    assert match is not None, "scripts/quickstart.sh sets LLAMACPP_CMAKE_ARGS"
    assert match.group(1) == CMAKE_ARGS


# -- the GGUF files ---------------------------------------------------------------------------

def test_tensor_specs_match_the_shapes_parameter_counts() -> None:
    # Llama-3.2-1B has 1,235,814,400 parameters (tied embeddings; rope_freqs is not a weight).
    params = sum(int(np.prod(s.shape)) for s in tensor_specs("llama-3.2-1b")
                 if s.name != "rope_freqs.weight")
    assert params == 1_235_814_400
    names = [s.name for s in tensor_specs("llama-3-8b")]
    assert "output.weight" in names and "rope_freqs.weight" not in names  # untied, plain RoPE
    tiny = tensor_specs("tiny-llama")
    assert len(tiny) == 1 + 2 * 9 + 1  # embeddings, 2 layers of 9, final norm (tied output)


def test_the_vocabulary_is_the_word_level_one() -> None:
    vocab = vocabulary(2048)
    assert len(vocab) == 2048 and tuple(vocab[:3]) == SPECIAL_TOKENS
    assert vocab[3] == "t3" and vocab[2047] == "t2047"
    assert len(set(vocab)) == len(vocab)


def _bpe(word: str, ranks: dict[tuple[str, str], int]) -> list[str]:
    """Byte-pair encoding as llama.cpp applies it: merge the lowest-ranked adjacent pair until
    none is ranked."""
    symbols = list(word)
    while True:
        pairs = [(ranks[(a, b)], i) for i, (a, b) in enumerate(itertools.pairwise(symbols))
                 if (a, b) in ranks]
        if not pairs:
            return symbols
        _, i = min(pairs)
        symbols[i:i + 2] = [symbols[i] + symbols[i + 1]]


def test_the_merges_build_every_word_as_one_token() -> None:
    ranks = {tuple(m.split(" ")): rank for rank, m in enumerate(merges(2048))}
    assert all(len(pair) == 2 for pair in ranks)
    for word in vocabulary(2048)[3:]:
        assert _bpe(word, ranks) == [word]
    assert _bpe("t2048", ranks) != ["t2048"]  # not a word of this vocabulary


def test_the_fingerprint_follows_the_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    before = fingerprint("tiny-llama")
    assert fingerprint("tiny-llama") == before != fingerprint("llama-3.2-1b")
    monkeypatch.setitem(MODEL_SHAPES, "tiny-llama",
                        {**MODEL_SHAPES["tiny-llama"], "num_hidden_layers": 3})
    assert fingerprint("tiny-llama") != before


def test_a_written_gguf_reads_back_as_the_shape(tmp_path: Path) -> None:
    gguf = _gguf()
    path = write_source_gguf(tmp_path, "tiny-llama")
    assert path == source_gguf_path(tmp_path, "tiny-llama")
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left
    mtime = path.stat().st_mtime_ns
    assert write_source_gguf(tmp_path, "tiny-llama") == path and path.stat().st_mtime_ns == mtime

    reader = gguf.GGUFReader(path)
    fields = {name: field.contents() for name, field in reader.fields.items()
              if not name.startswith("GGUF.")}
    assert fields["general.architecture"] == "llama"
    assert fields["llama.embedding_length"] == 64 and fields["llama.block_count"] == 2
    assert fields["llama.attention.head_count"] == 4
    assert fields["llama.attention.head_count_kv"] == 2
    assert fields["llama.context_length"] == 4096
    assert fields["tokenizer.ggml.model"] == fields["tokenizer.ggml.pre"] == TOKENIZER
    assert fields["tokenizer.ggml.tokens"] == vocabulary(2048)
    assert fields["tokenizer.ggml.merges"] == merges(2048)
    assert fields["tokenizer.ggml.add_bos_token"] is False
    assert fields["tokenizer.ggml.add_eos_token"] is False
    tensors = {t.name: t for t in reader.tensors}
    specs = tensor_specs("tiny-llama")
    assert list(tensors) == [s.name for s in specs]
    embd = tensors["token_embd.weight"]
    assert list(embd.shape) == [64, 2048]  # GGUF order: columns first
    assert embd.tensor_type == gguf.GGMLQuantizationType.F16
    weights = np.asarray(embd.data, dtype=np.float32)
    assert 0.015 < float(weights.std()) < 0.025  # initializer_range 0.02
    assert tensors["blk.0.attn_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    assert float(np.asarray(tensors["output_norm.weight"].data).min()) == 1.0

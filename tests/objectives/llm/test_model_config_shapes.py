"""Dense decoder shapes from config.json (objectives/llm/shapes.py): the shipped example configs
count the published parameters, a shape's canonical name rebuilds the same shape, built-in shapes
keep their names, anything that is not a dense Llama/Mistral/Qwen2 decoder is refused with the
reason, and the model directory written from a custom shape is the one engines load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from advisor.errors import WorkloadError
from objectives.llm.models import (
    MODEL_SHAPES,
    model_config,
    model_dir_parameters,
    parameter_count,
    prompt_text,
    tokenizer_dir,
    write_model_dir,
)
from objectives.llm.safetensors_model import llama_tensor_specs, write_random_safetensors
from objectives.llm.shapes import (
    config_from_name,
    features_of,
    is_canonical_name,
    load_model_config,
    parse_config,
    shape_features,
    shape_name,
)

EXAMPLES = Path(__file__).resolve().parents[3] / "docs" / "examples" / "model-configs"


@pytest.mark.parametrize(("example", "exact", "published_b", "digits"), [
    ("qwen2.5-7b", 7_615_616_512, 7.62, 2),      # Qwen2.5-7B: 7.62B (q/k/v biases, untied)
    ("mistral-7b-v0.3", 7_248_023_552, 7.25, 2),  # Mistral-7B-v0.3: 7.25B
    ("llama-3.1-70b", 70_553_706_496, 70.6, 1),   # Llama-3.1-70B: 70.6B
    ("llama-3.2-3b", 3_212_749_824, 3.21, 2),     # Llama-3.2-3B: 3.21B (tied)
    ("qwen2.5-3b", 3_085_938_688, 3.09, 2),       # Qwen2.5-3B: 3.09B (tied, biases)
])
def test_example_configs_count_the_published_parameters(example: str, exact: int,
                                                        published_b: float, digits: int) -> None:
    config = load_model_config(str(EXAMPLES / example / "config.json"))
    assert parameter_count(config) == exact
    assert round(exact / 1e9, digits) == published_b
    # The random safetensors file holds exactly these weights (TGI loads it by these names).
    assert sum(spec.numel for spec in llama_tensor_specs(config)) == exact


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir()))
def test_a_canonical_name_rebuilds_the_same_shape(example: str) -> None:
    features = features_of(load_model_config(str(EXAMPLES / example)))  # a directory works too
    assert is_canonical_name(features.name) and features.name in MODEL_SHAPES
    assert features.name not in list(MODEL_SHAPES)  # listed shapes stay the named ones
    rebuilt = config_from_name(features.name)
    assert shape_name(rebuilt) == features.name
    assert features_of(rebuilt) == features
    assert shape_features(features.name) == features  # from the name alone: no file needed


def test_the_names_spell_out_the_shape() -> None:
    qwen = features_of(load_model_config(str(EXAMPLES / "qwen2.5-7b")))
    assert qwen.name == "qwen2-h3584-i18944-l28-a28-kv4-v152064-ctx131072"
    assert (qwen.layers, qwen.heads, qwen.kv_heads, qwen.head_dim) == (28, 28, 4, 128)
    # Keys and values of 28 layers x 4 KV heads x 128 dims in bf16.
    assert qwen.kv_bytes_per_token == 2 * 28 * 4 * 128 * 2 == qwen.kv_bytes_at("auto")
    assert qwen.kv_bytes_at("fp8") == qwen.kv_bytes_per_token // 2
    llama3b = features_of(load_model_config(str(EXAMPLES / "llama-3.2-3b")))
    assert llama3b.name == "llama-h3072-i8192-l28-a24-kv8-v128256-ctx131072-tied"


@pytest.mark.parametrize(("shape", "kv_bytes"), [("llama-3.2-1b", 32768),
                                                  ("llama-3-8b", 131072)])
def test_builtin_shapes_keep_their_names_and_counts(shape: str, kv_bytes: int) -> None:
    features = features_of(parse_config(model_config(shape)))
    assert features.name == shape
    assert features.parameters == parameter_count(model_config(shape))
    assert features.kv_bytes_per_token == kv_bytes
    # The same shape given as other fields (other token ids, rope) is still the built-in one.
    as_published = {**model_config(shape), "bos_token_id": 128000, "rope_theta": 1.0}
    assert shape_name(parse_config(as_published)) == shape


def test_qwen2_counts_its_qkv_biases_and_llama_its_flags() -> None:
    base = {"architectures": ["Qwen2ForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "vocab_size": 256, "max_position_embeddings": 512}
    qwen = parse_config(base)
    llama = parse_config({**base, "architectures": ["LlamaForCausalLM"]})
    q_out, kv_out = 64, 2 * 16
    assert parameter_count(qwen) - parameter_count(llama) == 2 * (q_out + 2 * kv_out)
    assert parameter_count({**llama, "attention_bias": True}) - parameter_count(llama) == (
        2 * (q_out + 2 * kv_out + 64))


@pytest.mark.parametrize(("raw", "message"), [
    ({"architectures": ["MixtralForCausalLM"]}, "MixtralForCausalLM is a mixture of experts"),
    ({"architectures": ["T5ForConditionalGeneration"]}, "is an encoder-decoder"),
    ({"architectures": ["GPT2LMHeadModel"]}, "architecture GPT2LMHeadModel is not supported"),
    ({"model_type": "mixtral"}, "model_type 'mixtral' is not supported"),
    ({"model_type": "qwen2", "num_experts": 64}, "num_experts mark a mixture of experts"),
    ({"model_type": "llama", "text_config": {}}, "multimodal"),
    ({}, "names no architecture"),
    ({"model_type": "llama", "hidden_size": 64}, "missing intermediate_size, num_hidden_layers"),
])
def test_what_is_not_a_dense_decoder_is_refused_with_the_reason(raw: dict, message: str
                                                                 ) -> None:
    with pytest.raises(WorkloadError, match=message):
        parse_config(raw)


TINY = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 512, "max_position_embeddings": 1024}


@pytest.mark.parametrize(("change", "message"), [
    ({"num_attention_heads": 5}, "num_attention_heads 5 must divide hidden_size 64"),
    ({"num_key_value_heads": 3}, "num_key_value_heads 3 must divide num_attention_heads 4"),
    ({"num_hidden_layers": 0}, "num_hidden_layers must be a positive integer"),
    ({"hidden_size": True}, "hidden_size must be a positive integer"),
    ({"head_dim": 15}, "head dimension 15 must be even"),
    ({"vocab_size": 2}, "vocab_size 2 must exceed 3"),
    ({"hidden_act": "gelu"}, "hidden_act 'gelu'"),
    ({"quantization_config": {"quant_method": "awq"}}, "quantization_config"),
    ({"torch_dtype": "int8"}, "torch_dtype 'int8'"),
    ({"tie_word_embeddings": "yes"}, "tie_word_embeddings must be true or false"),
    ({"model_type": "qwen2", "use_sliding_window": True}, "use_sliding_window is on"),
    ({"architectures": ["LlamaForCausalLM"], "model_type": "qwen2"}, "is model_type 'llama'"),
])
def test_inconsistent_fields_are_refused_naming_the_rule(change: dict, message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        parse_config({**TINY, **change})


def test_a_config_is_read_from_a_file_a_directory_or_fields(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(TINY))
    from_file = load_model_config(str(tmp_path / "m" / "config.json"))
    assert load_model_config(str(tmp_path / "m")) == from_file
    fields = ",".join(f"{k}={v}" for k, v in TINY.items())
    assert shape_name(load_model_config(fields)) == shape_name(from_file)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(WorkloadError, match="is not valid JSON"):
        load_model_config(str(tmp_path / "bad.json"))
    (tmp_path / "list.json").write_text("[1]")
    with pytest.raises(WorkloadError, match="must hold a JSON object"):
        load_model_config(str(tmp_path / "list.json"))
    with pytest.raises(WorkloadError, match="no such file"):
        load_model_config(str(tmp_path / "missing.json"))
    with pytest.raises(WorkloadError, match="is not KEY=VALUE"):
        load_model_config("model_type=llama,oops")


def test_a_custom_shape_resolves_everywhere_a_named_one_does(tmp_path: Path) -> None:
    name = shape_name(parse_config({**TINY, "model_type": "mistral", "sliding_window": 256}))
    assert name == "mistral-h64-i128-l2-a4-kv2-v512-ctx1024-swa256"
    config = model_config(name)
    assert config["sliding_window"] == 256 and config["architectures"] == ["MistralForCausalLM"]
    directory = write_model_dir(name, tmp_path / name)
    assert model_dir_parameters(directory) == parameter_count(config)
    vocab = json.loads((directory / "tokenizer.json").read_text())["model"]["vocab"]
    assert len(vocab) == 512  # every id the model can emit has a word
    assert json.loads((directory / "config.json").read_text())["eos_token_id"] == 2
    with pytest.raises(WorkloadError, match="canonical shape name"):
        model_config("qwen2-h64")


def test_the_serving_targets_load_a_custom_shape_with_random_weights(tmp_path: Path) -> None:
    from objectives.llm.server import resolve_model

    name = shape_name(parse_config({**TINY, "model_type": "qwen2"}))
    source = resolve_model(name, tmp_path)
    assert source.dummy_weights and source.label == name  # vLLM: --load-format dummy
    assert source.path == tmp_path / "models" / name
    assert (source.vocab_size, source.max_position_embeddings) == (512, 1024)


@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2"])
def test_the_tokenizer_directory_encodes_prompts_for_every_family(tmp_path: Path,
                                                                  family: str) -> None:
    """Engines load the tokenizer from its own directory (vLLM ``--tokenizer``): beside a qwen2
    config.json transformers 5 picks Qwen2Tokenizer, which encodes these prompts to nothing
    (vLLM on the H200: "The decoder prompt cannot be empty" for every request of Qwen2.5-7B)."""
    transformers = pytest.importorskip("transformers")
    from objectives.llm.server import resolve_model

    name = shape_name(parse_config({**TINY, "model_type": family}))
    source = resolve_model(name, tmp_path)
    assert source.tokenizer_path == tokenizer_dir(source.path)
    assert not (source.tokenizer_path / "config.json").exists()
    tok = transformers.AutoTokenizer.from_pretrained(source.tokenizer_path)
    ids = [3, 17, 511]
    assert tok(prompt_text(ids))["input_ids"] == ids
    chat = tok.apply_chat_template([{"role": "user", "content": prompt_text(ids)}],
                                   tokenize=False)
    assert tok(chat)["input_ids"] == ids


def test_a_model_directory_written_before_the_tokenizer_directory_is_completed(
        tmp_path: Path) -> None:
    from objectives.llm.server import resolve_model

    name = shape_name(parse_config({**TINY, "model_type": "qwen2"}))
    path = resolve_model(name, tmp_path).path
    for f in tokenizer_dir(path).iterdir():
        f.unlink()
    tokenizer_dir(path).rmdir()
    assert (resolve_model(name, tmp_path).tokenizer_path / "tokenizer.json").exists()


def test_a_prompt_of_a_full_context_stays_inside_vllms_character_bound(tmp_path: Path) -> None:
    """vLLM 0.26 refuses a prompt of more characters than its input-token budget times the
    longest token text of the vocabulary (``max_chars_per_token``, read from ``get_vocab()``).
    With ``<pad>`` as the longest special token, ``t<6 digits>`` words (8 characters with their
    space) broke that bound near a full context: on the H200, 1 chat request in ~5,000 was
    refused (14,594 characters against 14,511 for 2,073 input tokens)."""
    transformers = pytest.importorskip("transformers")
    directory = write_model_dir("llama-3-8b", tmp_path / "m")
    tok = transformers.AutoTokenizer.from_pretrained(tokenizer_dir(directory))
    max_chars_per_token = max(len(t) for t in tok.get_vocab())  # as vLLM computes it
    budget = 2_073
    ids = [128_255] * budget  # the longest words the vocabulary has
    text = prompt_text(ids)
    assert len(text) <= budget * max_chars_per_token
    assert tok(text)["input_ids"] == ids
    assert tok(prompt_text([3, 99_999, 128_255]))["input_ids"] == [3, 99_999, 128_255]


def test_a_tokenizer_written_by_an_older_layout_is_rewritten(tmp_path: Path) -> None:
    directory = write_model_dir("tiny-llama", tmp_path / "m")
    tokenizer = directory / "tokenizer.json"
    current = tokenizer.read_text()
    old = json.loads(current)
    old["model"]["vocab"] = {"<pad>": 0, **{k: v for k, v in old["model"]["vocab"].items() if v}}
    tokenizer.write_text(json.dumps(old))
    (directory / "advisor-tokenizer.json").unlink()  # written before the mark existed
    write_model_dir("tiny-llama", tmp_path / "m")
    assert tokenizer.read_text() == current
    # A current one is left as it is (the vocabulary is large: written once).
    tokenizer.write_text(current + " ")
    write_model_dir("tiny-llama", tmp_path / "m")
    assert tokenizer.read_text() == current + " "


@pytest.mark.slow
def test_transformers_builds_the_shape_with_the_counted_weights(tmp_path: Path) -> None:
    """The written directory is what transformers instantiates, and its own count agrees."""
    transformers = pytest.importorskip("transformers")
    for change in ({"model_type": "qwen2"}, {"head_dim": 32}, {"tie_word_embeddings": False}):
        config = parse_config({**TINY, **change})
        directory = write_model_dir(shape_name(config), tmp_path / shape_name(config))
        hf = transformers.AutoConfig.from_pretrained(directory)
        model = transformers.AutoModelForCausalLM.from_config(hf)
        assert sum(p.numel() for p in model.parameters()) == parameter_count(config), change


@pytest.mark.slow
def test_the_random_safetensors_of_a_qwen2_shape_load_with_every_weight(tmp_path: Path) -> None:
    """TGI reads weights from the directory: the file must hold exactly the model's tensors,
    the q/k/v biases of Qwen2 included."""
    transformers = pytest.importorskip("transformers")
    config = parse_config({**TINY, "model_type": "qwen2"})
    directory = write_model_dir(shape_name(config), tmp_path / "m")
    write_random_safetensors(directory / "model.safetensors", model_config(shape_name(config)))
    model, info = transformers.AutoModelForCausalLM.from_pretrained(
        directory, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert not info["mismatched_keys"]
    assert sum(p.numel() for p in model.parameters()) == parameter_count(config)

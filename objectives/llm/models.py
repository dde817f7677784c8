"""Named model shapes and the model directories random-weight engines load.

Serving speed depends on a model's architecture, not its weights: compute, memory traffic and KV
cache use are those of the real shape (vLLM and TensorRT-LLM call this ``load_format="dummy"``).
Besides the named shapes below, any dense Llama/Mistral/Qwen2 decoder is a shape under its
canonical name (:mod:`objectives.llm.shapes`, e.g. from ``advisor tune --model-config``).
A model directory holds the real ``config.json`` of the shape and an offline word-level tokenizer
whose vocabulary covers every id the model can emit (id i <-> the word ``t<i>``; 0-2 special), so
prompts of exact token lengths round-trip and no hub is ever contacted.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from advisor.errors import WorkloadError
from objectives.atomic_files import atomic_write_text

__all__ = ["MODEL_SHAPES", "N_SPECIAL_TOKENS", "PAD_TOKEN", "TOKENIZER_DIR", "TOKENIZER_LAYOUT",
           "model_config", "model_dir_parameters", "parameter_count", "prompt_text",
           "tokenizer_dir", "write_model_dir"]

N_SPECIAL_TOKENS = 3  # PAD_TOKEN=0, <s>=1, </s>=2
#: The padding (and unknown) token's text, long on purpose. vLLM refuses a prompt of more
#: characters than its input-token budget (max_model_len - max_tokens) times the longest token
#: text in the vocabulary; real tokenizers hold long whitespace and punctuation tokens, so real
#: prompts never meet that bound, but the prompt words here (``t<id>`` and a space: 8 characters
#: for a six-digit id, one more than ``t128255``) did, near a full context. A vocabulary with
#: this token allows 20 characters a token: room for ids of up to 18 digits.
PAD_TOKEN = "<|advisor-pad-token|>"
#: The version of the tokenizer files :func:`write_model_dir` writes, kept beside them in
#: ``_TOKENIZER_MARK``: a directory written by an older version has its tokenizer rewritten
#: rather than reused (prompts spelt for one vocabulary and read by another would turn into
#: unknown tokens). 2: the long :data:`PAD_TOKEN` (was ``<pad>``).
TOKENIZER_LAYOUT = 2
_TOKENIZER_MARK = "advisor-tokenizer.json"
#: The model directory's subdirectory holding the tokenizer alone (no config.json): what an
#: engine is pointed at as its tokenizer (see :func:`tokenizer_dir`).
TOKENIZER_DIR = "tokenizer"
_LLAMA_BASE: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
    "attention_bias": False, "mlp_bias": False, "rms_norm_eps": 1e-5, "initializer_range": 0.02,
    "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "use_cache": True,
    "torch_dtype": "bfloat16",
}



class _ShapeTable(dict[str, dict[str, Any]]):
    """The named shapes (what iterating, ``keys()`` and ``--help`` list) that also answers, for
    ``in`` and ``[]``, the canonical name of any supported dense decoder
    (:func:`objectives.llm.shapes.config_from_name`): such a name spells out its shape, so every
    engine that resolves shapes here accepts a custom shape with no registry to share."""

    def __contains__(self, name: object) -> bool:
        if dict.__contains__(self, name):
            return True
        from objectives.llm.shapes import is_canonical_name

        return isinstance(name, str) and is_canonical_name(name)

    def __missing__(self, name: str) -> dict[str, Any]:
        from objectives.llm.shapes import config_from_name, is_canonical_name

        if not is_canonical_name(name):
            raise KeyError(name)
        return config_from_name(name)


MODEL_SHAPES: dict[str, dict[str, Any]] = _ShapeTable({
    # For CPU tests: the same architecture, small enough to run on 2 cores.
    "tiny-llama": {**_LLAMA_BASE, "hidden_size": 64, "intermediate_size": 128,
                   "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                   "head_dim": 16, "vocab_size": 2048, "max_position_embeddings": 4096,
                   "rope_theta": 10000.0, "tie_word_embeddings": True, "torch_dtype": "float32"},
    # meta-llama/Llama-3.2-1B's published config.json.
    "llama-3.2-1b": {**_LLAMA_BASE, "hidden_size": 2048, "intermediate_size": 8192,
                     "num_hidden_layers": 16, "num_attention_heads": 32,
                     "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 128256,
                     "max_position_embeddings": 131072, "rope_theta": 500000.0,
                     "tie_word_embeddings": True,
                     "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0,
                                      "low_freq_factor": 1.0,
                                      "original_max_position_embeddings": 8192,
                                      "rope_type": "llama3"}},
    # meta-llama/Meta-Llama-3-8B's published config.json.
    "llama-3-8b": {**_LLAMA_BASE, "hidden_size": 4096, "intermediate_size": 14336,
                   "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                   "head_dim": 128, "vocab_size": 128256, "max_position_embeddings": 8192,
                   "rope_theta": 500000.0, "tie_word_embeddings": False},
})


def model_config(shape: str) -> dict[str, Any]:
    """The ``config.json`` contents of a named shape or of a canonical shape name."""
    try:
        return dict(MODEL_SHAPES[shape])
    except KeyError:
        raise WorkloadError(f"unknown model shape {shape!r}; known shapes: "
                            f"{', '.join(sorted(MODEL_SHAPES))}, a canonical shape name "
                            "(advisor tune --model-config prints it), or a local model path"
                            ) from None


def parameter_count(config: Mapping[str, Any]) -> int:
    """The number of weights of a dense Llama-style decoder with this ``config.json``: the token
    embedding, per layer the attention projections (q, k, v, o; grouped-query k/v), the gated MLP
    (gate, up, down) and two RMS norms, the final norm, and the output matrix unless it is tied
    to the embedding. Biases are counted where the config turns them on (Llama's
    ``attention_bias``: q, k, v and o; Qwen2 always has q, k and v biases, none on o).

    meta-llama/Llama-3.2-1B: 1,235,814,400; Meta-Llama-3-8B: 8,030,261,248 (as published).
    """
    hidden, inter = int(config["hidden_size"]), int(config["intermediate_size"])
    layers, vocab = int(config["num_hidden_layers"]), int(config["vocab_size"])
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    q_out, kv_out = heads * head_dim, kv_heads * head_dim
    attention = hidden * q_out + 2 * hidden * kv_out + q_out * hidden
    if config.get("attention_bias"):
        attention += q_out + 2 * kv_out + hidden
    elif config.get("model_type") == "qwen2":
        attention += q_out + 2 * kv_out
    mlp = 3 * hidden * inter + ((2 * inter + hidden) if config.get("mlp_bias") else 0)
    per_layer = attention + mlp + 2 * hidden
    output = 0 if config.get("tie_word_embeddings", False) else vocab * hidden
    return vocab * hidden + layers * per_layer + hidden + output


def model_dir_parameters(directory: Path) -> int | None:
    """:func:`parameter_count` of the model whose ``config.json`` is in ``directory``; None when
    it cannot be read or is not a dense decoder config this count knows."""
    try:
        config = json.loads((Path(directory) / "config.json").read_text())
        return parameter_count(config)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def prompt_text(token_ids: tuple[int, ...] | list[int]) -> str:
    """The text that the word-level tokenizer encodes to exactly ``token_ids``."""
    return " ".join(f"t{i}" for i in token_ids)


def _tokenizer_json(vocab_size: int) -> dict[str, Any]:
    vocab = {PAD_TOKEN: 0, "<s>": 1, "</s>": 2}
    vocab.update({f"t{i}": i for i in range(N_SPECIAL_TOKENS, vocab_size)})
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [
            {"id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for tok, i in ((PAD_TOKEN, 0), ("<s>", 1), ("</s>", 2))
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": None,
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": False},
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": PAD_TOKEN},
    }


def tokenizer_dir(model_dir: Path | str) -> Path:
    """Where :func:`write_model_dir` put the tokenizer alone. Point an engine's tokenizer at it
    (vLLM ``--tokenizer``): next to a ``config.json``, transformers 5 picks the tokenizer class
    by the model type, and for ``qwen2`` that class rebuilds a byte-level BPE from the vocabulary
    and encodes every prompt of this word-level tokenizer to no tokens at all (vLLM then answers
    "The decoder prompt cannot be empty"). Without a config the declared fast tokenizer loads."""
    return Path(model_dir) / TOKENIZER_DIR


def write_model_dir(shape: str, directory: Path, *, overrides: Mapping[str, Any] | None = None
                    ) -> Path:
    """Write ``config.json``, ``generation_config.json`` and the offline tokenizer of ``shape``.

    No weights: engines initialise random ones (vLLM ``--load-format dummy``; transformers
    ``from_config``). Idempotent; returns ``directory``.
    """
    config = {**model_config(shape), **(overrides or {})}
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write_text(directory / "config.json", json.dumps(config, indent=2))
    atomic_write_text(directory / "generation_config.json", json.dumps({
        "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "do_sample": False}))
    # Beside the config (engines that read the tokenizer from the model directory) and alone in
    # tokenizer_dir() (engines pointed at it; see there why).
    vocab_size = int(config["vocab_size"])
    # Serialised at most once for both places (the vocabulary is large: 128k words).
    text = functools.cache(lambda: json.dumps(_tokenizer_json(vocab_size)))
    for where in (directory, tokenizer_dir(directory)):
        _write_tokenizer(where, vocab_size, int(config["max_position_embeddings"]), text)
    return directory


def _write_tokenizer(directory: Path, vocab_size: int, max_length: int,
                     text: Callable[[], str]) -> None:
    """The tokenizer files in ``directory``; ``tokenizer.json`` (``text()``) only where it is
    missing or was written for another layout or vocabulary size."""
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer, mark = directory / "tokenizer.json", directory / _TOKENIZER_MARK
    written = {"layout": TOKENIZER_LAYOUT, "vocab_size": vocab_size}
    if not tokenizer.exists() or _read_mark(mark) != written:
        atomic_write_text(tokenizer, text())
        atomic_write_text(mark, json.dumps(written))
    atomic_write_text(directory / "tokenizer_config.json", json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "pad_token": PAD_TOKEN, "unk_token": PAD_TOKEN, "add_bos_token": False,
        "model_max_length": max_length, "clean_up_tokenization_spaces": False,
        "chat_template": "{% for m in messages %}{{ m['content'] }}{% if not loop.last %} "
                         "{% endif %}{% endfor %}",
    }))
    atomic_write_text(directory / "special_tokens_map.json", json.dumps({
        "bos_token": "<s>", "eos_token": "</s>", "pad_token": PAD_TOKEN, "unk_token": PAD_TOKEN}))


def _read_mark(path: Path) -> Any:
    """What a tokenizer mark file says (None when missing or unreadable: rewrite)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None

"""Named model shapes and the model directories random-weight engines load.

Serving speed depends on a model's architecture, not its weights: compute, memory traffic and KV
cache use are those of the real shape (vLLM and TensorRT-LLM call this ``load_format="dummy"``).
The named shapes, and any dense Llama/Mistral/Qwen2 decoder under its canonical name (e.g. from
``advisor tune --model-config``), are declared in :mod:`objectives.llm.shapes` (naming a shape needs
the named ones) and re-exported here, where the model directories' callers look for them.
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

from objectives.atomic_files import atomic_write_text
from objectives.llm.shapes import MODEL_SHAPES, N_SPECIAL_TOKENS, model_config, parameter_count

__all__ = ["MODEL_SHAPES", "N_SPECIAL_TOKENS", "PAD_TOKEN", "TOKENIZER_DIR", "TOKENIZER_LAYOUT",
           "config_vocab_size", "model_config", "model_dir_parameters", "parameter_count",
           "prompt_text", "tokenizer_dir", "vocab_size_of", "write_model_dir"]

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


def vocab_size_of(model: Any) -> int | None:
    """The vocabulary size of a workload's ``model``: a built-in shape's, or a local model
    directory's ``config.json`` (its ``text_config`` for a multimodal one); None where it is
    neither (a directory on another machine)."""
    if isinstance(model, str) and model in MODEL_SHAPES:
        return int(model_config(model)["vocab_size"])
    try:
        config = json.loads((Path(str(model)).expanduser() / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return config_vocab_size(config) if isinstance(config, dict) else None


def config_vocab_size(config: Mapping[str, Any]) -> int | None:
    """The vocabulary size a Hugging Face ``config.json`` declares (its ``text_config``'s for a
    multimodal one), or None where it declares no integer one."""
    vocab = config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")
    return vocab if isinstance(vocab, int) else None


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

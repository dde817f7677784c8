"""Random-weight GGUF files of the named model shapes, for llama.cpp.

llama.cpp has no ``--load-format dummy``: it needs a file. This module writes one per shape in
the llama layout (``token_embd``, ``blk.N.attn_q`` ..., ``output_norm``; ``output`` only for
untied shapes; ``rope_freqs`` for Llama-3.x rope scaling), F16 matrices drawn from a seeded
normal distribution with the shape's ``initializer_range``, written one tensor at a time so an
8B shape never sits in memory whole. Serving speed depends on the architecture, not the weights,
as for the other engines' dummy loaders.

The vocabulary is the project's word-level one (token i <-> the word ``t<i>``, ids 0-2 special;
:mod:`objectives.llm.models`), written for llama.cpp's ``whitespace`` tokenizer: it splits the
prompt at whitespace and byte-pair-merges each word, and the merges written here build every
word ``t<i>`` one digit at a time (``t 1``, ``t1 2``, ...), so the text ``t5 t100`` is exactly
the ids ``[5, 100]`` and every prompt the client sends has the token length the workload asked
for. No BOS or EOS is added (``add_bos_token`` false, which this tokenizer honours; llama.cpp's
WordPiece tokenizer would add two tokens to every prompt whatever the file says).

The file is written under a temporary name and renamed, so a trial reading the cache never sees
half of one; its name carries a fingerprint of everything that shapes its contents.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from advisor.errors import EngineUnavailableError, WorkloadError
from objectives.llm.models import N_SPECIAL_TOKENS, model_config

__all__ = [
    "GGUF_LAYOUT_VERSION",
    "SPECIAL_TOKENS",
    "TOKENIZER",
    "TensorSpec",
    "fingerprint",
    "merges",
    "source_gguf_path",
    "tensor_specs",
    "vocabulary",
    "write_source_gguf",
]

#: Bumped whenever what :func:`write_source_gguf` writes changes (new file names follow).
GGUF_LAYOUT_VERSION = 2
#: llama.cpp's tokenizer (and pre-tokenizer) that splits at whitespace only.
TOKENIZER = "whitespace"
#: The special tokens at ids 0, 1, 2 (pad/unk, bos, eos), as in the HF tokenizer of the shapes.
SPECIAL_TOKENS: tuple[str, ...] = ("<pad>", "<s>", "</s>")
_TOKEN_NORMAL, _TOKEN_CONTROL = 1, 3  # gguf.TokenType.NORMAL / CONTROL
_SEED = 0
#: Elements drawn per random batch: bounds the float32 scratch memory (64 MiB).
_DRAW_ELEMENTS = 16 * 2**20


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of the file: its GGUF name, numpy shape (rows, columns) and dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: type[np.floating[Any]]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize


def _shape_config(shape: str) -> dict[str, Any]:
    config = model_config(shape)
    if config.get("model_type") != "llama":
        raise WorkloadError(f"shape {shape!r} is not a llama model; the GGUF writer knows only "
                            "the llama layout")
    return config


def _head_dim(config: Mapping[str, Any]) -> int:
    return int(config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"])


def fingerprint(shape: str) -> str:
    """A short hash of everything that shapes the file's contents (the shape's config, the
    layout version and the seed): part of the file name, so an edited shape gets a new file."""
    blob = json.dumps({"config": model_config(shape), "layout": GGUF_LAYOUT_VERSION,
                       "seed": _SEED}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:10]


def source_gguf_path(model_dir: Path, shape: str) -> Path:
    """Where the F16 file of ``shape`` lives inside its model directory."""
    return Path(model_dir) / f"{shape}-{fingerprint(shape)}-F16.gguf"


def vocabulary(vocab_size: int) -> list[str]:
    """The token texts: the special tokens, then ``t<i>`` for every other id."""
    if vocab_size <= N_SPECIAL_TOKENS:
        raise WorkloadError(f"`vocab_size > {N_SPECIAL_TOKENS}` must hold, got {vocab_size}")
    return [*SPECIAL_TOKENS, *(f"t{i}" for i in range(N_SPECIAL_TOKENS, vocab_size))]


def merges(vocab_size: int) -> list[str]:
    """The byte-pair merges that build each word ``t<i>`` from its characters: ``"<prefix>
    <digit>"`` for every prefix of a word, shortest first. Only one merge ever applies to a
    word at a time (digits never merge with each other), so each word ends as one token."""
    seen: set[str] = set()
    out: list[str] = []
    for word in vocabulary(vocab_size)[N_SPECIAL_TOKENS:]:
        for end in range(2, len(word) + 1):
            piece = word[:end]
            if piece not in seen:
                seen.add(piece)
                out.append(f"{piece[:-1]} {piece[-1]}")
    return out


def tensor_specs(shape: str) -> list[TensorSpec]:
    """Every tensor of ``shape``'s file, in file order (numpy shapes: output rows first)."""
    c = _shape_config(shape)
    hidden, ff, vocab = int(c["hidden_size"]), int(c["intermediate_size"]), int(c["vocab_size"])
    heads, kv_heads, head_dim = (int(c["num_attention_heads"]), int(c["num_key_value_heads"]),
                                 _head_dim(c))
    f16, f32 = np.float16, np.float32
    specs = [TensorSpec("token_embd.weight", (vocab, hidden), f16)]
    if _rope_factors(c) is not None:
        specs.append(TensorSpec("rope_freqs.weight", (head_dim // 2,), f32))
    for i in range(int(c["num_hidden_layers"])):
        specs += [
            TensorSpec(f"blk.{i}.attn_norm.weight", (hidden,), f32),
            TensorSpec(f"blk.{i}.attn_q.weight", (heads * head_dim, hidden), f16),
            TensorSpec(f"blk.{i}.attn_k.weight", (kv_heads * head_dim, hidden), f16),
            TensorSpec(f"blk.{i}.attn_v.weight", (kv_heads * head_dim, hidden), f16),
            TensorSpec(f"blk.{i}.attn_output.weight", (hidden, heads * head_dim), f16),
            TensorSpec(f"blk.{i}.ffn_norm.weight", (hidden,), f32),
            TensorSpec(f"blk.{i}.ffn_gate.weight", (ff, hidden), f16),
            TensorSpec(f"blk.{i}.ffn_up.weight", (ff, hidden), f16),
            TensorSpec(f"blk.{i}.ffn_down.weight", (hidden, ff), f16),
        ]
    specs.append(TensorSpec("output_norm.weight", (hidden,), f32))
    if not c.get("tie_word_embeddings", False):
        specs.append(TensorSpec("output.weight", (vocab, hidden), f16))
    return specs


def _rope_factors(config: Mapping[str, Any]) -> np.ndarray[Any, Any] | None:
    """Llama-3.x frequency factors (``rope_freqs.weight``), computed as llama.cpp's
    convert_hf_to_gguf.py does for ``rope_type: llama3``; None for plain RoPE."""
    scaling = config.get("rope_scaling") or {}
    if scaling.get("rope_type") != "llama3":
        return None
    dim = _head_dim(config)
    freqs = 1.0 / (float(config["rope_theta"]) ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    factor = float(scaling.get("factor", 8.0))
    low, high = float(scaling.get("low_freq_factor", 1.0)), float(scaling.get("high_freq_factor",
                                                                                4.0))
    old_len = float(scaling.get("original_max_position_embeddings", 8192))
    factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < old_len / high:
            factors.append(1.0)
        elif wavelen > old_len / low:
            factors.append(factor)
        else:
            smooth = (old_len / wavelen - low) / (high - low)
            factors.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.asarray(factors, dtype=np.float32)


def _tensor_data(spec: TensorSpec, config: Mapping[str, Any], rng: np.random.Generator
                 ) -> np.ndarray[Any, Any]:
    """The tensor's data; matrices are drawn in row blocks into the final dtype, so the float32
    scratch stays small even for a 128k x 4096 embedding."""
    if spec.name == "rope_freqs.weight":
        factors = _rope_factors(config)
        assert factors is not None
        return factors
    if len(spec.shape) == 1:  # RMS norm weights: ones, as a freshly initialised model has
        return np.ones(spec.shape, dtype=spec.dtype)
    rows, cols = spec.shape
    std = float(config.get("initializer_range", 0.02))
    out = np.empty(spec.shape, dtype=spec.dtype)
    step = max(1, _DRAW_ELEMENTS // cols)
    for start in range(0, rows, step):
        block = rng.standard_normal((min(step, rows - start), cols), dtype=np.float32)
        block *= std
        out[start:start + block.shape[0]] = block
    return out


def _add_metadata(writer: Any, gguf: Any, shape: str, config: Mapping[str, Any]) -> None:
    hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
    head_dim = _head_dim(config)
    writer.add_name(f"advisor random-weight {shape}")
    writer.add_context_length(int(config["max_position_embeddings"]))
    writer.add_embedding_length(hidden)
    writer.add_block_count(int(config["num_hidden_layers"]))
    writer.add_feed_forward_length(int(config["intermediate_size"]))
    writer.add_head_count(heads)
    writer.add_head_count_kv(int(config["num_key_value_heads"]))
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(float(config["rope_theta"]))
    writer.add_layer_norm_rms_eps(float(config["rms_norm_eps"]))
    writer.add_vocab_size(int(config["vocab_size"]))
    writer.add_file_type(int(gguf.LlamaFileType.MOSTLY_F16))
    tokens = vocabulary(int(config["vocab_size"]))
    writer.add_tokenizer_model(TOKENIZER)
    writer.add_tokenizer_pre(TOKENIZER)
    writer.add_token_list(tokens)
    writer.add_token_types([_TOKEN_CONTROL] * N_SPECIAL_TOKENS
                           + [_TOKEN_NORMAL] * (len(tokens) - N_SPECIAL_TOKENS))
    writer.add_token_merges(merges(len(tokens)))
    writer.add_unk_token_id(0)
    writer.add_pad_token_id(0)
    writer.add_bos_token_id(int(config.get("bos_token_id", 1)))
    writer.add_eos_token_id(int(config.get("eos_token_id", 2)))
    # The word-level HF tokenizer adds nothing either: prompts are exactly the workload's ids.
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(False)


def write_source_gguf(model_dir: Path, shape: str) -> Path:
    """The F16 GGUF of ``shape`` in ``model_dir`` (written once, atomically; returns its path).

    Raises :class:`WorkloadError` for an unknown or non-llama shape and
    :class:`~advisor.errors.EngineUnavailableError` when the ``gguf`` package is missing.
    """
    path = source_gguf_path(model_dir, shape)
    if path.is_file():
        return path
    try:
        import gguf
    except ImportError:
        raise EngineUnavailableError(
            "writing a GGUF model needs the gguf package: pip install 'slo-advisor[llamacpp]'"
        ) from None
    config = _shape_config(shape)
    specs = tensor_specs(shape)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        writer = gguf.GGUFWriter(tmp, arch="llama")
        try:
            _add_metadata(writer, gguf, shape, config)
            for spec in specs:
                writer.add_tensor_info(spec.name, spec.shape, np.dtype(spec.dtype), spec.nbytes)
            writer.write_header_to_file()
            writer.write_kv_data_to_file()
            writer.write_ti_data_to_file()
            rng = np.random.default_rng(_SEED)
            for spec in specs:  # one tensor in memory at a time
                writer.write_tensor_data(_tensor_data(spec, config, rng))
        finally:
            writer.close()
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path

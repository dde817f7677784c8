"""Random-weight ``model.safetensors`` files for the llama-layout shapes (Llama, Mistral, Qwen2:
the named ones and any canonical custom shape), for engines that have no
dummy-weight loader (text-generation-inference reads weights from the model directory only).

Serving speed depends on the architecture, not on the weights' values (see
:mod:`objectives.llm.models`), so the tensors hold seeded normal noise of the shape's
``initializer_range`` (norms are ones), under the Hugging Face parameter names that
``LlamaForCausalLM`` / ``MistralForCausalLM`` / ``Qwen2ForCausalLM`` and TGI's ``flash_llama``,
``flash_mistral`` and ``flash_qwen2`` load (the three share one layout; biases where the config
has them). The file is written without torch or the
``safetensors`` package: the format is an 8-byte little-endian header length, a JSON header of
``{name: {dtype, shape, data_offsets}}`` and the raw little-endian tensor bytes, which lets the
data be generated and written one row block at a time (an 8B shape is 16 GB of bf16).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from advisor.errors import WorkloadError

__all__ = ["LLAMA_LAYOUT", "SAFETENSORS_DTYPES", "TensorSpec", "llama_tensor_specs",
           "write_random_safetensors"]

#: config.json ``torch_dtype`` -> (safetensors dtype name, bytes per element).
SAFETENSORS_DTYPES: dict[str, tuple[str, int]] = {
    "bfloat16": ("BF16", 2), "float16": ("F16", 2), "float32": ("F32", 4)}
#: Elements drawn per block: bounds the float32 scratch memory (64 MiB) whatever the tensor.
_BLOCK_ELEMENTS = 1 << 24
_SEED = 0


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of the file: its Hugging Face name, shape and whether it is a norm (ones)."""

    name: str
    shape: tuple[int, ...]
    norm: bool = False

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape))


#: model_types that share the Llama tensor layout.
LLAMA_LAYOUT = ("llama", "mistral", "qwen2")


def llama_tensor_specs(config: Mapping[str, Any]) -> list[TensorSpec]:
    """The parameters of a Llama-layout model (``LlamaForCausalLM``, ``MistralForCausalLM``,
    ``Qwen2ForCausalLM``) with ``config`` (its ``config.json``), in file order; ``lm_head.weight``
    only when the embeddings are not tied; biases where the config has them (Llama's
    ``attention_bias``/``mlp_bias``, Qwen2's q/k/v biases). Raises :class:`WorkloadError` for
    another architecture."""
    model_type = config.get("model_type")
    if model_type not in LLAMA_LAYOUT:
        raise WorkloadError(f"random safetensors weights are written for llama shapes only (the "
                            f"llama layout: model_type {', '.join(LLAMA_LAYOUT)}), got "
                            f"model_type {model_type!r}")
    hidden, vocab = int(config["hidden_size"]), int(config["vocab_size"])
    heads, kv_heads = int(config["num_attention_heads"]), int(config["num_key_value_heads"])
    head_dim = int(config.get("head_dim") or hidden // heads)
    inter = int(config["intermediate_size"])
    qkv_bias = bool(config.get("attention_bias")) or model_type == "qwen2"
    o_bias = bool(config.get("attention_bias"))
    mlp_bias = bool(config.get("mlp_bias"))
    q_out, kv_out = heads * head_dim, kv_heads * head_dim
    specs = [TensorSpec("model.embed_tokens.weight", (vocab, hidden))]
    for i in range(int(config["num_hidden_layers"])):
        p = f"model.layers.{i}"
        specs.append(TensorSpec(f"{p}.input_layernorm.weight", (hidden,), norm=True))
        for proj, rows in (("q_proj", q_out), ("k_proj", kv_out), ("v_proj", kv_out)):
            specs.append(TensorSpec(f"{p}.self_attn.{proj}.weight", (rows, hidden)))
            if qkv_bias:
                specs.append(TensorSpec(f"{p}.self_attn.{proj}.bias", (rows,)))
        specs.append(TensorSpec(f"{p}.self_attn.o_proj.weight", (hidden, q_out)))
        if o_bias:
            specs.append(TensorSpec(f"{p}.self_attn.o_proj.bias", (hidden,)))
        specs.append(TensorSpec(f"{p}.post_attention_layernorm.weight", (hidden,), norm=True))
        for proj, shape in (("gate_proj", (inter, hidden)), ("up_proj", (inter, hidden)),
                            ("down_proj", (hidden, inter))):
            specs.append(TensorSpec(f"{p}.mlp.{proj}.weight", shape))
            if mlp_bias:
                specs.append(TensorSpec(f"{p}.mlp.{proj}.bias", (shape[0],)))
    specs.append(TensorSpec("model.norm.weight", (hidden,), norm=True))
    if not config.get("tie_word_embeddings", False):
        specs.append(TensorSpec("lm_head.weight", (vocab, hidden)))
    return specs


def _header(specs: list[TensorSpec], dtype: str, itemsize: int) -> bytes:
    entries: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for spec in specs:
        size = spec.numel * itemsize
        entries[spec.name] = {"dtype": dtype, "shape": list(spec.shape),
                              "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(entries, separators=(",", ":")).encode()
    # The data starts 8-byte aligned (the format recommends it; padding is spaces).
    raw += b" " * (-(8 + len(raw)) % 8)
    return len(raw).to_bytes(8, "little") + raw


def _encode(values: np.ndarray[Any, Any], dtype: str) -> bytes:
    if dtype == "F32":
        return values.astype("<f4").tobytes()
    if dtype == "F16":
        return values.astype("<f2").tobytes()
    # bfloat16 is the upper half of a float32 (truncated: noise needs no rounding).
    return (values.astype("<f4").view("<u4") >> 16).astype("<u2").tobytes()


def _write_tensor(out: BinaryIO, spec: TensorSpec, dtype: str, std: float,
                  rng: np.random.Generator) -> None:
    remaining = spec.numel
    while remaining:
        n = min(remaining, _BLOCK_ELEMENTS)
        if spec.norm:
            block = np.ones(n, dtype=np.float32)
        else:
            block = rng.standard_normal(n, dtype=np.float32)
            block *= std
        out.write(_encode(block, dtype))
        remaining -= n


def write_random_safetensors(path: Path, config: Mapping[str, Any]) -> Path:
    """Write the random weights of the llama-layout ``config`` to ``path`` once (atomically; an
    existing file is kept) and return ``path``. The dtype is the config's ``torch_dtype``."""
    path = Path(path)
    if path.is_file():
        return path
    name = str(config.get("torch_dtype", "float32"))
    if name not in SAFETENSORS_DTYPES:
        raise WorkloadError(f"no safetensors dtype for torch_dtype {name!r}; known: "
                            f"{sorted(SAFETENSORS_DTYPES)}")
    dtype, itemsize = SAFETENSORS_DTYPES[name]
    specs = llama_tensor_specs(config)
    std = float(config.get("initializer_range", 0.02))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(_header(specs, dtype, itemsize))
            rng = np.random.default_rng(_SEED)
            for spec in specs:
                _write_tensor(out, spec, dtype, std, rng)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path

"""Random-weight ``model.safetensors`` files for the named llama shapes, for engines that have no
dummy-weight loader (text-generation-inference reads weights from the model directory only).

Serving speed depends on the architecture, not on the weights' values (see
:mod:`objectives.llm.models`), so the tensors hold seeded normal noise of the shape's
``initializer_range`` (norms are ones), under the Hugging Face Llama parameter names that
``LlamaForCausalLM`` and TGI's ``flash_llama`` load. The file is written without torch or the
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

__all__ = ["SAFETENSORS_DTYPES", "TensorSpec", "llama_tensor_specs", "write_random_safetensors"]

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


def llama_tensor_specs(config: Mapping[str, Any]) -> list[TensorSpec]:
    """The parameters of a ``LlamaForCausalLM`` with ``config`` (its ``config.json``), in file
    order; ``lm_head.weight`` only when the embeddings are not tied. Raises
    :class:`WorkloadError` for another architecture."""
    if config.get("model_type") != "llama":
        raise WorkloadError(f"random safetensors weights are written for llama shapes only, got "
                            f"model_type {config.get('model_type')!r}")
    hidden, vocab = int(config["hidden_size"]), int(config["vocab_size"])
    heads, kv_heads = int(config["num_attention_heads"]), int(config["num_key_value_heads"])
    head_dim = int(config.get("head_dim") or hidden // heads)
    inter = int(config["intermediate_size"])
    specs = [TensorSpec("model.embed_tokens.weight", (vocab, hidden))]
    for i in range(int(config["num_hidden_layers"])):
        p = f"model.layers.{i}"
        specs += [
            TensorSpec(f"{p}.input_layernorm.weight", (hidden,), norm=True),
            TensorSpec(f"{p}.self_attn.q_proj.weight", (heads * head_dim, hidden)),
            TensorSpec(f"{p}.self_attn.k_proj.weight", (kv_heads * head_dim, hidden)),
            TensorSpec(f"{p}.self_attn.v_proj.weight", (kv_heads * head_dim, hidden)),
            TensorSpec(f"{p}.self_attn.o_proj.weight", (hidden, heads * head_dim)),
            TensorSpec(f"{p}.post_attention_layernorm.weight", (hidden,), norm=True),
            TensorSpec(f"{p}.mlp.gate_proj.weight", (inter, hidden)),
            TensorSpec(f"{p}.mlp.up_proj.weight", (inter, hidden)),
            TensorSpec(f"{p}.mlp.down_proj.weight", (hidden, inter)),
        ]
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
    """Write the random weights of the llama ``config`` to ``path`` once (atomically; an existing
    file is kept) and return ``path``. The dtype is the config's ``torch_dtype``."""
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

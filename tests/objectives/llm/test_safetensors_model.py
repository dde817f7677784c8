"""Random-weight safetensors for the tgi target: the file is valid safetensors, holds exactly the
parameters Hugging Face's LlamaForCausalLM loads, in the config's dtype, and is written once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from advisor.errors import WorkloadError
from objectives.llm.models import model_config
from objectives.llm.safetensors_model import llama_tensor_specs, write_random_safetensors
from objectives.llm.server import resolve_model
from objectives.targets.tgi_target import tgi_model_dir


def test_the_file_holds_every_parameter_with_its_shape(tmp_path: Path) -> None:
    from safetensors.numpy import load_file

    config = model_config("tiny-llama")
    path = write_random_safetensors(tmp_path / "model.safetensors", config)
    tensors = load_file(str(path))
    specs = llama_tensor_specs(config)
    assert set(tensors) == {s.name for s in specs}
    for spec in specs:
        values = tensors[spec.name]
        assert values.shape == spec.shape and values.dtype == np.float32
        if spec.norm:
            assert np.all(values == 1.0)
        else:
            assert 0.01 < float(values.std()) < 0.03  # initializer_range 0.02
    assert "lm_head.weight" not in tensors  # tiny-llama ties its embeddings
    mtime = path.stat().st_mtime_ns
    assert write_random_safetensors(path, config) == path and path.stat().st_mtime_ns == mtime


def test_bfloat16_is_the_upper_half_of_float32(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file

    config = {**model_config("tiny-llama"), "torch_dtype": "bfloat16",
              "tie_word_embeddings": False}
    tensors = load_file(str(write_random_safetensors(tmp_path / "m.safetensors", config)))
    assert tensors["lm_head.weight"].dtype == torch.bfloat16
    assert 0.01 < float(tensors["model.layers.0.mlp.up_proj.weight"].float().std()) < 0.03
    assert torch.all(tensors["model.norm.weight"] == 1)


def test_transformers_loads_the_directory_without_missing_weights(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    directory = tgi_model_dir(resolve_model("tiny-llama", tmp_path))
    assert directory.name.startswith("tiny-llama-safetensors-")
    assert {"config.json", "tokenizer.json", "model.safetensors"} <= {
        p.name for p in directory.iterdir()}
    loaded: Any = AutoModelForCausalLM.from_pretrained(directory, output_loading_info=True)
    model, info = loaded
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert not info["mismatched_keys"]
    assert sum(p.numel() for p in model.parameters()) == sum(
        s.numel for s in llama_tensor_specs(model_config("tiny-llama")))


def test_only_llama_shapes() -> None:
    with pytest.raises(WorkloadError, match="llama shapes only"):
        llama_tensor_specs({"model_type": "gpt2"})

"""Parameter counts of the named shapes: they must equal what the published checkpoints hold,
since bits per weight (a quantization's quality proxy) divides the loaded bytes by them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from objectives.llm.models import (
    model_config,
    model_dir_parameters,
    parameter_count,
    write_model_dir,
)


@pytest.mark.parametrize(("shape", "published"), [
    ("llama-3.2-1b", 1_235_814_400),  # tied embeddings: no separate output matrix
    ("llama-3-8b", 8_030_261_248),
])
def test_parameter_counts_match_the_published_checkpoints(shape: str, published: int) -> None:
    assert parameter_count(model_config(shape)) == published


def test_untied_output_and_biases_add_their_weights() -> None:
    config = model_config("tiny-llama")
    tied = parameter_count(config)
    untied = parameter_count({**config, "tie_word_embeddings": False})
    assert untied - tied == config["vocab_size"] * config["hidden_size"]
    biased = parameter_count({**config, "attention_bias": True})
    q_out = config["num_attention_heads"] * config["head_dim"]
    kv_out = config["num_key_value_heads"] * config["head_dim"]
    assert biased - tied == config["num_hidden_layers"] * (q_out + 2 * kv_out
                                                           + config["hidden_size"])


def test_a_model_directory_is_counted_from_its_config(tmp_path: Path) -> None:
    write_model_dir("tiny-llama", tmp_path / "m")
    assert model_dir_parameters(tmp_path / "m") == parameter_count(model_config("tiny-llama"))
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "config.json").write_text(json.dumps({"model_type": "mamba"}))
    assert model_dir_parameters(tmp_path / "odd") is None
    assert model_dir_parameters(tmp_path / "missing") is None

"""Configs sampled by every sampler lie inside the space and honour its conditions."""

from __future__ import annotations

import optuna
import pytest

from advisor.samplers import make_sampler
from advisor.sampling import suggest_config
from search_spaces import SearchSpace, load_space
from tests.scripted_target import SPACE


@pytest.mark.parametrize("sampler", ["tpe", "gp", "random"])
@pytest.mark.parametrize("space_name", ["faiss", "scripted"])
def test_sampled_configs_validate(sampler: str, space_name: str) -> None:
    space = load_space("faiss") if space_name == "faiss" else SearchSpace.from_dict(SPACE)
    study = optuna.create_study(direction="maximize", sampler=make_sampler(sampler, 3))
    seen_types = set()
    for i in range(25):
        trial = study.ask()
        config = suggest_config(trial, space)
        assert space.validate_config(config) == config  # inside ranges, only active knobs
        seen_types.add(config.get("index_type", config.get("mode")))
        study.tell(trial, float(i % 7))
    assert len(seen_types) >= 2  # conditional branches are explored


def test_capped_knob_is_clamped_not_resampled() -> None:
    space = load_space("faiss")
    study = optuna.create_study()
    study.enqueue_trial({"index_type": "ivf_flat", "nlist": 16, "nprobe": 300, "batch_size": 4,
                         "threads": 1})
    config = suggest_config(study.ask(), space)
    assert config["nprobe"] == 16

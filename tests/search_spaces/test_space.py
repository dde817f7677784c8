"""Search-space loading and validation: clear errors naming file and field; config checks."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from advisor.errors import SearchSpaceError
from search_spaces import SPACES_DIR, SearchSpace, load_space

GOOD = {
    "target": "t", "engine": "e",
    "knobs": [
        {"name": "kind", "type": "categorical", "choices": ["a", "b"], "default": "a"},
        {"name": "n", "type": "int", "low": 1, "high": 64, "log": True, "default": 8},
        {"name": "m", "type": "int", "low": 1, "high": 32, "default": 4, "high_from": "n",
         "when": {"kind": ["b"]}},
        {"name": "f", "type": "float", "low": 0.1, "high": 0.9, "default": 0.5,
         "flags": [{"flag": "old_f", "versions": "<2"}, {"flag": "new_f", "versions": ">=2"}]},
        {"name": "on", "type": "bool", "default": True},
    ],
}


def _write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("name", sorted(p.stem for p in SPACES_DIR.glob("*.yaml")))
def test_every_shipped_space_loads_and_its_defaults_validate(name: str) -> None:
    space = load_space(name)
    assert space.target == name
    assert space.validate_config(space.default_config()) == space.default_config()


@pytest.mark.parametrize("mutate, fragment", [
    (lambda d: d["knobs"][1].update(low=100), "`low <= high` must hold"),
    (lambda d: d["knobs"][1].update(type="integer"), "knobs[1] (n).type"),
    (lambda d: d["knobs"][1].pop("default"), "knobs[1] (n).default: is required"),
    (lambda d: d["knobs"][1].update(low=0), "log-scale knob needs low > 0"),
    (lambda d: d["knobs"][0].update(choices=[]), "knobs[0] (kind).choices"),
    (lambda d: d["knobs"][2].update(when={"later": [1]}), "not an earlier knob"),
    (lambda d: d["knobs"][2].update(when={"kind": ["zzz"]}), "not valid for 'kind'"),
    (lambda d: d["knobs"][1].update(colour="red"), "knobs[1] (n).colour: unknown field"),
    (lambda d: d["knobs"][3].update(default=2.0), "knobs[3] (f).default"),
    (lambda d: d["knobs"].append(dict(d["knobs"][0])), "duplicate knob"),
    (lambda d: d.pop("engine"), "field 'engine': is required"),
    (lambda d: d["knobs"][3].update(flags=[{"flag": "x", "versions": "~~1"}]), "flags"),
    (lambda d: d["knobs"][1].update(role="batch_size"), "knobs[1] (n).role: must be one of"),
])
def test_bad_files_name_file_and_field(tmp_path: Path, mutate, fragment: str) -> None:
    data = yaml.safe_load(yaml.safe_dump(GOOD))
    mutate(data)
    path = _write(tmp_path, data)
    with pytest.raises(SearchSpaceError) as info:
        SearchSpace.from_file(path)
    assert str(path) in str(info.value)
    assert fragment in str(info.value)


def test_knob_roles_name_the_knobs_that_hold_them() -> None:
    """Models that need a knob by what it holds (the batch simulator) ask the space, which
    names the knob; a space that marks none answers None."""
    vllm = load_space("vllm")
    assert vllm.knob_with_role("batch_slots") == "max_num_seqs"
    assert vllm.knob_with_role("step_token_budget") == "max_num_batched_tokens"
    assert load_space("faiss").knob_with_role("batch_slots") is None


def test_invalid_yaml_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("knobs: [unclosed")
    with pytest.raises(SearchSpaceError, match="not valid YAML"):
        SearchSpace.from_file(bad)
    with pytest.raises(SearchSpaceError, match="no search space for target 'nope'"):
        load_space("nope")


def test_validate_config_reports_every_problem() -> None:
    space = SearchSpace.from_dict(GOOD)
    with pytest.raises(SearchSpaceError) as info:
        space.validate_config({"kind": "a", "n": 100, "m": 3, "f": 0.5, "on": "yes", "zz": 1})
    text = str(info.value)
    for fragment in ("unknown knob 'zz'", "n: must be in [1, 64]", "'m' only applies when",
                     "on: must be true or false"):
        assert fragment in text


def test_conditions_and_capped_ranges() -> None:
    space = SearchSpace.from_dict(GOOD)
    ok = space.validate_config({"kind": "b", "n": 8, "m": 8, "f": 0.2, "on": False})
    assert ok["m"] == 8
    with pytest.raises(SearchSpaceError, match=r"m: must be in \[1, 8\] \(capped by n\)"):
        space.validate_config({"kind": "b", "n": 8, "m": 9, "f": 0.2, "on": False})
    assert "m" not in space.default_config()


def test_version_aware_flags() -> None:
    knob = SearchSpace.from_dict(GOOD).knob("f")
    assert knob.flag_for("1.9") == "old_f"
    assert knob.flag_for("2.0") == "new_f"


def test_unknown_knob_lists_the_knobs() -> None:
    with pytest.raises(SearchSpaceError, match="its knobs are: kind, n, m, f, on"):
        SearchSpace.from_dict(GOOD).knob("x")


def test_a_misspelt_knob_names_the_knob_meant() -> None:
    space = SearchSpace.from_dict(GOOD)
    with pytest.raises(SearchSpaceError, match=r"has no knob 'kin'; did you mean 'kind'\?$"):
        space.knob("kin")
    with pytest.raises(SearchSpaceError, match="unknown knob 'kinds'; did you mean 'kind'"):
        space.validate_config({"kinds": 1})

"""The shipped YAML files parse to the same values through libyaml's C parser as through
PyYAML's pure-Python one, and the C parser is the one used where PyYAML has it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from search_spaces import fast_yaml

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted([*(ROOT / "search_spaces").glob("*.yaml"),
                  *(ROOT / "objectives" / "workloads").glob("*.yaml")])


def test_the_shipped_files_are_found() -> None:
    assert any(p.parent.name == "search_spaces" for p in SHIPPED)
    assert any(p.parent.name == "workloads" for p in SHIPPED)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_shipped_file_parses_to_the_same_values(path: Path) -> None:
    text = path.read_text()
    assert fast_yaml.safe_load(text) == yaml.safe_load(text)


def test_the_c_parser_is_used_where_pyyaml_has_it() -> None:
    expected = yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader
    assert fast_yaml._LOADER is expected


@pytest.mark.parametrize("text", ["a: [1, 2", "a: !!python/object:os.system x"])
def test_bad_or_unsafe_yaml_is_a_yaml_error(text: str) -> None:
    with pytest.raises(yaml.YAMLError):
        fast_yaml.safe_load(text)

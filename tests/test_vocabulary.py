"""knowledge/ and advisor/ name no engine, target, knob or dataset: targets declare their own.

A new engine (one YAML, one module, one registry line) must not need an edit in the generic
layers, so they may not spell its vocabulary. The forbidden words are read from the registries
and the search-space YAMLs, never written here, so a new target is covered the day it is added:
- a string constant (docstrings excluded) equal to a target name, an engine package name, a knob
  name of any search space, or a dataset name the workloads know;
- an identifier, comment or docstring containing a target or engine name as a word.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import yaml

from objectives.datasets.vectors import DATASETS
from objectives.registry import target_class, target_names
from objectives.target import Target
from search_spaces import SPACES_DIR

ROOT = Path(__file__).resolve().parent.parent
GENERIC_PACKAGES = ("advisor", "knowledge")


def _spellings(name: str) -> set[str]:
    """``name`` as prose and code write it: ``tensorrt-llm``, ``tensorrt_llm``, ``tensorrtllm``,
    ``llama.cpp`` for ``llama_cpp``."""
    lowered = name.lower()
    parts = [p for p in re.split(r"[-_.\s]+", lowered) if p]
    return {lowered, "".join(parts), "_".join(parts), "-".join(parts), ".".join(parts)}


def _target_classes() -> list[type[Target]]:
    return [target_class(name) for name in target_names()]


@cache
def _spaces() -> list[dict]:
    return [yaml.safe_load(path.read_text(encoding="utf-8"))
            for path in sorted(SPACES_DIR.glob("*.yaml"))]


@cache
def forbidden_words() -> frozenset[str]:
    """Target and engine names (with their declared aliases), lower case, every spelling."""
    names: set[str] = set(target_names())
    for cls in _target_classes():
        names.add(cls.engine)
        names.update(cls.aliases)
    names.update(str(space.get("engine", "")) for space in _spaces())
    return frozenset(s for name in names if name for s in _spellings(name))


@cache
def forbidden_constants() -> frozenset[str]:
    """Exact string constants: target, engine, knob and dataset names."""
    knobs = {str(k["name"]) for space in _spaces() for k in space.get("knobs", [])}
    names = set(target_names()) | set(DATASETS) | knobs
    for cls in _target_classes():
        names.add(cls.engine)
    names.update(str(space.get("engine", "")) for space in _spaces())
    return frozenset(n for n in names if n)


def _word_pattern() -> re.Pattern[str]:
    words = sorted(forbidden_words(), key=len, reverse=True)
    return re.compile(r"(?<![a-z0-9])(" + "|".join(map(re.escape, words)) + r")(?![a-z0-9])")


def _identifier_words(identifier: str) -> str:
    """``FaissTarget`` -> ``faiss_target``: camel case split so that a name is a word."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", identifier).lower()


def _docstring_nodes(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                ids.add(id(body[0].value))
    return ids


def _identifiers(tree: ast.AST) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Name):
            yield line, node.id
        elif isinstance(node, ast.Attribute):
            yield line, node.attr
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield line, node.name
        elif isinstance(node, ast.arg | ast.keyword) and node.arg:
            yield line, node.arg
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield line, node.module
            for alias in node.names:
                yield line, alias.asname or alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield line, alias.asname or alias.name


def violations(path: Path) -> list[str]:
    """Every place in ``path`` that names a target, engine, knob or dataset."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    words = _word_pattern()
    constants = forbidden_constants()
    docstrings = _docstring_nodes(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) in docstrings:
                match = words.search(node.value.lower())
                if match:
                    found.append(f"{rel}:{node.lineno}: docstring names {match.group(1)!r}")
            elif node.value in constants:
                found.append(f"{rel}:{node.lineno}: string constant {node.value!r}")
    for line, identifier in _identifiers(tree):
        match = words.search(_identifier_words(identifier))
        if match:
            found.append(f"{rel}:{line}: identifier {identifier!r} names {match.group(1)!r}")
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            match = words.search(token.string.lower())
            if match:
                found.append(f"{rel}:{token.start[0]}: comment names {match.group(1)!r}")
    return found


def generic_files() -> list[Path]:
    return sorted(p for pkg in GENERIC_PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def test_forbidden_lists_come_from_the_registries() -> None:
    # The lists are derived, so they hold what the registries and YAMLs hold.
    assert set(target_names()) <= forbidden_constants()
    assert {"faiss", "vllm"} <= forbidden_words()
    assert len(forbidden_constants()) > len(target_names())


def test_the_checker_finds_each_kind_of_name(tmp_path: Path) -> None:
    target, knob = sorted(target_names())[0], next(
        str(k["name"]) for space in _spaces() for k in space.get("knobs", []))
    probe = tmp_path / "probe.py"
    probe.write_text(f'"""Doc."""\nX = {target!r}\nY = {knob!r}\n# uses {target}\n'
                     f"def {target.replace('-', '_')}_thing() -> None:\n    pass\n",
                     encoding="utf-8")
    found = violations(probe)
    assert len(found) == 4, found


def test_generic_layers_name_no_engine_knob_or_dataset() -> None:
    found = [hit for path in generic_files() for hit in violations(path)]
    assert not found, "\n".join(
        [f"{len(found)} engine/target/knob/dataset names in knowledge/ or advisor/ "
         "(declare them on the target or its workload kind instead):", *found])

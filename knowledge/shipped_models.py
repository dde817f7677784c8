"""The fitted models of the shipped knowledge, shipped beside it so a fresh store answers at once.

A fresh store holds exactly the shipped trials files (:func:`knowledge.cache.content_key`), and
fitting them takes minutes on a small machine. ``scripts/knowledge/fit_shipped_models.py`` fits
them once and writes ``knowledge/data/fitted-models.pkl.xz`` with a small JSON key beside it: the
shipped data's content hash, the fitting code's version (:func:`fit_code_version`, a digest of
every module the fit runs) and the library versions the pickle needs. A store uses the file only
when all three match; otherwise it fits as before. ``tests/knowledge/test_shipped_models.py``
fails when the file is stale and names the command that regenerates it.

The pickle is read from this package's own data directory only, never from a path a caller or a
user gives.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import json
import logging
import lzma
import pickle
import threading
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from knowledge.transfer import FORMAT, SHIPPED_DIR, read_trials_text, shipped_files

__all__ = ["REGENERATE", "SHIPPED_KEY", "SHIPPED_MODELS", "ShippedKey", "library_versions",
           "read_shipped", "shipped_content", "shipped_key", "source_digest", "write_shipped"]

log = logging.getLogger(__name__)

#: The fitted models of the shipped knowledge, and their key (what they were fitted on).
SHIPPED_MODELS = SHIPPED_DIR / "fitted-models.pkl.xz"
SHIPPED_KEY = SHIPPED_DIR / "fitted-models.json"
#: The one command that regenerates both files (run from the repository root).
REGENERATE = "python scripts/knowledge/fit_shipped_models.py"
#: The packages a pickled model set holds objects of: another version may not unpickle them.
_LIBRARIES = ("scikit-learn", "numpy", "scipy")
#: The modules the pickled models' objects come from (the fitted trees): importing them is
#: most of the unpickling's time, and is done while the file decompresses.
_PICKLE_MODULES = ("sklearn.tree",)
_ROOT = Path(__file__).resolve().parent.parent
#: Where the fit starts: every module these import (at any depth, inside functions too), and
#: the load simulators the fit finds by entry point, are fitting code.
_FIT_ENTRY = ("knowledge.surrogates",)


@dataclass(frozen=True)
class ShippedKey:
    """What a fitted model set was fitted on and by."""

    content: str
    code: str
    family: str
    libraries: dict[str, str]

    def as_json(self) -> dict[str, Any]:
        return {"content": self.content, "code": self.code, "family": self.family,
                "libraries": self.libraries}


def shipped_content(directory: Path = SHIPPED_DIR) -> str:
    """The content key a fresh store of the shipped files has (:func:`knowledge.cache.
    content_key` over the import records those files leave), computed from the files."""
    texts = (read_trials_text(p) for p in shipped_files(directory))
    # A file of hardware profiles only adds no trial: the fit never sees it (content_key).
    digests = sorted(hashlib.sha256(text.encode()).hexdigest() for text in texts
                     if _holds_trials(text))
    return hashlib.sha256("\n".join(digests).encode()).hexdigest()[:16]


def _holds_trials(text: str) -> bool:
    """Whether a knowledge file's JSONL holds at least one trial line."""
    return any(json.loads(line).get("format") == FORMAT for line in text.splitlines()
               if line.strip())


def _module_file(name: str) -> Path | None:
    """The source file of project module ``name`` (a package's ``__init__.py``), or None when
    ``name`` is not a module of this repository."""
    base = _ROOT.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _imports(path: Path, module: str) -> set[str]:
    """The module names ``path`` (module ``module``) imports, anywhere in its body."""
    found: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[:len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # submodules
    return found


def _closure(entries: tuple[str, ...]) -> dict[str, Path]:
    """Every project module ``entries`` import, transitively. A package's ``__init__`` counts
    only where it is imported by name: what it re-exports does not change a fit."""
    seen: dict[str, Path] = {}
    todo = list(entries)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        path = _module_file(name)
        if path is None:
            continue
        seen[name] = path
        todo.extend(_imports(path, name))
    return seen


@functools.cache
def source_digest() -> str:
    """A digest of the fitting code's sources: every project module the surrogate fit imports
    (at any depth), the load simulators it finds by entry point, and the search spaces.
    :func:`knowledge.cache.fit_code_version` adds the part of the cache that groups trials."""
    from knowledge.curve_blend import ENTRY_POINT_GROUP

    simulators = tuple(p.module for p in metadata.entry_points(group=ENTRY_POINT_GROUP))
    digest = hashlib.sha256()
    for name, path in sorted(_closure(_FIT_ENTRY + simulators).items()):
        digest.update(f"{name}\n".encode())
        digest.update(path.read_bytes())
    for space in sorted((_ROOT / "search_spaces").glob("*.yaml")):  # the knobs' definitions
        digest.update(f"{space.name}\n".encode())
        digest.update(space.read_bytes())
    return digest.hexdigest()


@functools.cache
def library_versions() -> dict[str, str]:
    """The installed versions of the libraries a pickled model set holds objects of."""
    versions = {}
    for name in _LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions


def shipped_key(path: Path = SHIPPED_KEY) -> ShippedKey | None:
    """The key of the shipped model set, or None when there is none (or it is unreadable)."""
    try:
        raw = json.loads(path.read_text())
        return ShippedKey(str(raw["content"]), str(raw["code"]), str(raw["family"]),
                          {str(k): str(v) for k, v in dict(raw["libraries"]).items()})
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _trees(obj: Any, seen: set[int]) -> Any:
    """Every scikit-learn decision tree structure (``tree_``) reachable from ``obj``."""
    from sklearn.tree._tree import Tree

    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, Tree):
        yield obj
    elif isinstance(obj, list | tuple):
        for item in obj:
            yield from _trees(item, seen)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _trees(item, seen)
    elif hasattr(obj, "__dict__"):
        for item in vars(obj).values():
            yield from _trees(item, seen)


def _drop_tree_statistics(models: Any) -> int:
    """Zero the per-node training statistics of every tree in ``models`` (impurity, sample
    counts): the surrogates only call ``tree_.predict`` (knowledge/surrogates/families.py),
    which reads the splits and leaf values alone, so predictions are unchanged, and the zeros
    compress to nothing (a third off the shipped file). Returns the trees changed."""
    changed = 0
    for context in models.contexts.values():
        for metric in context.metrics.values():
            for tree in _trees(metric.fitted(), set()):
                state = tree.__getstate__()
                nodes = state["nodes"].copy()
                for name in ("impurity", "n_node_samples", "weighted_n_node_samples"):
                    nodes[name] = 0
                state["nodes"] = nodes
                tree.__setstate__(state)
                changed += 1
    return changed


def write_shipped(models: Any, key: ShippedKey, cache_format: int) -> None:
    """Write ``models`` (a :class:`knowledge.cache.KnowledgeModels` of ``cache_format``) and
    ``key`` as the shipped model set (compressed; the key beside it in JSON, so a check reads no
    pickle). Their trees lose the statistics no prediction reads (:func:`_drop_tree_statistics`)."""
    _drop_tree_statistics(models)
    data = pickle.dumps({"format": cache_format, "key": key.as_json(), "models": models},
                        protocol=pickle.HIGHEST_PROTOCOL)
    tmp = SHIPPED_MODELS.with_suffix(".tmp")
    tmp.write_bytes(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME))
    tmp.replace(SHIPPED_MODELS)
    SHIPPED_KEY.write_text(json.dumps(key.as_json(), indent=2, sort_keys=True) + "\n")


def _decompressed() -> bytes:
    """The shipped pickle, decompressed in a second thread while this one imports the modules
    its objects come from: xz releases the GIL, so on a second core the two overlap instead of
    adding up (each about a second of a fresh store's first answer)."""
    box: dict[str, Any] = {}

    def decompress() -> None:
        try:
            box["data"] = lzma.decompress(SHIPPED_MODELS.read_bytes())
        except BaseException as exc:  # re-raised below, in the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=decompress, name="shipped-models-xz", daemon=True)
    worker.start()
    try:
        for module in _PICKLE_MODULES:
            importlib.import_module(module)
    finally:
        worker.join()
    if "error" in box:
        raise box["error"]
    data: bytes = box["data"]
    return data


def read_shipped(expected: ShippedKey, cache_format: int) -> Any | None:
    """The shipped model set when its key is ``expected`` (the store's content, this fitting
    code, these library versions) and it was written in ``cache_format``; else None (the caller
    fits)."""
    key = shipped_key()
    if key is None or key.content != expected.content or key.family != expected.family:
        return None
    if key != expected:
        log.info("the shipped models were fitted by other code or libraries (%s, now %s): "
                 "fitting here", key, expected)
        return None
    try:
        # The project's own file in its own data directory (the fixed path above), never a
        # file a caller names.
        payload = pickle.loads(_decompressed())
    except (OSError, lzma.LZMAError, pickle.UnpicklingError, EOFError, AttributeError,
            ImportError) as exc:
        log.warning("cannot read the shipped models %s: %s", SHIPPED_MODELS.name, exc)
        return None
    if (not isinstance(payload, dict) or payload.get("format") != cache_format
            or payload.get("key") != key.as_json()):
        return None
    return payload.get("models")

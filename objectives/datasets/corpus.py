"""A real text corpus available offline: the docstrings of the CPython standard library.

Every Python installation ships it, so the vector-search workload needs no download. Docstrings
are read by parsing the stdlib sources with :mod:`ast` (nothing is imported, so no module's import
side effects run), split into paragraphs and deduplicated. Passages are then ordered by the sha256
of their text: a fixed order that does not depend on the file layout and spreads any prefix over
the whole library, so ``load_passages(2000)`` is a sample of every module, not of ``a*.py``.
"""

from __future__ import annotations

import ast
import gc
import hashlib
import logging
import os
import platform
import sysconfig
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

from advisor.errors import DataError

__all__ = [
    "CORPUS_NAME",
    "MIN_WORDS",
    "corpus_provenance",
    "holds",
    "load_passages",
    "passages_sha256",
    "stdlib_dir",
]

logger = logging.getLogger(__name__)

CORPUS_NAME = "python-stdlib-docstrings"
#: Shorter paragraphs ("Return self.", "See above.") carry too little meaning to retrieve.
MIN_WORDS = 8
# Test suites and demo/tool packages are mostly fixtures, not documentation; site-packages holds
# whatever the user installed, which would make the corpus differ between machines.
_SKIP_DIRS = frozenset({"site-packages", "test", "tests", "idlelib", "lib2to3", "turtledemo"})
_DOC_NODES = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
_DocNode = ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
#: The fields of a node that hold statements (``handlers`` and ``cases`` hold the ``except`` and
#: ``case`` blocks, whose ``body`` holds statements).
_STATEMENT_FIELDS = ("body", "orelse", "finalbody", "handlers", "cases")


def stdlib_dir() -> Path:
    """The directory holding this interpreter's standard-library sources."""
    return Path(sysconfig.get_paths()["stdlib"])


def _source_files(root: Path) -> Iterator[Path]:
    """Every ``.py`` file under ``root`` outside the skipped directories, in sorted order."""
    for dirpath, dirnames, filenames in os.walk(root):
        # Sorting in place makes os.walk descend in a fixed order on every filesystem.
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(".py"):
                yield Path(dirpath) / name


def _doc_nodes(tree: ast.Module) -> list[_DocNode]:
    """The module, class and function nodes of ``tree``, found through statement lists only.

    A class or function is a statement, and expressions hold no statements, so following the
    fields that hold statements (a body, an ``else``, ``finally``, ``except`` and ``case``
    blocks) finds every one that :func:`ast.walk` finds, without visiting the expressions: a
    third of the corpus's build time, which the first check of a workload waits for."""
    found: list[_DocNode] = []
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, _DOC_NODES):
            found.append(node)
        for name in _STATEMENT_FIELDS:
            todo.extend(getattr(node, name, ()))
    return found


def _docstrings(path: Path) -> Iterator[str]:
    """Docstrings of the module, classes and functions in ``path``, in source order."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError, OSError) as exc:
        # A few stdlib files are deliberately unparsable or unreadable; they hold no prose we need.
        logger.debug("skipping %s: %s", path, exc)
        return
    nodes = _doc_nodes(tree)
    nodes.sort(key=lambda n: getattr(n, "lineno", 0))
    for node in nodes:
        doc = ast.get_docstring(node, clean=True)
        if doc:
            yield doc


def _paragraphs(doc: str) -> Iterator[str]:
    """Blank-line separated paragraphs with whitespace collapsed; doctest blocks dropped."""
    block: list[str] = []
    for line in [*doc.splitlines(), ""]:
        if line.strip():
            block.append(line)
            continue
        if block:
            text = " ".join(" ".join(block).split())
            block = []
            if not text.startswith(">>>"):
                yield text


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside: parsing the stdlib allocates millions of AST nodes,
    and each allocation burst starts a collection that walks every tracked object of the
    process. In a process already holding the fitted models (200k objects), the collections
    doubled the parse (3 s instead of 1.3 s on 2 cores). The trees hold no reference cycles:
    reference counting frees each file's tree as the next one is parsed."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _Scan:
    """The stdlib read file by file, only as far as asked: a workload check needs to know that
    the corpus holds ``n`` passages (:func:`holds`), and ``stdlib-docs-2k`` finds its 2,100 in
    the first quarter of the files; a second request carries on where the first stopped, so
    nothing is parsed twice. Passages are kept in the order found; :func:`_corpus` sorts them."""

    def __init__(self, root: Path) -> None:
        self._files = _source_files(root)
        self._seen: set[str] = set()
        self.found: list[str] = []
        self.done = False

    def until(self, n: int | None) -> None:
        """Read on until ``n`` passages are found (``None``: every file)."""
        with _cyclic_gc_paused():
            while not self.done and (n is None or len(self.found) < n):
                path = next(self._files, None)
                if path is None:
                    self.done = True
                    self._seen.clear()  # the found list holds them; no file is left to dedupe
                    break
                for doc in _docstrings(path):
                    for text in _paragraphs(doc):
                        if len(text.split()) >= MIN_WORDS and text not in self._seen:
                            self._seen.add(text)
                            self.found.append(text)


@lru_cache(maxsize=1)
def _scan() -> _Scan:
    root = stdlib_dir()
    if not root.is_dir():
        raise DataError(
            f"the standard-library sources are not at {root}; cannot build {CORPUS_NAME}"
        )
    return _Scan(root)


@lru_cache(maxsize=1)
def _corpus() -> tuple[str, ...]:
    scan = _scan()
    scan.until(None)
    if not scan.found:
        raise DataError(f"no docstring passages found under {stdlib_dir()}")
    return tuple(sorted(scan.found, key=lambda text: hashlib.sha256(text.encode()).digest()))


def holds(n: int) -> bool:
    """Whether the corpus has at least ``n`` passages, reading only as much of the stdlib as that
    takes (the whole of it when it has fewer)."""
    scan = _scan()
    scan.until(n)
    return len(scan.found) >= n


def load_passages(limit: int | None = None) -> list[str]:
    """The first ``limit`` passages of the corpus (all of them for ``None``), in corpus order.

    Raises :class:`DataError` when the corpus holds fewer than ``limit`` passages.
    """
    passages = _corpus()
    if limit is None:
        return list(passages)
    if limit < 0:
        raise DataError(f"`limit >= 0` must hold, but got {limit=}")
    if limit > len(passages):
        raise DataError(
            f"asked for {limit} passages but {CORPUS_NAME} (Python {platform.python_version()}) "
            f"has only {len(passages)}"
        )
    return list(passages[:limit])


def passages_sha256(passages: list[str] | tuple[str, ...]) -> str:
    """sha256 over the NUL-separated passages: equal hashes mean equal texts in equal order."""
    digest = hashlib.sha256()
    for text in passages:
        digest.update(text.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def corpus_provenance(passages: list[str] | None = None) -> dict[str, Any]:
    """Where ``passages`` (the whole corpus by default) came from, for recording with a study."""
    texts = _corpus() if passages is None else passages
    return {
        "name": CORPUS_NAME,
        "python_version": platform.python_version(),
        # Where the corpus came from, without this machine's paths (provenance is published).
        "source": f"{platform.python_implementation()} {platform.python_version()} stdlib",
        "min_words": MIN_WORDS,
        "n_passages": len(texts),
        "sha256": passages_sha256(texts),
    }

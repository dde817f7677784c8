"""The docstring corpus (objectives/datasets/corpus.py) finds its nodes through statement lists
only: exactly the module, class and function nodes :func:`ast.walk` finds, wherever they sit."""

from __future__ import annotations

import ast
import hashlib
import textwrap

from objectives.datasets import corpus

#: A function or class in every kind of block a statement can sit in.
NESTED = textwrap.dedent('''
    """Module."""
    import sys
    if sys.platform == "x":
        def in_if():
            """If."""
    elif sys:
        class InElif:
            """Elif."""
    else:
        async def in_else():
            """Else."""
    for _ in ():
        def in_for():
            """For."""
    else:
        def in_for_else():
            """For-else."""
    while False:
        def in_while():
            """While."""
    try:
        def in_try():
            """Try."""
    except ValueError:
        def in_except():
            """Except."""
    else:
        def in_try_else():
            """Try-else."""
    finally:
        def in_finally():
            """Finally."""
    try:
        pass
    except* OSError:
        def in_except_star():
            """Except-star."""
    with open(__file__):
        def in_with():
            """With."""
    match sys.argv:
        case [x]:
            def in_case():
                """Case."""
    class Outer:
        """Outer."""
        @staticmethod
        def method():
            """Method."""
            def inner():
                """Inner."""
                return lambda: (lambda: None)
            async def inner_async():
                """Inner async."""
    f = lambda: [x for x in ()]
''')


def _walked(tree: ast.Module) -> list[ast.AST]:
    return [n for n in ast.walk(tree) if isinstance(n, corpus._DOC_NODES)]


def test_every_nested_definition_is_found() -> None:
    tree = ast.parse(NESTED)
    found = corpus._doc_nodes(tree)
    assert len(found) == len(_walked(tree)) == NESTED.count('"""') // 2  # one docstring each
    assert {id(n) for n in found} == {id(n) for n in _walked(tree)}


def test_the_stdlib_sources_give_the_nodes_ast_walk_gives() -> None:
    """On a sample of the real sources the corpus reads (every 20th file)."""
    files = list(corpus._source_files(corpus.stdlib_dir()))[::20]
    assert len(files) > 10
    for path in files:
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except (SyntaxError, ValueError):
            continue
        found = corpus._doc_nodes(tree)
        assert {id(n) for n in found} == {id(n) for n in _walked(tree)}, path
        lines = sorted(getattr(n, "lineno", 0) for n in found)
        assert len(set(lines)) == len(lines), f"{path}: two definitions share a line"


def test_the_parse_pauses_the_cyclic_gc_and_restores_its_state() -> None:
    import gc

    assert gc.isenabled()
    with corpus._cyclic_gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with corpus._cyclic_gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled(), "a caller's disabled gc stays disabled"
    finally:
        gc.enable()
    corpus._corpus.cache_clear()
    assert len(corpus.load_passages()) > 0 and gc.isenabled()


def test_a_read_stopped_early_and_resumed_gives_the_whole_corpus() -> None:
    scan = corpus._Scan(corpus.stdlib_dir())
    scan.until(10)
    assert len(scan.found) >= 10 and not scan.done  # the check stopped before the last file
    scan.until(None)
    assert scan.done
    resumed = tuple(sorted(scan.found, key=lambda text: hashlib.sha256(text.encode()).digest()))
    assert resumed == tuple(corpus.load_passages())


def test_the_corpus_holds_exactly_its_passages() -> None:
    n = len(corpus.load_passages())
    assert corpus.holds(1) and corpus.holds(n)
    assert not corpus.holds(n + 1)

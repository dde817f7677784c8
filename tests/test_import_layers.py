"""No import circle among the project's modules: a module never needs, directly or through
others, a module that needs it. Imports inside functions count too (a late import that closes a
circle is still a circle, only hidden), and so do ``TYPE_CHECKING`` imports."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("advisor", "api", "knowledge", "objectives", "search_spaces")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules ``name`` imports anywhere in its body: ``from a.b import c`` needs
    ``a.b.c`` when that is a module, else ``a.b``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {m for m in found if m in known and m != name}


def _circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The import circles of ``graph``: its strongly connected components of two or more
    modules (each module of one reaches every other through imports), found by Tarjan's
    algorithm."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            members = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                members.add(member)
                if member == node:
                    break
            if len(members) > 1:
                circles.append(frozenset(members))

    for start in sorted(graph):
        if start not in index:
            visit(start)
    return circles


def test_no_import_circle_among_project_modules() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, set(modules)) for name, path in modules.items()}
    circles = _circles(graph)
    assert not circles, "import circles: " + "; ".join(
        " <-> ".join(sorted(c)) for c in circles)


def test_the_circle_finder_finds_circles() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [
        frozenset({"a", "b", "c"})]
    assert _circles({"a": {"b"}, "b": set()}) == []


#: The packages below ``advisor`` in the one-way order (api -> advisor -> these).
_LOWER = ("knowledge", "objectives", "search_spaces")


def test_the_error_tree_is_the_ground_floor() -> None:
    """advisor/errors.py imports nothing of the project and ``advisor/__init__.py`` nothing at
    all, so the lower packages raise the one error tree without loading the rest of advisor."""
    modules = _modules()
    known = set(modules)
    assert not _imports("advisor.errors", modules["advisor.errors"], known)
    assert not _imports("advisor", modules["advisor"], known)


def test_lower_packages_import_nothing_of_advisor_or_api_but_the_error_tree() -> None:
    modules = _modules()
    known = set(modules)
    upward = sorted(
        f"{name} -> {imported}"
        for name, path in modules.items() if name.split(".")[0] in _LOWER
        for imported in _imports(name, path, known)
        if imported.split(".")[0] in ("advisor", "api") and imported != "advisor.errors")
    assert not upward, "imports against the one-way order: " + "; ".join(upward)

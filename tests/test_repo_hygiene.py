"""The checkout holds no unresolved merge: a conflict marker once reached main in the README."""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^(<{7}|>{7})( |$)|^={7}$", re.MULTILINE)
TEXT_SUFFIXES = {".md", ".py", ".yaml", ".yml", ".toml", ".sh", ".cfg", ".txt", ".html"}
SKIP_DIRS = {".git", ".venv", "node_modules", "__pycache__", ".vllm-h200", ".whl"}


def test_no_merge_conflict_markers() -> None:
    found = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]  # never walk into the virtualenv
        for name in files:
            path = Path(folder) / name
            if path.suffix not in TEXT_SUFFIXES:
                continue
            text = path.read_text(errors="replace")
            for match in MARKER.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                found.append(f"{path.relative_to(ROOT)}:{line}")
    assert not found, f"unresolved merge conflict markers: {found}"


#: A repository path as the docs and scripts name it (for the tools and campaign files).
_TOOL_PATH = re.compile(
    r"(?<![\w./-])((?:scripts|benchmarks|docs/benchmarks)/[\w./-]+\.(?:sh|py|yaml))")


def test_dated_one_off_scripts_live_beside_their_data() -> None:
    """scripts/ and benchmarks/ hold the reusable tools; a script of one dated campaign lives in
    docs/benchmarks/<campaign>/ with what it produced (scripts/device/README.md)."""
    dated = re.compile(r"_20\d\d_\d\d_\d\d\b")
    # scripts/knowledge/ rebuilds the shipped trial files from their raw exports: each script
    # there is how one shipped file is (re)made, and stays with the others.
    found = [str(p.relative_to(ROOT)) for folder in ("scripts", "benchmarks")
             for p in (ROOT / folder).rglob("*") if p.is_file() and dated.search(p.stem)
             and p.parent != ROOT / "scripts" / "knowledge"]
    assert not found, f"dated one-off scripts outside docs/benchmarks/: {found}"


def test_every_script_the_docs_and_scripts_name_exists() -> None:
    missing = []
    sources = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "scripts").rglob("*"),
               *(ROOT / "docs" / "benchmarks").rglob("*.sh"), *(ROOT / "tests").rglob("*.py")]
    for source in sources:
        if not source.is_file() or source.suffix not in TEXT_SUFFIXES:
            continue
        for match in _TOOL_PATH.finditer(source.read_text(errors="replace")):
            path = match.group(1).rstrip(".")
            if not (ROOT / path).exists():
                missing.append(f"{source.relative_to(ROOT)}: {path}")
    assert not missing, f"paths named but not in the repository: {sorted(set(missing))}"


def test_every_relative_link_in_the_readme_and_docs_resolves() -> None:
    """Docs move (dated narratives into docs/benchmarks/<campaign>/): a link left behind fails
    here rather than in a reader's browser."""
    link = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
    broken = []
    for page in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for match in link.finditer(text):
            target = match.group(1).split("#", 1)[0]
            if not target or re.match(r"^[a-z]+:", target):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)}: {match.group(1)}")
    assert not broken, f"links to nothing: {broken}"


def _heading_anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a Markdown page's headings: lower case, punctuation but hyphens
    and underscores dropped, spaces as hyphens, a repeated heading numbered -1, -2, ..."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6}\s+(.*?)\s*#*\s*$", text, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def test_every_link_anchor_in_the_readme_and_docs_names_a_heading() -> None:
    """A section moved (or renamed) out of a page takes its anchor with it: a `page.md#section`
    link left behind would open the page at its top, silently."""
    link = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
    broken = []
    for page in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for match in link.finditer(text):
            target, _, anchor = match.group(1).partition("#")
            if not anchor or re.match(r"^[a-z]+:", target):
                continue
            linked = page if not target else page.parent / target
            if linked.is_dir():
                linked = linked / "README.md"
            if linked.suffix != ".md" or not linked.exists():
                continue  # a missing file is the test above's to report
            if anchor not in _heading_anchors(linked):
                broken.append(f"{page.relative_to(ROOT)}: {match.group(1)}")
    assert not broken, f"links to a heading no page has: {broken}"

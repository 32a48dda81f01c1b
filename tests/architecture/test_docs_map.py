"""docs/architecture.md's map lists every package of the product, once, and nothing else.

The map is the fenced block right after the ``<!-- package-map -->`` marker: one line per
package, ``path/  — what it holds``. A package is a directory with an ``__init__.py`` under one
of the product's top-level packages, migrations left out.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPS = ("bhgbrain_site", "memories", "search", "categories", "retention", "mcp_bridge")
MAP_DOC = ROOT / "docs" / "architecture.md"
MARKER = "<!-- package-map"
LINE = re.compile(r"^(?P<path>[a-z_][a-z0-9_]*(?:/[a-z_][a-z0-9_]*)*/)\s+—\s+(?P<what>\S.*)$")


def packages_on_disk() -> set[str]:
    found = set()
    for app in APPS:
        for init in (ROOT / app).rglob("__init__.py"):
            folder = init.parent.relative_to(ROOT)
            if "migrations" not in folder.parts and "__pycache__" not in folder.parts:
                found.add(f"{folder.as_posix()}/")
    return found


def map_lines(text: str) -> list[str]:
    """The lines of the fenced block that follows the marker."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(MARKER))
    fence = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("```"))
    end = next(i for i in range(fence + 1, len(lines)) if lines[i].startswith("```"))
    return [line for line in lines[fence + 1:end] if line.strip()]


def parse_map(text: str) -> list[str]:
    paths = []
    for line in map_lines(text):
        match = LINE.match(line)
        assert match, f"not a map line (expected 'path/  — what it holds'): {line!r}"
        paths.append(match["path"])
    return paths


def test_the_map_lists_every_package_and_only_those() -> None:
    listed = parse_map(MAP_DOC.read_text(encoding="utf-8"))
    on_disk = packages_on_disk()
    assert on_disk, "no package found: is ROOT the repository root?"
    assert sorted(on_disk - set(listed)) == [], "packages missing from the map in docs/architecture.md"
    assert sorted(set(listed) - on_disk) == [], "the map lists packages that do not exist"


def test_each_package_has_exactly_one_line() -> None:
    listed = parse_map(MAP_DOC.read_text(encoding="utf-8"))
    assert sorted(p for p in set(listed) if listed.count(p) > 1) == []


def test_the_parser_catches_a_missing_and_an_extra_package() -> None:
    """The check above can fail: a map without one real package, or with a made-up one, differs."""
    text = MAP_DOC.read_text(encoding="utf-8")
    listed = parse_map(text)
    dropped = "\n".join(line for line in text.splitlines() if not line.startswith("memories/indexes/ "))
    assert set(listed) - set(parse_map(dropped)) == {"memories/indexes/"}
    added = text.replace("mcp_bridge/  ", "mcp_bridge/made_up/  — nothing\nmcp_bridge/  ", 1)
    assert set(parse_map(added)) - packages_on_disk() == {"mcp_bridge/made_up/"}

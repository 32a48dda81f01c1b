"""The shape the import contracts (.importlinter) and the write funnel promise, checked on the tree."""
from __future__ import annotations

import ast
import configparser
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPS = ("bhgbrain_site", "memories", "search", "categories", "retention", "mcp_bridge")


def _layers() -> list[set[str]]:
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    raw = config["importlinter:contract:layers"]["layers"]
    return [{m.strip() for m in re.split(r"[|:]", line) if m.strip()} for line in raw.strip().splitlines()]


def _product_files() -> list[Path]:
    return [p for app in APPS for p in (ROOT / app).rglob("*.py") if "migrations" not in p.parts]


def test_every_shell_and_ground_module_sits_in_a_layer() -> None:
    """bhgbrain_site holds both the ground and the shell: a module or package listed in no layer
    would escape the layers contract."""
    listed = set().union(*_layers())
    site = ROOT / "bhgbrain_site"
    modules = {f"bhgbrain_site.{p.stem}" for p in site.glob("*.py") if p.stem != "__init__"}
    packages = {f"bhgbrain_site.{p.parent.name}" for p in site.glob("*/__init__.py")}
    assert (modules | packages) - listed == set()


def test_no_folder_of_product_code_holds_more_than_twenty_modules() -> None:
    """A folder is a table of contents: past ~20 modules its modules are grouped by role."""
    crowded = {
        str(folder.relative_to(ROOT)): count
        for app in APPS for folder in [ROOT / app, *(ROOT / app).rglob("*")]
        if folder.is_dir() and "migrations" not in folder.parts and "__pycache__" not in folder.parts
        and (count := len([p for p in folder.glob("*.py") if p.name != "__init__.py"])) > 20
    }
    assert crowded == {}


def test_audit_and_feed_rows_are_written_by_the_funnel_only() -> None:
    pattern = re.compile(r"\b(?:AuditLog|ChangeFeedEntry)\(|\b(?:AuditLog|ChangeFeedEntry)\.objects\.(?:create|bulk_create)")
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in _product_files() if path.name not in ("funnel.py", "models.py")
        for number, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)
    ]
    assert offenders == []


def test_no_domain_module_imports_the_mcp_bridge() -> None:
    offenders = [
        str(path.relative_to(ROOT)) for path in _product_files()
        if path.parts[-2] != "mcp_bridge" and "mcp_bridge" in path.read_text() and re.search(
            r"^\s*(from|import) mcp_bridge", path.read_text(), re.MULTILINE)
        and not str(path.relative_to(ROOT)).startswith(("bhgbrain_site/asgi.py", "bhgbrain_site/cli/main.py"))
    ]
    assert offenders == []


def test_no_class_of_product_code_reaches_three_hundred_lines() -> None:
    """A class past ~300 lines holds more than one role: split it (the engines' storage, capture
    and statistics are classes of their own)."""
    large = {
        f"{path.relative_to(ROOT)}:{node.name}": node.end_lineno - node.lineno + 1
        for path in _product_files() for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 >= 300
    }
    assert large == {}

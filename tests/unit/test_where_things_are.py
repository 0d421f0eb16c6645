"""docs/ARCHITECTURE.md's "Where things are" table stays true: every row names a file of the
repository and a symbol that file defines (a function, class or constant at the top level,
or `Class.method`), so a moved or renamed symbol fails here instead of misleading a reader."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "ARCHITECTURE.md"
ROW = re.compile(r"^\|(?P<what>[^|]+)\|\s*`(?P<file>[^`]+)`\s*\|\s*`(?P<symbol>[^`]+)`\s*\|\s*$")


def _rows() -> list[tuple[str, str, str]]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Where things are", 1)[1].split("\n## ", 1)[0]
    return [(m["what"].strip(), m["file"], m["symbol"]) for line in section.splitlines()
            if (m := ROW.match(line.strip()))]


def _defines(tree: ast.Module, symbol: str) -> bool:
    """Whether the module defines `symbol` ("name" or "Class.method") at its top level."""
    scope: list[ast.stmt] = tree.body
    *owners, name = symbol.split(".")
    for owner in owners:
        found = [n for n in scope if isinstance(n, ast.ClassDef) and n.name == owner]
        if not found:
            return False
        scope = found[0].body
    for node in scope:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign) else [])
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
    return False


def test_the_table_names_the_behaviours_the_issue_asks_for():
    text = " ".join(what for what, _, _ in _rows()).lower()
    for behaviour in ("4r weights", "tenant comes from", "re-scored", "pdf", "restarts a service",
                      "qdrant maps", "expansion is called", "grpc server span", "bm25 scores",
                      "commits atomically"):
        assert behaviour in text, f"no row for {behaviour!r}"


@pytest.mark.parametrize(("what", "file", "symbol"), _rows(), ids=lambda v: v if "/" in str(v) else None)
def test_each_row_names_a_file_that_defines_its_symbol(what, file, symbol):
    path = ROOT / file
    assert path.is_file(), f"{what}: {file} does not exist"
    assert _defines(ast.parse(path.read_text(encoding="utf-8")), symbol), f"{what}: {file} does not define {symbol}"


def test_a_stale_row_is_caught():
    tree = ast.parse((ROOT / "services/knowledge_store/qdrant/filters.py").read_text(encoding="utf-8"))
    assert _defines(tree, "conditions") and not _defines(tree, "conditions_renamed")
    store = ast.parse((ROOT / "services/knowledge_store/qdrant/writes.py").read_text(encoding="utf-8"))
    assert _defines(store, "Writes._write") and not _defines(store, "Writes._commit")

"""Settings that fit on one page (docs/SETTINGS.md): the reference table is generated from the
settings objects and lists every variable once; a `NUCLEUS_*` variable nothing reads is logged
at start, naming it; and no product module reads a `NUCLEUS_*` variable itself (the settings
objects do, for the composition roots: the services' and the CLI's; `benchmarks/` start stacks
and are roots of their own)."""
from __future__ import annotations

import ast
import importlib.util
import logging
import re
from pathlib import Path

from shared.settings import HANDED_TO_SOURCES, known_env_names, warn_unknown_env

ROOT = Path(__file__).resolve().parents[2]
TABLE_ROW = re.compile(r"^\| `(NUCLEUS_[A-Z0-9_]+)` \|", re.M)
#: Where the environment is read on purpose: the settings objects, and the conversion worker's
#: documented hand-off of its limits (shared/documents/limits.py).
READERS = {"shared/settings.py", "shared/documents/limits.py"}


def _generator():
    spec = importlib.util.spec_from_file_location("gen_settings_doc", ROOT / "scripts" / "gen_settings_doc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_reference_table_is_generated_and_lists_every_setting_once():
    text = (ROOT / "docs" / "SETTINGS.md").read_text(encoding="utf-8")
    assert text == _generator().render(), "docs/SETTINGS.md is stale: run python scripts/gen_settings_doc.py"
    listed = TABLE_ROW.findall(text)
    twice = sorted({name for name in listed if listed.count(name) > 1})
    assert not twice, f"listed twice: {twice}"
    missing = sorted(known_env_names() - set(HANDED_TO_SOURCES) - set(listed))   # those the stack sets
    assert not missing, f"settings missing from docs/SETTINGS.md: {missing}"
    assert not set(listed) - known_env_names(), "a row names a variable no setting reads"


def test_an_unknown_nucleus_variable_is_logged_by_name_and_a_known_one_is_not(caplog):
    environ = {"NUCLEUS_KS_FAISS_THREADS": "2", "NUCLEUS_RAG_DEADLNE_S": "3", "NUCLEUS_KS_HOST": "0.0.0.0",
               "NUCLEUS_INGEST_MAX_SHEET_ROWS": "10", "PATH": "/bin"}
    with caplog.at_level(logging.WARNING):
        unknown = warn_unknown_env(logging.getLogger("start"), environ)
    assert unknown == ["NUCLEUS_KS_FAISS_THREADS", "NUCLEUS_RAG_DEADLNE_S"]
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "NUCLEUS_KS_FAISS_THREADS is set but no setting reads it" in logged and "NUCLEUS_RAG_DEADLNE_S" in logged
    assert "NUCLEUS_KS_HOST" not in logged and "NUCLEUS_INGEST_MAX_SHEET_ROWS" not in logged


def _environment_reads(tree: ast.AST):
    """(line, key) of each read of os.environ / os.getenv whose key mentions NUCLEUS_."""
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Call) and node.args and ast.unparse(node.func) in (
                "os.environ.get", "os.getenv", "environ.get", "getenv"):
            key = node.args[0]
        elif (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load)
              and ast.unparse(node.value) in ("os.environ", "environ")):
            key = node.slice
        if key is not None and "NUCLEUS_" in ast.unparse(key):
            yield node.lineno, ast.unparse(key)


def test_no_product_module_reads_a_nucleus_variable_outside_the_settings():
    found = [f"{path.relative_to(ROOT)}:{line} {key}"
             for package in ("services", "shared", "ranking", "cli")
             for path in sorted((ROOT / package).rglob("*.py"))
             if str(path.relative_to(ROOT)) not in READERS
             for line, key in _environment_reads(ast.parse(path.read_text(encoding="utf-8")))]
    assert not found, found


def test_the_environment_read_finder_finds_a_read():
    tree = ast.parse('import os\nx = os.environ.get("NUCLEUS_X")\ny = os.environ[f"NUCLEUS_{n}"]\n')
    assert [line for line, _ in _environment_reads(tree)] == [2, 3]

"""The layer order is a contract, not a hope: generated nucleus.v1 <- shared <- ranking <-
services <- the operator application (cli, benchmarks). The contracts live in pyproject.toml
([tool.importlinter]); these tests run them on the tree and show they catch a violation."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("nucleus", "shared", "ranking", "services", "cli", "benchmarks", "lab")
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LINT), "--no-cache", "--config", str(cwd / "pyproject.toml")],
                          cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin", "NO_COLOR": "1"})


def _copy_tree(dest: Path) -> Path:
    for name in PACKAGES:
        shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def test_every_import_contract_holds_on_the_tree():
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Dependencies point down only KEPT" in result.stdout


def test_an_upward_import_from_shared_breaks_the_layer_contract(tmp_path):
    tree = _copy_tree(tmp_path)
    records = tree / "shared" / "records.py"
    records.write_text(records.read_text() + "\nfrom services.rag_pipeline import core  # upward\n")
    result = _lint(tree)
    assert result.returncode != 0
    assert "Dependencies point down only BROKEN" in result.stdout
    assert "shared.records -> services.rag_pipeline.core" in result.stdout


def test_protobuf_in_the_ranking_core_breaks_its_contract(tmp_path):
    tree = _copy_tree(tmp_path)
    rank = tree / "ranking" / "rank.py"
    rank.write_text(rank.read_text() + "\nimport grpc  # transport in the numpy core\n")
    result = _lint(tree)
    assert result.returncode != 0
    assert "The ranking core is numpy only" in result.stdout and "BROKEN" in result.stdout


def test_the_qdrant_backend_borrowing_from_the_embedded_one_breaks_the_siblings_contract(tmp_path):
    tree = _copy_tree(tmp_path)
    search = tree / "services" / "knowledge_store" / "qdrant" / "search.py"
    search.write_text(search.read_text() + "\nfrom services.knowledge_store.embedded import search as _twin\n")
    result = _lint(tree)
    assert result.returncode != 0
    out = " ".join(result.stdout.split())       # the report wraps long lines
    assert "The KnowledgeStore's two backends are siblings: neither imports the other BROKEN" in out
    assert "services.knowledge_store.qdrant.search -> services.knowledge_store.embedded.search" in out


def test_an_adapter_importing_a_backend_breaks_the_front_contract(tmp_path):
    tree = _copy_tree(tmp_path)
    grpc_api = tree / "services" / "knowledge_store" / "grpc_api.py"
    grpc_api.write_text(grpc_api.read_text() + "\nfrom services.knowledge_store.embedded import topics as _topics\n")
    result = _lint(tree)
    assert result.returncode != 0
    out = " ".join(result.stdout.split())       # the report wraps long lines
    assert "imports neither backend BROKEN" in out
    assert "services.knowledge_store.grpc_api -> services.knowledge_store.embedded.topics" in out

"""The console works offline: its templates and stylesheet ship in the wheel (package data)."""
from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONSOLE = REPO / "services" / "rag_pipeline" / "console"
PACKAGES = ("nucleus", "shared", "services", "ranking", "cli", "benchmarks")


def test_the_wheel_holds_every_console_template_and_asset(tmp_path):
    source = tmp_path / "src"          # a copy: building leaves build/ and *.egg-info beside the sources
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    for package in PACKAGES:
        shutil.copytree(REPO / package, source / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path / "wheel"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(out), str(source)], check=True, timeout=600, cwd=tmp_path)
    wheel = next(out.glob("*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = [p.relative_to(REPO).as_posix() for d in ("templates", "static") for p in (CONSOLE / d).iterdir()]
    assert {"services/rag_pipeline/console/templates/base.html",
            "services/rag_pipeline/console/static/console.css"} <= set(shipped)
    assert not set(shipped) - names, f"missing from {wheel.name}: {sorted(set(shipped) - names)}"
    assert "services/rag_pipeline/console/app.py" in names

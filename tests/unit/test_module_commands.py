"""Every `python -m X` that README.md, docs/*.md or the Makefile names, where X is a module of
this repository, exists: its spec is found (nothing is imported or run), so a module moved
(e.g. from benchmarks/ to lab/) cannot leave a documented command dangling."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "Makefile")
COMMAND = re.compile(r"python3?\s+-m\s+([a-zA-Z_][\w.]*)|\$\(PY\)\s+-m\s+([a-zA-Z_][\w.]*)")


def _repo_packages() -> set[str]:
    """Top-level folders of the checkout that are importable packages (or namespace folders of
    Python modules): the names a repository module starts with."""
    return {p.name for p in ROOT.iterdir()
            if p.is_dir() and not p.name.startswith(".") and (p / "__init__.py").exists()}


def in_checkout(module: str) -> bool:
    """Whether `module` is found, and found in this checkout (an editable install of another
    checkout may answer for a name this one no longer has)."""
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError:
        return False
    return spec is not None and spec.origin is not None and Path(spec.origin).resolve().is_relative_to(ROOT)


def documented_modules() -> dict[str, list[str]]:
    """module -> where it is named (file:line), for the modules of this repository."""
    packages = _repo_packages()
    found: dict[str, list[str]] = {}
    for path in SOURCES:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for m in COMMAND.finditer(line):
                module = (m.group(1) or m.group(2)).rstrip(".")
                if module.split(".")[0] in packages:
                    found.setdefault(module, []).append(f"{path.relative_to(ROOT)}:{n}")
    return found


def test_every_documented_python_m_module_of_the_repo_exists(capsys):
    modules = documented_modules()
    with capsys.disabled():
        print(f"\n{len(modules)} documented `python -m` modules of the repository")
    assert len(modules) >= 10, modules          # the docs name many; none found means the parse broke
    assert any(m.startswith("lab.") for m in modules) and "cli.main" in modules, sorted(modules)
    missing = {m: where for m, where in modules.items() if not in_checkout(m)}
    assert not missing, f"documented but not found: {missing}"


def test_a_moved_module_would_be_caught():
    assert in_checkout("lab.fusion_lab")
    assert not in_checkout("benchmarks.fusion_lab")                    # moved to lab/
    assert not in_checkout("lab.no_such_module")
    assert "pytest" not in documented_modules()                        # not a module of the repo

"""No import cycles among the modules of shared/, services/, cli/ and the shipped benchmarks
(lab/ and the tests are left out: not shipped). The graph is built with `ast` from every import
statement, at module level and inside functions, of a module of the repository; `from x import
y` is an edge to `x.y` when that is a module, else to `x`; `import a.b.c` is an edge to `a.b.c` only (not to
its parent packages, so a package re-exporting its submodules is not a false cycle). Each
strongly connected component of more than one module is a cycle."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("shared", "services", "cli", "benchmarks")
#: Cycles known to remain, each with why it is allowed (printed by the test): none.
ALLOWED: dict[frozenset[str], str] = {}


def _modules(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {m for m in found if m in modules and m != name}


def import_graph(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    modules = _modules(root, packages)
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[frozenset[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(frozenset(component))
    return found


def test_shared_services_cli_and_the_shipped_benchmarks_have_no_import_cycle(capsys):
    graph = import_graph()
    found = cycles(graph)
    with capsys.disabled():
        print(f"\nimport graph: {len(graph)} modules, {sum(map(len, graph.values()))} edges, "
              f"{len(found)} cycles ({len([c for c in found if c in ALLOWED])} allowed)")
        for cycle in found:
            if cycle in ALLOWED:
                print(f"  allowed: {sorted(cycle)}: {ALLOWED[cycle]}")
    assert len(graph) > 100 and {"shared.settings", "cli.main", "benchmarks.harness"} <= graph.keys()
    assert not [sorted(c) for c in found if c not in ALLOWED]


def test_a_cycle_is_found_and_a_package_reexport_is_not(tmp_path):
    for rel, text in {"p/__init__.py": "from p.a import f\n", "p/a.py": "import p.b\ndef f(): ...\n",
                      "p/b.py": "def g():\n    from p import a\n", "p/c.py": "from . import d\n",
                      "p/d.py": "import p.c\n", "p/e.py": "import p\n"}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    graph = import_graph(tmp_path, ("p",))
    assert graph["p.b"] == {"p.a"} and graph["p.c"] == {"p.d"} and graph["p.e"] == {"p"}
    assert sorted(sorted(c) for c in cycles(graph)) == [["p.a", "p.b"], ["p.c", "p.d"]]

"""The package is a clean stack: no module imports, directly or through others, a module that
imports it back. Read from the source with ast, so every import counts: module-level and inside
functions, absolute and relative. A cycle fails the test and is printed as a path."""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set

PACKAGE = "horovod_q8"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE
ALLOWED: list = []  # strongly connected groups tolerated, each exactly as it stands (none)


def module_files(root: Path = ROOT) -> Dict[str, Path]:
    """Dotted module name -> file, for every .py under the package (__init__ names the package)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _base(module: str, is_package: bool, level: int, name: str | None) -> str:
    """The absolute name of `from <level dots><name> import ...` written in `module`."""
    if level == 0:
        return name or ""
    parts = module.split(".") if is_package else module.split(".")[:-1]
    parts = parts[:len(parts) - (level - 1)]
    return ".".join(parts + ([name] if name else []))


def imports_of(module: str, path: Path, modules: Set[str]) -> Set[str]:
    """The package's modules that `module` imports anywhere in its source."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    found: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _base(module, is_package, node.level, node.module)
            # `from pkg import name`: the submodule pkg.name where there is one, else pkg itself
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                       for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # `import a.b.c` of a name inside a module
                target = target.rpartition(".")[0]
            if target and target != module:
                found.add(target)
    return found


def import_graph(root: Path = ROOT) -> Dict[str, Set[str]]:
    files = module_files(root)
    return {m: imports_of(m, p, set(files)) for m, p in files.items()}


def groups(graph: Dict[str, Set[str]]) -> List[Set[str]]:
    """The strongly connected groups of more than one module: each is one or more cycles."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[Set[str]] = []

    def visit(v: str) -> None:  # Tarjan; the package is small enough for recursion
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """One cycle (a, b, ..., a) for every strongly connected group."""
    return [_path_in(group, graph) for group in groups(graph)]


def _path_in(group: Set[str], graph: Dict[str, Set[str]], start: str = "") -> List[str]:
    """A shortest way from `start` (default: the group's first module) back to it, inside the
    group."""
    start = start or min(group)
    previous = {start: None}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & group):
                if w == start:
                    path = [v]
                    while previous[path[-1]] is not None:
                        path.append(previous[path[-1]])
                    return path[::-1] + [start]
                if w not in previous:
                    previous[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle through {start} in {sorted(group)}")


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    found = [g for g in groups(graph) if g not in ALLOWED]
    allowed = set().union(*ALLOWED)
    assert not found, "import cycles (a -> b means a imports b):\n" + "\n".join(
        "  " + " -> ".join(_path_in(g, graph, min(g - allowed, default=""))) +
        f"\n    (all of {sorted(g)} reach one another)" for g in found)
    stale = [sorted(g) for g in ALLOWED if g not in groups(graph)]
    assert not stale, f"no longer a cycle: remove from ALLOWED: {stale}"


def test_the_walker_sees_every_kind_of_import(tmp_path):
    pkg = tmp_path / PACKAGE
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text("def f():\n    from .sub import high\n")  # relative, in a function
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "high.py").write_text("import horovod_q8.low\n")  # absolute, module level
    (pkg / "sub" / "other.py").write_text("from ..low import f\nfrom . import high\n")
    graph = import_graph(pkg)
    assert graph["horovod_q8.low"] == {"horovod_q8.sub.high"}
    assert graph["horovod_q8.sub.other"] == {"horovod_q8.low", "horovod_q8.sub.high"}
    assert cycles(graph) == [["horovod_q8.low", "horovod_q8.sub.high", "horovod_q8.low"]]
    assert groups(graph) == [{"horovod_q8.low", "horovod_q8.sub.high"}]

"""The package is a clean stack: no module imports, directly or through others, a module that
imports it back, and no room imports a room of a later row of docs/design.md's table (ROWS
below mirrors it; a test holds the two together). Read from the source with ast, so every import
counts: module-level and inside functions, absolute and relative. A cycle fails the test and is
printed as a path; an import across the table's rows is printed with its room and file."""
from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Dict, List, Set, Tuple, Union

PACKAGE = "horovod_q8"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE
ALLOWED: list = []  # strongly connected groups tolerated, each exactly as it stands (none)
DESIGN = ROOT.parent / "docs" / "design.md"
EARLIER, ANY = "earlier rows", "any room"
# docs/design.md's "Rooms, bottom to top": each row's rooms ("" the package's __init__) and the
# rooms they may import besides their own; rooms of one row do not import each other.
ROWS: Tuple[Tuple[Tuple[str, ...], Union[Tuple[str, ...], str]], ...] = (
    (("errors",), ()),
    (("_compat", "cores", "startup", "options"), ("errors",)),
    (("formats",), ("options",)),
    (("backends",), ("_compat", "cores", "formats")),
    (("codec",), ("backends", "formats")),
    (("collective",), ("_compat", "options", "formats", "backends", "codec")),
    (("tensorflow", "torch"), ("_compat", "options", "formats", "collective")),
    (("bench",), EARLIER),
    (("workloads",), ("tensorflow", "torch", "collective", "formats", "cores", "errors", "startup")),
    (("speedup",), ("formats", "codec", "collective", "bench", "workloads")),
    (("cluster",), ("cores", "startup")),
    (("launcher", "doctor", "doctor_paths", "cuda_version", "ddp_probe", "cli", ""), ANY),
)
# The exceptions the table names: a module (or a room's prefix) -> modules of other rooms it may import.
EXCEPTIONS = {
    "horovod_q8.backends.warmup": ("horovod_q8.codec",),
    "horovod_q8.bench": ("horovod_q8.workloads.common", "horovod_q8.workloads.datasets",
                         "horovod_q8.workloads.models"),
    "horovod_q8.workloads": ("horovod_q8.bench.common",),
}


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


def room_of(module: str) -> str:
    """The room of a module: its subpackage or top-level module ("" for the package itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def may_import(room: str) -> Set[str]:
    """The rooms `room` may import besides itself, by ROWS."""
    row = next(i for i, (rooms, _) in enumerate(ROWS) if room in rooms)
    allowed = ROWS[row][1]
    if allowed == ANY:
        return {r for rooms, _ in ROWS for r in rooms}
    if allowed == EARLIER:
        return {r for rooms, _ in ROWS[:row] for r in rooms}
    return set(allowed)


def across_rows(graph: Dict[str, Set[str]]) -> List[str]:
    """Every import of a room that its row may not import, as 'a (room) imports b (room)'."""
    found = []
    for module in sorted(graph):
        room = room_of(module)
        allowed = may_import(room) | {room}
        extra = {t for prefix, targets in EXCEPTIONS.items()
                 if module == prefix or module.startswith(prefix + ".") for t in targets}
        for target in sorted(graph[module]):
            if room_of(target) not in allowed and target not in extra:
                found.append(f"{module} ({room or 'the package'}) imports {target} ({room_of(target) or 'the package'})")
    return found


def design_rows(path: Path = DESIGN) -> List[Tuple[str, ...]]:
    """The rooms named in each row of design.md's room table: its first cell's `names`."""
    text = path.read_text()
    table = text[text.index("## Rooms, bottom to top"):]
    table = table[:table.index("\n## ", 1)]
    rows = []
    for line in table.splitlines():
        if line.startswith("| `"):
            cell = line.split("|")[1]
            names = re.findall(r"`([^`]+)`", cell)
            rows.append(tuple("" if n == "__init__.py" else n.removesuffix(".py").rstrip("/") for n in names))
    return rows


def test_every_room_is_in_the_table():
    rooms = {r for rooms, _ in ROWS for r in rooms}
    missing = sorted({room_of(m) for m in module_files()} - rooms)
    assert not missing, f"rooms in no row of ROWS and docs/design.md's table: {missing}"


def test_rows_mirror_design_md():
    assert design_rows() == [rooms for rooms, _ in ROWS]


def test_no_room_imports_a_later_row():
    found = across_rows(import_graph())
    assert not found, "imports the room table does not allow (docs/design.md):\n  " + "\n  ".join(found)


def test_across_rows_sees_an_upward_import(tmp_path):
    pkg = tmp_path / PACKAGE
    (pkg / "formats").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "formats" / "__init__.py").write_text("def f():\n    from horovod_q8 import codec\n")
    (pkg / "codec.py").write_text("from horovod_q8.formats import f\n")
    graph = import_graph(pkg)
    assert across_rows(graph) == ["horovod_q8.formats (formats) imports horovod_q8.codec (codec)"]

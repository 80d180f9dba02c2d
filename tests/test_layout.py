"""The package's layout rules, read from the source with ``ast`` (nothing is imported):

* no import cycle between modules;
* no module imports a stage above its own (STAGES, lowest first, as the README's Layout
  section draws them);
* no module over MAX_LINES lines.

An import counts wherever it stands (module level, a function, ``if TYPE_CHECKING``):
each shows what a module depends on. ``from pkg import name`` depends on ``pkg.name``
when that is a module, else on ``pkg`` (its ``__init__``).
"""
from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "jformer"
MAX_LINES = 400

# Stages, lowest first; a module may import its own stage and those below. A module's
# stage is that of the longest name here that it is, or lies inside.
STAGES: dict[str, int] = {
    # foundations: shapes, typed configs, the workdir's files and checkpoints, the mesh,
    # packages' names imported on first use
    "jformer.types": 0, "jformer.config": 0, "jformer.workdir": 0, "jformer.mesh": 0,
    "jformer.lazy": 0, "jformer.step_index": 0,
    # the plain forms: the paper's model, searches over a step function, text to batches
    "jformer.model": 1, "jformer.search": 1, "jformer.data": 1,
    # XLA:CPU speed-ups, each equal to the plain form it replaces (so it may read it),
    # and the one module that resolves model.ops into a set of either
    "jformer.kernels": 2, "jformer.ops": 2,
    "jformer.inference": 3,
    "jformer.train": 4,  # its validation BLEU uses the Translator
    "jformer.interop": 5, "jformer.serve": 5,
    "jformer.cli": 6, "jformer.__main__": 6, "jformer": 6,  # the root: the public API
}

# Imports of a higher stage allowed for now, each with the issue that removes it; only
# remove entries (a new upward import fails, and so does an entry no longer imported).
# Empty since issue 38: model/ and search/ receive their implementations (jformer.ops)
# and import nothing of jformer.kernels.
KNOWN_UPWARD: set[tuple[str, str]] = set()


def module_files(root: pathlib.Path) -> dict[str, pathlib.Path]:
    """Dotted module name -> file, for every .py file under the package folder root."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imported(module: str, path: pathlib.Path, node: ast.AST, modules: set[str]) -> set[str]:
    """The package's modules that one import statement of ``module`` depends on."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in modules}
    if not isinstance(node, ast.ImportFrom):
        return set()
    base = node.module or ""
    if node.level:  # relative: from the package holding module (module itself if a package)
        package = module.split(".")
        if path.name != "__init__.py":
            package = package[:-1]
        package = package[:len(package) - (node.level - 1)]
        base = ".".join(package + ([base] if base else []))
    out = set()
    for alias in node.names:
        name = f"{base}.{alias.name}"
        if name in modules:
            out.add(name)
        elif base in modules:
            out.add(base)
    return out


def import_graph(files: dict[str, pathlib.Path]) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (itself left out)."""
    graph = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        deps = set()
        for node in ast.walk(tree):
            deps |= _imported(module, path, node, set(files))
        graph[module] = deps - {module}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(cycles)


def stage_of(module: str, stages: dict[str, int]) -> int:
    """The stage of the longest name in ``stages`` that is ``module`` or holds it."""
    holders = [name for name in stages if module == name or module.startswith(name + ".")]
    if not holders:
        raise KeyError(f"{module} has no stage: add it (or its package) to STAGES")
    return stages[max(holders, key=len)]


def upward_imports(graph: dict[str, set[str]], stages: dict[str, int]
                   ) -> set[tuple[str, str]]:
    """(importer, imported) pairs where the imported module's stage is higher."""
    return {(m, d) for m, deps in graph.items() for d in deps
            if stage_of(d, stages) > stage_of(m, stages)}


def long_modules(files: dict[str, pathlib.Path], max_lines: int) -> dict[str, int]:
    """Module -> line count, for the modules over ``max_lines`` lines."""
    counts = {m: len(p.read_text(encoding="utf-8").splitlines()) for m, p in files.items()}
    return {m: n for m, n in sorted(counts.items()) if n > max_lines}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(module_files(ROOT))


def test_no_import_cycles(graph):
    cycles = import_cycles(graph)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_no_module_imports_a_higher_stage(graph):
    upward = upward_imports(graph, STAGES)
    new = sorted(upward - KNOWN_UPWARD)
    assert not new, ("imports of a higher stage (STAGES): "
                     + "; ".join(f"{m} imports {d}" for m, d in new))
    gone = sorted(KNOWN_UPWARD - upward)
    assert not gone, f"no longer imported, remove from KNOWN_UPWARD: {gone}"


def test_no_module_over_the_line_limit():
    long = long_modules(module_files(ROOT), MAX_LINES)
    assert not long, f"modules over {MAX_LINES} lines: {long}"


# ------------------------------------------------ each check fails where it should
def _package(tmp_path: pathlib.Path, sources: dict[str, str]) -> dict[str, pathlib.Path]:
    """Writes a package ``pkg`` of the given {relative path: source} under tmp_path."""
    for rel, text in {"__init__.py": "", **sources}.items():
        path = tmp_path / "pkg" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return module_files(tmp_path / "pkg")


def test_a_cycle_is_found(tmp_path):
    files = _package(tmp_path, {"a.py": "from pkg import b\n",
                                "b.py": "def f():\n    from . import c\n",
                                "c.py": "import pkg.a\n",
                                "d.py": "from pkg.a import x\n"})
    assert import_cycles(import_graph(files)) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_an_upward_import_is_found(tmp_path):
    files = _package(tmp_path, {"low/__init__.py": "", "high/__init__.py": "",
                                "low/x.py": "from pkg.high import y\n",
                                "high/y.py": "from pkg.low import x\n"})
    stages = {"pkg": 2, "pkg.low": 0, "pkg.high": 1}
    assert upward_imports(import_graph(files), stages) == {("pkg.low.x", "pkg.high.y")}
    with pytest.raises(KeyError, match="pkg.other has no stage"):
        stage_of("pkg.other", {"pkg.low": 0})


def test_a_long_module_is_found(tmp_path):
    files = _package(tmp_path, {"short.py": "x = 1\n" * 400, "long.py": "x = 1\n" * 401})
    assert long_modules(files, 400) == {"pkg.long": 401}

"""The repo's modules import each other without circles: every import between them points one way.

The graph counts every import statement a module holds (top level, inside functions, under TYPE_CHECKING), so
a lazy import cannot hide a cycle. A module's edge goes to the module it names: `from learner import graph`
names learner.graph, `from learner.learner import Learner` names learner.learner; importing a package's
__init__ (e.g. `from lobsim_env import ENV_ID`) is an edge to the package itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("actors", "learner", "lobsim_env", "foxhunt_ray", "cuda")


def _modules() -> dict[str, Path]:
    """Module name -> file: every .py, and every C extension's source (pkg/name.c builds the module pkg.name,
    e.g. lobsim_env._lobster_fast) beside a package's __init__.py, as a module that imports nothing."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted([*(ROOT / pkg).rglob("*.py"), *(ROOT / pkg).rglob("*.c")]):
            if path.suffix == ".c" and not (path.parent / "__init__.py").exists():
                continue
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the repo modules it imports, by ast over every .py file of the repo's packages."""
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        is_pkg = path.name == "__init__.py"
        deps = set()
        if path.suffix == ".c":
            graph[name] = deps
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the module's package, up level - 1 more
                    pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                    pkg = pkg[: len(pkg) - (node.level - 1)]
                    base = ".".join([*pkg, base] if base else pkg)
                # `from a import b` names the module a.b when there is one, else the module a
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in mods:  # `import a.b.c` of a non-module attribute: the longest module prefix
                    t = t.rpartition(".")[0]
                if t and t != name:
                    deps.add(t)
        graph[name] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
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
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_the_graph_sees_the_imports_it_should():
    g = import_graph()
    assert {"learner.learner", "foxhunt_ray.driver", "actors.rollout", "lobsim_env"} <= g.keys()
    assert "learner.graph" in g["learner.learner"]  # `from learner import graph as G`
    assert "foxhunt_ray.loops" in g["foxhunt_ray.driver"]  # `from foxhunt_ray.loops import ...`
    assert "foxhunt_ray.remote" in g["foxhunt_ray.loops"]  # a function-level import counts


def test_no_import_cycle_among_the_repos_modules():
    found = cycles(import_graph())
    assert not found, "modules that import each other (move what they share into a module below both):\n" + "\n".join(
        "  " + " <-> ".join(c) for c in found
    )


if __name__ == "__main__":  # python tests/test_layout.py: the cycles, if any
    for c in cycles(import_graph()):
        print(" <-> ".join(c))

"""The repo's modules import each other without circles: every import between them points one way.

The graph counts every import statement a module holds (top level, inside functions, under TYPE_CHECKING), so
a lazy import cannot hide a cycle. A module's edge goes to the module it names: `from learner import graph`
names learner.graph, `from learner.learner import Learner` names learner.learner; importing a package's
__init__ (e.g. `from lobsim_env import ENV_ID`) is an edge to the package itself.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
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
    assert "foxhunt_ray.remote" in g["foxhunt_ray.ray_loop"]  # a function-level import counts


def test_no_import_cycle_among_the_repos_modules():
    found = cycles(import_graph())
    assert not found, "modules that import each other (move what they share into a module below both):\n" + "\n".join(
        "  " + " <-> ".join(c) for c in found
    )


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_two_markets_stand_side_by_side_behind_one_interface():
    """lobsim_env's layout (docs/market.md): the synthetic and the LOBSTER market never import each other and reach
    the rest of lobsim_env only through the shared contract (config, market) and the project's leaf of field rules
    and error classes (validation, which imports nothing from the project); the envs and the evaluation loop
    (baselines, which reads fills through the Market protocol's action_listener) reach them only through
    markets.make_market, and the contract imports neither."""
    g = import_graph()
    assert g["lobsim_env.validation"] == set(), "lobsim_env.validation is the leaf every config imports"
    contract = {"lobsim_env.config", "lobsim_env.market"}
    markets = ("lobsim_env.synthetic", "lobsim_env.lobster")
    for pkg in markets:
        members = [m for m in g if _inside(m, pkg)]
        assert len(members) > 2, pkg
        for m in members:
            outside = {d for d in g[m] if _inside(d, "lobsim_env") and not _inside(d, pkg)}
            allowed = contract | {"lobsim_env.validation"}
            assert outside <= allowed, f"{m} imports {sorted(outside - allowed)}: only lobsim_env.config/.market"
    for m in (*contract, "lobsim_env.env", "lobsim_env.baselines"):
        reached = {d for d in g[m] if any(_inside(d, pkg) for pkg in markets)}
        assert not reached, f"{m} imports {sorted(reached)}: a market is chosen in lobsim_env.markets alone"


def test_lobsim_env_is_the_bottom_package():
    """Imports between the project's folders point down only, and lobsim_env is at the bottom (lobsim_env.validation's
    docstring): none of its modules imports actors, learner, foxhunt_ray or cuda, at any depth of a module."""
    g = import_graph()
    upward = {
        m: sorted(d for d in deps if not _inside(d, "lobsim_env"))
        for m, deps in g.items()
        if _inside(m, "lobsim_env") and any(not _inside(d, "lobsim_env") for d in deps)
    }
    assert not upward, f"lobsim_env imports from the packages above it: {upward}"


def test_the_config_imports_no_torch():
    """A RunConfig can be built, read and checked without torch (nor Ray, nor the rollout worker): the configs
    (actors.config, learner.config, lobsim_env.config, actors.kill_rules) and the env-id check (actors.envs) import
    none of them. gymnasium does come in: lobsim_env.config is inside the lobsim_env package, whose import registers
    foxhunt/LOB-v0 with gymnasium (DESIGN.md), so importing any part of the market imports gymnasium."""
    heavy = ("torch", "ray", "actors.rollout", "learner.network")
    code = f"import sys, foxhunt_ray.config; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", f"importing foxhunt_ray.config imported {out.strip()}"


def test_every_package_folder_is_listed_for_the_wheel():
    """pyproject lists its packages (it maps cuda/ into learner.ops.csrc); a package folder missing from the list
    would be missing from the wheel, and an extension module's source from its build."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    folders = {
        ".".join(p.parent.relative_to(ROOT).parts) for pkg in PACKAGES for p in (ROOT / pkg).rglob("__init__.py")
    }
    assert folders - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    for ext in setuptools["ext-modules"]:
        (source,) = ext["sources"]
        assert (ROOT / source).is_file(), source
        assert ext["name"] == ".".join(Path(source).with_suffix("").parts) and ext["name"].rpartition(".")[0] in listed


if __name__ == "__main__":  # python tests/test_layout.py: the cycles, if any
    for c in cycles(import_graph()):
        print(" <-> ".join(c))

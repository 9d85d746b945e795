"""What an installed foxhunt-ray is: a wheel that carries the CUDA sources (so an installed package builds its
kernels as a checkout does, instead of falling back to the reference ops), the dependency floors the code needs,
matplotlib only as the report's extra, and the constraints file ./bootstrap and CI install from."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


@pytest.mark.slow
def test_the_wheel_carries_the_cuda_sources_and_an_install_finds_them(tmp_path):
    pip = [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q"]
    built = subprocess.run(
        [*pip, "-w", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = tmp_path.glob("foxhunt_ray-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    sources = [p for p in (ROOT / "cuda").rglob("*") if p.suffix in (".cu", ".cuh", ".h", ".cpp")]
    assert sources
    in_wheel = {p: f"learner/ops/csrc/{p.relative_to(ROOT / 'cuda')}" for p in sources}
    missing = [str(p.relative_to(ROOT)) for p, name in in_wheel.items() if name not in names]
    assert not missing, f"the wheel lacks {missing}"
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    probe = (
        "import learner.ops as o; print(o.cuda_sources()); print(o.default_build_dir()); "
        "print(sorted(p.name for p in (o.cuda_sources() / 'kernels').glob('*.cu')))"
    )
    found = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env={"PYTHONPATH": str(site), "XDG_CACHE_HOME": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert found.returncode == 0, found.stderr[-3000:]
    src, build, kernels = found.stdout.splitlines()[-3:]
    assert Path(src) == site / "learner" / "ops" / "csrc"
    assert Path(build) == tmp_path / "cache" / "foxhunt_ray" / "ext"
    assert kernels == str(sorted(p.name for p in (ROOT / "cuda" / "kernels").glob("*.cu")))


def _floor(requirement: str, name: str) -> tuple[int, ...] | None:
    m = re.match(rf"{name}(\[[^\]]*\])?>=([0-9.]+)", requirement.replace(" ", ""))
    return tuple(int(x) for x in m[2].split(".")) if m else None


def test_dependency_floors_match_what_the_code_uses():
    deps = PYPROJECT["project"]["dependencies"]
    floors = {name: next((f for d in deps if (f := _floor(d, name))), None) for name in ("numpy", "gymnasium")}
    assert floors["numpy"] >= (2, 0)  # np.bitwise_count
    assert floors["gymnasium"] >= (1, 1)  # gymnasium.vector.AutoresetMode
    used = " ".join(p.read_text() for p in (ROOT / "lobsim_env").rglob("*.py"))
    used += " ".join(p.read_text() for p in (ROOT / "actors").rglob("*.py"))
    assert "bitwise_count" in used and "AutoresetMode" in used  # why the floors are what they are
    assert not any(d.startswith("matplotlib") for d in deps), "matplotlib is the report's extra, not a dependency"
    assert any(d.startswith("matplotlib") for d in PYPROJECT["project"]["optional-dependencies"]["report"])


def test_every_package_the_code_imports_is_declared():
    """A third-party import in the installed packages names a dependency (or an optional extra: the report's, the
    Databento reader's): one that came only through another package (fsspec through torch) would break the day
    that package drops it."""
    import ast
    import importlib.metadata

    def names(reqs: list[str]) -> set[str]:
        return {re.split(r"[<>=\[ ;]", r, maxsplit=1)[0].lower() for r in reqs}

    declared = names(PYPROJECT["project"]["dependencies"])
    optional = PYPROJECT["project"]["optional-dependencies"]
    extras = names(optional["report"]) | names(optional["databento"])
    ours = set(PYPROJECT["tool"]["setuptools"]["packages"]) | {"cuda"}
    found = set()
    for pkg in ("foxhunt_ray", "learner", "actors", "lobsim_env"):
        for path in (ROOT / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    found |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    found.add(node.module.split(".")[0])
    third = {m for m in found if m not in sys.stdlib_module_names and m.split(".")[0] not in ours}
    dists = importlib.metadata.packages_distributions()
    undeclared = {m: dists.get(m) for m in third if not {d.lower() for d in dists.get(m, [m])} & (declared | extras)}
    assert not undeclared, f"imported but not in pyproject's dependencies: {undeclared}"
    assert {"torch", "ray", "numpy", "gymnasium", "msgpack", "fsspec"} <= third  # the scan sees the imports


def test_bootstrap_installs_from_the_constraints_file_which_pins_every_tool_the_tests_run():
    bootstrap = (ROOT / "bootstrap").read_text()
    assert "-c constraints.txt" in bootstrap
    pins = dict(
        line.split("==", 1) for line in (ROOT / "constraints.txt").read_text().splitlines() if "==" in line
    )
    for name in ("ray", "ruff", "pytest", "numpy", "gymnasium", "msgpack", "matplotlib", "hypothesis"):
        assert name in pins, f"constraints.txt does not pin {name}"

"""Every CUDA kernel source compiles for Hopper with warnings as errors and no register spills.

Runs wherever nvcc is (no GPU or CUDA libraries needed: the kernels include no torch headers), so a kernel
that stops compiling, warns or starts spilling fails CI rather than the GPU run.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

KERNELS = sorted((Path(__file__).resolve().parents[1] / "cuda" / "kernels").glob("*.cu"))
NVCC = shutil.which("nvcc")
SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
ENTRY = re.compile(r"Compiling entry function '([^']+)'")


def test_kernel_sources_exist():
    names = {p.name for p in KERNELS}
    assert {
        "dueling.cu",
        "c51_project.cu",
        "iqn_loss.cu",
        "ensemble_q.cu",
        "gae.cu",
        "iqn_head.cu",
        "replay_write.cu",
        "soft_update.cu",
        "policy_losses.cu",
        "guarded_adam.cu",
    } <= names


@pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("source", KERNELS, ids=lambda p: p.name)
def test_compiles_without_warnings_or_spills(source, tmp_path):
    cmd = [NVCC, "-c", "-arch=sm_90", "-Werror", "all-warnings", "-Xptxas", "-v", str(source)]
    result = subprocess.run(
        [*cmd, "-o", str(tmp_path / "k.o")], capture_output=True, text=True, timeout=300, check=False
    )
    log = result.stdout + result.stderr
    assert result.returncode == 0, f"{' '.join(cmd)} failed:\n{log}"
    entries = ENTRY.findall(log)
    spills = SPILL.findall(log)
    # One spill line per entry function, float and double instantiations both present.
    assert entries and len(spills) == len(entries), log
    assert any("If" in e for e in entries) and any("Id" in e for e in entries), entries
    spilling = [(e, s) for e, s in zip(entries, spills, strict=True) if s != ("0", "0")]
    assert not spilling, f"register spills in {source.name}: {spilling}"


def _cuda_include() -> Path | None:
    if NVCC is None:
        return None
    for root in (Path(NVCC).resolve().parents[1], Path("/usr/local/cuda"), *sorted(Path("/usr/local").glob("cuda-*"))):
        if (root / "include" / "cuda_runtime.h").exists():
            return root / "include"
    return None


@pytest.mark.skipif(shutil.which("g++") is None or _cuda_include() is None, reason="needs g++ and CUDA's headers")
def test_the_torch_binding_compiles_against_this_torchs_headers(tmp_path):
    """cuda/binding/foxhunt_binding.cpp through the C++ compiler (-fsyntax-only: every template it uses is
    instantiated) with the installed torch's headers, so a binding that would not build fails CI, not the GPU
    run. A CPU build of torch ships c10/cuda's headers but not the one its CMake generates: a stub stands in."""
    import torch

    include = Path(torch.__file__).parent / "include"
    stub = tmp_path / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h"
    stub.parent.mkdir(parents=True)
    stub.write_text("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
    root = Path(__file__).resolve().parents[1]
    cmd = ["g++", "-std=c++17", "-fsyntax-only", f"-I{tmp_path}", f"-I{include}"]
    cmd += [f"-I{include / 'torch' / 'csrc' / 'api' / 'include'}", f"-I{_cuda_include()}"]
    cmd += [f"-I{root / 'cuda' / 'kernels'}", str(root / "cuda" / "binding" / "foxhunt_binding.cpp")]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]

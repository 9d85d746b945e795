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

"""The CUDA kernels against the float64 reference (skipped without a CUDA device, as extension-cpp's tests are).

Every op forward and backward at the five sizes of tests/kernel_checks.SIZES in float32 and float64, outputs
poisoned with NaN first, bitwise repeats; `torch.library.opcheck` on every op on CUDA; a bad input's message.
The extension is built with `learner.ops.set_backend("cuda")`, so a kernel that does not build fails here
rather than skipping. FOXHUNT_REQUIRE_CUDA=1 turns the skip into a failure (benchmarks/gpu_check.sh sets it:
a GPU run that cannot see its GPU must not pass); FOXHUNT_KERNEL_REPORT=PATH writes every check's row (op,
size, dtype, relative error) as JSON there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from learner import ops
from learner.ops import library
from tests.kernel_checks import F32, F64, SIZES, TOL, check_size
from tests.test_ops_library import sample_inputs

needs_cuda = pytest.mark.skipif(
    not torch.cuda.is_available() and not os.environ.get("FOXHUNT_REQUIRE_CUDA"), reason="needs a CUDA device"
)
DTYPES = pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
ROWS: list[dict] = []
"""Every check's row, written to FOXHUNT_KERNEL_REPORT when the module ends."""


@pytest.fixture(scope="module")
def kernels():
    """The CUDA backend for this module (built now: a failed build fails every test), the mode put back after."""
    previous = ops._State.mode
    try:
        ops.set_backend("cuda")
    except Exception:
        ops._State.mode = previous  # the failure is this module's, not the next module's
        raise
    assert ops.backend().startswith("cuda: "), ops.backend()
    yield
    ops.set_backend(previous)
    if os.environ.get("FOXHUNT_KERNEL_REPORT"):
        worst: dict[str, float] = {}
        for r in ROWS:
            if "rel_err" in r:
                key = f"{r['op']} {r['dtype']}"
                worst[key] = max(worst.get(key, 0.0), r["rel_err"])
        report = {"backend": ops.backend(), "worst_rel_err": worst, "results": ROWS}
        Path(os.environ["FOXHUNT_KERNEL_REPORT"]).write_text(json.dumps(report, indent=1))


def failures(rows: list[dict], dtype) -> list[str]:
    return [
        f"{r['op']} {r['what']}: rel_err {r.get('rel_err', '-')} (tolerance {TOL[dtype]:g}, reference's own "
        f"{r.get('ref_same_dtype_rel_err', '-')})"
        for r in rows
        if not r["ok"]
    ]


@needs_cuda
@DTYPES
@pytest.mark.parametrize("size", range(len(SIZES)), ids=[f"B{c['B']}_H{c['H']}_N{c['N']}" for c in SIZES])
def test_every_op_matches_the_float64_reference(kernels, size, dtype):
    rows: list[dict] = []
    check_size(SIZES[size], dtype, "cuda", seed=1000 + size, results=rows)
    torch.cuda.synchronize()
    ROWS.extend(rows)
    assert len(rows) == 40, f"{len(rows)} checks ran, expected 40"
    bad = failures(rows, dtype)
    assert not bad, "\n".join(bad)


@needs_cuda
@DTYPES
@pytest.mark.parametrize("name", library.OP_NAMES)
def test_opcheck_on_cuda(kernels, name, dtype):
    """Schema, fake impl, autograd registration and AOT dispatch of the CUDA implementation."""
    args = sample_inputs(dtype, rows=7, seed=11, requires_grad=True, device="cuda")[name]
    torch.library.opcheck(getattr(torch.ops.foxhunt, name).default, args)


@needs_cuda
def test_a_bad_input_on_the_cuda_path_is_named(kernels):
    z = torch.zeros(3, 2, device="cuda")
    with pytest.raises(RuntimeError, match="terminated has dtype Float, expected Bool"):
        torch.ops.foxhunt.gae(z, z, z, z, torch.zeros(3, 2, dtype=torch.bool, device="cuda"), 0.9, 0.9)


@DTYPES
def test_the_checks_run_on_the_cpu_reference(dtype):
    """The harness itself, on any machine: CPU tensors take the reference, so every check passes and a typo in
    tests/kernel_checks.py fails CI rather than the next GPU run."""
    rows: list[dict] = []
    check_size(SIZES[0], dtype, "cpu", seed=1000, results=rows)
    assert len(rows) == 40
    assert not failures(rows, dtype)

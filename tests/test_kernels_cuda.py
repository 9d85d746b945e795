"""The CUDA kernels against the float64 reference (skipped without a CUDA device, as extension-cpp's tests are).

Every op forward and backward at the six sizes of learner.ops.checks.SIZES in float32 and float64, outputs
poisoned with NaN first, bitwise repeats; `torch.library.opcheck` on every op on CUDA; a bad input's message.
The extension is built with `learner.ops.set_backend("cuda")`, so a kernel that does not build fails here
rather than skipping. FOXHUNT_REQUIRE_CUDA=1 turns the skip into a failure (benchmarks.gpu_host's checks step sets it:
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
from learner.ops import library, reference
from learner.ops.checks import CHECKS_PER_SIZE, F32, F64, SIZES, TOL, check_size
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
    assert len(rows) == CHECKS_PER_SIZE, f"{len(rows)} checks ran, expected {CHECKS_PER_SIZE}"
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
@DTYPES
def test_iqn_head_off_the_pack_boundary(kernels, dtype):
    """iqn_head moves packs of up to 16 bytes of hidden units when H and every pointer allow it; inputs that start
    one element past a pack boundary (views into a larger buffer) take the one-element path and give the same
    numbers, forward and backward, as aligned inputs and the float64 reference (the market's 7 actions and 3). W_out
    and b_out off the boundary alone keep the packed path (the forward stages W_out in shared memory)."""
    g = torch.Generator(device="cuda").manual_seed(12)
    for n_actions in (7, 3):
        x = [
            torch.randn(*shape, generator=g, dtype=F64, device="cuda")
            for shape in ((33, 64), (33, 5, 64), (n_actions, 64), (n_actions,))
        ]
        grad = torch.randn(33, 5, n_actions, generator=g, dtype=F64, device="cuda")

        def off_by_one(v: torch.Tensor) -> torch.Tensor:
            out = torch.empty(v.numel() + 1, dtype=dtype, device="cuda")[1:].view(v.shape)
            out.copy_(v.detach())
            assert out.data_ptr() % 16 != 0
            return out.requires_grad_()

        exact = [v.clone().requires_grad_() for v in x]
        want = reference.iqn_head(*exact)
        want_g = torch.autograd.grad(want, exact, grad)
        aligned = [v.detach().to(dtype).clone().requires_grad_() for v in x]
        # all four off the boundary; only w_out and b_out, as the learner's are (views into its flat parameters)
        every = [off_by_one(v) for v in x]
        weights = [*aligned[:2], off_by_one(x[2]), off_by_one(x[3])]
        for inputs in (every, weights, aligned):
            got = ops.iqn_head(*inputs)
            got_g = torch.autograd.grad(got, inputs, grad.to(dtype))
            assert (got.double() - want).norm() <= TOL[dtype] * want.norm(), (dtype, n_actions)
            for g_got, g_want in zip(got_g, want_g, strict=True):
                assert (g_got.double() - g_want).norm() <= TOL[dtype] * g_want.norm(), (dtype, n_actions, g_got.shape)


@needs_cuda
def test_a_bad_input_on_the_cuda_path_is_named(kernels):
    z = torch.zeros(3, 2, device="cuda")
    with pytest.raises(RuntimeError, match="terminated has dtype Float, expected Bool"):
        torch.ops.foxhunt.gae(z, z, z, z, torch.zeros(3, 2, dtype=torch.bool, device="cuda"), 0.9, 0.9)


@DTYPES
def test_the_checks_run_on_the_cpu_reference(dtype):
    """The harness itself, on any machine: CPU tensors take the reference, so every check passes and a typo in
    learner/ops/checks.py fails CI rather than the next GPU run."""
    rows: list[dict] = []
    check_size(SIZES[0], dtype, "cpu", seed=1000, results=rows)
    assert len(rows) == CHECKS_PER_SIZE
    assert not failures(rows, dtype)

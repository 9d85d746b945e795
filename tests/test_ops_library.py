"""The registered foxhunt:: custom ops on CPU: torch.library.opcheck, autograd through them, and agreement
with the reference. The CUDA implementations get opcheck on these same inputs, and every op's numbers against the
float64 reference, in tests/test_kernels_cuda.py (on a CUDA machine)."""

from __future__ import annotations

import pytest
import torch

from learner.ops import library
from learner.ops import reference as ref

F64, F32 = torch.float64, torch.float32


def sample_inputs(dtype, rows=5, seed=0, requires_grad=False, device="cpu"):
    """One argument tuple per op, shaped as the learner calls them (small sizes); test_kernels_cuda reuses it."""
    g = torch.Generator().manual_seed(seed)

    def rand(*shape, grad=False):
        t = torch.randn(*shape, generator=g, dtype=dtype).to(device)
        return t.requires_grad_(grad and requires_grad)

    hidden, n_actions, n_atoms, n_q, n_t, steps = 6, 3, 7, 4, 5, 4
    h = rand(rows, hidden, grad=True)
    return {
        "dueling_forward": (
            h,
            rand(hidden, grad=True),
            rand(1, grad=True),
            rand(hidden, n_actions, grad=True),
            rand(n_actions, grad=True),
        ),
        "dueling_backward": (
            rand(rows),
            None,
            rand(rows, n_actions),
            rand(rows, hidden),
            rand(hidden),
            rand(hidden, n_actions),
        ),
        "dueling_bellman_target": (
            rand(rows, n_actions),
            rand(rows, n_actions),
            rand(rows),
            rand(rows).abs(),
        ),
        "dueling_huber_loss": (
            rand(rows, n_actions, grad=True) * 2,
            torch.randint(0, n_actions, (rows,), generator=g).to(device),
            rand(rows),
            1.0,
        ),
        "c51_project": (torch.softmax(rand(rows, n_atoms), 1), rand(rows), rand(rows).abs(), -2.0, 3.0),
        "iqn_quantile_huber_loss": (
            rand(rows, n_q, grad=True),
            torch.rand(rows, n_q, generator=g, dtype=dtype).to(device),
            rand(rows, n_t),
            1.0,
        ),
        "ensemble_q": (
            rand(rows, n_actions, n_atoms, grad=True),
            torch.linspace(-1, 1, n_atoms, dtype=dtype, device=device),
            rand(rows, n_q, n_actions, grad=True),
            0.4,
        ),
        "ensemble_q_backward": (
            rand(rows, n_actions),
            rand(rows, n_actions, n_atoms),
            torch.linspace(-1, 1, n_atoms, dtype=dtype, device=device),
            n_q,
            0.4,
        ),
        "gae": (
            rand(steps, rows),
            rand(steps, rows),
            rand(steps, rows),
            (torch.rand(steps, rows, generator=g) < 0.3).to(device),
            (torch.rand(steps, rows, generator=g) < 0.3).to(device),
            0.95,
            0.9,
        ),
        "iqn_head": (
            h,
            rand(rows, n_q, hidden, grad=True),
            rand(n_actions, hidden, grad=True),
            rand(n_actions, grad=True),
        ),
        "iqn_head_backward": (
            rand(rows, n_q, n_actions),
            rand(rows, hidden),
            rand(rows, n_q, hidden),
            rand(n_actions, hidden),
        ),
        "nstep_returns": (
            rand(steps, rows),
            (torch.rand(steps, rows, generator=g) < 0.9).to(device),
            (torch.rand(steps, rows, generator=g) < 0.2).to(device),
            (torch.rand(steps, rows, generator=g) < 0.2).to(device),
            0.9,
            3,
            0.5,
        ),
        "replay_write_": (
            rand(11, hidden),
            torch.zeros(11, dtype=torch.int64, device=device),
            rand(11),
            rand(11),
            rand(11, hidden),
            rand(steps + 1, rows, hidden),
            torch.randint(0, n_actions, (steps, rows), generator=g).to(device),
            rand(steps, rows),
            rand(steps, rows).abs(),
            torch.randint(0, (steps + 1) * rows, (steps, rows), generator=g).to(device),
            torch.tensor([0, 3, 7, 2, 19, 5], device=device),
            8,
        ),
        "soft_update_": (rand(37), rand(37), 0.05),
        "policy_losses": (
            rand(rows, n_actions, grad=True),
            rand(rows, n_actions),
            rand(rows, grad=True),
            rand(rows),
            rand(rows) * 2,
            torch.randint(0, n_actions, (rows,), generator=g).to(device),
            -rand(rows).abs() - 0.5,
            (torch.arange(rows) % 4 != 1).to(device),
            0.2,
            0.5,
            True,
            False,
        ),
        "guarded_adam_": (  # the main net (three groups) and the dueling head, as the learner steps them
            [rand(37), rand(11)],
            [rand(37), rand(11) * 30],
            [rand(37) * 0.1, rand(11) * 0.1],
            [rand(37).abs() * 0.01, rand(11).abs() * 0.01],
            [torch.tensor(3.0, device=device), torch.tensor(0.0, device=device)],
            [rand(37), rand(11)],
            [torch.tensor(1e-2, device=device), torch.tensor(3e-3, device=device)],
            [rand(()), rand(())],
            [10, 25, 37],
            [0.5, 10.0],
            0.9,
            0.999,
            1e-8,
            0.05,
        ),
    }


@pytest.mark.parametrize("name", library.OP_NAMES)
@pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
def test_opcheck(name, dtype):
    args = sample_inputs(dtype, requires_grad=True)[name]
    torch.library.opcheck(getattr(torch.ops.foxhunt, name).default, args)


REFERENCE_OF = {
    "dueling_forward": ref.dueling_forward,
    "dueling_bellman_target": ref.dueling_bellman_target,
    "c51_project": ref.c51_project,
    "gae": ref.gae,
    "iqn_head": ref.iqn_head,
    "nstep_returns": ref.nstep_returns,
}


@pytest.mark.parametrize("name", list(REFERENCE_OF))
def test_op_output_equals_reference(name):
    args = sample_inputs(F32, seed=3)[name]
    got, want = getattr(torch.ops.foxhunt, name)(*args), REFERENCE_OF[name](*args)
    torch.testing.assert_close(got, want)


def test_losses_return_reference_loss_and_autograd_grad():
    args = sample_inputs(F64, seed=4, requires_grad=True)
    q, action, y, kappa = args["dueling_huber_loss"]
    q = q.detach().requires_grad_()
    loss, _ = torch.ops.foxhunt.dueling_huber_loss(q, action, y, kappa)
    (grad_op,) = torch.autograd.grad(3.0 * loss, q)
    want = ref.dueling_huber_loss(q, action, y, kappa)
    (grad_ref,) = torch.autograd.grad(3.0 * want, q)
    torch.testing.assert_close(loss, want.detach())
    torch.testing.assert_close(grad_op, grad_ref)

    theta, tau, target, kappa = args["iqn_quantile_huber_loss"]
    loss, _ = torch.ops.foxhunt.iqn_quantile_huber_loss(theta, tau, target, kappa)
    (grad_op,) = torch.autograd.grad(loss, theta)
    want = ref.iqn_quantile_huber_loss(theta, tau, target, kappa)
    (grad_ref,) = torch.autograd.grad(want, theta)
    torch.testing.assert_close(loss, want.detach())
    torch.testing.assert_close(grad_op, grad_ref)


@pytest.mark.parametrize("used", ["q", "v", "q+a"])
def test_dueling_autograd_through_op_matches_reference(used):
    inputs = sample_inputs(F64, seed=5, requires_grad=True)["dueling_forward"]

    def loss_of(outs):
        v, a, q = outs
        return {"q": (q**2).sum(), "v": v.sum(), "q+a": (q * a).sum()}[used]

    got = torch.autograd.grad(
        loss_of(torch.ops.foxhunt.dueling_forward(*inputs)), inputs, allow_unused=True, materialize_grads=True
    )
    want = torch.autograd.grad(loss_of(ref.dueling_forward(*inputs)), inputs, allow_unused=True, materialize_grads=True)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


def test_ensemble_autograd_through_op_matches_reference():
    logits, support, quantiles, w = sample_inputs(F64, seed=6, requires_grad=True)["ensemble_q"]
    weight = torch.randn(5, 3, dtype=F64)
    got = torch.autograd.grad(
        (torch.ops.foxhunt.ensemble_q(logits, support, quantiles, w) * weight).sum(), (logits, quantiles)
    )
    want = torch.autograd.grad((ref.ensemble_q(logits, support, quantiles, w) * weight).sum(), (logits, quantiles))
    for g, w_ in zip(got, want, strict=True):
        torch.testing.assert_close(g, w_)


def test_iqn_head_backward_matches_autograd_of_the_reference():
    """The explicit backward (what the kernel computes) equals autograd through the reference, relu's kink
    included: some pre entries are exactly 0 (gradient 0 there, as torch.relu's)."""
    h, pre, w_out, b_out = (t.detach().requires_grad_() for t in sample_inputs(F64, seed=8)["iqn_head"])
    with torch.no_grad():
        pre[0, 0, :3] = 0.0
    grad = torch.randn(*pre.shape[:2], w_out.shape[0], dtype=F64)
    want = torch.autograd.grad(ref.iqn_head(h, pre, w_out, b_out), (h, pre, w_out, b_out), grad)
    got = torch.autograd.grad(torch.ops.foxhunt.iqn_head(h, pre, w_out, b_out), (h, pre, w_out, b_out), grad)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)
    assert torch.count_nonzero(got[1][0, 0, :3]) == 0


def test_replay_write_writes_the_reference_rows_around_the_ring():
    args = sample_inputs(F32, seed=9)["replay_write_"]
    got, want = [t.clone() for t in args[:5]], [t.clone() for t in args[:5]]
    torch.ops.foxhunt.replay_write_(*got, *args[5:])
    ref.replay_write_(*want, *args[5:])
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)
    obs, next_row, flat_idx, cursor = args[5], args[9], args[10], args[11]
    rows = obs.reshape(-1, obs.shape[-1])
    # six transitions from cursor 8 of an 11-row ring: rows 8, 9, 10, 0, 1, 2; the rest untouched
    torch.testing.assert_close(got[0][[8, 9, 10, 0, 1, 2]], rows[flat_idx])
    torch.testing.assert_close(got[4][[8, 9, 10, 0, 1, 2]], rows[next_row.reshape(-1)[flat_idx]])
    torch.testing.assert_close(got[0][3:8], args[0][3:8])
    assert cursor == 8


def test_ops_compile_with_fake_impls():
    """The fake impls let torch.compile trace the ops with no graph break."""
    args = sample_inputs(F32, seed=7)

    @torch.compile(fullgraph=True, backend="eager")
    def step(dueling_args, ens_args):
        v, _a, q = torch.ops.foxhunt.dueling_forward(*dueling_args)
        return q.sum() + v.sum() + torch.ops.foxhunt.ensemble_q(*ens_args).sum()

    d, e = args["dueling_forward"], args["ensemble_q"]
    expected = ref.dueling_forward(*d)[2].sum() + ref.dueling_forward(*d)[0].sum() + ref.ensemble_q(*e).sum()
    torch.testing.assert_close(step(d, e), expected)


class TestBackend:
    def test_mode_names_are_checked(self):
        from learner import ops

        with pytest.raises(ValueError, match=r"backend mode='gpu' must be one of"):
            ops.set_backend("gpu")

    def test_reference_is_forced_and_reported(self):
        from learner import ops

        previous = ops._State.mode
        try:
            ops.set_backend("reference")
            assert ops.backend().startswith("reference: forced")
        finally:
            ops._State.mode = previous

    @pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
    def test_cuda_mode_without_a_gpu_raises_and_auto_says_why(self):
        from learner import ops

        previous = ops._State.mode
        try:
            ops._State.mode = "auto"
            assert ops.backend() == "reference: no CUDA device visible to torch"
            with pytest.raises(RuntimeError, match="torch sees no CUDA device"):
                ops.set_backend("cuda")
        finally:
            ops._State.mode = previous


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("flip", [False, True])
def test_policy_losses_op_equals_the_reference_through_autograd(normalize, flip):
    """The op's stats and, through its autograd formula (the saved per-loss gradients, weighted), the gradients of
    a learner-like combination of its losses equal autograd through the reference."""
    args = list(sample_inputs(F64, seed=10, rows=9, requires_grad=True)["policy_losses"])
    args[10], args[11] = normalize, flip
    logits, values = args[0], args[2]
    stats, _, _ = torch.ops.foxhunt.policy_losses(*args)
    want = ref.policy_losses(*args)
    torch.testing.assert_close(stats, torch.stack([w.detach() for w in want]))
    weights = torch.tensor([1.0, -0.01, 0.1, 0.5], dtype=F64)
    got = torch.autograd.grad((stats[:4] * weights).sum() + 7.0 * stats[6], (logits, values))
    expected = torch.autograd.grad((torch.stack(want[:4]) * weights).sum(), (logits, values))
    for g, w in zip(got, expected, strict=True):
        torch.testing.assert_close(g, w)
    assert torch.all(got[0][1] == 0) and got[1][1] == 0  # row 1 is not valid
    assert 0 < stats[5] < 1  # some rows clipped, some not: both branches of the surrogate's gradient are checked


def test_guarded_adam_op_equals_the_reference_and_refuses_bad_input_by_name():
    """The CPU op gives the reference's stats, healthy flag and state bit for bit (fresh copies of the same inputs);
    the ops wrapper names what is wrong with a bad call before anything is written."""
    from learner import ops

    def fresh():
        args = sample_inputs(F32)["guarded_adam_"]
        return [[t.clone() for t in a] if isinstance(a, list) and a and torch.is_tensor(a[0]) else a for a in args]

    a, b = fresh(), fresh()
    got = torch.ops.foxhunt.guarded_adam_(*a)
    want = ref.guarded_adam_(*b)
    assert torch.equal(got[0], want[0]) and bool(got[1]) is bool(want[1]) is True
    for x, y in zip(a[:6], b[:6], strict=True):
        assert all(torch.equal(s, t) for s, t in zip(x, y, strict=True))
    assert a[4][0].item() == 4.0 and a[4][1].item() == 1.0  # the step counts moved on

    args = fresh()
    kw = dict(zip(("beta1", "beta2", "eps", "tau"), args[10:], strict=True))
    before = [t.clone() for t in args[0]]
    with pytest.raises(ValueError, match=r"steps has 1 entries"):
        ops.guarded_adam_(*args[:4], args[4][:1], *args[5:10], **kw)
    with pytest.raises(TypeError, match=r"steps\[0\] must be a float32 scalar"):
        ops.guarded_adam_(*args[:4], [args[4][0].double(), args[4][1]], *args[5:10], **kw)
    with pytest.raises(ValueError, match=r"group_ends=\[25, 10, 37\] must be at most 8 rising"):
        ops.guarded_adam_(*args[:8], [25, 10, 37], args[9], **kw)
    with pytest.raises(ValueError, match=r"max_norms\[1\]=0.0 must be > 0"):
        ops.guarded_adam_(*args[:9], [0.5, 0.0], **kw)
    assert all(torch.equal(s, t) for s, t in zip(args[0], before, strict=True))

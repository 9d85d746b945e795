"""The seed's pearls as tests: the mathematics that decided the Phase 4 design, and its encapsulation."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from foxhunt_ray.presets import preset
from learner import losses as L
from learner import ops
from learner.learner import Learner

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_scalar_v_added_to_c51_atom_logits_is_a_noop():
    """Phase 2: softmax_z(V + X_z) = softmax_z(X_z); the CE gradient to V is sum_z (p - m) = 0."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 11, generator=g, dtype=torch.float64)
    target = torch.softmax(torch.randn(8, 11, generator=g, dtype=torch.float64), -1)
    v = (3.0 * torch.randn(8, 1, generator=g, dtype=torch.float64)).requires_grad_()
    composed = v + x
    assert torch.allclose(torch.softmax(composed, -1), torch.softmax(x, -1), atol=1e-12)
    ce = L.c51_cross_entropy(composed, target)
    assert torch.allclose(ce, L.c51_cross_entropy(x, target), atol=1e-12)
    ce.backward()
    assert v.grad.abs().max().item() < 1e-15


def _dueling_inputs(b: int, h_dim=16, n=5, dtype=torch.float64):
    g = torch.Generator().manual_seed(b)
    mk = lambda *s: torch.randn(*s, generator=g, dtype=dtype).requires_grad_()  # noqa: E731
    return mk(b, h_dim), mk(h_dim), mk(1), mk(h_dim, n), mk(n)


def test_dueling_composition_removes_mean_advantage_and_routes_gradients():
    """Q = V + A - mean_a A: mean_a (Q - V) = 0; grad_A sums to 0 over actions; grad_V = sum_a grad_Q."""
    h, w_v, b_v, w_a, b_a = _dueling_inputs(1)
    v, a, q = ops.dueling_forward(h, w_v, b_v, w_a, b_a)
    assert torch.allclose((q - v[:, None]).mean(-1), torch.zeros(1, dtype=q.dtype), atol=1e-12)
    assert torch.allclose(q - v[:, None], a - a.mean(-1, keepdim=True), atol=1e-12)
    grad_q = torch.randn(q.shape, generator=torch.Generator().manual_seed(9), dtype=q.dtype)
    q.backward(grad_q)
    # With B = 1 the bias gradients ARE the gradients to V and A: dA[a] = dQ[a] - mean dQ, dV = sum dQ.
    assert abs(b_a.grad.sum().item()) < 1e-12
    assert torch.allclose(b_a.grad, grad_q[0] - grad_q[0].mean(), atol=1e-12)
    assert torch.allclose(b_v.grad, grad_q.sum().reshape(1), atol=1e-12)
    # And for a batch, on the weights: W_a's gradient rows each sum to zero over actions.
    h, w_v, b_v, w_a, b_a = _dueling_inputs(7)
    _, _, q = ops.dueling_forward(h, w_v, b_v, w_a, b_a)
    q.backward(torch.randn(q.shape, dtype=q.dtype))
    assert w_a.grad.sum(-1).abs().max().item() < 1e-12


def _rollouts(seed: int, count: int, t_len=6, b=4, d=5, n=7):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        ends = rng.random((t_len, b)) < 0.15
        valid = np.ones((t_len, b), bool)
        valid[1:] = ~ends[:-1]
        out.append(
            {
                "obs": rng.standard_normal((t_len + 1, b, d)).astype(np.float32),
                "actions": rng.integers(0, n, (t_len, b)),
                "rewards": rng.standard_normal((t_len, b)).astype(np.float32),
                "terminated": ends & valid & (rng.random((t_len, b)) < 0.5),
                "truncated": ends & valid & (rng.random((t_len, b)) >= 0.5),
                "behaviour_logp": np.log(rng.dirichlet(np.ones(n), (t_len, b))[..., 0]).astype(np.float32),
                "valid": valid,
                "policy_version": i,
            }
        )
    return out


def _learner(mode: str, **kw) -> Learner:
    cfg = dataclasses.replace(preset("smoke"), dueling_mode=mode, q_batch_size=16, replay_min_size=16, **kw)
    return Learner(cfg, obs_dim=5, n_actions=7, seed=3)


def test_dueling_loss_leaves_every_main_gradient_bit_identical():
    """The same step with and without the dueling head: the main network's gradients are equal bit for bit."""
    off, diag = _learner("off"), _learner("diagnostic")
    for batch in _rollouts(0, 3):
        off.update(batch)
        d_diag = diag.update(batch)
        assert torch.equal(off.main.grad, diag.main.grad)
    assert d_diag["q_trained"] == 1.0 and d_diag["l_dueling"] > 0
    assert diag.dueling.grad.abs().sum() > 0  # the dueling head did train, on its own


def test_phase4_2_trains_main_network_exactly_as_plan_a_v2():
    """Encoder, C51, IQN, pi and V_scalar (and their target copy) are bit-identical after several updates.

    Both clip norms are tight so clipping is active on every step: a global norm over both networks, or
    a shared optimiser, would show here.
    """
    clips = {"grad_clip": 0.05, "dueling_grad_clip": 1e-3}
    off, diag = _learner("off", **clips), _learner("diagnostic", **clips)
    assert torch.equal(off.main.flat, diag.main.flat)  # building the dueling head used none of their RNG
    for batch in _rollouts(1, 12):
        d_off, d_diag = off.update(batch), diag.update(batch)
        assert d_off["grad_norm/total"] > 0.05 and d_diag["grad_norm/dueling"] > 1e-3
        for key in ("l_c51", "l_iqn", "l_pi", "l_v", "l_distill", "qpa", "entropy", "v_scalar_mean"):
            assert d_off[key] == d_diag[key], key
    for name, sl in off.groups.items():
        assert torch.equal(off.main.flat[sl], diag.main.flat[sl]), name
    assert torch.equal(off.main.target_flat, diag.main.target_flat)
    assert not torch.equal(off.main.flat, _learner("off").main.flat)  # and they did move


def test_phase4_3_feeds_v_dq_into_the_advantage_only():
    """Baseline mode changes the PPO update (V_dq is the GAE baseline) but not the Q losses of step 1."""
    diag, base = _learner("diagnostic"), _learner("baseline")
    batch = _rollouts(2, 1)[0]
    d_diag, d_base = diag.update(batch), base.update(batch)
    assert d_diag["adv_mean"] != d_base["adv_mean"]
    for key in ("l_c51", "l_iqn", "l_dueling", "qpa"):
        assert d_diag[key] == d_base[key], key
    pi = diag.groups["pi"]
    assert not torch.equal(diag.main.flat[pi], base.main.flat[pi])

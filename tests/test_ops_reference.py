"""The pure-PyTorch reference ops against hand-computed cases, plain loops and autograd.

These pin the semantics the CUDA kernels are checked against on the GPU machine (tests/test_kernels_cuda.py), so
every case here is computed a second, independent way (a naive loop, a closed form, or a value worked out by hand).
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.autograd import gradcheck

from learner import ops
from learner.ops import reference as ref

F64 = torch.float64


def naive_c51_project(probs, reward, discount, v_min, v_max):
    """The textbook loop (Bellemare et al. 2017, Algorithm 1) with the l == u case made explicit."""
    rows, n_atoms = probs.shape
    dz = (v_max - v_min) / (n_atoms - 1)
    out = [[0.0] * n_atoms for _ in range(rows)]
    for b in range(rows):
        for j in range(n_atoms):
            tz = min(max(float(reward[b]) + float(discount[b]) * (v_min + j * dz), v_min), v_max)
            pos = (tz - v_min) / dz
            low, up = math.floor(pos), math.ceil(pos)
            p = float(probs[b, j])
            if low == up:
                out[b][low] += p
            else:
                out[b][low] += p * (up - pos)
                out[b][up] += p * (pos - low)
    return torch.tensor(out, dtype=F64)


def _probs(rows, n_atoms, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(rows, n_atoms, generator=g, dtype=F64), dim=1)


class TestC51Project:
    V_MIN, V_MAX, Z = -10.0, 10.0, 11  # Δz = 2

    def project(self, probs, reward, discount):
        return ref.c51_project(
            probs, torch.tensor(reward, dtype=F64), torch.tensor(discount, dtype=F64), self.V_MIN, self.V_MAX
        )

    def test_identical_support_is_identity(self):
        probs = _probs(3, self.Z)
        out = self.project(probs, [0.0, 0.0, 0.0], [1.0, 1.0, 1.0])
        torch.testing.assert_close(out, probs, rtol=0, atol=1e-15)

    def test_shift_by_one_atom_piles_overflow_on_v_max(self):
        probs = _probs(1, self.Z)
        out = self.project(probs, [2.0], [1.0])  # exactly one Δz to the right
        expected = torch.zeros_like(probs)
        expected[0, 1:] = probs[0, :-1]
        expected[0, -1] += probs[0, -1]  # the top atom's mass is clamped onto v_max
        torch.testing.assert_close(out, expected, rtol=0, atol=1e-15)

    @pytest.mark.parametrize(("reward", "atom"), [(-1e3, 0), (1e3, -1)])
    def test_all_mass_at_an_end_of_the_support(self, reward, atom):
        probs = _probs(2, self.Z)
        out = self.project(probs, [reward, reward], [0.99, 0.99])
        expected = torch.zeros_like(probs)
        expected[:, atom] = 1.0
        torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)

    def test_inexact_delta_z_splits_mass_by_distance(self):
        probs = torch.zeros(1, self.Z, dtype=F64)
        probs[0, 5] = 1.0  # all mass on z = 0
        out = self.project(probs, [0.5], [1.0])  # lands a quarter of the way from atom 5 to atom 6
        expected = torch.zeros_like(probs)
        expected[0, 5], expected[0, 6] = 0.75, 0.25
        torch.testing.assert_close(out, expected, rtol=0, atol=1e-15)

    def test_terminal_transition_collapses_onto_the_reward(self):
        probs = _probs(1, self.Z)
        out = self.project(probs, [3.0], [0.0])  # 3.0 sits between atoms 6 (z=2) and 7 (z=4)
        expected = torch.zeros_like(probs)
        expected[0, 6], expected[0, 7] = 0.5, 0.5
        torch.testing.assert_close(out, expected, rtol=0, atol=1e-15)

    def test_random_cases_match_naive_loop_and_keep_mass(self):
        g = torch.Generator().manual_seed(3)
        probs = _probs(64, 51, seed=4)
        reward = torch.randn(64, generator=g, dtype=F64) * 4
        discount = torch.where(torch.rand(64, generator=g, dtype=F64) < 0.2, 0.0, 0.97)
        out = ref.c51_project(probs, reward, discount, -7.5, 12.5)
        torch.testing.assert_close(out, naive_c51_project(probs, reward, discount, -7.5, 12.5))
        torch.testing.assert_close(out.sum(1), torch.ones(64, dtype=F64))

    def test_float32_matches_float64(self):
        probs = _probs(32, 51, seed=5)
        reward, discount = torch.linspace(-3, 3, 32, dtype=F64), torch.full((32,), 0.9, dtype=F64)
        out64 = ref.c51_project(probs, reward, discount, -10.0, 10.0)
        out32 = ref.c51_project(probs.float(), reward.float(), discount.float(), -10.0, 10.0)
        torch.testing.assert_close(out32.double(), out64, rtol=0, atol=1e-5)


class TestQuantileHuber:
    def test_gradient_is_huber_gradient_times_quantile_weight(self):
        g = torch.Generator().manual_seed(0)
        rows, n_q, n_t, kappa = 3, 4, 5, 0.7
        theta = torch.randn(rows, n_q, generator=g, dtype=F64, requires_grad=True)
        tau = torch.rand(rows, n_q, generator=g, dtype=F64)
        target = torch.randn(rows, n_t, generator=g, dtype=F64) * 2
        ref.iqn_quantile_huber_loss(theta, tau, target, kappa).backward()
        expected = torch.zeros(rows, n_q, dtype=F64)
        for b in range(rows):
            for i in range(n_q):
                for j in range(n_t):
                    u = float(target[b, j] - theta[b, i].detach())
                    huber_grad_wrt_u = max(-kappa, min(kappa, u))  # d huber / du
                    weight = abs(float(tau[b, i]) - (1.0 if u < 0 else 0.0))
                    # u = target − θ, so d/dθ = −d/du; loss divides by κ, T' and B.
                    expected[b, i] -= weight * huber_grad_wrt_u / (kappa * n_t * rows)
        torch.testing.assert_close(theta.grad, expected)

    def test_loss_by_hand(self):
        # One row, one quantile τ=0.25, targets at +2 and −0.5 around θ=0, κ=1:
        # u=+2: weight 0.25, huber 1.5; u=−0.5: weight 0.75, huber 0.125 -> mean_j = (0.375 + 0.09375)/2.
        loss = ref.iqn_quantile_huber_loss(
            torch.zeros(1, 1, dtype=F64),
            torch.tensor([[0.25]], dtype=F64),
            torch.tensor([[2.0, -0.5]], dtype=F64),
        )
        assert float(loss) == pytest.approx((0.375 + 0.09375) / 2)

    def test_closed_form_matches_autograd(self):
        g = torch.Generator().manual_seed(1)
        theta = torch.randn(5, 8, generator=g, dtype=F64, requires_grad=True)
        tau = torch.rand(5, 8, generator=g, dtype=F64)
        target = torch.randn(5, 6, generator=g, dtype=F64)
        loss = ref.iqn_quantile_huber_loss(theta, tau, target, 1.0)
        loss.backward()
        loss2, grad = ref.iqn_quantile_huber_loss_and_grad(theta, tau, target, 1.0)
        torch.testing.assert_close(loss2, loss.detach())
        torch.testing.assert_close(grad, theta.grad)


def plain_gae(rewards, values, next_values, terminated, episode_end, gamma, lam):
    steps, cols = len(rewards), len(rewards[0])
    adv = [[0.0] * cols for _ in range(steps)]
    for b in range(cols):
        running = 0.0
        for t in reversed(range(steps)):
            bootstrap = 0.0 if terminated[t][b] else gamma * next_values[t][b]
            delta = rewards[t][b] + bootstrap - values[t][b]
            running = delta + (0.0 if episode_end[t][b] else gamma * lam * running)
            adv[t][b] = running
    return adv


def test_gae_matches_plain_loop_with_terminations_and_truncations():
    g = torch.Generator().manual_seed(2)
    steps, cols = 9, 5
    rewards, values, next_values = (torch.randn(steps, cols, generator=g, dtype=F64) for _ in range(3))
    terminated = torch.rand(steps, cols, generator=g) < 0.15
    truncated = torch.rand(steps, cols, generator=g) < 0.15
    episode_end = terminated | truncated
    adv, ret = ref.gae(rewards, values, next_values, terminated, episode_end, 0.97, 0.9)
    expected = plain_gae(
        rewards.tolist(),
        values.tolist(),
        next_values.tolist(),
        terminated.tolist(),
        episode_end.tolist(),
        0.97,
        0.9,
    )
    torch.testing.assert_close(adv, torch.tensor(expected, dtype=F64))
    torch.testing.assert_close(ret, adv + values)


def test_gae_truncation_bootstraps_but_cuts_the_trace():
    # Two steps, one env: step 0 is truncated (episode ends, state not terminal), so A_0 = δ_0 exactly,
    # and δ_0 still bootstraps from next_values.
    rewards = torch.tensor([[1.0], [5.0]], dtype=F64)
    values = torch.tensor([[0.5], [0.0]], dtype=F64)
    next_values = torch.tensor([[2.0], [0.0]], dtype=F64)
    adv, _ = ref.gae(
        rewards,
        values,
        next_values,
        torch.zeros(2, 1, dtype=torch.bool),
        torch.tensor([[True], [False]]),
        0.5,
        1.0,
    )
    assert float(adv[0, 0]) == pytest.approx(1.0 + 0.5 * 2.0 - 0.5)
    assert float(adv[1, 0]) == pytest.approx(5.0)


class TestDueling:
    def params(self, rows=6, hidden=7, n_actions=4, seed=0):
        g = torch.Generator().manual_seed(seed)
        shapes = [(rows, hidden), (hidden,), (1,), (hidden, n_actions), (n_actions,)]
        return [torch.randn(*s, generator=g, dtype=F64, requires_grad=True) for s in shapes]

    def test_composition_removes_mean_advantage(self):
        v, a, q = ref.dueling_forward(*self.params())
        torch.testing.assert_close((q - v.unsqueeze(1)).mean(1), torch.zeros_like(v), rtol=0, atol=1e-12)
        torch.testing.assert_close(q - v.unsqueeze(1), a - a.mean(1, keepdim=True))

    def test_jacobian_pearls(self):
        """grad reaching A sums to zero over actions, grad V = Σ_a grad Q (seed note, Phase 4)."""
        h, w_v, b_v, w_a, b_a = self.params()
        v, a, q = ref.dueling_forward(h, w_v, b_v, w_a, b_a)
        grad_q = torch.randn_like(q)
        g_v, g_a = torch.autograd.grad(q, (v, a), grad_q)
        torch.testing.assert_close(g_a.sum(1), torch.zeros_like(v), rtol=0, atol=1e-12)
        torch.testing.assert_close(g_v, grad_q.sum(1))
        g_b_v, g_b_a = torch.autograd.grad(q, (b_v, b_a), grad_q)
        torch.testing.assert_close(g_b_v, grad_q.sum().reshape(1))
        torch.testing.assert_close(g_b_a.sum(), torch.zeros((), dtype=F64), rtol=0, atol=1e-12)

    @pytest.mark.parametrize("which", ["q", "v", "a", "all"])
    def test_closed_form_backward_matches_autograd(self, which):
        inputs = self.params()
        v, a, q = ref.dueling_forward(*inputs)
        grads = {
            k: torch.randn_like(t) if which in (k, "all") else None for k, t in (("v", v), ("a", a), ("q", q))
        }
        outs = [t for k, t in (("v", v), ("a", a), ("q", q)) if grads[k] is not None]
        given = [grads[k] for k in ("v", "a", "q") if grads[k] is not None]
        auto = torch.autograd.grad(outs, inputs, given, allow_unused=True, materialize_grads=True)
        closed = ref.dueling_backward(grads["v"], grads["a"], grads["q"], inputs[0], inputs[1], inputs[3])
        for got, want in zip(closed, auto, strict=True):
            torch.testing.assert_close(got, want)

    def test_bellman_target_double_dqn_first_max_and_terminal(self):
        q_online = torch.tensor([[1.0, 3.0, 3.0], [2.0, 0.0, 1.0]], dtype=F64)
        q_target = torch.tensor([[10.0, 20.0, 30.0], [40.0, 50.0, 60.0]], dtype=F64)
        y = ref.dueling_bellman_target(
            q_online, q_target, torch.tensor([1.0, 2.0], dtype=F64), torch.tensor([0.5, 0.0], dtype=F64)
        )
        # row 0: tie between actions 1 and 2 -> first (1), target 20; row 1: terminal, y = r.
        torch.testing.assert_close(y, torch.tensor([1.0 + 0.5 * 20.0, 2.0], dtype=F64))

    def test_huber_loss_by_hand_and_closed_form_grad(self):
        q = torch.tensor([[0.0, 3.0], [1.0, -1.0]], dtype=F64, requires_grad=True)
        action = torch.tensor([1, 0])
        y = torch.tensor([0.5, 0.8], dtype=F64)
        loss = ref.dueling_huber_loss(q, action, y, kappa=1.0)
        # diffs 2.5 (linear: 2.5 − 0.5 = 2.0) and 0.2 (quadratic: 0.02); mean = 1.01.
        assert float(loss.detach()) == pytest.approx(1.01)
        loss.backward()
        loss2, grad = ref.dueling_huber_loss_and_grad(q, action, y, 1.0)
        torch.testing.assert_close(grad, torch.tensor([[0.0, 0.5], [0.1, 0.0]], dtype=F64))
        torch.testing.assert_close(grad, q.grad)
        torch.testing.assert_close(loss2, loss.detach())


class TestEnsemble:
    def test_value_by_hand(self):
        logits = torch.zeros(1, 1, 2, dtype=F64)  # uniform over support {−1, 3}: E = 1
        quantiles = torch.tensor([[[2.0]], [[4.0]]], dtype=F64).reshape(1, 2, 1)  # mean 3
        out = ref.ensemble_q(logits, torch.tensor([-1.0, 3.0], dtype=F64), quantiles, 0.25)
        torch.testing.assert_close(out, torch.tensor([[0.25 * 1.0 + 0.75 * 3.0]], dtype=F64))

    def test_closed_form_backward_matches_autograd(self):
        g = torch.Generator().manual_seed(7)
        logits = torch.randn(3, 4, 5, generator=g, dtype=F64, requires_grad=True)
        quantiles = torch.randn(3, 6, 4, generator=g, dtype=F64, requires_grad=True)
        support = torch.linspace(-2, 2, 5, dtype=F64)
        out = ref.ensemble_q(logits, support, quantiles, 0.6)
        grad = torch.randn_like(out)
        auto = torch.autograd.grad(out, (logits, quantiles), grad)
        closed = ref.ensemble_q_backward(grad, logits, support, 6, 0.6)
        for got, want in zip(closed, auto, strict=True):
            torch.testing.assert_close(got, want)

    def test_scalar_added_to_atom_logits_is_a_no_op(self):
        """The Phase 2 pearl: V + logits over z leaves softmax, E[Q] and CE unchanged; V gets zero grad."""
        g = torch.Generator().manual_seed(8)
        logits = torch.randn(4, 3, 7, generator=g, dtype=F64)
        v = torch.randn(4, 1, 1, generator=g, dtype=F64, requires_grad=True)
        support = torch.linspace(-1, 1, 7, dtype=F64)
        quantiles = torch.zeros(4, 2, 3, dtype=F64)
        shifted = ref.ensemble_q(logits + v, support, quantiles, 1.0)
        torch.testing.assert_close(shifted, ref.ensemble_q(logits, support, quantiles, 1.0))
        target = torch.softmax(torch.randn(4, 3, 7, generator=g, dtype=F64), dim=2)
        ce = -(target * torch.log_softmax(logits + v, dim=2)).sum()
        (grad_v,) = torch.autograd.grad(ce, v)
        torch.testing.assert_close(grad_v, torch.zeros_like(grad_v), rtol=0, atol=1e-12)


def test_soft_update_in_place():
    target = torch.tensor([0.0, 1.0, -2.0], dtype=F64)
    online = torch.tensor([1.0, 1.0, 2.0], dtype=F64)
    ref.soft_update_(target, online, 0.25)
    torch.testing.assert_close(target, torch.tensor([0.25, 1.0, -1.0], dtype=F64))


def _rand(*shape, seed=0, grad=False):
    t = torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)
    return t.requires_grad_(grad)


def _gradcheck_cases():
    tau = torch.rand(3, 4, generator=torch.Generator().manual_seed(1), dtype=F64)
    support = torch.linspace(-1, 2, 5, dtype=F64)
    return {
        "dueling_forward": (
            ref.dueling_forward,
            [
                _rand(4, 5, grad=True),
                _rand(5, seed=1, grad=True),
                _rand(1, seed=2, grad=True),
                _rand(5, 3, seed=3, grad=True),
                _rand(3, seed=4, grad=True),
            ],
        ),
        "dueling_huber_loss": (
            lambda q: ref.dueling_huber_loss(q, torch.tensor([0, 2, 1, 2]), _rand(4, seed=5) * 3, 1.0),
            [_rand(4, 3, grad=True)],
        ),
        "iqn_quantile_huber_loss": (
            lambda theta: ref.iqn_quantile_huber_loss(theta, tau, _rand(3, 5, seed=6), 1.0),
            [_rand(3, 4, grad=True)],
        ),
        "ensemble_q": (
            lambda logits, quantiles: ref.ensemble_q(logits, support, quantiles, 0.3),
            [_rand(2, 3, 5, grad=True), _rand(2, 4, 3, seed=9, grad=True)],
        ),
    }


@pytest.mark.parametrize("name", list(_gradcheck_cases()))
def test_gradcheck_float64(name):
    fn, inputs = _gradcheck_cases()[name]
    assert gradcheck(fn, inputs, eps=1e-6, atol=1e-5)


class TestPublicValidation:
    def test_shape_error_names_tensor(self):
        with pytest.raises(ValueError, match=r"w_a has shape \[4, 3\], expected \[5, \?\]"):
            ops.dueling_forward(
                torch.zeros(2, 5), torch.zeros(5), torch.zeros(1), torch.zeros(4, 3), torch.zeros(3)
            )

    def test_dtype_errors(self):
        with pytest.raises(TypeError, match=r"action has dtype torch\.int32"):
            ops.dueling_huber_loss(torch.zeros(2, 3), torch.zeros(2, dtype=torch.int32), torch.zeros(2))
        with pytest.raises(TypeError, match=r"reward has dtype torch\.float64"):
            ops.c51_project(torch.zeros(2, 5), torch.zeros(2, dtype=F64), torch.zeros(2), -1.0, 1.0)
        with pytest.raises(TypeError, match="terminated has dtype"):
            z = torch.zeros(3, 2)
            ops.gae(z, z, z, torch.zeros(3, 2), torch.zeros(3, 2, dtype=torch.bool), 0.9, 0.9)

    def test_value_errors(self):
        with pytest.raises(ValueError, match=r"v_min=1\.0 must be < v_max=1\.0"):
            ops.c51_project(torch.zeros(2, 5), torch.zeros(2), torch.zeros(2), 1.0, 1.0)
        with pytest.raises(ValueError, match=r"kappa=0 must be > 0"):
            ops.iqn_quantile_huber_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 4), kappa=0)
        with pytest.raises(ValueError, match=r"tau=1\.5 must be in"):
            ops.soft_update_(torch.zeros(3), torch.zeros(3), 1.5)

    @pytest.mark.parametrize("mode", ["auto", "cuda", "reference"])
    def test_cpu_tensors_take_the_reference_in_every_mode(self, mode, monkeypatch):
        """On any machine, GPU or not, with the extension loaded or not: an op on CPU tensors calls the reference
        (once, bit for bit its result) and never starts a build of the extension."""
        calls = []
        reference_ensemble_q = ref.ensemble_q
        monkeypatch.setattr(ref, "ensemble_q", lambda *args: calls.append(args) or reference_ensemble_q(*args))
        monkeypatch.setattr(ops._State, "mode", mode)
        loaded = ops._State.loaded
        q = _rand(4, 3).float()
        args = (q.reshape(4, 3, 1), torch.ones(1), q.reshape(4, 1, 3), 0.5)
        got = ops.ensemble_q(*args)
        assert len(calls) == 1
        assert ops._State.loaded == loaded
        torch.testing.assert_close(got, reference_ensemble_q(*args), rtol=0, atol=0)

"""The learner's loss functions, qpa, n-step returns, batch validation, replay and config, on hand cases."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from foxhunt_ray.presets import PRESET_NAMES, preset
from learner import losses as L
from learner.config import FaultInjection, LearnerConfig
from learner.diag import qpa
from learner.replay import (
    ReplayBuffer,
    Rollout,
    gather_transitions,
    nstep_returns,
    nstep_transitions,
    rollout_from_batch,
)


def test_c51_cross_entropy_matches_hand_sum():
    logits = torch.tensor([[0.0, 1.0, 2.0], [1.0, 1.0, 1.0]])
    target = torch.tensor([[0.2, 0.3, 0.5], [1.0, 0.0, 0.0]])
    p = logits.softmax(-1)
    want = -((target * p.log()).sum(-1)).mean()
    assert torch.allclose(L.c51_cross_entropy(logits, target), want)
    assert math.isclose(L.c51_cross_entropy(logits[1:], target[1:]).item(), math.log(3), rel_tol=1e-6)


def test_ppo_clip_loss_unclipped_and_clipped():
    adv = torch.tensor([1.0, -1.0, 2.0])
    behaviour = torch.log(torch.tensor([0.5, 0.5, 0.5]))
    same = behaviour.clone().requires_grad_()
    loss, kl, clip_frac = L.ppo_clip_loss(same, behaviour, adv, 0.2)
    assert math.isclose(loss.item(), -adv.mean().item(), rel_tol=1e-6)
    assert kl.item() == 0.0 and clip_frac.item() == 0.0
    # ratio 2 on every row: positive advantages are clipped at 1.2, the negative one keeps min(2*-1, 1.2*-1).
    doubled = torch.log(torch.tensor([1.0, 1.0, 1.0])).requires_grad_()
    loss, kl, clip_frac = L.ppo_clip_loss(doubled, behaviour, adv, 0.2)
    assert math.isclose(loss.item(), -(1.2 * 1 + 2 * -1 + 1.2 * 2) / 3, rel_tol=1e-6)
    assert clip_frac.item() == 1.0 and kl.item() > 0
    loss.backward()  # clipped rows with positive advantage get no gradient; the negative one does
    assert doubled.grad[0] == 0 and doubled.grad[2] == 0 and doubled.grad[1] != 0


def test_entropy_and_distill_kl():
    assert math.isclose(L.entropy(torch.zeros(4, 5)).item(), math.log(5), rel_tol=1e-6)
    q = torch.tensor([[1.0, 2.0, 0.5]], requires_grad=True)
    t = 0.5
    logits = (q.detach() / t).clone().requires_grad_()
    assert abs(L.distill_kl(q, logits, t).item()) < 1e-6  # pi == softmax(q/T): no disagreement
    other = torch.zeros(1, 3, requires_grad=True)
    kl = L.distill_kl(q, other, t)
    p = (q.detach() / t).softmax(-1)
    assert torch.allclose(kl, (p * (p.log() - math.log(1 / 3))).sum())
    kl.backward()
    assert q.grad is None and other.grad is not None  # q_ens is the teacher: detached


def test_value_mse_and_dueling_loss_use_double_dqn_target():
    assert L.value_mse(torch.tensor([1.0, 3.0]), torch.tensor([0.0, 1.0])).item() == 2.5
    q = torch.tensor([[0.0, 5.0]], requires_grad=True)
    q_online_next = torch.tensor([[1.0, 0.0]])  # a* = 0 by the online net...
    q_target_next = torch.tensor([[0.25, 9.0]])  # ...so the target net's 9.0 must not be used
    loss = L.dueling_loss(
        q, torch.tensor([0]), q_online_next, q_target_next, torch.tensor([0.5]), torch.tensor([0.9]), 1.0
    )
    y = 0.5 + 0.9 * 0.25
    assert math.isclose(loss.item(), 0.5 * y * y, rel_tol=1e-6)


def test_masked_losses_equal_the_plain_ones_on_the_kept_rows_and_ignore_the_rest():
    """Each on-policy loss with a row mask == the unmasked one on those rows; a masked-out row whose loss
    term overflows to inf reaches neither the value nor the gradient (torch.where, not a 0 weight)."""
    g = torch.Generator().manual_seed(1)
    mask = torch.tensor([True, False, True, True, False])
    logits = torch.randn(5, 4, generator=g, dtype=torch.float64)
    q = torch.randn(5, 4, generator=g, dtype=torch.float64)
    logp, behaviour = torch.randn(5, generator=g, dtype=torch.float64), torch.randn(5, generator=g, dtype=torch.float64)
    adv, values, returns = (torch.randn(5, generator=g, dtype=torch.float64) for _ in range(3))
    values[1], returns[4] = 1e300, -1e300  # garbage on the masked-out rows: (V - R)^2 is inf there
    m = mask
    cases = {  # name: (input, the loss with the mask on every row, the plain loss on the kept rows)
        "ppo": (
            logp,
            lambda x: L.ppo_clip_loss(x, behaviour, adv, 0.2, m),
            lambda x: L.ppo_clip_loss(x, behaviour[m], adv[m], 0.2),
        ),
        "entropy": (logits, lambda x: (L.entropy(x, m),), lambda x: (L.entropy(x),)),
        "distill": (logits, lambda x: (L.distill_kl(q, x, 0.5, m),), lambda x: (L.distill_kl(q[m], x, 0.5),)),
        "value": (values, lambda x: (L.value_mse(x, returns, m),), lambda x: (L.value_mse(x, returns[m]),)),
    }
    for name, (x, masked, plain) in cases.items():
        full = x.clone().requires_grad_()
        kept = x[m].clone().requires_grad_()
        got, want = masked(full), plain(kept)
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12, msg=name)
        got[0].backward()
        want[0].backward()
        assert torch.equal(full.grad[~m], torch.zeros_like(full.grad[~m])), name
        torch.testing.assert_close(full.grad[m], kept.grad, rtol=1e-12, atol=1e-12, msg=name)


def test_masked_mean_and_advantage_normalisation():
    x = torch.tensor([[1.0, 2.0], [math.nan, math.nan], [3.0, 6.0]])
    mask = torch.tensor([True, False, True])
    assert L.masked_mean(x, mask).item() == 3.0  # over the kept rows and the trailing dim
    assert L.masked_mean(x[mask]).item() == 3.0
    adv = torch.tensor([1.0, 100.0, 3.0, 5.0])
    norm = L.normalize_advantages(adv, torch.tensor([True, False, True, True]))
    kept = torch.tensor([1.0, 3.0, 5.0])
    want = (kept - 3.0) / (kept.std(correction=0) + 1e-8)
    torch.testing.assert_close(norm[[0, 2, 3]], want)
    torch.testing.assert_close(L.normalize_advantages(kept), want)
    # a single row is left as it is (standardising would zero it), masked or not
    one = torch.tensor([False, False, True, False])
    assert torch.equal(L.normalize_advantages(adv, one)[2], adv[2])
    assert torch.equal(L.normalize_advantages(adv[2:3]), adv[2:3])


@pytest.mark.parametrize(
    ("q", "log_pi", "want"),
    [
        ([[1.0, 2.0, 3.0]], [[-3.0, -2.0, -1.0]], 1.0),
        ([[1.0, 2.0, 3.0]], [[-1.0, -2.0, -3.0]], -1.0),
        ([[1.0, 1.0, 1.0]], [[-1.0, -2.0, -3.0]], 0.0),  # no spread in q: counts 0, never NaN
        ([[1.0, 2.0, 3.0], [0.0, 1.0, 0.0]], [[-3.0, -3.0, -3.0], [-2.0, -1.0, -2.0]], 0.5),
    ],
)
def test_qpa_pearson_per_state(q, log_pi, want):
    assert math.isclose(qpa(torch.tensor(q), torch.tensor(log_pi)).item(), want, abs_tol=1e-6)


def test_qpa_is_scale_and_shift_invariant():
    g = torch.Generator().manual_seed(0)
    q, lp = torch.randn(16, 5, generator=g), torch.randn(16, 5, generator=g)
    assert torch.allclose(qpa(q, lp), qpa(3 * q + 7, 0.5 * lp - 2), atol=1e-6)
    with pytest.raises(ValueError, match="one shape"):
        qpa(q, lp[:, :4])


def _naive_nstep(r: Rollout, gamma: float, n: int):
    t_len, b = r.rewards.shape
    out = []
    for bi in range(b):
        for t in range(t_len):
            if not r.valid[t, bi]:
                continue
            ret, m = 0.0, 0
            while True:
                ret += gamma**m * float(r.rewards[t + m, bi])
                m += 1
                k = t + m - 1
                if r.terminated[k, bi] or r.truncated[k, bi] or m == n or t + m == t_len:
                    break
            disc = 0.0 if r.terminated[t + m - 1, bi] else gamma**m
            out.append((t, bi, ret, disc, t + m))
    return out


def _random_rollout(seed: int, t_len=9, b=3, d=2) -> Rollout:
    rng = np.random.default_rng(seed)
    ends = rng.random((t_len, b)) < 0.25
    term = ends & (rng.random((t_len, b)) < 0.5)
    trunc = ends & ~term
    valid = np.ones((t_len, b), bool)
    valid[1:] = ~ends[:-1]  # NEXT_STEP autoreset: the step after an episode end is not a transition
    term, trunc = term & valid, trunc & valid
    rewards = np.where(valid, rng.standard_normal((t_len, b)), 0).astype(np.float32)
    obs = np.arange((t_len + 1) * b * d, dtype=np.float32).reshape(t_len + 1, b, d)
    return Rollout(
        obs=torch.tensor(obs),
        actions=torch.zeros(t_len, b, dtype=torch.int64),
        rewards=torch.tensor(rewards),
        terminated=torch.tensor(term),
        truncated=torch.tensor(trunc),
        behaviour_logp=torch.zeros(t_len, b),
        valid=torch.tensor(valid),
        valid_idx=torch.tensor(np.flatnonzero(valid)),
        policy_version=0,
    )


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("n", [1, 3])
def test_nstep_transitions_match_a_plain_loop(seed, n):
    r = _random_rollout(seed)
    gamma = 0.9
    tr = nstep_transitions(r, gamma, n, reward_scale=1.0)
    want = _naive_nstep(r, gamma, n)
    # nstep_transitions emits valid steps in (t, b) row-major order; the loop went (b, t): sort both.
    want.sort(key=lambda x: (x[0], x[1]))
    assert tr["ret"].shape[0] == len(want)
    for i, (t, bi, ret, disc, nxt) in enumerate(want):
        assert math.isclose(tr["ret"][i].item(), ret, rel_tol=1e-5, abs_tol=1e-6)
        assert math.isclose(tr["discount"][i].item(), disc, rel_tol=1e-6)
        assert torch.equal(tr["obs"][i], r.obs[t, bi]) and torch.equal(tr["next_obs"][i], r.obs[nxt, bi])


def _batch(t_len=4, b=2, d=3):
    return {
        "obs": np.zeros((t_len + 1, b, d), np.float32),
        "actions": np.zeros((t_len, b), np.int64),
        "rewards": np.zeros((t_len, b), np.float32),
        "terminated": np.zeros((t_len, b), bool),
        "truncated": np.zeros((t_len, b), bool),
        "behaviour_logp": np.zeros((t_len, b), np.float32),
        "valid": np.ones((t_len, b), bool),
        "policy_version": 0,
    }


def test_rollout_validation_names_every_problem():
    rollout_from_batch(_batch(), obs_dim=3, n_actions=2)
    bad = _batch()
    bad["actions"] = bad["actions"].astype(np.int32)
    bad["rewards"] = np.zeros((5, 2), np.float32)
    bad["policy_version"] = -1
    with pytest.raises(ValueError) as e:
        rollout_from_batch(bad, obs_dim=3, n_actions=2)
    msg = str(e.value)
    assert "batch['actions'].dtype=torch.int32 must be torch.int64" in msg
    assert "batch['rewards'].shape=(5, 2) must be [T, B]=(4, 2)" in msg
    assert "policy_version" in msg
    with pytest.raises(ValueError, match=r"missing \['valid'\]"):
        rollout_from_batch(
            {k: v for k, v in _batch().items() if k != "valid"},
            obs_dim=3,
            n_actions=2,
        )
    with pytest.raises(ValueError, match=r"obs_dim=4"):
        rollout_from_batch(_batch(), obs_dim=4, n_actions=2)
    oob = _batch()
    oob["actions"][0, 0] = 2
    with pytest.raises(ValueError, match=r"\[0, 2\)"):
        rollout_from_batch(oob, obs_dim=3, n_actions=2)
    nan = _batch()
    nan["rewards"][1, 1] = np.nan
    with pytest.raises(ValueError, match=r"rewards.*NaN"):
        rollout_from_batch(nan, obs_dim=3, n_actions=2)


def test_replay_ring_wraps_and_samples_only_stored_rows():
    rb = ReplayBuffer(capacity=5, obs_dim=1, device=torch.device("cpu"), seed=0)
    for start in (0, 3):
        n = 3
        rb.add(
            {
                "obs": torch.arange(start, start + n, dtype=torch.float32)[:, None],
                "action": torch.arange(start, start + n),
                "ret": torch.zeros(n),
                "discount": torch.ones(n),
                "next_obs": torch.zeros(n, 1),
            }
        )
    assert len(rb) == 5 and rb.cursor == 1
    assert rb.data["action"].tolist() == [5, 1, 2, 3, 4]  # row 0 was overwritten by the 6th transition
    s = rb.sample(200)
    assert set(s["action"].tolist()) == {1, 2, 3, 4, 5}
    assert torch.equal(s["obs"][:, 0], s["action"].float())


@pytest.mark.parametrize("capacity", [7, 40, 1000])
def test_add_rows_writes_what_add_of_the_gathered_transitions_writes(capacity):
    """ReplayBuffer.add_rows (the learner worker's path: rollout -> ring in one op) against add(gather_transitions)
    over three rollouts, wrapping the ring (capacity 7 and 40) and more rows than fit at once (capacity 7)."""
    a = ReplayBuffer(capacity=capacity, obs_dim=2, device=torch.device("cpu"), seed=0)
    b = ReplayBuffer(capacity=capacity, obs_dim=2, device=torch.device("cpu"), seed=0)
    for seed in range(3):
        r = _random_rollout(seed)
        returns = nstep_returns(r, 0.9, 3, 0.5)
        a.add_rows(r, returns, r.valid_idx)
        b.add(gather_transitions(r, returns, r.valid_idx))
        assert (a.cursor, a.size) == (b.cursor, b.size)
        for k in ReplayBuffer.KEYS:
            assert torch.equal(a.data[k], b.data[k]), k


def test_config_errors_name_each_bad_value():
    assert LearnerConfig().errors() == []
    errs = LearnerConfig(hidden_dim=0, lr=-1.0, v_min=5.0, v_max=1.0, dueling_mode="x", gamma=2.0).errors()
    for want in (
        "learner.hidden_dim=0 must be an int >= 1",
        "learner.lr=-1.0 must be > 0",
        "learner.v_max=1.0 must be > learner.v_min=5.0",
        "learner.gamma=2.0 must be in [0, 1]",
        "learner.dueling_mode='x' must be one of",
    ):
        assert any(e.startswith(want) for e in errs), (want, errs)
    (err,) = FaultInjection(inject_nan_at=0).errors()  # the test-only faults have their own rules, apart
    assert err.startswith("faults.inject_nan_at=0 must be") and "a learner step" in err
    assert any("q_batch_size" in e for e in LearnerConfig(q_batch_size=10, replay_capacity=5).errors())


def test_presets():
    ablations = {"phase2_v2", "phase3_1", "phase3_2", "phase3_2c", "phase3_1_fix"}  # tests/test_ablations.py
    assert set(PRESET_NAMES) == {"plan_a_v2", "phase4_2", "phase4_3", "smoke", *ablations}
    for name in PRESET_NAMES:
        assert preset(name).errors() == []
    assert preset("plan_a_v2").hidden_dim == 512
    modes = {n: preset(n).dueling_mode for n in ("plan_a_v2", "phase4_2", "phase4_3")}
    assert modes == {"plan_a_v2": "off", "phase4_2": "diagnostic", "phase4_3": "baseline"}
    base = dataclasses.asdict(preset("plan_a_v2"))
    for n in ("phase4_2", "phase4_3"):  # the phase 4 presets differ from the baseline in dueling_mode only
        diff = {k for k, v in dataclasses.asdict(preset(n)).items() if base[k] != v}
        assert diff == {"dueling_mode"}
    with pytest.raises(ValueError, match=r"unknown preset 'nope'; valid presets: \['plan_a_v2'"):
        preset("nope")


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(-50, 50), min_size=3, max_size=3),
    st.lists(st.floats(-50, 50), min_size=3, max_size=3),
)
def test_qpa_is_a_bounded_antisymmetric_correlation(q, lp):
    q_t, lp_t = torch.tensor([q], dtype=torch.float64), torch.tensor([lp], dtype=torch.float64)
    r = qpa(q_t, lp_t).item()
    assert -1.0 <= r <= 1.0 and math.isfinite(r)
    assert math.isclose(qpa(q_t, -lp_t).item(), -r, abs_tol=1e-9)
    assert qpa(q_t, q_t).item() in (0.0, pytest.approx(1.0))


def _policy_batch(rows=64, n=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, n, generator=g, dtype=torch.float64, requires_grad=True)
    values = torch.randn(rows, generator=g, dtype=torch.float64, requires_grad=True)
    rest = dict(
        q_ens=torch.randn(rows, n, generator=g, dtype=torch.float64),
        returns=torch.randn(rows, generator=g, dtype=torch.float64),
        adv=torch.randn(rows, generator=g, dtype=torch.float64) * 3 + 1,
        actions=torch.randint(0, n, (rows,), generator=g),
        behaviour_logp=-torch.rand(rows, generator=g, dtype=torch.float64) * 2 - 0.5,
        valid=torch.rand(rows, generator=g) > 0.2,
    )
    return logits, values, rest


def _policy(logits, values, rest, **kw):
    opts = dict(clip=0.2, temperature=0.5, normalize=True) | kw
    return L.policy_losses(
        logits,
        rest["q_ens"],
        values,
        rest["returns"],
        rest["adv"],
        rest["actions"],
        rest["behaviour_logp"],
        rest["valid"],
        **opts,
    )


def test_policy_losses_are_the_learner_s_losses_over_the_valid_rows_only():
    logits, values, rest = _policy_batch()
    p = _policy(logits, values, rest)
    m = rest["valid"]
    adv = L.normalize_advantages(rest["adv"][m])
    logp = torch.log_softmax(logits[m], -1).gather(-1, rest["actions"][m, None]).squeeze(-1)
    l_pi, kl, cf = L.ppo_clip_loss(logp, rest["behaviour_logp"][m], adv, 0.2)
    torch.testing.assert_close(p.l_pi, l_pi)
    torch.testing.assert_close((p.approx_kl, p.clip_frac), (kl, cf))
    torch.testing.assert_close(p.entropy, L.entropy(logits[m]))
    torch.testing.assert_close(p.l_distill, L.distill_kl(rest["q_ens"][m], logits[m], 0.5))
    torch.testing.assert_close(p.l_v, L.value_mse(values[m], rest["returns"][m]))
    torch.testing.assert_close(p.adv_mean, rest["adv"][m].mean())
    torch.testing.assert_close((p.v_mean, p.q_mean), (values[m].mean(), rest["q_ens"][m].mean()))
    # an invalid row's inputs (wild but finite) change nothing and get no gradient
    wild = {k: v.clone() for k, v in rest.items()}
    for k in ("q_ens", "returns", "adv", "behaviour_logp"):
        wild[k][~m] = 1e6
    wild["actions"][~m] = 0
    logits2 = logits.detach().clone()
    logits2[~m] = 50.0
    logits2.requires_grad_(True)
    p2 = _policy(logits2, values, wild)
    for a, b in zip(p, p2, strict=True):
        torch.testing.assert_close(a, b)
    total = p2.l_pi - 0.01 * p2.entropy + 0.1 * p2.l_distill + 0.5 * p2.l_v
    g_logits, g_values = torch.autograd.grad(total, (logits2, values))
    assert torch.all(g_logits[~m] == 0) and torch.all(g_values[~m] == 0)
    assert torch.all(g_logits[m].abs().sum(-1) > 0)


def test_policy_losses_flip_only_the_distillation_and_normalize_only_the_surrogate():
    logits, values, rest = _policy_batch(seed=1)
    p, flipped, raw = (
        _policy(logits, values, rest),
        _policy(logits, values, rest, flip_distill=True),
        _policy(logits, values, rest, normalize=False),
    )
    assert not torch.isclose(p.l_distill, flipped.l_distill)
    assert torch.equal(p.qpa, flipped.qpa) and torch.equal(p.q_mean, flipped.q_mean)
    assert not torch.isclose(p.l_pi, raw.l_pi)
    assert torch.equal(p.entropy, raw.entropy) and torch.equal(p.adv_mean, raw.adv_mean)


def test_policy_losses_name_a_bad_input():
    logits, values, rest = _policy_batch()
    with pytest.raises(TypeError, match=r"actions has dtype torch\.int32; pass int64"):
        _policy(logits, values, rest | {"actions": rest["actions"].int()})
    with pytest.raises(ValueError, match=r"q_ens has shape \[64, 6\], expected \[64, 7\]"):
        _policy(logits, values, rest | {"q_ens": rest["q_ens"][:, :6]})
    with pytest.raises(TypeError, match=r"valid has dtype torch\.float64; pass a bool mask"):
        _policy(logits, values, rest | {"valid": rest["valid"].double()})
    with pytest.raises(ValueError, match=r"clip=0\.0 and temperature=0\.5 must both be > 0"):
        _policy(logits, values, rest, clip=0.0)

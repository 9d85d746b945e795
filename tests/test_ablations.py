"""The seed's failed designs as ablation presets: each does what the seed note says it did, and nothing else.

phase2_v2 (scalar V on the C51 atom logits), phase3_1 (IQN V/A split, composed Q to the consumers), phase3_2
(+ V_IQN as the GAE baseline), phase3_2c (+ the alpha blend from V_scalar to V_IQN), phase3_1_fix (raw A + bias
to the consumers, composed Q to the loss). Off, every switch leaves Plan A v2 as it was, bit for bit.
"""

from __future__ import annotations

import copy
import dataclasses
import io
import math

import numpy as np
import pytest
import torch

import learner.losses as losses_module
from foxhunt_ray.presets import preset, run_preset
from learner import graph as G
from learner import losses as L
from learner import ops
from learner.learner import BASELINE_ALPHA, V_IQN_MEAN, Learner, _at_action
from learner.network import HEAD_GROUPS, MainNet, identity_obs_stats, policy_from_weights, quantile_midpoints
from tests.learner_batches import OBS, N, random_rollout

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ABLATIONS = ("phase2_v2", "phase3_1", "phase3_2", "phase3_2c", "phase3_1_fix")
SWITCHES = {
    "phase2_v2": {"c51_scalar_v": True},
    "phase3_1": {"iqn_dueling": "composed"},
    "phase3_2": {"iqn_dueling": "composed", "iqn_baseline": "v_iqn"},
    "phase3_2c": {"iqn_dueling": "composed", "iqn_baseline": "blend"},
    "phase3_1_fix": {"iqn_dueling": "dual"},
}
SMOKE_SIZES = {
    "hidden_dim": 32,
    "n_atoms": 11,
    "iqn_taus": 8,
    "iqn_target_taus": 8,
    "q_batch_size": 16,
    "replay_capacity": 8192,
    "replay_min_size": 16,
}


def _cfg(name: str, **kw):
    """Preset `name` (its switches and plan_a_v2's coefficients) at smoke sizes and the seed's settings (lr 2.5e-4,
    reward scale 1: what the seed ran these designs at, and what the step sizes below are stated for); replay
    trains at once."""
    return dataclasses.replace(preset(name, settings="seed"), **{**SMOKE_SIZES, **kw})


def _learner(name: str, seed: int = 3, **kw) -> Learner:
    return Learner(_cfg(name, **kw), obs_dim=OBS, n_actions=N, seed=seed)


def _batches(seed: int, count: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [random_rollout(rng, version=i, logp_noise=0.3) for i in range(count)]


def _h(lrn: Learner, batch: dict) -> torch.Tensor:
    """h of every s_t, t = 0..T, flattened [(T+1)B, H], as the update's on-policy pass computes it."""
    with torch.no_grad():
        return lrn.net.encoder(torch.as_tensor(batch["obs"]).reshape(-1, OBS))


# ---------------------------------------------------------------------------------- presets and switches


def test_ablation_presets_differ_from_plan_a_v2_in_their_switches_alone():
    base = dataclasses.asdict(preset("plan_a_v2"))
    for name in ABLATIONS:
        cfg = preset(name)
        assert cfg.errors() == [] and run_preset(name).validate().learner == cfg
        diff = {k: v for k, v in dataclasses.asdict(cfg).items() if base[k] != v}
        assert diff == SWITCHES[name], name


def test_every_switch_at_its_default_is_plan_a_v2():
    """Defaults: the Plan A v2 network (same parameters, same groups), the Plan A v2 head outputs op for op,
    and training bit-identical to a learner whose (unused) blend steps are moved."""
    cfg = dataclasses.replace(preset("plan_a_v2"), **SMOKE_SIZES)
    assert (cfg.c51_scalar_v, cfg.iqn_dueling, cfg.iqn_baseline) == (False, "off", "off")
    lrn = Learner(cfg, obs_dim=OBS, n_actions=N, seed=3, **identity_obs_stats(OBS))
    net = lrn.net
    assert net.groups == HEAD_GROUPS and net.c51_v is None and net.iqn_v is None
    assert list(dict.fromkeys(k.split(".")[0] for k in net.state_dict())) == list(HEAD_GROUPS)
    h = torch.randn(9, cfg.hidden_dim, generator=torch.Generator().manual_seed(0))
    tau = torch.rand(9, 5, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(net.c51_logits(h), net.c51(h).view(9, N, cfg.n_atoms))
        assert torch.equal(net.iqn_quantiles(h, tau), net.iqn(h, tau))
        assert torch.equal(net.iqn_consumer_quantiles(h, tau), net.iqn(h, tau))
        mid = quantile_midpoints(9, cfg.iqn_taus, h)
        # q_ens takes IQN's mean over the midpoints as one tau (equal to the explicit mean: the test below)
        want = ops.ensemble_q(net.c51(h).view(9, N, cfg.n_atoms), lrn.support, net.iqn(h, cfg.iqn_taus), cfg.ensemble_w)
        assert torch.equal(net.q_ens(h, lrn.support, cfg.ensemble_w, cfg.iqn_taus), want)
        torch.testing.assert_close(net.iqn(h, cfg.iqn_taus)[:, 0], net.iqn(h, mid).mean(1), rtol=1e-5, atol=1e-6)
    moved = Learner(
        dataclasses.replace(cfg, alpha_start_step=1, alpha_end_step=2),
        obs_dim=OBS,
        n_actions=N,
        seed=3,
        **identity_obs_stats(OBS),
    )
    for batch in _batches(0, 5):
        assert lrn.update(batch) == moved.update(batch)
    assert torch.equal(lrn.main.flat, moved.main.flat) and torch.equal(lrn.main.target_flat, moved.main.target_flat)


@pytest.mark.parametrize("name", ABLATIONS)
def test_ablation_heads_start_from_plan_a_v2s_weights(name):
    """The extra heads are built after the Plan A v2 ones: encoder, C51, IQN, pi and V start identical."""
    base, abl = _learner("plan_a_v2"), _learner(name)
    for group in HEAD_GROUPS:
        assert torch.equal(base.main.flat[base.groups[group]], abl.main.flat[abl.groups[group]]), group
    extra = {"c51_v"} if SWITCHES[name].get("c51_scalar_v") else {"iqn_v"}
    assert set(abl.net.groups) - set(HEAD_GROUPS) == extra


def test_new_fields_bad_values_are_named():
    cases = {
        "learner.c51_scalar_v='yes' must be a bool": {"c51_scalar_v": "yes"},
        "learner.iqn_dueling='centred' must be one of ['off', 'composed', 'dual']": {"iqn_dueling": "centred"},
        "learner.iqn_baseline='v_c51' must be one of ['off', 'v_iqn', 'blend']": {"iqn_baseline": "v_c51"},
        "learner.iqn_baseline='v_iqn' needs learner.iqn_dueling='composed' or 'dual' (V_IQN is the dueling IQN's V)": {
            "iqn_baseline": "v_iqn"
        },
        "learner.iqn_baseline='blend' conflicts with learner.dueling_mode='baseline' (V_dq is then the GAE "
        "baseline): pick one": {"iqn_dueling": "dual", "iqn_baseline": "blend", "dueling_mode": "baseline"},
        "learner.alpha_start_step=-1 must be an int >= 0": {"alpha_start_step": -1},
        "learner.alpha_end_step=2.5 must be an int >= 0": {"alpha_end_step": 2.5},
        "learner.alpha_start_step=True must be an int >= 0": {"alpha_start_step": True},
        "learner.alpha_end_step=200 must be > learner.alpha_start_step=200": {"alpha_end_step": 200},
    }
    for want, kw in cases.items():
        assert _cfg("plan_a_v2", **kw).errors() == [want], kw
    with pytest.raises(ValueError, match=r"iqn_dueling='x' must be 'off', 'composed' or 'dual'"):
        MainNet(OBS, N, 8, 1, 5, iqn_dueling="x")
    with pytest.raises(ValueError, match=r"learner.iqn_dueling='x' must be one of"):
        Learner(_cfg("plan_a_v2", iqn_dueling="x"), obs_dim=OBS, n_actions=N)


# ---------------------------------------------------------------------------------- phase2_v2


def test_phase2_v2_scalar_v_gets_exactly_zero_gradient_from_the_c51_loss():
    """float64, so that exactly-zero-in-maths reads as zero: V's gradient is (sum_z p_z - 1)/B per state."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        net = MainNet(OBS, N, 16, 2, 11, c51_scalar_v=True).double()
    g = torch.Generator().manual_seed(1)
    obs = torch.randn(32, OBS, generator=g, dtype=torch.float64)
    action = torch.randint(0, N, (32,), generator=g)
    target = torch.softmax(3 * torch.randn(32, 11, generator=g, dtype=torch.float64), -1)
    logits = net.c51_logits(net.encoder(obs))
    L.c51_cross_entropy(logits[torch.arange(32), action], target).backward()
    c51_grad = torch.cat([p.grad.reshape(-1) for p in net.c51.parameters()])
    v_grad = torch.cat([p.grad.reshape(-1) for p in net.c51_v.parameters()])
    assert c51_grad.abs().max() > 1e-3
    assert v_grad.abs().max() < 1e-14


def test_phase2_v2_v_cancels_but_the_per_atom_centring_does_not():
    """softmax_z drops V; it does not drop mean_a A[., z], which varies with z. So the distributions are those of
    A - mean_a A, not of A, and every state's prod_a p(z | s, a) is the same for all atoms z."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        net = MainNet(OBS, N, 16, 2, 11, c51_scalar_v=True).double()
    h = net.encoder(torch.randn(6, OBS, generator=torch.Generator().manual_seed(2), dtype=torch.float64))
    with torch.no_grad():
        a = net.c51(h).view(6, N, 11)
        p = torch.softmax(net.c51_logits(h), -1)
        assert torch.allclose(p, torch.softmax(a - a.mean(1, keepdim=True), -1), atol=1e-14)  # V drops out
        assert not torch.allclose(p, torch.softmax(a, -1), atol=1e-3)  # plain C51 reads A itself
        log_prod = torch.log(p).sum(1)  # [B, Z]: log prod_a p(z | s, a)
        assert torch.allclose(log_prod, log_prod[:, :1].expand_as(log_prod), atol=1e-10)
        plain = torch.log(torch.softmax(a, -1)).sum(1)
        assert (plain.max(1).values - plain.min(1).values).min() > 1e-3  # plain C51 has no such constraint


def test_phase2_v2_trains_and_its_v_stays_put():
    lrn = _learner("phase2_v2")
    v0 = lrn.main.flat[lrn.groups["c51_v"]].clone()
    for batch in _batches(1, 4):
        d = lrn.update(batch)
        assert d["q_trained"] == 1.0 and d["l_c51"] > 0
        # float32: sum_z p_z rounds to 1 only within ~1e-7, so V's gradient is rounding noise
        assert d["grad_norm/c51_v"] < 1e-5 * d["grad_norm/c51"]
    # Adam turns noise into steps of at most ~lr * grad / eps: V barely moves
    assert (lrn.main.flat[lrn.groups["c51_v"]] - v0).abs().max() < 1e-5


# ---------------------------------------------------------------------------------- phase3_1 and phase3_1_fix


def _spy(monkeypatch, module, name: str) -> list:
    seen: list = []
    real = getattr(module, name)

    def spy(*args):
        seen.append(tuple(a.detach().clone() if torch.is_tensor(a) else a for a in args))
        return real(*args)

    monkeypatch.setattr(module, name, spy)
    return seen


def _composed_by_hand(net: MainNet, h: torch.Tensor, tau: torch.Tensor) -> tuple[torch.Tensor, ...]:
    x = h[:, None, :] * torch.relu(net.iqn.embed(torch.cos(math.pi * torch.arange(64.0) * tau[..., None])))
    v, a = net.iqn_v(x), net.iqn.out(x)
    return v, a, v + a - a.mean(-1, keepdim=True)


@pytest.mark.parametrize("name", ["phase3_1", "phase3_1_fix"])
def test_phase3_ensemble_input_and_iqn_loss_input(name, monkeypatch):
    """phase3_1: q_ens reads the composed Q, centred: mean_a of it is V(s, tau) at each fixed tau.
    phase3_1_fix: q_ens reads raw A + bias (not centred); in both the quantile Huber loss trains composed Q."""
    lrn = _learner(name)
    batches = _batches(2, 2)
    lrn.update(batches[0])  # replay filled: the next update runs the Q losses
    before = copy.deepcopy(lrn.net)
    ens, iqn = _spy(monkeypatch, ops, "ensemble_q"), _spy(monkeypatch, losses_module, "iqn_loss")
    gen_state, replay_state = lrn.gen.get_state(), lrn.replay.gen.get_state()
    lrn.update(batches[1])
    # the on-policy pass: q_ens over the T*B states s_t, IQN at the fixed midpoints
    with torch.no_grad():
        h = before.encoder(torch.as_tensor(batches[1]["obs"]).reshape(-1, OBS))[: 6 * 4]
        mid = quantile_midpoints(h.shape[0], lrn.cfg.iqn_taus, h)
        v, a, q = _composed_by_hand(before, h, mid)
    fed = ens[0][2][:, 0]  # ensemble_q(c51_logits, support, iqn mean over the midpoints as one tau, w)
    if name == "phase3_1":
        torch.testing.assert_close(fed, q.mean(1), rtol=0, atol=1e-6)
        torch.testing.assert_close(fed.mean(-1, keepdim=True), v.mean(1), rtol=0, atol=1e-6)  # centred on V
    else:
        torch.testing.assert_close(fed, a.mean(1), rtol=0, atol=1e-6)  # raw A + bias
        assert (fed.mean(-1, keepdim=True) - v.mean(1)).abs().max() > 1e-2  # not centred
    # the IQN loss: theta = composed Q(s, a_taken, tau) at the sampled taus of this update
    lrn.gen.set_state(gen_state)
    lrn.replay.gen.set_state(replay_state)
    sample = lrn.replay.sample(lrn.cfg.q_batch_size)
    torch.rand(sample["action"].shape[0], lrn.cfg.iqn_target_taus, generator=lrn.gen)  # tau' is drawn first
    tau = torch.rand(sample["action"].shape[0], lrn.cfg.iqn_taus, generator=lrn.gen)
    with torch.no_grad():
        _, _, q_replay = _composed_by_hand(before, before.encoder(sample["obs"]), tau)
    theta, tau_seen = iqn[0][0], iqn[0][1]
    assert torch.equal(tau_seen, tau)
    torch.testing.assert_close(theta, _at_action(q_replay, sample["action"]), rtol=0, atol=1e-6)


def test_phase3_1_and_its_fix_differ_by_a_per_state_constant_that_every_consumer_here_ignores():
    """Same seed, parameters and data: the Q losses agree, and q_ens differs only by (1-w) mean_tau(V - mean_a A),
    one number per state. Softmax over actions (distillation) and a correlation across actions (qpa) cannot
    see it, so here 3.1 and 3.1-fix train alike up to float rounding (the seed's runs: qpa -0.93 and -0.92)."""
    composed, dual = _learner("phase3_1"), _learner("phase3_1_fix")
    assert torch.equal(composed.main.flat, dual.main.flat)
    batch = _batches(3, 1)[0]
    h = _h(composed, batch)[: 6 * 4]
    with torch.no_grad():
        cfg = composed.cfg
        gap = composed.net.q_ens(h, composed.support, cfg.ensemble_w, cfg.iqn_taus) - dual.net.q_ens(
            h, dual.support, cfg.ensemble_w, cfg.iqn_taus
        )
    assert gap.abs().max() > 1e-2  # the consumers are handed different values ...
    torch.testing.assert_close(gap, gap[:, :1].expand_as(gap), rtol=0, atol=1e-5)  # ... by a constant per state
    dc, dd = composed.update(batch), dual.update(batch)
    for key in ("l_c51", "l_iqn", "l_v"):
        assert dc[key] == dd[key], key
    assert dc["q_ens_mean"] != dd["q_ens_mean"]
    for key in ("qpa", "l_distill", "l_pi"):
        assert math.isclose(dc[key], dd[key], rel_tol=1e-4, abs_tol=1e-6), key


def test_dueling_iqn_gradient_to_a_sums_to_zero_over_actions():
    """The addendum: A(s, ., tau) trained through composed Q gets a gradient that sums to 0 over actions, so
    iqn.out's bias gradient is 0 summed over actions, where Plan A v2's is not."""
    for mode, zero in (("composed", True), ("off", False)):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            net = MainNet(OBS, N, 16, 2, 11, iqn_dueling=mode).double()
        g = torch.Generator().manual_seed(4)
        h = net.encoder(torch.randn(8, OBS, generator=g, dtype=torch.float64))
        tau = torch.rand(8, 5, generator=g, dtype=torch.float64)
        action = torch.randint(0, N, (8,), generator=g)
        target = torch.randn(8, 7, generator=g, dtype=torch.float64)
        L.iqn_loss(_at_action(net.iqn_quantiles(h, tau), action), tau, target, 1.0).backward()
        bias_sum = net.iqn.out.bias.grad.sum().abs().item()
        assert (bias_sum < 1e-14) == zero, (mode, bias_sum)


# ---------------------------------------------------------------------------------- phase3_2 and phase3_2c


def _gae_spy(monkeypatch) -> list:
    seen: list = []
    real = losses_module.gae

    def spy(rewards, values, next_values, terminated, episode_end, gamma, lam):
        seen.append((values.clone(), next_values.clone()))
        return real(rewards, values, next_values, terminated, episode_end, gamma, lam)

    monkeypatch.setattr(losses_module, "gae", spy)
    return seen


def test_v_iqn_is_the_mean_over_actions_and_taus_of_composed_q():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        net = MainNet(OBS, N, 16, 2, 11, iqn_dueling="composed").double()
    h = net.encoder(torch.randn(10, OBS, generator=torch.Generator().manual_seed(5), dtype=torch.float64))
    with torch.no_grad():
        mid = quantile_midpoints(10, 8, h)
        v, _, q = _composed_by_hand(net, h, mid)
        assert torch.allclose(net.v_iqn(h, 8), q.mean((1, 2)), atol=1e-14)
        assert torch.allclose(net.v_iqn(h, 8), v.mean((1, 2)), atol=1e-12)  # the dueling identity


def test_phase3_2_gae_baseline_is_v_iqn(monkeypatch):
    lrn = _learner("phase3_2")
    seen = _gae_spy(monkeypatch)
    t_len, b = 6, 4
    for batch in _batches(6, 3):
        h = _h(lrn, batch)
        with torch.no_grad():
            v_iqn = lrn.net.v_iqn(h, lrn.cfg.iqn_taus).view(t_len + 1, b)
            v_scalar = lrn.net.value(h).view(t_len + 1, b)
        d = lrn.update(batch)
        values, next_values = seen[-1]
        assert torch.equal(values, v_iqn[:-1]) and torch.equal(next_values, v_iqn[1:])
        assert not torch.allclose(values, v_scalar[:-1])
        assert d[V_IQN_MEAN] == pytest.approx(v_iqn[:-1][torch.as_tensor(batch["valid"])].mean().item(), abs=1e-5)
    assert d["l_v"] > 0  # V_scalar still trains


def test_blend_alpha_ramps_linearly_from_one_to_zero():
    assert [L.blend_alpha(s, 200, 1000) for s in (0, 1, 200, 201, 600, 999, 1000, 5000)] == [
        1.0,
        1.0,
        1.0,
        799 / 800,
        0.5,
        1 / 800,
        0.0,
        0.0,
    ]


def test_phase3_2c_baseline_is_v_scalar_then_the_blend_then_v_iqn(monkeypatch):
    """alpha_start_step=2, alpha_end_step=6: steps 1-2 V_scalar EXACTLY (the seed's smoking gun), then
    alpha = (6 - step)/4, and V_IQN exactly from step 6 on."""
    lrn = _learner("phase3_2c", alpha_start_step=2, alpha_end_step=6)
    seen = _gae_spy(monkeypatch)
    for step, batch in enumerate(_batches(7, 8), start=1):
        h = _h(lrn, batch)
        with torch.no_grad():
            v_iqn = lrn.net.v_iqn(h, lrn.cfg.iqn_taus).view(7, 4)
            v_scalar = lrn.net.pi_value(h)[1].view(7, 4)  # V_scalar as the learner makes it, beside pi's logits
        d = lrn.update(batch)
        alpha = min(1.0, max(0.0, (6 - step) / 4))
        values, next_values = seen[-1]
        assert d[BASELINE_ALPHA] == alpha, step
        if step <= 2:
            assert torch.equal(values, v_scalar[:-1]) and torch.equal(next_values, v_scalar[1:]), step
        elif step >= 6:
            assert torch.equal(values, v_iqn[:-1]) and torch.equal(next_values, v_iqn[1:]), step
        else:
            torch.testing.assert_close(values, alpha * v_scalar[:-1] + (1 - alpha) * v_iqn[:-1], rtol=0, atol=1e-6)
            assert not torch.equal(values, v_scalar[:-1]) and not torch.equal(values, v_iqn[:-1])


def test_phase3_2c_is_phase3_1_bit_for_bit_while_alpha_is_one():
    """Up to alpha_start_step 3.2c trains exactly like 3.1: V_IQN enters with weight 0. On the cluster 3.2c still
    collapsed there, which put the blame on 3.1's consumers, not on the baseline."""
    blend, composed = _learner("phase3_2c", alpha_start_step=5, alpha_end_step=9), _learner("phase3_1")
    for batch in _batches(8, 5):
        db, dc = blend.update(batch), composed.update(batch)
        assert db[BASELINE_ALPHA] == 1.0
        for key in dc:
            assert db[key] == dc[key], key
    assert torch.equal(blend.main.flat, composed.main.flat)
    d = blend.update(_batches(9, 1)[0])  # step 6: alpha < 1, the two part
    assert d[BASELINE_ALPHA] == 0.75


# ---------------------------------------------------------------------------------- every preset, every path


@pytest.mark.parametrize("name", ABLATIONS)
def test_every_ablation_trains_finite_and_acts(name):
    lrn = _learner(name, alpha_start_step=1, alpha_end_step=3)
    before = lrn.main.flat.detach().clone()
    for batch in _batches(10, 4):
        d = lrn.update(batch)
        assert all(math.isfinite(v) for v in d.values()), d
    assert d["q_trained"] == 1.0 and d["nan_abort_step"] == 0 and d["l_c51"] > 0 and d["l_iqn"] > 0
    for group in lrn.net.groups:
        assert f"grad_norm/{group}" in d
    assert not torch.equal(before, lrn.main.flat)
    w = lrn.policy_weights()  # rollout actors still get encoder + pi only
    assert all(k.startswith(("encoder.", "pi.")) for k in w["state"])
    obs = torch.randn(5, OBS)
    with torch.no_grad():
        assert torch.equal(policy_from_weights(w)(obs), lrn.net.pi(lrn.net.encoder(obs)))


@pytest.mark.parametrize("name", ABLATIONS)
def test_graph_body_trains_every_ablation_like_the_eager_update(name):
    """What CUDA captures, run eagerly on CPU: the ablations need nothing of their own in the graph path, and
    3.2c's alpha (a device scalar written before each step) moves through the ramp inside it."""
    kw = {"alpha_start_step": 1, "alpha_end_step": 4}
    eager = _learner(name, seed=1, **kw)
    body = _learner(name, seed=1, nan_guard="composed", **kw)
    body.graph = G.GraphUpdate(body, capture=False)
    for batch in _batches(11, 5):
        da, db = eager.update(batch), body.update(batch)
        assert da.keys() == db.keys()
        for k in da:
            assert math.isclose(da[k], db[k], rel_tol=1e-3, abs_tol=1e-4), (k, da[k], db[k])
    assert body.graph.shapes
    torch.testing.assert_close(eager.main.flat, body.main.flat, rtol=1e-3, atol=1e-5)
    assert torch.equal(eager.gen.get_state(), body.gen.get_state())


def test_ablation_checkpoints_resume_exactly_and_old_configs_still_load():
    batches = _batches(12, 5)
    a = _learner("phase3_2c", alpha_start_step=1, alpha_end_step=5)
    for batch in batches[:2]:
        a.update(batch)
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    b = _learner("phase3_2c", seed=99, alpha_start_step=1, alpha_end_step=5)
    b.load_state_dict(torch.load(buf, weights_only=True))
    for batch in batches[2:]:
        assert a.update(batch) == b.update(batch)  # alpha follows the restored step
    with pytest.raises(ValueError, match=r"config fields differ \['iqn_baseline'\]"):
        _learner("phase3_1").load_state_dict(_learner("phase3_2").state_dict())
    # a checkpoint written before the ablation fields existed: its config lacks them, and ran with the defaults
    old = _learner("plan_a_v2")
    old.update(batches[0])
    sd = old.state_dict()
    for key in ("c51_scalar_v", "iqn_dueling", "iqn_baseline", "alpha_start_step", "alpha_end_step"):
        del sd["config"][key]
    fresh = _learner("plan_a_v2", seed=7)
    fresh.load_state_dict(sd)
    assert torch.equal(fresh.main.flat, old.main.flat) and fresh.step == 1
    with pytest.raises(ValueError, match=r"config fields differ \['iqn_dueling'\]"):
        _learner("phase3_1").load_state_dict(sd)


@pytest.mark.parametrize("iqn_dueling", ["off", "composed", "dual"])
def test_midpoint_mean_in_one_tau_equals_the_mean_over_the_midpoints(iqn_dueling):
    """q_ens, V_IQN and the double-DQN a* take IQN's mean over the fixed midpoints as one tau (the heads are
    affine in the features): it must equal the explicit mean over the n midpoints, for every IQN variant."""
    torch.manual_seed(0)
    net = MainNet(6, 4, 16, 2, 11, iqn_dueling=iqn_dueling)
    h = net.encoder(torch.randn(9, 6))
    mid = quantile_midpoints(9, 8, h)
    for fn in (net.iqn_quantiles, net.iqn_consumer_quantiles):
        explicit = fn(h, mid).mean(1)
        one_tau = fn(h, 8)
        assert one_tau.shape == (9, 1, 4)
        torch.testing.assert_close(one_tau[:, 0], explicit, rtol=1e-5, atol=1e-6)

"""The CUDA path's pieces on CPU: device-side NaN guard, single backward, masked losses, the graph body.

On CUDA, learner.graph captures these as one graph; here the same code runs eagerly and is compared with the
CPU path it replaces: bit-identical where the arithmetic is the same (guard, one backward), within float32
rounding where only the reduction order differs (masked means instead of indexed ones).
"""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
import torch

from foxhunt_ray.presets import preset
from learner import diag as D
from learner import graph as G
from learner import losses as L
from learner.config import FaultInjection
from learner.learner import Learner
from learner.replay import rollout_from_batch
from tests.learner_batches import OBS, N, random_rollout, smoke_cfg

pytestmark = pytest.mark.usefixtures("one_torch_thread")


_cfg = smoke_cfg


def _rollout(rng, t_len=6, b=4, version=0, end_p=0.15):
    return random_rollout(rng, t_len, b, version, end_p, logp_noise=0.3)


def _state(lrn: Learner) -> dict[str, torch.Tensor]:
    out = {}
    for name in ("main", "dueling"):
        p = getattr(lrn, name)
        if p is None:
            continue
        out[f"{name}.flat"] = p.flat.detach().clone()
        out[f"{name}.target"] = p.target_flat.detach().clone()
        for k, v in p.opt.state.get(p.flat, {}).items():
            out[f"{name}.adam.{k}"] = torch.as_tensor(v).clone()
    return out


@pytest.mark.parametrize("mode", ["off", "diagnostic", "baseline"])
@pytest.mark.parametrize("pair", ["host_vs_device", "composed_vs_fused"])
def test_device_guard_trains_bit_identically_to_the_host_guard(mode, pair):
    """Healthy steps, an injected NaN (step 3) and an overflowing Adam step (step 5): same bits, same diag. Also
    the device guard as torch ops against it as one op (ops.guarded_adam_, here its reference: the CPU op)."""
    nan_at_3 = FaultInjection(inject_nan_at=3)
    guards = ("host", "composed") if pair == "host_vs_device" else ("composed", "fused")
    learners = [
        Learner(_cfg(dueling_mode=mode, nan_guard=g), obs_dim=OBS, n_actions=N, seed=4, faults=nan_at_3) for g in guards
    ]
    rng = np.random.default_rng(7)
    batches = [_rollout(rng) for _ in range(7)]
    for step, batch in enumerate(batches, start=1):
        if step == 5:
            for lrn in learners:  # huge lr: Adam's step overflows float32 from finite gradients
                lrn.main.opt.param_groups[0]["lr"] = 1e30
                lrn.main.opt.state[lrn.main.flat]["exp_avg"].fill_(1e30)
        if step == 6:
            for lrn in learners:
                lrn.main.opt.param_groups[0]["lr"] = lrn.cfg.lr
        diags = [lrn.update(batch) for lrn in learners]
        host, dev = diags
        assert host.keys() == dev.keys()
        for k in host:
            assert host[k] == dev[k] or (math.isnan(host[k]) and math.isnan(dev[k])), (step, k)
        a, b = (_state(lrn) for lrn in learners)
        assert a.keys() == b.keys()
        for k in a:
            assert torch.equal(a[k], b[k]), (step, k)
    assert learners[1].nan_abort_step == 3


def test_first_step_aborted_leaves_adam_as_if_never_stepped():
    """The device guard always steps; undoing Adam's very first step must leave a zero state that then
    trains exactly like the fresh state the host guard keeps."""
    nan_at_1 = FaultInjection(inject_nan_at=1)
    learners = [Learner(_cfg(nan_guard=g), obs_dim=OBS, n_actions=N, faults=nan_at_1) for g in ("host", "composed")]
    rng = np.random.default_rng(8)
    batches = [_rollout(rng) for _ in range(3)]
    for batch in batches:
        for lrn in learners:
            lrn.update(batch)
    assert [lrn.nan_abort_step for lrn in learners] == [1, 1]
    a, b = (_state(lrn) for lrn in learners)
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_one_backward_gives_the_gradients_of_two():
    lrn = Learner(_cfg(dueling_mode="baseline"), obs_dim=OBS, n_actions=N, seed=2)
    rng = np.random.default_rng(3)
    lrn.update(_rollout(rng))  # fills replay
    ro = rollout_from_batch(_rollout(rng), obs_dim=OBS, n_actions=N)
    grads = []
    for single in (False, True):
        state = (lrn.gen.get_state(), lrn.replay.gen.get_state())
        out: dict = {}
        l_pi, ent, l_distill, l_v = lrn._policy_losses(ro.to_dict(), out)
        l_c51, l_iqn, l_dueling = lrn._q_losses(lrn.replay.sample(lrn.cfg.q_batch_size))
        loss = l_pi - 0.01 * ent + 0.1 * l_distill + 0.5 * l_v + l_c51 + l_iqn
        lrn.main.grad.zero_()
        lrn.dueling.grad.zero_()
        if single:
            (loss + l_dueling).backward()
        else:
            loss.backward()
            l_dueling.backward()
        grads.append((lrn.main.grad.clone(), lrn.dueling.grad.clone()))
        lrn.gen.set_state(state[0])
        lrn.replay.gen.set_state(state[1])
    assert grads[0][1].abs().sum() > 0 and grads[0][0].abs().sum() > 0
    assert torch.equal(grads[0][0], grads[1][0]) and torch.equal(grads[0][1], grads[1][1])


def _indexed_policy_losses(lrn: Learner, ro, out: dict) -> tuple[torch.Tensor, ...]:
    """The oracle: the plain, unmasked loss functions on the valid rows picked by index (data-dependent
    shapes, so never in a graph); what Learner._policy_losses computes with its row mask."""
    cfg, valid = lrn.cfg, ro.valid_idx
    t_len, b = ro.rewards.shape
    tb = t_len * b
    h_all = lrn.net.encoder(ro.obs.reshape(-1, OBS))
    v_all = lrn.net.value(h_all)
    logits = lrn.net.pi(h_all[:tb])[valid]
    with torch.no_grad():
        q_ens = lrn.net.q_ens(h_all[:tb], lrn.support, cfg.ensemble_w, cfg.iqn_taus)[valid]
        v_dq_all = lrn.dueling.net(h_all.detach())[0]
        out[D.V_DQ_MEAN] = v_dq_all[:tb][valid].mean()
        baseline = v_dq_all if cfg.dueling_mode == "baseline" else v_all
        adv, ret = L.gae(
            ro.rewards * cfg.reward_scale,
            baseline[:tb].view(t_len, b),
            baseline[b:].view(t_len, b),
            ro.terminated,
            ro.terminated | ro.truncated,
            cfg.gamma,
            cfg.gae_lambda,
        )
    adv = adv.reshape(-1)[valid]
    out[D.ADV_MEAN] = adv.mean()
    if adv.numel() > 1:  # a single valid step is not standardised (its std is 0)
        adv = (adv - adv.mean()) / (adv.std(correction=0) + 1e-8)
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, ro.actions.reshape(-1)[valid, None]).squeeze(-1)
    l_pi, out[D.APPROX_KL], out[D.CLIP_FRAC] = L.ppo_clip_loss(
        logp, ro.behaviour_logp.reshape(-1)[valid], adv, cfg.ppo_clip
    )
    ent = L.entropy(logits)
    l_distill = L.distill_kl(q_ens, logits, cfg.distill_temperature)
    v_t = v_all[:tb][valid]
    l_v = L.value_mse(v_t, ret.reshape(-1)[valid])
    out[D.QPA] = D.qpa(q_ens, logp_all.detach())
    out[D.V_SCALAR_MEAN] = v_t.detach().mean()
    out[D.Q_ENS_MEAN] = q_ens.mean()
    return l_pi, ent, l_distill, l_v


@pytest.mark.parametrize("mode", ["diagnostic", "baseline"])
def test_masked_policy_losses_match_the_plain_losses_on_the_valid_rows(mode):
    """Learner._policy_losses (all T*B rows, valid as the row mask; eager path and graph body alike) against
    the unmasked loss functions on the indexed valid rows: losses, diag means and gradients. Garbage on the
    invalid rows (an out-of-range action, a huge behaviour log-prob) must not reach any of them."""
    lrn = Learner(_cfg(dueling_mode=mode), obs_dim=OBS, n_actions=N, seed=5)
    rng = np.random.default_rng(4)
    for end_p, only_one in ((0.3, False), (0.0, False), (0.0, True)):
        batch = _rollout(rng, end_p=end_p)
        if only_one:  # a single valid step: its advantage is not standardised
            batch["valid"][:] = False
            batch["valid"][2, 1] = True
        ro = rollout_from_batch(batch, obs_dim=OBS, n_actions=N)
        static = {k: getattr(ro, k) for k in G.ROLLOUT_FIELDS}
        static["actions"] = torch.where(ro.valid, ro.actions, 99)  # garbage off the valid steps is ignored
        static["behaviour_logp"] = torch.where(ro.valid, ro.behaviour_logp, -1e4)  # ratio e^1e4: inf
        results = []
        for fn, arg in ((lambda r, o: _indexed_policy_losses(lrn, r, o), ro), (lrn._policy_losses, static)):
            out: dict = {}
            losses = fn(arg, out)
            lrn.main.grad.zero_()
            sum(losses).backward()
            results.append((losses, out, lrn.main.grad.clone()))
        (la, oa, ga), (lb, ob, gb) = results
        for x, y in zip(la, lb, strict=True):
            torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6)
        assert oa.keys() == ob.keys()
        for k in oa:
            torch.testing.assert_close(oa[k], ob[k], rtol=1e-5, atol=1e-6, msg=k)
        assert torch.isfinite(gb).all()
        torch.testing.assert_close(ga, gb, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("mode", ["off", "baseline"])
def test_graph_body_trains_like_the_eager_update(mode):
    """GraphUpdate's body (what CUDA captures) run eagerly: same samples, same steps, float32-close results."""
    eager = Learner(_cfg(dueling_mode=mode), obs_dim=OBS, n_actions=N, seed=1)
    body = Learner(_cfg(dueling_mode=mode, nan_guard="composed"), obs_dim=OBS, n_actions=N, seed=1)
    body.graph = G.GraphUpdate(body, capture=False)
    rng = np.random.default_rng(11)
    for _ in range(6):
        batch = _rollout(rng)
        da, db = eager.update(batch), body.update(batch)
        assert da.keys() == db.keys()
        for k in da:
            assert math.isclose(da[k], db[k], rel_tol=1e-3, abs_tol=1e-4), (k, da[k], db[k])
    assert body.graph.shapes  # the body really ran (replay was full from the first update)
    a, b = _state(eager), _state(body)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-3, atol=1e-5, msg=k)
    # the same replay and IQN draws: the generators are in the same place
    assert torch.equal(eager.gen.get_state(), body.gen.get_state())
    assert torch.equal(eager.replay.gen.get_state(), body.replay.gen.get_state())


def test_graph_body_skips_an_injected_nan_step():
    lrn = Learner(_cfg(nan_guard="composed"), obs_dim=OBS, n_actions=N, faults=FaultInjection(inject_nan_at=2))
    lrn.graph = G.GraphUpdate(lrn, capture=False)
    rng = np.random.default_rng(12)
    assert lrn.update(_rollout(rng))[D.NAN_ABORT_STEP] == 0
    before = _state(lrn)
    d = lrn.update(_rollout(rng))
    assert d[D.NAN_ABORT_STEP] == 2 and math.isnan(d[D.L_PI] + d[D.GRAD_NORM_PREFIX + "total"])
    after = _state(lrn)
    for k in before:
        assert torch.equal(before[k], after[k]), k
    d = lrn.update(_rollout(rng))  # the loss scale is back to 1: the next step trains
    assert d[D.NAN_ABORT_STEP] == 2 and math.isfinite(d[D.L_PI])
    assert not torch.equal(before["main.flat"], lrn.main.flat)


def test_cuda_graph_flag_is_validated_and_not_part_of_a_checkpoints_identity():
    assert preset("phase4_3").cuda_graph is True
    errs = _cfg(cuda_graph="yes").errors()
    assert errs == ["learner.cuda_graph='yes' must be a bool"]
    src = Learner(_cfg(cuda_graph=False), obs_dim=OBS, n_actions=N)
    src.update(_rollout(np.random.default_rng(0)))
    buf = io.BytesIO()
    torch.save(src.state_dict(), buf)
    buf.seek(0)
    dst = Learner(_cfg(cuda_graph=True), obs_dim=OBS, n_actions=N)
    dst.load_state_dict(torch.load(buf, weights_only=True))
    assert torch.equal(dst.main.flat, src.main.flat) and dst.step == 1
    assert dst.graph is None  # CPU: the flag has no effect


def test_the_nan_guard_is_one_validated_field_and_not_part_of_a_checkpoints_identity():
    """learner.nan_guard picks the guard's path ("auto": the host guard on the CPU); a checkpoint written with one
    path loads into a learner of another, which trains on from it exactly as the writer does."""
    assert preset("phase4_3").nan_guard == "auto"
    assert _cfg(nan_guard="device").errors() == [
        "learner.nan_guard='device' must be one of ['auto', 'host', 'composed', 'fused']"
    ]
    assert Learner(_cfg(), obs_dim=OBS, n_actions=N).optim.guard == "host"
    rng = np.random.default_rng(14)
    src = Learner(_cfg(nan_guard="host"), obs_dim=OBS, n_actions=N)
    src.update(_rollout(rng))
    buf = io.BytesIO()
    torch.save(src.state_dict(), buf)  # a copy: the state_dict shares Adam's state tensors with src
    buf.seek(0)
    dst = Learner(_cfg(nan_guard="fused"), obs_dim=OBS, n_actions=N)
    dst.load_state_dict(torch.load(buf, weights_only=True))
    batch = _rollout(rng)
    assert src.update(batch) == dst.update(batch)
    assert _state(src).keys() == _state(dst).keys()
    for k, v in _state(src).items():
        assert torch.equal(v, _state(dst)[k]), k


def test_graph_body_keeps_one_buffer_set_per_rollout_shape_and_a_load_drops_them():
    lrn = Learner(_cfg(nan_guard="composed"), obs_dim=OBS, n_actions=N)
    lrn.graph = G.GraphUpdate(lrn, capture=False)
    rng = np.random.default_rng(13)
    shapes = [(6, 4), (3, 8), (6, 4), (2, 5), (4, 4), (5, 3), (3, 8)]
    for t_len, b in shapes:
        d = lrn.update(_rollout(rng, t_len=t_len, b=b))
        assert d[D.Q_TRAINED] == 1.0 and math.isfinite(d[D.L_PI])
    # at most MAX_SHAPES kept, least recently used dropped first: (6, 4) went, the last one used is last
    assert list(lrn.graph.shapes) == [(2, 5), (4, 4), (5, 3), (3, 8)]
    lrn.load_state_dict(lrn.state_dict())
    assert not lrn.graph.shapes

"""The Learner end to end on CPU at smoke sizes: diag contract, NaN guard, checkpoints, acting, learning."""

from __future__ import annotations

import dataclasses
import io
import math

import numpy as np
import pytest
import torch

from foxhunt_ray.presets import preset
from learner import diag as D
from learner.config import FaultInjection
from learner.learner import Learner
from learner.network import policy_from_weights
from learner.replay import rollout_from_batch
from tests.learner_batches import OBS, N, random_rollout, smoke_cfg

pytestmark = pytest.mark.usefixtures("one_torch_thread")


_cfg, _rollout = smoke_cfg, random_rollout


REQUIRED = (
    "step",
    "l_c51",
    "l_iqn",
    "l_pi",
    "l_v",
    "l_distill",
    "l_dueling",
    "qpa",
    "v_dq_mean",
    "v_scalar_mean",
    "nan_abort_step",
    "entropy",
    "approx_kl",
    "clip_frac",
    "grad_norm/encoder",
    "grad_norm/c51",
    "grad_norm/iqn",
    "grad_norm/pi",
    "grad_norm/v",
    "grad_norm/dueling",
    "policy_lag",
)


@pytest.mark.parametrize("mode", ["off", "diagnostic", "baseline"])
def test_update_returns_every_diag_key_finite(mode):
    lrn = Learner(_cfg(dueling_mode=mode), obs_dim=OBS, n_actions=N, seed=0)
    rng = np.random.default_rng(0)
    before = lrn.main.flat.detach().clone()
    for i in range(3):
        d = lrn.update(_rollout(rng, version=max(i - 1, 0)))
    assert set(REQUIRED) <= set(d)
    assert all(isinstance(v, float) and math.isfinite(v) for v in d.values()), d
    assert d[D.STEP] == 3 and d[D.NAN_ABORT_STEP] == 0 and d[D.Q_TRAINED] == 1 and d[D.POLICY_LAG] == 1
    assert d[D.L_C51] > 0 and d[D.L_IQN] > 0 and (d[D.L_DUELING] > 0) == (mode != "off")
    assert not torch.equal(before, lrn.main.flat)


def test_q_losses_wait_for_replay_min_size():
    lrn = Learner(_cfg(replay_min_size=1000), obs_dim=OBS, n_actions=N)
    d = lrn.update(_rollout(np.random.default_rng(0)))
    assert d[D.Q_TRAINED] == 0 and d[D.L_C51] == 0 and d[D.L_DUELING] == 0 and d[D.L_PI] != 0


def test_injected_nan_step_is_never_applied():
    lrn = Learner(_cfg(), obs_dim=OBS, n_actions=N, faults=FaultInjection(inject_nan_at=3))
    rng = np.random.default_rng(1)
    for _ in range(2):
        assert lrn.update(_rollout(rng))[D.NAN_ABORT_STEP] == 0
    flat, target = lrn.main.flat.detach().clone(), lrn.main.target_flat.detach().clone()
    duel = lrn.dueling.flat.detach().clone()
    adam = {k: v.clone() for k, v in lrn.main.opt.state[lrn.main.flat].items()}
    d = lrn.update(_rollout(rng))
    assert d[D.NAN_ABORT_STEP] == 3 and d[D.STEP] == 3
    assert torch.equal(flat, lrn.main.flat) and torch.equal(target, lrn.main.target_flat)
    assert torch.equal(duel, lrn.dueling.flat)
    for k, v in lrn.main.opt.state[lrn.main.flat].items():
        assert torch.equal(v, adam[k]), k
    assert lrn.update(_rollout(rng))[D.NAN_ABORT_STEP] == 3  # sticky: the run is to be killed


def test_non_finite_parameters_after_a_step_are_rolled_back():
    lrn = Learner(_cfg(), obs_dim=OBS, n_actions=N)
    rng = np.random.default_rng(2)
    lrn.update(_rollout(rng))
    flat = lrn.main.flat.detach().clone()
    with torch.no_grad():  # a huge lr makes Adam's step overflow float32 from finite gradients
        lrn.main.opt.param_groups[0]["lr"] = 1e30
        lrn.main.opt.state[lrn.main.flat]["exp_avg"].fill_(1e30)
    d = lrn.update(_rollout(rng))
    assert d[D.NAN_ABORT_STEP] == 2 and torch.equal(flat, lrn.main.flat)


def test_soft_update_moves_targets_by_tau():
    lrn = Learner(_cfg(polyak_tau=0.25), obs_dim=OBS, n_actions=N)
    rng = np.random.default_rng(3)
    lrn.update(_rollout(rng))
    t0, d0 = lrn.main.target_flat.detach().clone(), lrn.dueling.target_flat.detach().clone()
    lrn.update(_rollout(rng))
    assert torch.allclose(lrn.main.target_flat, t0 + 0.25 * (lrn.main.flat - t0), atol=1e-6)
    assert torch.allclose(lrn.dueling.target_flat, d0 + 0.25 * (lrn.dueling.flat - d0), atol=1e-6)
    # the module views see the flat buffers: the target net's first weight is the flat buffer's head
    w = lrn.main.target.encoder[0].weight
    assert torch.equal(w.reshape(-1), lrn.main.target_flat[: w.numel()])


def test_learning_rate_decays_with_the_run_s_progress():
    """lr_decay_to 0.25: at progress 1 both optimisers step with a quarter of their lr. Two learners of one seed
    on one batch: Adam's first step is linear in lr, so the second's parameters move a quarter as far (to float32
    rounding), and the diag says lr_scale 0.25. At lr_decay_to 1 (the default) progress changes nothing."""
    rng = np.random.default_rng(5)
    batch = _rollout(rng)
    moved = {}
    for progress in (0.0, 1.0):
        lrn = Learner(_cfg(lr_decay_to=0.25), obs_dim=OBS, n_actions=N, seed=0)
        before = lrn.main.flat.detach().clone(), lrn.dueling.flat.detach().clone()
        lrn.set_progress(progress)
        d = lrn.update(batch)
        assert d[D.LR_SCALE] == (1.0 if progress == 0 else 0.25)
        assert lrn.main.opt.param_groups[0]["lr"] == pytest.approx(lrn.cfg.lr * d[D.LR_SCALE])
        moved[progress] = (lrn.main.flat.detach() - before[0], lrn.dueling.flat.detach() - before[1])
    for full, quarter in zip(moved[0.0], moved[1.0], strict=True):
        assert full.abs().max() > 0
        assert torch.allclose(quarter, 0.25 * full, rtol=1e-3, atol=2e-7)  # float32 differences of ~0.1-sized weights
    constant = Learner(_cfg(), obs_dim=OBS, n_actions=N, seed=0)
    constant.set_progress(1.0)
    assert constant.update(batch)[D.LR_SCALE] == 1.0 and constant.main.opt.param_groups[0]["lr"] == constant.cfg.lr
    lrn.set_progress(0.5)  # clamped into [0, 1], linear between
    assert lrn.optim.lr_scale == pytest.approx(0.625)
    lrn.set_progress(7.0)
    assert lrn.optim.lr_scale == 0.25


def test_building_a_learner_leaves_the_global_rng_alone():
    torch.manual_seed(123)
    want = torch.rand(3)
    torch.manual_seed(123)
    Learner(_cfg(), obs_dim=OBS, n_actions=N, seed=5)
    assert torch.equal(torch.rand(3), want)


def test_checkpoint_round_trip_resumes_bit_exactly():
    rng = np.random.default_rng(4)
    batches = [_rollout(rng, version=i) for i in range(6)]
    a = Learner(_cfg(), obs_dim=OBS, n_actions=N, seed=1)
    for b in batches[:3]:
        a.update(b)
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    b_ = Learner(_cfg(), obs_dim=OBS, n_actions=N, seed=99)  # different seed: everything must come from disk
    b_.load_state_dict(torch.load(buf, weights_only=True))
    for b in batches[3:]:
        da, db = a.update(b), b_.update(b)
        assert da == db
    for x, y in ((a.main, b_.main), (a.dueling, b_.dueling)):
        assert torch.equal(x.flat, y.flat) and torch.equal(x.target_flat, y.target_flat)
    with pytest.raises(ValueError, match=r"config fields differ \['hidden_dim'\]"):
        Learner(_cfg(hidden_dim=16), obs_dim=OBS, n_actions=N).load_state_dict(a.state_dict())
    with pytest.raises(ValueError, match="not a learner checkpoint"):
        a.load_state_dict({"format": "something else"})


def test_policy_weights_rebuild_the_policy_and_act():
    lrn = Learner(_cfg(), obs_dim=OBS, n_actions=N)
    lrn.update(_rollout(np.random.default_rng(5)))
    w = lrn.policy_weights()
    assert w["version"] == 1 and all(k.startswith(("encoder.", "pi.")) for k in w["state"])
    pol = policy_from_weights(w)
    obs = np.random.default_rng(6).standard_normal((10, OBS)).astype(np.float32)
    with torch.no_grad():
        want = lrn.net.pi(lrn.net.encoder(torch.tensor(obs)))
    assert torch.equal(pol(torch.tensor(obs)), want)
    action, logp = pol.act(obs, generator=torch.Generator().manual_seed(0))
    assert action.dtype == np.int64 and logp.dtype == np.float32 and action.shape == logp.shape == (10,)
    assert np.allclose(logp, torch.log_softmax(want, -1).numpy()[np.arange(10), action], atol=1e-6)
    greedy, _ = pol.act(obs, greedy=True)
    assert np.array_equal(greedy, want.argmax(-1).numpy())
    with pytest.raises(ValueError, match="obs must be"):
        pol.act(obs[0])


def test_bad_learner_arguments_are_reported_together():
    with pytest.raises(ValueError) as e:
        Learner(_cfg(lr=-1.0), obs_dim=0, n_actions=1)
    msg = str(e.value)
    assert "learner.lr=-1.0 must be > 0" in msg and "obs_dim=0" in msg and "n_actions=1" in msg
    with pytest.raises(ValueError, match=r"n_actions=2\.0 must be an int"):
        Learner(_cfg(), obs_dim=4, n_actions=2.0)


def test_numpy_integer_sizes_are_accepted_as_gymnasium_gives_them():
    lrn = Learner(_cfg(), obs_dim=np.int64(4), n_actions=np.int64(3), seed=np.int64(1))
    assert (type(lrn.obs_dim), type(lrn.n_actions)) == (int, int)
    assert (lrn.obs_dim, lrn.n_actions) == (4, 3)


def _bandit_rollout(pol, rng, gen, t_len=8, b=16, version=0):
    """3-context, 3-action bandit, one-step episodes with NEXT_STEP autoreset: best action = context."""
    obs = np.zeros((t_len + 1, b, 3), np.float32)
    ctx = rng.integers(0, 3, (t_len + 1, b))
    obs[np.arange(t_len + 1)[:, None], np.arange(b)[None], ctx] = 1.0
    real = (np.arange(t_len) % 2 == 0)[:, None].repeat(b, 1)  # even t: a bandit pull; odd t: the reset
    actions, logp = pol.act(obs[:-1].reshape(-1, 3), generator=gen)
    actions, logp = actions.reshape(t_len, b), logp.reshape(t_len, b)
    rewards = np.where(real & (actions == ctx[:-1]), 1.0, 0.0).astype(np.float32)
    return {
        "obs": obs,
        "actions": actions,
        "rewards": rewards,
        "terminated": real.copy(),
        "truncated": np.zeros_like(real),
        "behaviour_logp": logp,
        "valid": real.copy(),
        "policy_version": version,
    }


def test_learns_a_contextual_bandit_and_q_agrees_with_pi():
    cfg = dataclasses.replace(
        preset("smoke"),
        lr=3e-3,
        dueling_lr=3e-3,
        q_batch_size=64,
        replay_min_size=64,
        entropy_coef=0.001,
        v_min=-2.0,
        v_max=2.0,
    )
    lrn = Learner(cfg, obs_dim=3, n_actions=3, seed=0)
    rng, gen = np.random.default_rng(0), torch.Generator().manual_seed(0)
    qpas = []
    for i in range(150):
        pol = policy_from_weights(lrn.policy_weights())
        qpas.append(lrn.update(_bandit_rollout(pol, rng, gen, version=i))[D.QPA])
    eye = torch.eye(3)
    with torch.no_grad():
        h = lrn.net.encoder(eye)
        q = lrn.net.q_ens(h, lrn.support, cfg.ensemble_w, cfg.iqn_taus)
        pi = lrn.net.pi(h)
    assert q.argmax(-1).tolist() == [0, 1, 2] and pi.argmax(-1).tolist() == [0, 1, 2]
    assert torch.softmax(pi, -1).diagonal().min() > 0.9
    assert np.mean(qpas[-20:]) > 0.5


def test_flipped_distillation_collapses_qpa():
    """The fault the kill rule exists for: pi taught against Q drives qpa towards -1."""
    cfg = dataclasses.replace(
        preset("smoke"),
        lr=3e-3,
        q_batch_size=64,
        replay_min_size=64,
        distill_coef=5.0,
        v_min=-2.0,
        v_max=2.0,
    )
    lrn = Learner(cfg, obs_dim=3, n_actions=3, seed=0, faults=FaultInjection(flip_distill_sign=True))
    rng, gen = np.random.default_rng(1), torch.Generator().manual_seed(1)
    qpas = []
    for i in range(100):
        pol = policy_from_weights(lrn.policy_weights())
        qpas.append(lrn.update(_bandit_rollout(pol, rng, gen, version=i))[D.QPA])
    assert np.mean(qpas[-20:]) < -0.3


def test_tensor_batches_train_exactly_like_numpy_batches():
    rng = np.random.default_rng(7)
    batches = [_rollout(rng, version=i) for i in range(3)]
    a = Learner(_cfg(), obs_dim=OBS, n_actions=N, seed=2)
    b = Learner(_cfg(), obs_dim=OBS, n_actions=N, seed=2)
    for batch in batches:
        as_tensors = {k: torch.as_tensor(v) for k, v in batch.items()}
        assert a.update(batch) == b.update(as_tensors)
    assert torch.equal(a.main.flat, b.main.flat)


@pytest.mark.parametrize("mode", ["diagnostic", "baseline"])
def test_gae_gets_the_right_baseline_and_episode_masks(mode, monkeypatch):
    """diagnostic: V_scalar(s_t), V_scalar(s_{t+1}); baseline (phase4_3): V_dq(s_t), V_dq(s_{t+1}).

    terminated cuts the bootstrap, terminated | truncated cuts the trace; rewards arrive scaled.
    """
    import learner.losses as losses_module

    seen = {}
    real_gae = losses_module.gae

    def spy(rewards, values, next_values, terminated, episode_end, gamma, lam):
        seen.update(
            rewards=rewards, values=values, next_values=next_values, terminated=terminated, episode_end=episode_end
        )
        return real_gae(rewards, values, next_values, terminated, episode_end, gamma, lam)

    monkeypatch.setattr(losses_module, "gae", spy)
    lrn = Learner(_cfg(dueling_mode=mode, reward_scale=0.5), obs_dim=OBS, n_actions=N)
    rng = np.random.default_rng(8)
    batch = _rollout(rng)
    batch["truncated"] = (rng.random(batch["valid"].shape) < 0.2) & batch["valid"] & ~batch["terminated"]
    with torch.no_grad():
        h = lrn.net.encoder(torch.as_tensor(batch["obs"]))
        v = (
            lrn.dueling.net(h.reshape(-1, h.shape[-1]))[0].view(h.shape[:2])
            if mode == "baseline"
            else (lrn.net.value(h.reshape(-1, h.shape[-1])).view(h.shape[:2]))
        )
    lrn.update(batch)
    assert torch.allclose(seen["values"], v[:-1]) and torch.allclose(seen["next_values"], v[1:])
    assert torch.equal(seen["rewards"], torch.as_tensor(batch["rewards"]) * 0.5)
    assert torch.equal(seen["terminated"].bool(), torch.as_tensor(batch["terminated"]))
    assert torch.equal(seen["episode_end"].bool(), torch.as_tensor(batch["terminated"] | batch["truncated"]))


def _minibatch(batch: dict, sl: slice) -> dict:
    return {k: (v[:, sl] if isinstance(v, np.ndarray) else v) for k, v in batch.items()}


@pytest.mark.parametrize("graph_body", [False, True])
def test_updates_in_minibatches_are_updates_on_each_minibatch_in_turn(graph_body):
    """updates() with minibatch_envs = m is update() on envs [0, m), [m, 2m), ... of the rollout, bit for bit:
    each minibatch keeps its envs' whole trajectories, its own n-step transitions (in its own order in replay)
    and its own advantage normalisation; the diags are the same, read after one sync instead of one each."""
    from learner import graph as G

    def make():
        guard = "composed" if graph_body else "auto"
        cfg = _cfg(minibatch_envs=3, dueling_mode="baseline", nan_guard=guard)
        lrn = Learner(cfg, obs_dim=OBS, n_actions=N, seed=2)
        if graph_body:  # the CUDA path's captured body, run eagerly (tests/test_graph.py)
            lrn.graph = G.GraphUpdate(lrn, capture=False)
        return lrn

    split, one_by_one = make(), make()
    rng = np.random.default_rng(21)
    for version in range(4):
        batch = _rollout(rng, t_len=5, b=9, version=version, end_p=0.3)
        got = split.updates(batch)
        want = [one_by_one.update(_minibatch(batch, slice(c, c + 3))) for c in (0, 3, 6)]
        assert got == want
    assert [d[D.STEP] for d in got] == [10.0, 11.0, 12.0] and got[-1][D.POLICY_LAG] == 12 - 1 - 3
    assert torch.equal(split.main.flat, one_by_one.main.flat)
    assert torch.equal(split.replay.data["obs"], one_by_one.replay.data["obs"])
    assert split.replay.cursor == one_by_one.replay.cursor


@pytest.mark.parametrize("graph_body", [False, True])
def test_ppo_epochs_pass_over_the_minibatches_again_and_write_replay_once(graph_body):
    """ppo_epochs = 2: the first pass is exactly the one-pass learner's steps; the second trains on the same
    minibatches again, in the same order, with the updated parameters and the same behaviour log-probs, and adds
    nothing to replay; a limit counts the steps of both passes."""
    from learner import graph as G
    from learner.replay import rollout_from_batch

    def make(epochs):
        guard = "composed" if graph_body else "auto"
        lrn = Learner(_cfg(minibatch_envs=3, ppo_epochs=epochs, nan_guard=guard), obs_dim=OBS, n_actions=N, seed=4)
        if graph_body:  # the CUDA path's captured body, run eagerly (tests/test_graph.py)
            lrn.graph = G.GraphUpdate(lrn, capture=False)
        return lrn

    two, one = make(2), make(1)
    rng = np.random.default_rng(23)
    for version in range(3):
        batch = _rollout(rng, t_len=5, b=6, version=version, end_p=0.3)
        before = len(two.replay)
        got = two.updates(batch)
        assert len(two.replay) - before == int(batch["valid"].sum())  # written once
        want = one.updates(batch)  # the first pass, replay written
        for c in (0, 3):  # the second: the same step on each minibatch, nothing written
            host = rollout_from_batch(_minibatch(batch, slice(c, c + 3)), obs_dim=OBS, n_actions=N)
            want += one.finish_updates([one._step(host, lambda: None)])
        assert got == want
        assert [d[D.STEP] for d in got] == [4.0 * version + k for k in (1, 2, 3, 4)]
        assert got[2][D.L_PI] != got[0][D.L_PI]  # the same minibatch, trained on once already
    assert torch.equal(two.main.flat, one.main.flat)
    assert torch.equal(two.replay.data["obs"], one.replay.data["obs"]) and two.replay.cursor == one.replay.cursor
    limited = make(2)  # a run's last payload: 3 steps left of its 4
    steps = limited.finish_updates(limited.start_updates(rollout_from_batch(batch, obs_dim=OBS, n_actions=N), limit=3))
    assert [d[D.STEP] for d in steps] == [1.0, 2.0, 3.0] and len(limited.replay) == int(batch["valid"].sum())
    assert _cfg(ppo_epochs=0).errors() == ["learner.ppo_epochs=0 must be an int >= 1"]


def test_updates_without_minibatches_is_one_update_and_a_bad_split_is_named():
    a = Learner(_cfg(), obs_dim=OBS, n_actions=N, seed=3)
    b = Learner(_cfg(), obs_dim=OBS, n_actions=N, seed=3)
    batch = _rollout(np.random.default_rng(22), b=6)
    assert a.updates(batch) == [b.update(batch)]
    lrn = Learner(_cfg(minibatch_envs=4), obs_dim=OBS, n_actions=N)
    with pytest.raises(
        ValueError, match=r"rollout of 6 envs does not split into minibatches of learner.minibatch_envs=4"
    ):
        lrn.updates(batch)
    assert lrn.step == 0
    assert _cfg(minibatch_envs=-1).errors() == [
        "learner.minibatch_envs=-1 must be an int >= 0 (0: the whole rollout is one step)"
    ]


def test_finite_checked_skips_only_the_finite_pass():
    """The learner worker's receive path checks floats once (actors.wire.decode); every other check still runs."""
    from learner.replay import rollout_from_batch

    batch = _rollout(np.random.default_rng(23))
    batch["obs"][1, 0, 0] = np.nan
    with pytest.raises(ValueError, match=r"batch\['obs'\] holds NaN or inf"):
        rollout_from_batch(batch, obs_dim=OBS, n_actions=N)
    assert rollout_from_batch(batch, obs_dim=OBS, n_actions=N, finite_checked=True).obs.shape == (7, 4, OBS)
    batch["actions"][0, 0] = N
    with pytest.raises(ValueError, match=r"actions.*must lie in \[0, 7\)"):
        rollout_from_batch(batch, obs_dim=OBS, n_actions=N, finite_checked=True)


def test_only_valid_steps_actions_must_be_in_range():
    """A step that is not valid (past its book's episode end in the sample) may hold any action: the range check
    looks at the valid steps alone, on both of its paths (every step in range; some step out of range)."""
    from learner.replay import rollout_from_batch

    batch = _rollout(np.random.default_rng(29))
    batch["valid"][:] = True
    batch["valid"][2, 1] = False
    batch["actions"][2, 1] = -5  # on the invalid step: accepted
    assert rollout_from_batch(batch, obs_dim=OBS, n_actions=N).valid_idx.numel() == batch["valid"].size - 1
    batch["actions"][3, 1] = N  # on a valid one: refused, with the valid steps' range
    with pytest.raises(ValueError, match=r"actions.*must lie in \[0, 7\), got range \[0, 7\]"):
        rollout_from_batch(batch, obs_dim=OBS, n_actions=N)


@pytest.mark.parametrize("graph_body", [False, True])
def test_one_online_encoder_pass_serves_the_rollout_and_the_replay_sample(graph_body):
    """A step with the Q losses on runs the online encoder once with gradients, over the rollout's states and the
    replay sample together (and once more without, for the next states): the same losses as two passes, and
    gradients equal up to the order in which the weight gradients sum their rows."""
    from learner import graph as G

    guard = "composed" if graph_body else "auto"
    lrn = Learner(_cfg(dueling_mode="baseline", nan_guard=guard), obs_dim=OBS, n_actions=N, seed=2)
    if graph_body:
        lrn.graph = G.GraphUpdate(lrn, capture=False)
    rng = np.random.default_rng(5)
    lrn.update(_rollout(rng))  # fills replay: the next step trains the Q losses
    passes: list[tuple[int, bool]] = []
    hook = lrn.net.encoder.register_forward_hook(lambda m, x, y: passes.append((len(y), torch.is_grad_enabled())))
    lrn.update(_rollout(rng))
    hook.remove()
    rows = 7 * 4 + lrn.cfg.q_batch_size  # (T+1) B rollout states, then the sample
    assert passes == [(rows, True), (lrn.cfg.q_batch_size, False)]

    ro = rollout_from_batch(_rollout(rng), obs_dim=OBS, n_actions=N)
    state = (lrn.gen.get_state(), lrn.replay.gen.get_state())
    results = []
    for together in (False, True):
        lrn.gen.set_state(state[0])
        lrn.replay.gen.set_state(state[1])
        sample = lrn.replay.sample(lrn.cfg.q_batch_size)
        h_all, h_q = lrn._encode(ro.obs, sample["obs"]) if together else (None, None)
        out: dict = {}
        losses = [*lrn._policy_losses(ro.to_dict(), out, h_all=h_all), *lrn._q_losses(sample, h=h_q)]
        lrn.main.grad.zero_()
        sum(losses[:-1]).backward()
        results.append((torch.stack([x.detach() for x in losses]), lrn.main.grad.clone()))
    (l_two, g_two), (l_one, g_one) = results
    torch.testing.assert_close(l_one, l_two, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(g_one, g_two, rtol=1e-5, atol=1e-7)
    assert g_one.abs().sum() > 0


def test_iqn_constants_are_made_once_with_the_values_each_call_made():
    """The cosine frequencies and the midpoints' cosine features are kept per (n, device, dtype) after their first
    use: the same tensor on every later call (a CUDA graph replays no kernel for them), with the very values the
    formula gives, and the head's output unchanged."""
    import math

    from learner.network import IQN_EMBED_DIM, IQNHead, quantile_midpoints

    torch.manual_seed(0)
    head = IQNHead(16, 3)
    h, tau = torch.randn(5, 16), torch.rand(5, 4)
    i = torch.arange(IQN_EMBED_DIM, dtype=torch.float32)
    want_freq, want_mid = math.pi * i, torch.cos(math.pi * i * quantile_midpoints(1, 8, h)[..., None])
    first = head.features(h, 8), head(h, tau)
    freq, mid = head._constant("freq", 0, tau), head._constant("midpoints", 8, h)
    assert torch.equal(freq, want_freq) and torch.equal(mid, want_mid)
    second = head.features(h, 8), head(h, tau)
    assert head._constant("freq", 0, tau) is freq and head._constant("midpoints", 8, h) is mid
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    phi = torch.relu(head.embed(torch.cos(math.pi * i * tau[..., None])))
    assert torch.equal(head(h, tau), head.out(h[:, None, :] * phi))
    assert head._constant("midpoints", 8, h.double()).dtype == torch.float64  # one per dtype


def test_pi_value_is_pi_and_value_in_one_product_with_their_gradients():
    """MainNet.pi_value (what the learner's policy losses read): pi's logits and V_scalar from one product with h,
    equal to self.pi(h) and self.value(h) up to rounding, and so are the gradients of a loss on both (h's, and each
    head's weights and bias)."""
    from learner.network import MainNet

    torch.manual_seed(0)
    net = MainNet(6, 4, 16, 2, 11)
    h = net.encoder(torch.randn(9, 6)).detach().requires_grad_(True)
    wl, wv = torch.randn(9, 4), torch.randn(9)
    grads = []
    for fused in (True, False):
        logits, v = net.pi_value(h) if fused else (net.pi(h), net.value(h))
        assert logits.shape == (9, 4) and v.shape == (9,)
        loss = (logits * wl).sum() + (v * wv).sum() + (v**2).sum()
        params = [h, net.pi.weight, net.pi.bias, net.v.weight, net.v.bias]
        grads.append((logits.detach(), v.detach(), *torch.autograd.grad(loss, params)))
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    assert all(g.abs().sum() > 0 for g in grads[0][2:])


def test_the_iqn_embedding_reads_its_bias_gradient_off_its_weight_gradient():
    """IQNHead.embed_taus: the cosine features' column 0 is exactly 1 (cos 0), so the bias's gradient is column 0 of
    the weight's gradient (one GEMM over grad_pre, no column sum besides); values and gradients equal to the plain
    nn.Linear on the same features, up to rounding."""
    from learner.network import IQNHead, cosine_features

    torch.manual_seed(3)
    head = IQNHead(16, 3)
    tau = torch.rand(7, 5).requires_grad_(True)
    feats = cosine_features(tau, head._constant("freq", 0, tau))
    assert torch.equal(feats[..., 0], torch.ones(7, 5))
    w = torch.randn(7, 5, 16)
    results = []
    for pre in (head.embed_taus(tau), head.embed(feats)):
        loss = (torch.relu(pre) * w).sum()
        results.append((pre.detach(), *torch.autograd.grad(loss, [tau, head.embed.weight, head.embed.bias])))
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    grad_w, grad_b = results[0][2], results[0][3]
    assert torch.equal(grad_b, grad_w[:, 0]) and grad_b.abs().sum() > 0

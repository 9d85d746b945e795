"""The synthetic flow's documented stylised facts, its planted signal, and the baselines that read it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from lobsim_env import MarketConfig, SyntheticConfig
from lobsim_env.baselines import evaluate_policy
from lobsim_env.synthetic.flow import hash_draws
from lobsim_env.synthetic.market import SyntheticMarket


def simulate(cfg: MarketConfig, books: int, steps: int, seed: int = 0):
    """Flow only (the agent holds): per-step spread, mid (ticks), signed flow, regime."""
    m = SyntheticMarket(cfg)
    s = m.new_state(books)
    m.reset_rows(s, np.arange(books), np.arange(books, dtype=np.uint64) + np.uint64(1000 * seed + 1))
    hold = np.zeros(books, np.int64)
    spread, mid, flow, regime = [], [], [], []
    for _ in range(steps):
        regime.append(s.regime.copy())
        m.step(s, hold)
        spread.append(s.book.best[:, 1] - s.book.best[:, 0])
        mid.append(m.mid2(s) / 2)
        flow.append(s.book.signed_volume.copy())
    return s, np.array(spread), np.array(mid), np.array(flow), np.array(regime)


@pytest.fixture(scope="module")
def default_run():
    return simulate(MarketConfig(), books=128, steps=800)


def test_spread_mostly_one_or_two_ticks_never_crossed(default_run):
    _, spread, *_ = default_run
    assert spread.min() >= 1  # never crossed, never locked
    share = np.bincount(spread.ravel(), minlength=4) / spread.size
    assert share[1] > 0.75 and share[1] + share[2] > 0.97


def test_mid_moves(default_run):
    _, _, mid, *_ = default_run
    dm = np.diff(mid, axis=0)
    assert 0.05 < (dm != 0).mean() < 0.6  # the mid moves on a fair share of steps
    assert dm.std() > 0.1
    assert np.ptp(mid, axis=0).mean() > 5  # and wanders over an episode


def test_cancels_outnumber_trades_several_fold(default_run):
    s, *_ = default_run
    ratio = s.book.n_cancels.sum() / s.book.n_trades.sum()
    assert 3 < ratio < 20


def test_planted_signal_predicts_next_mid_moves():
    def corr(strength: float) -> tuple[float, float]:
        cfg = MarketConfig(synthetic=SyntheticConfig(signal_strength=strength))
        _, _, mid, flow, regime = simulate(cfg, books=128, steps=400, seed=1)
        future = mid[10:] - mid[:-10]  # next 10 steps' mid move
        flow_ema = np.zeros_like(flow, dtype=float)
        for t in range(1, len(flow)):
            flow_ema[t] = 0.9 * flow_ema[t - 1] + 0.1 * flow[t]
        c_obs = np.corrcoef(flow_ema[:-10].ravel(), future.ravel())[0, 1]
        c_lat = np.corrcoef(regime[1:-9].ravel(), future.ravel())[0, 1]
        return c_obs, c_lat

    obs_signal, latent_signal = corr(0.3)
    obs_none, latent_none = corr(0.0)
    assert obs_signal > 0.15 and latent_signal > 0.3
    assert abs(obs_none) < 0.1 and abs(latent_none) < 0.05


def test_oracle_earns_and_beats_flat_random_and_imbalance():
    cfg = dataclasses.replace(MarketConfig(), horizon=500)
    res = {p: evaluate_policy(cfg, p, episodes=128, seed=7) for p in ("flat", "random", "imbalance", "oracle")}
    oracle = res["oracle"]
    assert oracle["pnl_usd_mean"] > 5 * oracle["pnl_usd_sem"] > 0  # clearly positive over seeds
    assert res["flat"]["pnl_usd_mean"] == 0 and res["flat"]["fills_mean"] == 0
    assert oracle["pnl_usd_mean"] > res["random"]["pnl_usd_mean"]
    assert oracle["pnl_usd_mean"] > res["imbalance"]["pnl_usd_mean"]
    assert res["random"]["fees_usd_mean"] > 0


def test_no_signal_no_oracle_edge():
    cfg = MarketConfig(horizon=500, synthetic=SyntheticConfig(signal_strength=0.0))
    r = evaluate_policy(cfg, "oracle", episodes=128, seed=7)
    assert r["pnl_usd_mean"] < 0  # it only pays the spread and fees


def test_hash_draws_are_per_book_pure_functions():
    keys = np.array([1, 2, 3], np.uint64)
    t = np.array([0, 5, 9], np.int64)
    all3 = hash_draws(keys, t, 4)
    for i in range(3):
        assert np.array_equal(hash_draws(keys[i : i + 1], t[i : i + 1], 4)[:, 0], all3[:, i])
    u = (hash_draws(np.arange(2000, dtype=np.uint64), np.zeros(2000, np.int64), 8) >> np.uint64(48)) / 65536
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.std() - 0.2887) < 0.01


def test_slow_flow_column_is_the_slower_ema_and_tells_the_regime_better():
    """Columns flow and flow_slow are EMAs of the same signed flow (decays 0.9 and 0.98); the slow one,
    averaging over ~50 steps of a ~200-step regime, correlates more with the hidden regime."""
    from lobsim_env import LobVectorEnv, obs_index

    cfg = MarketConfig()
    ix = obs_index(cfg)
    env = LobVectorEnv(64, cfg)
    obs, _ = env.reset(seed=11)
    fast_ema = np.zeros(64)
    slow_ema = np.zeros(64)
    fast, slow, regime = [], [], []
    for _ in range(600):
        obs, *_ = env.step(np.zeros(64, np.int64))
        signed = env._state.book.signed_volume
        fast_ema = 0.9 * fast_ema + 0.1 * signed
        slow_ema = 0.98 * slow_ema + 0.02 * signed
        np.testing.assert_allclose(obs[:, ix["flow"]], fast_ema / cfg.size_scale, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(obs[:, ix["flow_slow"]], slow_ema / cfg.size_scale, rtol=1e-5, atol=1e-6)
        fast.append(obs[:, ix["flow"]].copy())
        slow.append(obs[:, ix["flow_slow"]].copy())
        regime.append(env.latent_regime().copy())
    fast, slow, regime = (np.array(a)[100:].ravel() for a in (fast, slow, regime))
    c_fast, c_slow = np.corrcoef(fast, regime)[0, 1], np.corrcoef(slow, regime)[0, 1]
    assert c_slow > c_fast + 0.1 and c_slow > 0.4


def _near_mid_depth(book, ticks: np.ndarray, k: int) -> np.ndarray:
    """Resting bid size minus ask size on the absolute ticks ticks[b] - k .. ticks[b] + k of each book."""
    j = ticks[:, None] - book.base[:, None] + np.arange(-k, k + 1)[None, :]
    rows = np.arange(book.n_books)[:, None]
    return book.depth[rows, 0, j].sum(1).astype(np.int64) - book.depth[rows, 1, j].sum(1).astype(np.int64)


def test_depth_flow_columns_are_emas_of_the_near_mid_depth_change_and_change_nothing_else():
    """market.depth_flow_ticks=K appends two EMAs (decays flow_decay and slow_flow_decay) of one step's bid size
    gained minus ask size gained on the absolute ticks within K of the step's starting mid (limit orders, cancels,
    trades and the agent's own orders there); the market and the other columns are those of K=0 (same seeds, same
    random actions), across re-centred windows and episode ends."""
    from lobsim_env import LobVectorEnv, obs_index, obs_size

    K, books = 5, 32
    plain = MarketConfig(horizon=150, synthetic=SyntheticConfig(window_ticks=32))  # a narrow window re-centres often
    cfg = dataclasses.replace(plain, depth_flow_ticks=K)
    ix = obs_index(cfg)
    assert obs_size(cfg) == obs_size(plain) + 2 and (ix["depth_flow"], ix["depth_flow_slow"]) == (32, 33)
    assert "depth_flow" not in obs_index(plain)
    env, ref = LobVectorEnv(books, cfg), LobVectorEnv(books, plain)
    obs, _ = env.reset(seed=5)
    ref.reset(seed=5)
    rng = np.random.default_rng(0)
    fast, slow, shifted, ended = np.zeros(books), np.zeros(books), 0, np.zeros(books, bool)
    for _ in range(400):
        b = env._state.book
        mid = (b.base + (b.best[:, 0] + b.best[:, 1]) // 2).astype(np.int64)
        before, base0 = _near_mid_depth(b, mid, K), b.base.copy()
        acts = rng.integers(0, 7, books)
        obs, _, term, trunc, _ = env.step(acts)
        robs, *_ = ref.step(acts)
        np.testing.assert_array_equal(obs[:, :32], robs)
        if ended.any():  # the autoreset step after an episode's last: the next episode's first observation
            assert ended.all() and (obs[:, ix["depth_flow"]] == 0).all()
            fast[:] = slow[:] = 0
        else:
            shifted += int((b.base != base0).sum())
            w = _near_mid_depth(b, mid, K) - before
            fast, slow = 0.9 * fast + 0.1 * w, 0.98 * slow + 0.02 * w
        ended = term | trunc
        np.testing.assert_allclose(obs[:, ix["depth_flow"]], fast / cfg.size_scale, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(obs[:, ix["depth_flow_slow"]], slow / cfg.size_scale, rtol=1e-5, atol=1e-6)
    assert shifted > 0  # some windows re-centred mid-run: the flow is measured on absolute ticks
    assert np.abs(obs[:, ix["depth_flow"]]).max() > 0


def test_depth_flow_ticks_is_validated():
    from lobsim_env.config import MarketConfigError

    with pytest.raises(MarketConfigError, match=r"market\.depth_flow_ticks=11"):
        MarketConfig(depth_flow_ticks=11).validate()

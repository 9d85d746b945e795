"""The Gymnasium envs: contract, registration, determinism, vector == singles, accounting, limits, latency."""

from __future__ import annotations

import dataclasses
import inspect

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode
from hypothesis import given, settings
from hypothesis import strategies as st

import lobsim_env
from lobsim_env import Action, LobEnv, LobVectorEnv, MarketConfig, MarketConfigError, SyntheticConfig
from lobsim_env.lobster.market import LobsterMarket, lobster_config
from lobsim_env.market import ActionReport, Market, new_order_contracts, obs_index
from lobsim_env.synthetic.market import SyntheticMarket
from tests.test_lobster_reconstruct import random_day

CFG = MarketConfig(horizon=40)


def test_check_env_passes():
    check_env(LobEnv(CFG), skip_render_check=True)


@pytest.mark.parametrize("cls", [SyntheticMarket, LobsterMarket])
def test_both_markets_implement_the_market_protocol(cls):
    methods = [n for n, v in vars(Market).items() if inspect.isfunction(v) and not n.startswith("_")]
    assert sorted(methods) == ["latent_regime", "new_state", "observe", "reset_rows", "step"]
    for name in methods:
        want = list(inspect.signature(getattr(Market, name)).parameters)
        assert list(inspect.signature(getattr(cls, name)).parameters) == want, (cls.__name__, name)
    assert isinstance(SyntheticMarket(CFG), Market)
    assert list(Market.__annotations__) == ["cfg", "action_listener"]  # the protocol's attributes
    assert cls.action_listener is None  # nothing is reported unless a listener is set


# ---- the action listener: what an action did where it met the book, through the protocol ----------------


def _both_markets(latency: int) -> list[Market]:
    day = random_day(7, levels=3, n=900)
    lob = lobster_config(str(day.source), horizon=40, events_per_step=6, latency_events=latency, order_size=2)
    syn = dataclasses.replace(CFG, events_per_step=6, latency_events=latency)
    return [SyntheticMarket(syn), LobsterMarket(lob, day)]


def _cash_usd(market: Market, state) -> np.ndarray:
    """The state's cash in USD (each market keeps it in its own unit)."""
    if isinstance(market, SyntheticMarket):
        return state.cash_ticks * market.cfg.usd_per_tick
    return state.cash_units * market._units_to_usd


@pytest.mark.parametrize("latency", [0, 1, 6])
def test_a_listener_hears_each_step_once_and_changes_nothing(latency):
    """Both markets call the listener once per step, after it, with [B] arrays; the steps themselves are bit for
    bit those of the same market without one."""
    for plain in _both_markets(latency):
        heard = _both_markets(latency)[0 if isinstance(plain, SyntheticMarket) else 1]
        reports: list[ActionReport] = []
        heard.action_listener = reports.append
        B = 6
        s0, s1 = plain.new_state(B), heard.new_state(B)
        keys = np.arange(1, B + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        plain.reset_rows(s0, np.arange(B), keys)
        heard.reset_rows(s1, np.arange(B), keys)
        acts = np.random.default_rng(latency).integers(0, len(Action), (30, B))
        posted = 0
        for t in range(30):
            r0, r1 = plain.step(s0, acts[t]), heard.step(s1, acts[t])
            assert len(reports) == t + 1, type(plain).__name__
            rep = reports[-1]
            assert rep.taker.shape == rep.taker_cash_usd.shape == rep.posted.shape == (B,)
            assert rep.taker.dtype == rep.posted.dtype == np.int64 and rep.taker_cash_usd.dtype == np.float64
            for f in ("reward", "fills", "fees_usd", "truncated"):
                assert np.array_equal(getattr(r0, f), getattr(r1, f)), (type(plain).__name__, t, f)
            assert np.array_equal(plain.observe(s0), heard.observe(s1))
            if isinstance(plain, SyntheticMarket):  # it nets a step's passive fills, then charges the maker fee
                cfg = plain.cfg
                fees = np.abs(rep.taker) * cfg.taker_fee_usd + np.abs(r1.fills - rep.taker) * cfg.maker_fee_usd
                assert np.array_equal(r1.fees_usd, fees)
            trades = np.isin(acts[t], [Action.MARKET_BUY, Action.MARKET_SELL, Action.FLATTEN])
            assert not rep.taker[~trades].any() and not rep.taker_cash_usd[~trades].any()
            joins = np.isin(acts[t], [Action.JOIN_BID, Action.JOIN_ASK])
            assert not rep.posted[~joins].any() and (rep.posted <= plain.cfg.order_size).all()
            assert (np.sign(rep.taker_cash_usd) == -np.sign(rep.taker)).all()  # buying costs cash
            posted += rep.posted.sum()
        assert reports[-1] is not reports[-2] and posted > 0
        heard.action_listener = None
        heard.step(s1, acts[0])
        assert len(reports) == 30


def test_the_taker_cash_is_the_cash_the_market_orders_moved():
    """With market orders only (no resting order, so no passive fill) the taker fills and cash the listener heard
    add up to the state's position and cash, in USD, in both markets."""
    for m in _both_markets(1):
        reports: list[ActionReport] = []
        m.action_listener = reports.append
        s = m.new_state(4)
        m.reset_rows(s, np.arange(4), np.array([3, 5, 7, 11], np.uint64))
        rng = np.random.default_rng(2)
        for _ in range(30):
            m.step(s, rng.choice([Action.HOLD, Action.MARKET_BUY, Action.MARKET_SELL, Action.FLATTEN], 4))
        taker = np.sum([r.taker for r in reports], axis=0)
        cash = np.sum([r.taker_cash_usd for r in reports], axis=0)
        assert np.array_equal(taker, s.position) and np.abs(taker).sum() > 0, type(m).__name__
        assert np.allclose(cash, _cash_usd(m, s)), type(m).__name__
        assert not np.sum([r.posted for r in reports])


def test_a_join_posts_its_new_order_and_a_kept_one_posts_nothing():
    """posted counts the contracts of a newly rested order (new_order_contracts): joining from no order posts
    it, joining again where the order still rests keeps it (and its queue place) and posts nothing."""
    assert new_order_contracts(np.array([0, 2]), np.array([0, 100]), np.array([2, 2]), np.array([99, 100])) == 2
    assert new_order_contracts(np.array([1, 0]), np.array([5, 0]), np.array([2, 0]), np.array([6, 0])) == 2
    for m in _both_markets(6):  # the action meets the book after the step's events: nothing fills it this step
        reports: list[ActionReport] = []
        m.action_listener = reports.append
        s = m.new_state(1)
        m.reset_rows(s, np.arange(1), np.array([12345], np.uint64))
        size, price = (
            (s.book.own_size, s.book.own_tick) if isinstance(m, SyntheticMarket) else (s.own_size, s.own_price)
        )
        m.step(s, np.array([Action.JOIN_BID]))
        assert reports[-1].posted[0] == size[0, 0] == m.cfg.order_size, type(m).__name__
        price0 = int(price[0, 0])
        m.step(s, np.array([Action.JOIN_BID]))  # the best bid is still where it rests: kept
        assert int(price[0, 0]) == price0 and size[0, 0] > 0 and reports[-1].posted[0] == 0, type(m).__name__
        m.step(s, np.array([Action.HOLD]))
        assert reports[-1].posted[0] == 0


def test_registered_make_and_make_vec():
    assert lobsim_env.ENV_ID in gym.registry
    env = gym.make("foxhunt/LOB-v0", config=CFG)
    obs, info = env.reset(seed=3)
    assert obs.shape == env.observation_space.shape and set(info) == set(lobsim_env.INFO_KEYS)
    venv = gym.make_vec("foxhunt/LOB-v0", num_envs=5, vectorization_mode="vector_entry_point", config=CFG)
    assert isinstance(venv, LobVectorEnv) and venv.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    obs, info = venv.reset(seed=3)
    assert obs.shape == (5, *env.observation_space.shape) and obs.dtype == np.float32
    assert info["pnl_usd"].shape == (5,)


def rollout_single(env: LobEnv, seed: int, actions: np.ndarray):
    out = [env.reset(seed=seed)[0]]
    rewards = []
    for a in actions:
        if env._done:
            out.append(env.reset()[0])
            rewards.append(0.0)
            continue
        o, r, _, _, _ = env.step(int(a))
        out.append(o)
        rewards.append(r)
    return np.array(out), np.array(rewards)


def test_same_seed_same_trajectory_exactly():
    acts = np.random.default_rng(0).integers(0, 7, 60)
    o1, r1 = rollout_single(LobEnv(CFG), 11, acts)
    o2, r2 = rollout_single(LobEnv(CFG), 11, acts)
    o3, _ = rollout_single(LobEnv(CFG), 12, acts)
    assert np.array_equal(o1, o2) and np.array_equal(r1, r2)
    assert not np.array_equal(o1, o3)


def test_vector_env_equals_single_envs_across_autoreset():
    B, seed = 4, 100
    acts = np.random.default_rng(1).integers(0, 7, (95, B))  # > 2 episodes of 40 steps
    venv = LobVectorEnv(B, CFG)
    vo, _ = venv.reset(seed=seed)
    singles = [LobEnv(CFG) for _ in range(B)]
    so = np.stack([e.reset(seed=seed + i)[0] for i, e in enumerate(singles)])
    assert np.array_equal(vo, so)
    for t in range(acts.shape[0]):
        vo, vr, vterm, vtrunc, vinfo = venv.step(acts[t])
        for i, e in enumerate(singles):
            if e._done:  # NEXT_STEP: the vector env resets this book now and ignores its action
                o, info = e.reset()
                r, trunc, fills = 0.0, False, 0
            else:
                o, r, _, trunc, info = e.step(int(acts[t, i]))
                fills = info["fills"]
            assert np.array_equal(vo[i], o), (t, i)
            assert vr[i] == r and vtrunc[i] == trunc and not vterm[i]
            assert vinfo["position"][i] == info["position"] and vinfo["fills"][i] == fills
            assert vinfo["pnl_usd"][i] == info["pnl_usd"]


@pytest.mark.parametrize("which", ["synthetic", "lobster"])
def test_books_opened_late_have_the_time_left_and_steps_of_the_step_they_open_at(which):
    """options={"first_steps": f}: book i opens its first episode at step f[i] (time_left 1 - f/horizon), that
    episode ends after horizon - f[i] steps, and every later one is a whole episode again (autoreset at step 0)."""
    def make() -> LobVectorEnv:
        if which == "synthetic":
            return LobVectorEnv(4, CFG)
        day = random_day(5, levels=3, n=2000)
        cfg = lobster_config(str(day.source), horizon=40, events_per_step=6)
        return LobVectorEnv(4, market=LobsterMarket(cfg, day))

    venv, plain = make(), make()
    H, col = 40, obs_index(venv.config)["time_left"]
    first = np.array([0, 1, 17, 39])
    obs, _ = venv.reset(seed=3, options={"first_steps": first})
    np.testing.assert_allclose(obs[:, col], 1 - first / H)
    plain_obs, _ = plain.reset(seed=3)
    ends = [[] for _ in range(4)]
    for t in range(120):
        if t == 0:  # book 0 opened at step 0 is the very book a reset without options opens
            np.testing.assert_array_equal(obs[0], plain_obs[0])
        obs, _, _, trunc, _ = venv.step(np.zeros(4, np.int64))
        plain_obs, *_ = plain.step(np.zeros(4, np.int64))
        if t < H - 1:
            np.testing.assert_array_equal(obs[0], plain_obs[0])
        for i in np.flatnonzero(trunc):
            ends[i].append(t)
    for i, f in enumerate(first):  # horizon - f steps, then the autoreset step and whole episodes of H steps
        e1 = H - f - 1
        assert ends[i] == [e for e in range(e1, 120, H + 1)], (i, f)


def test_a_lobster_window_that_ends_at_the_days_last_message_survives_the_autoreset_step():
    """The vector env steps a finished book once more (its autoreset step) before it resets it: the replayed day
    must not read past the book's window then (it read past the day's end and raised IndexError)."""
    day = random_day(5, levels=3, n=600)
    m = LobsterMarket(lobster_config(str(day.source), horizon=40, events_per_step=6), day)
    s = m.new_state(1)
    last = day.n_messages - 1 - m._span  # the latest start a key can draw
    m.reset_rows(s, np.arange(1), np.array([last - 1], np.uint64))
    assert s.start[0] == last
    for _ in range(41):  # the window's 40 steps, then the step the autoreset ignores
        m.step(s, np.zeros(1, np.int64))


def test_first_steps_out_of_range_or_unknown_options_are_refused():
    venv = LobVectorEnv(3, CFG)
    with pytest.raises(ValueError, match=r"must be in \[0, horizon=40\); got 0\.\.40"):
        venv.reset(seed=0, options={"first_steps": [0, 5, 40]})
    with pytest.raises(ValueError, match=r"must be 3 integers"):
        venv.reset(seed=0, options={"first_steps": [0, 5]})
    with pytest.raises(ValueError, match=r"must be 3 integers"):
        venv.reset(seed=0, options={"first_steps": [0.5, 1.0, 2.0]})
    with pytest.raises(ValueError, match=r"unknown keys \['reset_mask'\]"):
        venv.reset(seed=0, options={"reset_mask": np.ones(3, bool)})
    obs, _ = venv.reset(seed=0, options={"first_steps": None})  # None: every book at step 0
    assert (obs[:, obs_index(CFG)["time_left"]] == 1).all()


def test_reward_is_equity_change_and_sums_to_pnl():
    env = LobEnv(CFG)
    env.reset(seed=5)
    rng = np.random.default_rng(5)
    total, fees = 0.0, 0.0
    for _ in range(CFG.horizon):
        _, r, _, trunc, info = env.step(int(rng.integers(0, 7)))
        total += r
        fees += info["fees_usd"]
    assert trunc and np.isclose(total, info["pnl_usd"]) and info["pnl_usd"] == info["equity_usd"]
    # Equity = cash + position * mid - fees, recomputed here from the state.
    s, m = env._state, env.market
    mid = (2 * s.book.base[0] + s.book.best[0].sum()) / 2
    expect = (s.cash_ticks[0] + s.position[0] * mid) * CFG.usd_per_tick - fees
    assert np.isclose(info["equity_usd"], expect)
    assert isinstance(m, SyntheticMarket)


def test_market_buy_pays_the_ask_and_taker_fee():
    cfg = dataclasses.replace(CFG, latency_events=0, taker_fee_usd=1.25, order_size=2)
    env = LobEnv(cfg)
    env.reset(seed=1)
    s = env._state
    ask_tick = int(s.book.base[0] + s.book.best[0, 1])
    ask_size = int(s.book.depth[0, 1, s.book.best[0, 1]])
    _, _, _, _, info = env.step(Action.MARKET_BUY)
    assert info["fills"] == 2 and info["position"] == 2 and info["fees_usd"] == 2.5
    expect_cash = -2 * ask_tick if ask_size >= 2 else -(ask_tick + ask_tick + 1)
    assert s.cash_ticks[0] == expect_cash


def test_position_limit_never_exceeded():
    cfg = dataclasses.replace(CFG, position_limit=2, order_size=1, horizon=300)
    venv = LobVectorEnv(64, cfg)
    venv.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(300):
        # Mostly buys and bid joins: pushes against the long limit through both market and passive fills.
        acts = rng.choice(
            [Action.MARKET_BUY, Action.JOIN_BID, Action.JOIN_ASK, Action.HOLD], 64, p=[0.3, 0.4, 0.1, 0.2]
        )
        _, _, _, _, info = venv.step(acts)
        b = venv._state.book
        assert (np.abs(info["position"]) <= 2).all()
        assert (venv._state.position + b.own_size[:, 0] <= 2).all()
    assert (info["position"] == 2).mean() > 0.5


def test_join_keeps_queue_place_and_cancel_and_flatten():
    cfg = dataclasses.replace(CFG, latency_events=0)
    env = LobEnv(cfg)
    ix = obs_index(cfg)
    obs, _ = env.reset(seed=2)
    obs, *_ = env.step(Action.JOIN_BID)
    b = env._state.book
    if b.own_size[0, 0]:  # still resting after this step's flow
        tick, ahead = b.own_tick[0, 0], b.own_ahead[0, 0]
        assert obs[ix["own_bid_size"]] > 0
        same_best = b.base[0] + b.best[0, 0] == tick
        obs, *_ = env.step(Action.JOIN_BID)
        if same_best:
            assert b.own_tick[0, 0] == tick and b.own_ahead[0, 0] <= ahead  # kept, never moved back
    obs, *_ = env.step(Action.CANCEL)
    assert b.own_size[0].sum() == 0 and obs[ix["own_bid_size"]] == 0
    env.step(Action.MARKET_SELL)
    env.step(Action.MARKET_SELL)
    _, _, _, _, info = env.step(Action.FLATTEN)
    assert info["position"] == 0


def test_latency_orders_arrive_after_k_events():
    """With latency k, the agent's market buy executes against the book as left by the first k events."""
    for k in (0, 3, 8):
        cfg = dataclasses.replace(CFG, latency_events=k, events_per_step=8)
        a, b = LobEnv(cfg), LobEnv(cfg)
        a.reset(seed=9)
        b.reset(seed=9)
        m = b.market
        # Replay the step by hand on b's state: k events, then the order.
        from lobsim_env.synthetic.flow import hash_draws

        s = b._state
        h = hash_draws(s.key, s.t, 9)
        s.regime = m.flow_model.step_regime(s.regime, h[8])
        ev = m.flow_model.prepare(h[:8], s.regime)
        for e in range(k):
            ev.apply(s.book, e)
        expected_tick = int(s.book.base[0] + s.book.best[0, 1])
        a.step(Action.MARKET_BUY)
        assert a._state.cash_ticks[0] == -expected_tick, k


def test_bad_config_lists_every_error():
    cfg = MarketConfig(
        tick_size=-0.25,
        horizon=0,
        latency_events=9,
        events_per_step=8,
        synthetic=SyntheticConfig(signal_strength=2.0, limit_rate=0.9),
    )
    errs = cfg.errors()
    joined = "\n".join(errs)
    for needle in (
        "market.tick_size=-0.25 must be > 0",
        "market.horizon=0",
        "market.latency_events=9",
        "market.synthetic.signal_strength=2.0",
        "limit_rate+market_rate+cancel_rate",
    ):
        assert needle in joined
    with pytest.raises(MarketConfigError, match="tick_size"):
        LobEnv(cfg)
    assert MarketConfig().errors() == []


def test_bad_actions_and_misuse_raise_clearly():
    env = LobEnv(CFG)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"0\.\.6"):
        env.step(7)
    venv = LobVectorEnv(3, CFG)
    venv.reset(seed=0)
    with pytest.raises(ValueError, match="shape"):
        venv.step(np.zeros(2, np.int64))
    with pytest.raises(ValueError, match=r"2 seeds for num_envs=3"):
        venv.reset(seed=[1, 2])


def test_observation_layout():
    cfg = dataclasses.replace(CFG, obs_levels=3)
    env = LobEnv(cfg)
    obs, _ = env.reset(seed=4)
    ix = obs_index(cfg)
    assert obs.shape == (4 * 3 + 12,)
    s = env._state.book
    spread = s.best[0, 1] - s.best[0, 0]
    assert obs[ix["spread"]] == spread and obs[0] == -spread / 2 and obs[6] == spread / 2
    assert obs[3] == s.depth[0, 0, s.best[0, 0]] / cfg.size_scale
    assert obs[ix["time_left"]] == 1.0 and obs[ix["position"]] == 0


def test_config_must_be_a_market_config():
    with pytest.raises(TypeError, match="MarketConfig"):
        LobEnv({"horizon": 10})


def test_an_env_built_on_a_market_object_is_the_env_of_its_config():
    a, b = LobVectorEnv(2, market=SyntheticMarket(CFG)), LobVectorEnv(2, CFG)
    oa, _ = a.reset(seed=9)
    ob, _ = b.reset(seed=9)
    assert np.array_equal(oa, ob) and a.config == CFG
    acts = np.random.default_rng(3).integers(0, 7, (45, 2))
    for t in range(45):
        oa, ra, _, ta, _ = a.step(acts[t])
        ob, rb, _, tb, _ = b.step(acts[t])
        assert np.array_equal(oa, ob) and np.array_equal(ra, rb) and np.array_equal(ta, tb), t
    assert LobEnv(CFG, market=SyntheticMarket(CFG)).config == CFG  # the same config twice is fine
    with pytest.raises(ValueError, match=r"config differs from market\.cfg"):
        LobEnv(MarketConfig(), market=SyntheticMarket(CFG))
    with pytest.raises(TypeError, match=r"must be a lobsim_env\.Market"):
        LobVectorEnv(2, market=CFG)


def test_make_vec_sync_mode_matches_native():
    sync = gym.make_vec("foxhunt/LOB-v0", num_envs=3, vectorization_mode="sync", config=CFG)
    native = LobVectorEnv(3, CFG)
    a, _ = sync.reset(seed=21)
    b, _ = native.reset(seed=21)
    assert np.array_equal(a, b)
    acts = np.random.default_rng(2).integers(0, 7, (45, 3))
    for t in range(45):  # across the autoreset at step 40
        oa, ra, _, ta, _ = sync.step(acts[t])
        ob, rb, _, tb, _ = native.step(acts[t])
        assert np.array_equal(oa, ob) and np.array_equal(ra, rb) and np.array_equal(ta, tb), t


def test_observation_ladder_near_the_window_edge():
    """Ladder ticks beyond the window read 0 (the slow path); inside it, both paths read the depth."""
    cfg = dataclasses.replace(CFG, obs_levels=5)
    m = SyntheticMarket(cfg)
    s = m.new_state(2)
    m.reset_rows(s, np.arange(2), np.array([1, 2], np.uint64))
    b = s.book
    b.depth[1, 0] = np.arange(b.window, dtype=np.int32) % 7  # a recognisable bid ladder in book 1
    b.depth[1, 0, 3:] = 0
    b.depth[1, 1, :4] = 0
    b.depth[1, 1, 4:] = 9
    b.best[1] = (2, 4)  # best bid 2 ticks above the window's floor: ticks -1 and -2 lie outside
    obs = m.observe(s)
    assert np.allclose(obs[1, 5:10] * cfg.size_scale, [2, 1, 0, 0, 0])
    assert np.allclose(obs[1, 15:20] * cfg.size_scale, [9] * 5)
    assert np.allclose(obs[1, 0:5], -(1 + np.arange(5))) and obs[1, 20] == 2
    # Book 0 (well inside) reads the same through either path.
    inside = m.observe(s)[0]
    bb = b.best[0, 0]
    assert np.allclose(inside[5:10] * cfg.size_scale, b.depth[0, 0, bb - np.arange(5)])


@settings(max_examples=25, deadline=None)
@given(
    latency=st.integers(0, 4),
    limit=st.integers(1, 4),
    size=st.integers(1, 2),
    seed=st.integers(0, 10_000),
    p_trade=st.floats(0.0, 1.0),
)
def test_invariants_under_random_configs_and_actions(latency, limit, size, seed, p_trade):
    cfg = MarketConfig(
        horizon=60, latency_events=latency, events_per_step=4, position_limit=limit, order_size=min(size, limit)
    )
    venv = LobVectorEnv(8, cfg)
    venv.reset(seed=seed)
    rng = np.random.default_rng(seed)
    fills = np.zeros(8, np.int64)
    rewards = np.zeros(8)
    for _ in range(59):
        acts = np.where(rng.random(8) < p_trade, rng.integers(1, 7, 8), 0)
        _, r, _, trunc, info = venv.step(acts)
        fills += info["fills"]
        rewards += r
        s = venv._state
        b = s.book
        assert (np.abs(s.position) <= limit).all()
        assert (s.position + b.own_size[:, 0] <= limit).all() and (s.position - b.own_size[:, 1] >= -limit).all()
        assert (b.depth >= 0).all() and (b.best[:, 0] < b.best[:, 1]).all()
        assert (b.own_ahead >= 0).all() and (b.own_ahead <= b.depth.max()).all()
        assert np.array_equal(fills, s.position) and not trunc.any()
        assert np.allclose(rewards, info["pnl_usd"])

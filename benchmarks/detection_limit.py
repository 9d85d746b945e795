"""How late the market's observable flow tells a regime change, and what that lateness costs the oracle.

Two measurements on the synthetic market (the phase4_3 preset's), to place the learned agent's 0.75-0.80 of the
oracle (BENCHMARKS.md, "The best observation-only rule"):

1. **The oracle, told late.** `DelayedOracle(d)` trades as the oracle does (market orders towards
   position_limit * z) on the regime of d steps ago, and flat for an episode's first d steps: a detector with a
   fixed delay and no false alarms. Scored on fold 0's held-out episodes; and `PassiveDelayedOracle(d, u)`, the
   same trading passively (joins at the best quote) while within u contracts of its target.
2. **How late a Bayes filter learns of a change.** The forward (HMM) filter of benchmarks/regime_filter.py run
   on the step's signed market-order volume (`flow`), on the order flow imbalance at the best quotes (`ofi`,
   Cont, Kukanov and Stoikov 2014: the best bid's size change where its price held or rose, minus the best ask's,
   which counts limit orders, cancels and trades there), on both (`flow+ofi`, a joint emission), on the depth
   flow near the mid (`depth`: the bid size gained minus the ask size gained over one step on the same absolute
   ticks within 5 of the mid, which the limit orders at every level they arrive at move; the observation has
   no such column) and on the trade flow with it (`flow+depth`). Books held
   flat, emissions fitted on training seeds, scored on other seeds. Per regime change: the steps until the
   filter's most probable regime first equals the new one ("delay"), or none before the regime ends
   ("undetected"); and the share of steps on which it is right.

The filter with both inputs is the best detector here, and it still learns of a change about 20 steps late on
the median and never on about a sixth of them; an oracle 20 steps late and never wrong makes 0.83 of the oracle.

    python benchmarks/detection_limit.py --episodes 256 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root

from benchmarks import regime_filter as rf
from lobsim_env.baselines import _position, _trade_towards, run_episodes
from lobsim_env.config import MarketConfig
from lobsim_env.env import LobVectorEnv
from lobsim_env.market import Action, obs_index
from lobsim_env.seeds import heldout_seed
from lobsim_env.synthetic import book as bk

DELAYS = (0, 5, 10, 20, 30, 50, 80)
MAX_OFI = 12
"""The OFI histogram spans -MAX_OFI..MAX_OFI contracts a step (clipped)."""
WINDOW_TICKS, MAX_DEPTH_FLOW = 5, 12
"""The depth flow sums the book within WINDOW_TICKS ticks of the mid (both sides, 11 ticks: past the 6 levels limit
orders arrive at); its histogram spans -MAX_DEPTH_FLOW..MAX_DEPTH_FLOW contracts a step (clipped)."""
FIT_SEED, SCORE_SEED = rf.FIT_SEED, 30_000
"""Training seeds of the emission fits, and the seeds the filters are scored on (both far below the held-out)."""


class DelayedOracle:
    """The oracle told the regime `delay` steps late: target position_limit * z(t - delay), 0 for an episode's
    first `delay` steps; moved with market orders one contract a step, as the oracle does."""

    def __init__(self, delay: int):
        self.delay = delay
        self.history: np.ndarray | None = None  # [delay + 1, B]: z(t), z(t-1), ...
        self.age: np.ndarray | None = None

    def __call__(self, obs: np.ndarray, env: LobVectorEnv, rng: np.random.Generator) -> np.ndarray:
        cfg = env.config
        if self.history is None or self.history.shape[1] != obs.shape[0]:
            self.history = np.zeros((self.delay + 1, obs.shape[0]), np.int64)
            self.age = np.zeros(obs.shape[0], np.int64)
        new = obs[:, obs_index(cfg)["time_left"]] >= 1.0 - 0.5 / cfg.horizon  # step 0 of an episode
        self.age = np.where(new, 0, self.age + 1)
        self.history = np.roll(self.history, 1, axis=0)
        self.history[0] = env.latent_regime()
        target = np.where(self.age >= self.delay, self.history[self.delay], 0) * cfg.position_limit
        return _trade_towards(_position(obs, cfg), target)


class PassiveDelayedOracle(DelayedOracle):
    """DelayedOracle(delay) that trades passively near its target: a join at the best quote on the side it needs
    (JOIN_BID or JOIN_ASK; CANCEL at the target) while within `urgent` contracts of it, market orders farther away."""

    def __init__(self, delay: int, urgent: int):
        super().__init__(delay)
        self.urgent = urgent

    def __call__(self, obs: np.ndarray, env: LobVectorEnv, rng: np.random.Generator) -> np.ndarray:
        market = super().__call__(obs, env, rng)  # also moves the regime history on
        cfg = env.config
        target = np.where(self.age >= self.delay, self.history[self.delay], 0) * cfg.position_limit
        gap = target - _position(obs, cfg)
        join = np.where(gap > 0, Action.JOIN_BID, np.where(gap < 0, Action.JOIN_ASK, Action.CANCEL))
        return np.where(np.abs(gap) > self.urgent, market, join).astype(np.int64)


URGENT = (1, 2, 3, 1_000)
"""PassiveDelayedOracle's `urgent` values scored (1,000: never a market order)."""


def best_quotes(env: LobVectorEnv) -> tuple[np.ndarray, ...]:
    """(bid price, ask price, bid size, ask size) at the best quotes of every book, absolute ticks and units."""
    b = env._state.book  # the env keeps its market state private; this measurement reads the book itself
    rows = np.arange(b.n_books)
    bid, ask = b.best[:, bk.BID], b.best[:, bk.ASK]
    return (
        (b.base + bid).astype(np.int64),
        (b.base + ask).astype(np.int64),
        *(b.depth[rows, side, best].astype(np.int64) for side, best in ((0, bid), (1, ask))),
    )


def order_flow_imbalance(before: tuple[np.ndarray, ...], after: tuple[np.ndarray, ...]) -> np.ndarray:
    """Cont, Kukanov and Stoikov's OFI between two snapshots of the best quotes: bid size added where the bid held
    or rose, bid size lost where it held or fell, and the mirror image for the ask (with the opposite sign)."""
    pb0, pa0, qb0, qa0 = before
    pb, pa, qb, qa = after
    return (pb >= pb0) * qb - (pb <= pb0) * qb0 - (pa <= pa0) * qa + (pa >= pa0) * qa0


def window_depth(env: LobVectorEnv, ticks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Resting bid and ask size summed over the absolute ticks ticks[b] - WINDOW_TICKS .. ticks[b] + WINDOW_TICKS of
    each book (clipped to its price window)."""
    b = env._state.book
    j = ticks[:, None] - b.base[:, None] + np.arange(-WINDOW_TICKS, WINDOW_TICKS + 1)[None, :]
    j = np.clip(j, 0, b.depth.shape[2] - 1)
    rows = np.arange(b.n_books)[:, None]
    return b.depth[rows, bk.BID, j].sum(1).astype(np.int64), b.depth[rows, bk.ASK, j].sum(1).astype(np.int64)


def step_with_depth_flow(env: LobVectorEnv, actions: np.ndarray) -> tuple[np.ndarray, tuple]:
    """env.step(actions), and over that step the bid size gained minus the ask size gained on the same absolute ticks
    near the mid (what every limit order, cancel and trade there did to the book: a limit bid or a market buy counts
    +1, a limit ask or a market sell -1, a cancel -1 on its side)."""
    b = env._state.book
    mid = (b.base + (b.best[:, bk.BID] + b.best[:, bk.ASK]) // 2).astype(np.int64)
    bid0, ask0 = window_depth(env, mid)
    out = env.step(actions)
    bid1, ask1 = window_depth(env, mid)
    return (bid1 - bid0) - (ask1 - ask0), out


def flows(cfg: MarketConfig, books: int, seed: int) -> tuple[np.ndarray, ...]:
    """[horizon, books] signed market-order volume, OFI, depth flow (all clipped) and the latent regime, books held
    flat."""
    env = LobVectorEnv(books, cfg)
    obs, _ = env.reset(seed=seed)
    quotes, hold = best_quotes(env), np.full(books, Action.HOLD, np.int64)
    xs, es, ws, zs = [], [], [], []
    for _ in range(cfg.horizon):
        w, (nxt, *_) = step_with_depth_flow(env, hold)
        now = best_quotes(env)
        xs.append(np.clip(rf.recovered_flow(nxt, obs, cfg), -rf.MAX_X, rf.MAX_X))
        es.append(np.clip(order_flow_imbalance(quotes, now), -MAX_OFI, MAX_OFI))
        ws.append(np.clip(w, -MAX_DEPTH_FLOW, MAX_DEPTH_FLOW))
        zs.append(env.latent_regime().copy())
        obs, quotes = nxt, now
    env.close()
    return np.array(xs), np.array(es), np.array(ws), np.array(zs)


FILTERS = ("flow", "ofi", "flow+ofi", "depth", "flow+depth")
"""The filters scored: each reads the inputs its name joins with '+' (a joint emission)."""


def filter_inputs(columns: list[np.ndarray], name: str) -> list[tuple[np.ndarray, int]]:
    """(values, half width) of each input filter `name` reads, from flows()'s flow, OFI and depth flow columns."""
    flow, ofi, depth = columns
    by_name = {"flow": (flow, rf.MAX_X), "ofi": (ofi, MAX_OFI), "depth": (depth, MAX_DEPTH_FLOW)}
    return [by_name[c] for c in name.split("+")]


def emission(z: np.ndarray, *cols: tuple[np.ndarray, int]) -> np.ndarray:
    """P(values | z) over the joint histogram of the columns (each (values, half width)), add-one smoothed and
    pooled with its mirror image (the flow is symmetric: P(v | z) = P(-v | -z))."""
    shape = (3, *(2 * k + 1 for _, k in cols))
    counts = np.ones(shape)
    np.add.at(counts, (z.ravel() + 1, *(v.ravel() + k for v, k in cols)), 1)
    counts = 0.5 * (counts + np.flip(counts))
    return counts / counts.sum(axis=tuple(range(1, counts.ndim)), keepdims=True)


def regime_spans(z: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) of every regime that begins with a change inside one episode's [horizon] regimes (the first
    regime, which no change starts, is left out); end is where the next change or the episode ends."""
    starts = np.flatnonzero(np.diff(z) != 0) + 1
    if starts.size == 0:
        return []
    return [(int(s), int(e)) for s, e in zip(starts, np.append(starts[1:], z.size), strict=True)]


def detection(z: np.ndarray, loglik: np.ndarray, switch_prob: float) -> dict[str, float]:
    """The forward filter over [horizon, B, 3] log-likelihoods; its accuracy and delays against z [horizon, B]."""
    trans = rf.transition_matrix(switch_prob)
    post = np.full((z.shape[1], 3), 1 / 3)
    best = np.empty_like(z)
    for t in range(z.shape[0]):
        lp = np.log(post @ trans) + loglik[t]
        lp -= lp.max(axis=1, keepdims=True)
        post = np.exp(lp)
        post /= post.sum(axis=1, keepdims=True)
        best[t] = post.argmax(axis=1) - 1
    delays, undetected = [], 0
    for b in range(z.shape[1]):
        for s, e in regime_spans(z[:, b]):
            hit = np.flatnonzero(best[s:e, b] == z[s, b])
            if hit.size:
                delays.append(int(hit[0]))
            else:
                undetected += 1
    d = np.array(delays)
    return {
        "accuracy": float((best == z).mean()),
        "changes": int(d.size + undetected),
        "delay_median": float(np.median(d)),
        "delay_mean": float(d.mean()),
        "undetected": undetected / (d.size + undetected),
        # its most probable regime read as a position, scored as the policies are (held HOLD steps, by length)
        "as_position": position_lag(z, best),
    }


class Recorder:
    """A policy wrapped to record, each step, the latent regime and the position it holds (scoring only)."""

    def __init__(self, policy):
        self.policy, self.z, self.position = policy, [], []

    def __call__(self, obs: np.ndarray, env: LobVectorEnv, rng: np.random.Generator) -> np.ndarray:
        self.z.append(env.latent_regime().copy())
        self.position.append(_position(obs, env.config))
        return self.policy(obs, env, rng)


HOLD = 10
"""position_lag counts a position as following a new regime once it keeps the regime's sign this many steps."""


LENGTH_BUCKETS = ((0, 20), (20, 50), (50, 100), (100, 200), (200, 10**9))
"""Regime lengths (steps, [lo, hi)) position_lag splits the changes never followed by."""


def position_lag(z: np.ndarray, position: np.ndarray) -> dict:
    """How late a policy's position follows the regime, from [horizon, B] regimes and positions: per change into
    +-1 within an episode, the steps until the position takes the new regime's sign and keeps it HOLD steps (or to
    the regime's end) ("lag"), or never before the regime ends; and the share of steps with z != 0 on which it
    has z's sign."""
    lags, lengths, missed, missed_steps = [], [], [], []
    for b in range(z.shape[1]):
        for s, e in regime_spans(z[:, b]):
            if z[s, b] == 0:
                continue
            right = np.sign(position[s:e, b]) == z[s, b]
            # held: right-signed for HOLD steps on (or to the regime's end), so a flicker does not count
            held = np.array([right[t : t + HOLD].all() for t in range(right.size)], dtype=bool)
            hit = np.flatnonzero(held)
            if hit.size:
                lags.append(int(hit[0]))
            lengths.append(e - s)
            missed.append(not hit.size)
            if not hit.size:
                missed_steps.append(np.sign(position[s:e, b]) * z[s, b])  # +1 right, 0 flat, -1 wrong
    lag = np.array(lags)
    signed = z != 0
    away = np.concatenate(missed_steps) if missed_steps else None  # the position's side through the ones missed
    lengths_a, missed_a = np.array(lengths), np.array(missed, dtype=bool)
    never = int(missed_a.sum())
    by_length = {}
    for lo, hi in LENGTH_BUCKETS:
        inside = (lengths_a >= lo) & (lengths_a < hi)
        share = float(missed_a[inside].mean()) if inside.any() else float("nan")
        by_length[f"{lo}-{hi}" if hi < 10**9 else f"{lo}+"] = {"changes": int(inside.sum()), "never": share}
    return {
        "changes": int(lag.size + never),
        "lag_median": float(np.median(lag)) if lag.size else float("nan"),
        "lag_mean": float(lag.mean()) if lag.size else float("nan"),
        "never": never / max(1, lag.size + never),
        "never_by_regime_length": by_length,
        "aligned": float((np.sign(position) == z)[signed].mean()),
        "flat": float((position == 0).mean()),
        # where the position is through the regimes it never follows: flat (waiting) or on the wrong side (stuck)
        "never_flat": float((away == 0).mean()) if away is not None else float("nan"),
        "never_wrong": float((away == -1).mean()) if away is not None else float("nan"),
    }


def length_split(lag: dict) -> str:
    """position_lag's never-followed shares by regime length, as one line."""
    return "  ".join(f"{k}: {v['never']:.2f} of {v['changes']}" for k, v in lag["never_by_regime_length"].items())


def lag_table(cfg: MarketConfig, policies: dict, episodes: int, seed: int, oracle: float) -> dict[str, dict]:
    """Each policy's PnL (of the oracle) and position_lag on the same held-out episodes."""
    rows = {}
    print(f"how late each policy's position follows the regime ({episodes} held-out episodes)")
    for name, policy in policies.items():
        rec = Recorder(policy)
        m = run_episodes(cfg, rec, episodes, seed).metrics()
        r = {"fraction_of_oracle": m["pnl_usd_mean"] / oracle, **position_lag(np.array(rec.z), np.array(rec.position))}
        rows[name] = r
        print(
            f"  {name:<16} {r['fraction_of_oracle']:.3f} of the oracle; its position takes a new regime's sign after "
            f"{r['lag_median']:.0f} steps (median; mean {r['lag_mean']:.1f}), never on {r['never']:.3f} of "
            f"{r['changes']} changes; right-signed on {r['aligned']:.3f} of steps with z != 0"
        )
        print(f"  {'':<16} never followed, by the new regime's length in steps: {length_split(r)}")
        print(
            f"  {'':<16} flat on {r['flat']:.2f} of all steps; through the regimes it never follows: flat on "
            f"{r['never_flat']:.2f} of their steps, on the wrong side on {r['never_wrong']:.2f}"
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    from foxhunt_ray.presets import run_preset

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=256, help="held-out episodes for the delayed oracles")
    ap.add_argument("--fit-books", type=int, default=256, help="training books of the emission fits")
    ap.add_argument("--score-books", type=int, default=512, help="books the filters are scored on")
    ap.add_argument("--agent", action="append", default=[], metavar="RUN_DIR",
                    help="also measure this run's newest checkpoint, greedy (repeatable)")  # fmt: skip
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    t0 = time.time()
    cfg = run_preset("phase4_3").market
    seed = heldout_seed(0)
    oracle = run_episodes(cfg, DelayedOracle(0), args.episodes, seed).metrics()["pnl_usd_mean"]
    late = {}
    print(f"the oracle told the regime late: {args.episodes} held-out episodes (fold 0)")
    for d in DELAYS:
        m = run_episodes(cfg, DelayedOracle(d), args.episodes, seed).metrics()
        late[d] = {"pnl_usd_mean": m["pnl_usd_mean"], "pnl_usd_sem": m["pnl_usd_sem"]}
        frac = m["pnl_usd_mean"] / oracle
        print(f"  {d:>3} steps late: {m['pnl_usd_mean']:8.1f} +- {m['pnl_usd_sem']:.1f}  {frac:.3f} of the oracle")
    passive = {}
    print("  the same, joining the best quote while within `urgent` contracts of the target (of the oracle):")
    for d in (0, 20, 30):
        passive[d] = {}
        for u in URGENT:
            m = run_episodes(cfg, PassiveDelayedOracle(d, u), args.episodes, seed).metrics()
            passive[d][u] = {k: m[k] for k in ("pnl_usd_mean", "pnl_usd_sem", "fees_usd_mean", "taker_contracts_mean")}
        row = "  ".join(f"urgent {u}: {passive[d][u]['pnl_usd_mean'] / oracle:.3f}" for u in URGENT)
        print(f"  {d:>3} steps late: {row}")
    *fit, z = flows(cfg, args.fit_books, FIT_SEED)
    em = {name: emission(z, *filter_inputs(fit, name)) for name in FILTERS}
    *score, z = flows(cfg, args.score_books, SCORE_SEED)
    logliks = {name: np.log(em[name][:, *(v + k for v, k in filter_inputs(score, name))]) for name in FILTERS}
    filters = {}
    print(f"the Bayes filter, books held flat ({args.score_books} books x {cfg.horizon} steps, seeds {SCORE_SEED}+i)")
    for name, ll in logliks.items():
        r = detection(z, np.moveaxis(ll, 0, -1), cfg.synthetic.regime_switch_prob)
        filters[name] = r
        print(
            f"  {name:<10} right on {r['accuracy']:.3f} of steps; a change seen after {r['delay_median']:.0f} steps "
            f"(median; mean {r['delay_mean']:.1f}), never on {r['undetected']:.3f} of {r['changes']} changes"
        )
        held = r["as_position"]
        print(
            f"  {'':<10} as a position held {HOLD} steps: never follows {held['never']:.3f} of the changes into +-1; "
            f"by the new regime's length: {length_split(held)}"
        )
    from lobsim_env.baselines import imbalance

    policies = {f"oracle {d} late": DelayedOracle(d) for d in (0, 20, 30)} | {"imbalance": imbalance}
    for i, run_dir in enumerate(args.agent):
        policies[f"agent {i}"] = _agent(run_dir)
    lags = lag_table(cfg, policies, args.episodes, seed, oracle)
    print(f"wall {time.time() - t0:.0f} s")
    if args.json:
        out = {"episodes": args.episodes, "heldout_seed": seed, "oracle_pnl_usd": oracle, "late_oracle": late}
        out |= {"fit_seed": FIT_SEED, "score_seed": SCORE_SEED, "filters": filters, "max_ofi": MAX_OFI}
        out |= {"depth_window_ticks": WINDOW_TICKS, "max_depth_flow": MAX_DEPTH_FLOW}
        out |= {"position_lag": lags, "agents": args.agent, "passive_late_oracle": passive}
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


def _agent(run_dir: str):
    """A run's newest checkpoint acting greedily on its policy head (foxhunt_ray.evaluate's agent)."""
    from actors.checkpoints import latest_checkpoint
    from foxhunt_ray.evaluate import load_agent, load_run, resolve_run_dir

    path = resolve_run_dir(run_dir)
    run, _, _ = load_run(path)
    env = LobVectorEnv(1, run.market)
    found = latest_checkpoint(path)
    if found is None:
        raise SystemExit(f"{run_dir}: no checkpoint to play")
    obs_dim, n_actions = int(env.single_observation_space.shape[0]), int(env.single_action_space.n)
    return load_agent(found[1], run, obs_dim=obs_dim, n_actions=n_actions)[0]


if __name__ == "__main__":
    sys.exit(main())

"""How well one observation tells the hidden regime: a classifier trained on it, with and without the depth flow.

The agent's policy reads one observation, not a history. So what it can know of the regime z in {-1, 0, +1} is
what a function of that one vector can tell, and the best such function is a classifier trained with z as the
label (which the agent never sees). This script trains one (an MLP, 2 x 256, cross-entropy, Adam) on the
phase4_3 market's observations, books held flat, and scores it on other books, for these inputs:

- `observation`: the 32 columns the agent sees today (book ladders, spread, imbalance, the trade flow's two
  EMAs, own position and orders, time left);
- `+ trade flow, 100 steps`: the same plus the step's signed market-order volume of the last 100 steps, a
  memory of the flow the EMAs summarise (how much the two EMAs lose);
- `+ depth flow`: the same observation with `market.depth_flow_ticks=5`: two EMAs (decays 0.9 and 0.98) of the
  bid size gained minus the ask size gained near the mid each step (BENCHMARKS.md, "The best observation-only
  rule": a Bayes filter on the trade flow and the depth flow is right on 0.736 of steps, on the trade
  flow alone 0.678).

It prints, per input, the share of steps on which the classifier's most probable regime is z, and its test
cross-entropy. Books are FIT_SEED + i (training) and SCORE_SEED + i (scoring), far below the held-out seeds.

    python benchmarks/observation_probe.py --json out.json      # about 2 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root

from benchmarks import regime_filter as rf
from lobsim_env.config import MarketConfig
from lobsim_env.env import LobVectorEnv
from lobsim_env.market import Action, obs_size

FIT_SEED, SCORE_SEED = rf.FIT_SEED, 30_000
DEPTH_FLOW_TICKS = 5
FLOW_WINDOW = 100
INPUTS = ("observation", "+ trade flow, 100 steps", "+ depth flow")


def collect(cfg: MarketConfig, books: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[horizon, books, obs] observations (with the depth-flow columns last), [horizon, books] signed trade flow of
    each step and the regime, books held flat."""
    env = LobVectorEnv(books, cfg)
    obs, _ = env.reset(seed=seed)
    hold = np.full(books, Action.HOLD, np.int64)
    observations, flow, z = [], [], []
    for _ in range(cfg.horizon):
        nxt, *_ = env.step(hold)
        flow.append(rf.recovered_flow(nxt, obs, cfg))
        observations.append(nxt)
        z.append(env.latent_regime().copy())
        obs = nxt
    env.close()
    return np.array(observations), np.array(flow, np.float32), np.array(z)


def features(data: tuple[np.ndarray, ...], name: str, plain: int) -> tuple[np.ndarray, np.ndarray]:
    """[samples, d] float32 inputs of `name` and [samples] labels z + 1."""
    observations, flow, z = data
    if name == "observation":
        x = observations[..., :plain]
    elif name == "+ depth flow":
        x = observations
    else:  # the last FLOW_WINDOW steps' trade flow, zeros before the episode
        padded = np.concatenate([np.zeros((FLOW_WINDOW - 1, flow.shape[1]), np.float32), flow])
        window = np.stack([padded[i : i + flow.shape[0]] for i in range(FLOW_WINDOW)], axis=-1)
        x = np.concatenate([observations[..., :plain], window], axis=-1)
    return x.reshape(-1, x.shape[-1]).astype(np.float32), (z.reshape(-1) + 1).astype(np.int64)


def fit_and_score(train, test, epochs: int, seed: int) -> dict[str, float]:
    (x, y), (xt, yt) = train, test
    mu, sd = x.mean(0), x.std(0) + 1e-6
    x, xt = torch.from_numpy((x - mu) / sd), torch.from_numpy((xt - mu) / sd)
    y, yt = torch.from_numpy(y), torch.from_numpy(yt)
    torch.manual_seed(seed)
    nn = torch.nn
    net = nn.Sequential(nn.Linear(x.shape[1], 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 3))
    opt = torch.optim.Adam(net.parameters(), 1e-3)
    for _ in range(epochs):
        for j in torch.randperm(len(y)).split(1024):
            loss = torch.nn.functional.cross_entropy(net(x[j]), y[j])
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        logits = torch.cat([net(part) for part in xt.split(65536)])
    return {
        "right_share": float((logits.argmax(1) == yt).float().mean()),
        "cross_entropy": float(torch.nn.functional.cross_entropy(logits, yt)),
        "inputs": int(x.shape[1]),
    }


def main(argv: list[str] | None = None) -> int:
    from foxhunt_ray.presets import run_preset

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fit-books", type=int, default=1024, help="training books (x horizon steps each)")
    ap.add_argument("--score-books", type=int, default=256, help="scoring books")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0, help="the classifier's initialisation and batch order")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    t0 = time.time()
    plain_cfg = dataclasses.replace(run_preset("phase4_3").market, depth_flow_ticks=0)
    cfg = dataclasses.replace(plain_cfg, depth_flow_ticks=DEPTH_FLOW_TICKS)
    plain = obs_size(plain_cfg)
    train = collect(cfg, args.fit_books, FIT_SEED)
    test = collect(cfg, args.score_books, SCORE_SEED)
    books = f"{args.fit_books} training books, {args.score_books} scored, {cfg.horizon} steps each"
    print(f"a classifier of the regime from one observation ({books}, books held flat; phase4_3's market)")
    out = {}
    for name in INPUTS:
        r = out[name] = fit_and_score(features(train, name, plain), features(test, name, plain), args.epochs, args.seed)
        print(f"  {name:<26} {r['inputs']:>4} inputs: right on {r['right_share']:.3f} of steps, "
              f"cross-entropy {r['cross_entropy']:.3f}")  # fmt: skip
    print(f"wall {time.time() - t0:.0f} s")
    if args.json:
        meta = {"fit_books": args.fit_books, "score_books": args.score_books, "epochs": args.epochs, "seed": args.seed}
        meta |= {"fit_seed": FIT_SEED, "score_seed": SCORE_SEED, "depth_flow_ticks": DEPTH_FLOW_TICKS}
        Path(args.json).write_text(json.dumps(meta | {"inputs": out}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""RLlib's PPO on the same market and the same machine: the system's baseline (what a Ray user would reach for).

It trains RLlib's PPO (the new API stack: EnvRunner actors that step the natively batched LobVectorEnv through its
`vector_entry_point`, and a Learner) on phase4_3's market for `--seconds` of wall time, as close to what
`python -m foxhunt_ray.local` trains as RLlib allows:

- the market of the `learn` settings (the depth flow near the mid), the observation standardised by the same
  probed statistics (`actors.envs.probe_env`, learner.obs_norm 'probe'), the reward scaled by the market's own unit
  (`foxhunt_ray.config.market_reward_scale`), the books opening their first episode at staggered steps;
- a policy/value MLP of the sizing's width (`cpu`: 2 x 128, `gpu_host`: 2 x 512, relu, shared layers) and the PPO
  settings foxhunt's policy head uses (lr 3e-3, gamma 0.99, lambda 0.95, clip 0.2, entropy 0.01, value 0.5,
  advantages standardised);
- `--env-runners` actors of `--envs-per-runner` books stepping `--fragment` steps a sample; each training iteration
  takes one sample of every runner and makes `--epochs` passes over it in minibatches of `--minibatch` steps.

Then the trained module plays greedily (argmax of its logits) on the same held-out episodes `foxhunt_ray.evaluate`
plays (fold 0's held-out seed), beside flat, random, imbalance and the oracle, with the same loop
(`lobsim_env.baselines.run_episodes`). It prints the table and a last line
`env_steps_per_s=<x> iterations=<n> heldout_pnl_usd=<y> oracle_pnl_usd=<z> fraction_of_oracle=<f>`.

With `--data DIR [--days NAMES] [--blocks N] [--holdout NAMES] --fold K` it trains instead on fold K of a day cache
by the walk-forward protocol (foxhunt_ray.walkforward, docs/evaluation.md "Walk-forward"), as
benchmarks/bench_walkforward.py trains foxhunt's agent:

- the replay market of the fold's training periods, built as the driver builds it: `foxhunt_ray.driver.data_sets`'s
  `market.*` settings, then `--set`, on the same preset and settings; the observation statistics are probed and the
  reward scale taken on that market, which plays the training periods alone;
- the policy picked on the validation period only: every `--validate-every` training iterations and after the last
  one the module plays `FoldMarkets.validate` greedily; the best mean PnL wins (a tie: the later) and its weights
  are kept (fold 1, which has no validation period: the last weights). The validation's time is not counted in
  `--seconds`, as foxhunt's runs pick their checkpoint after training;
- one agent a seed (`--seeds S S ...`, one after another, each a fresh algo), all scored by one
  `walkforward.score_agents` call: the same test windows, tuned quoting rule and intervals as bench_walkforward's
  fold records. It writes the record to `--json` ({"kind", "folds": [record], "argv"}, bench_walkforward's shape),
  prints `walkforward.table` (its "agent" is RLlib's) and a last line
  `fold=<K> seeds=<s> rllib_usd=<mean> best_baseline_usd=<y> ci95_low_usd=<l> ci95_high_usd=<h>`, the interval
  being that of RLlib's agent minus the best rule.

RLlib pins gymnasium 1.2.2 where this project pins 1.4.0, so it runs in a virtual environment of its own
(foxhunt_ray runs on either):

    python3 -m venv .rllib && .rllib/bin/pip install "torch==2.13.0" "ray[rllib]==2.60.0" -e .
    .rllib/bin/python benchmarks/bench_rllib.py --seconds 240 --seed 0 --json out.json    # the box's main job's budget
    .rllib/bin/python benchmarks/bench_rllib.py --data days --days AMZN --blocks 13 --fold 12 \
        --set market.horizon=200 --seconds 60 --seeds 0 1 2 3 4 --episodes 64 --num-cpus 2 --json fold12.json

The environment side (RllibLobEnv, greedy_policy, fold_market, ValidationPick, train_for) imports without RLlib and
is tested in tests/test_bench_rllib.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from actors.config import RolloutConfig  # noqa: E402
from actors.envs import probe_env  # noqa: E402
from actors.rollout import RolloutWorker  # noqa: E402
from foxhunt_ray import driver  # noqa: E402
from foxhunt_ray.config import ConfigError, apply_overrides, market_reward_scale  # noqa: E402
from foxhunt_ray.evaluate import AGENT  # noqa: E402
from foxhunt_ray.presets import run_preset  # noqa: E402
from foxhunt_ray.walkforward import FoldMarkets, score_agents, table  # noqa: E402
from lobsim_env import ENV_ID, LobVectorEnv, MarketConfig  # noqa: E402
from lobsim_env.baselines import POLICIES, Policy, run_episodes  # noqa: E402
from lobsim_env.seeds import heldout_seed  # noqa: E402

PRESET = "phase4_3"


class RllibLobEnv(LobVectorEnv):
    """LobVectorEnv as foxhunt's learner sees it: observations standardised, (x - mean) / std, as float32 in an
    unbounded Box; rewards times reward_scale; the first reset opens the books at steps drawn as a rollout worker
    draws its own (RolloutWorker._first_steps, stagger_episodes; stagger_seed as its seed, the reset's seed as its
    index; stagger_seed None: at 0), later ones at 0.
    `info` carries the market's own USD figures unchanged."""

    def __init__(
        self,
        num_envs: int,
        config: MarketConfig,
        obs_mean: np.ndarray,
        obs_std: np.ndarray,
        reward_scale: float,
        stagger_seed: int | None = 0,
    ):
        super().__init__(num_envs, config)
        self.standardise = standardiser(obs_mean, obs_std)
        shapes = np.shape(obs_mean), np.shape(obs_std)
        if shapes != (self.single_observation_space.shape,) * 2:
            raise ValueError(
                f"obs_mean / obs_std have shapes {shapes[0]} / {shapes[1]}; the market observes "
                f"{self.single_observation_space.shape}: probe the same MarketConfig"
            )
        self.reward_scale = float(reward_scale)
        self.stagger_seed = stagger_seed
        dim = self.single_observation_space.shape[0]
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (dim,), np.float32)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self._staggered = stagger_seed is None

    def reset(self, *, seed: Any = None, options: dict | None = None):
        if not self._staggered and options is None:
            rollout = RolloutConfig(num_envs=self.num_envs)
            first = RolloutWorker._first_steps(
                rollout, self.config, int(self.stagger_seed), 0 if seed is None else seed
            )
            options = {"first_steps": first}
        self._staggered = True
        obs, info = super().reset(seed=seed, options=options)
        return self.standardise(obs), info

    def step(self, actions):
        obs, reward, terminated, truncated, info = super().step(actions)
        return self.standardise(obs), reward * self.reward_scale, terminated, truncated, info


def market_and_stats(sizing: str, sets: Sequence[str] = ()) -> tuple[MarketConfig, np.ndarray, np.ndarray, float, int]:
    """phase4_3's market under the `learn` settings with the driver's `sets` applied (`section.field=value`: a
    fold's `market.*` from driver.data_sets, then --set; ConfigError naming every bad value), the observation
    statistics probed on it, the reward scale and the sizing's hidden width. A replay market plays `market.days`
    alone, so on a fold both come from its training periods."""
    run = run_preset(PRESET, settings="learn", sizing=sizing)
    if sets:
        run = apply_overrides(run, list(sets)).validate()
    spaces = probe_env(ENV_ID, market=run.market)
    return (
        run.market,
        np.asarray(spaces.obs_mean),
        np.asarray(spaces.obs_std),
        market_reward_scale(run.market),
        run.learner.hidden_dim,
    )


def fold_market(
    data: str,
    *,
    days: str | None = None,
    blocks: int = 1,
    holdout: str | None = None,
    fold: int | None = None,
    sets: Sequence[str] = (),
    sizing: str = "cpu",
) -> tuple[int, MarketConfig, np.ndarray, np.ndarray, float, int]:
    """Fold `fold` of the day cache `data` as the driver builds it (driver.data_sets: the training periods in
    market.days, the validation period in market.val_days, the test in market.eval_days; then `sets`, the --set
    overrides): (the fold, then market_and_stats' market, statistics, reward scale and width). driver.UsageError
    or ConfigError naming a bad value."""
    from_data, fold = driver.data_sets(data, days, fold, blocks, holdout)
    return (fold, *market_and_stats(sizing, [*from_data, *sets]))


@dataclass
class ValidationPick:
    """The weights a seed keeps, picked on the validation period alone: the best mean PnL offered, a tie going to
    the later (walkforward.score_fold's rule for checkpoints). `scores`: every offer's, by iteration."""

    scores: dict[int, float] = field(default_factory=dict)
    iteration: int | None = None
    state: dict[str, torch.Tensor] | None = None

    def offer(self, iteration: int, score: float, state: Mapping[str, torch.Tensor]) -> bool:
        """Records the validation `score` of the weights `state` after `iteration` and keeps a copy of them (the
        module trains on in place) unless an earlier offer scored more. True when kept."""
        self.scores[iteration] = float(score)
        if self.iteration is not None and score < self.scores[self.iteration]:
            return False
        self.iteration, self.state = iteration, {k: v.detach().clone() for k, v in state.items()}
        return True


def standardiser(mean: np.ndarray, std: np.ndarray):
    """obs -> (obs - mean) / std as float32, the encoder's learner.obs_norm (one multiply by 1 / std)."""
    mean32, scale32 = np.asarray(mean, np.float32), (1.0 / np.asarray(std, np.float64)).astype(np.float32)
    return lambda obs: ((np.asarray(obs, np.float32) - mean32) * scale32).astype(np.float32)


def greedy_policy(logits_of, mean: np.ndarray, std: np.ndarray):
    """A lobsim_env.baselines Policy that acts on argmax logits_of(standardised obs as a float32 tensor)."""
    standardise = standardiser(mean, std)

    def policy(obs: np.ndarray, env: LobVectorEnv, rng: np.random.Generator) -> np.ndarray:
        x = torch.from_numpy(standardise(obs))
        with torch.no_grad():
            return logits_of(x).argmax(-1).cpu().numpy().astype(np.int64)

    return policy


def heldout_table(market: MarketConfig, agent, episodes: int) -> dict[str, dict[str, float]]:
    """The agent and the baselines on fold 0's held-out episodes (foxhunt_ray.evaluate's seed and loop)."""
    seed = heldout_seed(0)
    out = {}
    for name, policy in {"agent": agent, **POLICIES}.items():
        m = run_episodes(market, policy, episodes, seed).metrics()
        out[name] = {"pnl_usd_mean": m["pnl_usd_mean"], "pnl_usd_sem": m["pnl_usd_sem"]}
    return out


ENV_NAME = "foxhunt-rllib-lob"
"""The name RLlib's env registry knows _env_creator by (RLlib takes a class or a registered name, not a function)."""


def _env_creator(ctx: dict) -> RllibLobEnv:
    return RllibLobEnv(
        int(ctx.get("num_envs", 1)),
        ctx["market"],
        ctx["obs_mean"],
        ctx["obs_std"],
        ctx["reward_scale"],
        stagger_seed=int(ctx["seed"]),
    )


def _rllib():
    """ray, RLlib's PPOConfig and DefaultModelConfig, and register_env; SystemExit saying how to install them."""
    import ray

    try:
        from ray.rllib.algorithms.ppo import PPOConfig
        from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
        from ray.tune.registry import register_env
    except ImportError as err:
        raise SystemExit(
            f"bench_rllib.py needs ray[rllib] ({err}); it pins gymnasium 1.2.2 where this project pins 1.4.0, so "
            'give it a venv of its own: python3 -m venv .rllib && .rllib/bin/pip install "torch==2.13.0" '
            '"ray[rllib]==2.60.0" -e . ; then run it with .rllib/bin/python'
        ) from None
    return ray, PPOConfig, DefaultModelConfig, register_env


def build_algo(
    args: argparse.Namespace,
    market: MarketConfig,
    mean: np.ndarray,
    std: np.ndarray,
    scale: float,
    hidden: int,
    seed: int,
) -> tuple[Any, int]:
    """RLlib's PPO on `market` (the flags' runners, books, fragment, epochs and minibatch; the policy head's PPO
    settings; a 2 x `hidden` MLP), built inside a started Ray: (the algo, its batch in env steps)."""
    _, PPOConfig, DefaultModelConfig, register_env = _rllib()
    register_env(ENV_NAME, _env_creator)
    cuda = torch.cuda.is_available()
    batch = args.env_runners * args.envs_per_runner * args.fragment
    env_config = {"market": market, "obs_mean": mean, "obs_std": std, "reward_scale": scale, "seed": seed}
    config = (
        PPOConfig()
        .environment(env=ENV_NAME, env_config=env_config)
        .env_runners(
            num_env_runners=args.env_runners,
            num_envs_per_env_runner=args.envs_per_runner,
            rollout_fragment_length=args.fragment,
            gym_env_vectorize_mode="vector_entry_point",
            num_cpus_per_env_runner=1,
        )
        .learners(num_learners=0, num_gpus_per_learner=1 if cuda else 0)
        .training(
            lr=3e-3,
            gamma=0.99,
            lambda_=0.95,
            clip_param=0.2,
            entropy_coeff=0.01,
            vf_loss_coeff=0.5,
            train_batch_size_per_learner=batch,
            minibatch_size=min(args.minibatch, batch),
            num_epochs=args.epochs,
        )
        .rl_module(
            model_config=DefaultModelConfig(
                fcnet_hiddens=[hidden, hidden], fcnet_activation="relu", vf_share_layers=True
            )
        )
        .debugging(seed=seed)
    )
    return config.build_algo(), batch


def train_for(
    algo: Any,
    seconds: float,
    *,
    progress: bool = False,
    every: int = 0,
    validate: Callable[[int], float] | None = None,
) -> tuple[list[dict[str, Any]], float]:
    """algo.train() until `seconds` of training wall time have passed: (one row per iteration, that time). With
    `validate`, validate(iteration) runs after every `every`-th iteration (every=0: none) and after the last one
    (once), its score in that iteration's row as `validation_usd`; its time counts neither in `seconds` nor in
    the rows' `seconds`."""
    start, paused, rows = time.perf_counter(), 0.0, []

    def check(iteration: int) -> None:
        nonlocal paused
        t = time.perf_counter()
        score = float(validate(iteration))
        if rows:
            rows[-1]["validation_usd"] = score
        if progress:
            print(f"  iteration {iteration}: validation {score:+.2f} USD", flush=True)
        paused += time.perf_counter() - t

    iterations = 0
    while time.perf_counter() - start - paused < seconds:
        result = algo.train()
        iterations += 1
        env_steps = int(result["env_runners"]["num_env_steps_sampled_lifetime"])
        ret = result["env_runners"].get("episode_return_mean")
        rows.append(
            {
                "iteration": iterations,
                "seconds": time.perf_counter() - start - paused,
                "env_steps": env_steps,
                "episode_return_mean": None if ret is None else float(ret),
            }
        )
        if progress:
            print(
                f"  iteration {iterations}: {env_steps:,} env steps, {rows[-1]['seconds']:.0f} s, "
                f"episode return {ret}",
                flush=True,
            )
        if validate is not None and every and iterations % every == 0:
            check(iterations)
    wall = time.perf_counter() - start - paused
    if validate is not None and "validation_usd" not in (rows[-1] if rows else {}):
        check(iterations)
    return rows, wall


def module_logits(module: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    """The action logits of an RLlib module's inference pass, on the module's device."""

    def logits_of(x: torch.Tensor) -> torch.Tensor:
        return module.forward_inference({"obs": x.to(next(module.parameters()).device)})["action_dist_inputs"]

    return logits_of


def train(args: argparse.Namespace) -> dict[str, Any]:
    """The synthetic mode: one seed on phase4_3's market, then fold 0's held-out episodes."""
    ray, *_ = _rllib()
    torch.set_num_threads(args.torch_threads)
    market, mean, std, scale, hidden = market_and_stats(args.sizing, args.overrides)
    ray.init(address="local", include_dashboard=False, num_cpus=args.num_cpus, log_to_driver=False)
    try:
        algo, batch = build_algo(args, market, mean, std, scale, hidden, args.seed)
        rows, wall = train_for(algo, args.seconds, progress=args.progress)
        iterations, env_steps = len(rows), rows[-1]["env_steps"] if rows else 0
        module = algo.get_module()
        module.eval()
        table = heldout_table(market, greedy_policy(module_logits(module), mean, std), args.episodes)
        algo.stop()
    finally:
        ray.shutdown()
    oracle = table["oracle"]["pnl_usd_mean"]
    return {
        "preset": PRESET,
        "settings": "learn",
        "sizing": args.sizing,
        "hidden": hidden,
        "seconds": wall,
        "iterations": iterations,
        "env_steps": env_steps,
        "env_steps_per_s": env_steps / wall,
        "batch": batch,
        "args": vars(args),
        "ray": ray.__version__,
        "torch": torch.__version__,
        "heldout": table,
        "fraction_of_oracle": table["agent"]["pnl_usd_mean"] / oracle if oracle else None,
        "curve": rows,
    }


def train_seed(
    args: argparse.Namespace,
    markets: FoldMarkets,
    stats: tuple[np.ndarray, np.ndarray, float, int],
    seed: int,
) -> tuple[Policy, dict[str, Any]]:
    """One seed of a fold, inside a started Ray: a fresh algo trained on the fold's training periods, its weights
    picked on the validation period (ValidationPick; fold 1: the last), then played greedily: (the agent, what it
    did: the pick, the validation scores, iterations, env steps, seconds, the curve)."""
    mean, std, scale, hidden = stats
    algo, batch = build_algo(args, markets.base, mean, std, scale, hidden, seed)
    pick = ValidationPick()

    def validate(iteration: int) -> float:
        module = algo.get_module()  # the local EnvRunner's, synced with the learner's after every iteration
        score = markets.validate(greedy_policy(module_logits(module), mean, std), args.episodes)
        pick.offer(iteration, score, module.state_dict())
        return score

    has_val = markets.validation is not None
    try:
        checked = validate if has_val else None
        rows, wall = train_for(algo, args.seconds, progress=args.progress, every=args.validate_every, validate=checked)
        module = algo.get_module()
        if pick.state is not None:
            module.load_state_dict(pick.state)
        module.eval()
    finally:
        algo.stop()
    env_steps = rows[-1]["env_steps"] if rows else 0
    return greedy_policy(module_logits(module), mean, std), {
        "seed": seed,
        "iteration": pick.iteration if has_val else len(rows),
        "how": "best mean PnL on the validation windows" if has_val else "last (no validation period: fold 1)",
        "validation_usd": pick.scores,
        "iterations": len(rows),
        "env_steps": env_steps,
        "seconds": wall,
        "env_steps_per_s": env_steps / wall if wall else None,
        "batch": batch,
        "curve": rows,
    }


def train_fold(args: argparse.Namespace) -> dict[str, Any]:
    """The walk-forward mode: every seed of --seeds on fold --fold of --data, one after another, then one
    score_agents call: its record, with `seeds`, `checkpoints` (each seed's pick, as score_fold's) and `trainer`."""
    ray, *_ = _rllib()
    torch.set_num_threads(args.torch_threads)
    fold, market, *stats = fold_market(
        args.data,
        days=args.days,
        blocks=args.blocks,
        holdout=args.holdout,
        fold=args.fold,
        sets=args.overrides,
        sizing=args.sizing,
    )
    markets = FoldMarkets.of(market, fold)
    ray.init(address="local", include_dashboard=False, num_cpus=args.num_cpus, log_to_driver=False)
    agents, picks = [], []
    try:
        for seed in args.seeds:
            agent, pick = train_seed(args, markets, stats, seed)
            agents.append(agent)
            picks.append(pick)
            print(
                f"seed {seed}: {pick['iterations']} iterations, {pick['env_steps']:,} env steps in "
                f"{pick['seconds']:.0f} s; kept iteration {pick['iteration']} ({pick['how']})",
                flush=True,
            )
    finally:
        ray.shutdown()
    record = score_agents(markets, agents, episodes=args.episodes)
    trainer = {"name": "RLlib PPO", "preset": PRESET, "settings": "learn", "sizing": args.sizing}
    trainer |= {"hidden": stats[3], "reward_scale": stats[2], "ray": ray.__version__, "torch": torch.__version__}
    return {**record, "seeds": list(args.seeds), "checkpoints": picks, "trainer": trainer, "args": vars(args)}


def fold_line(record: dict[str, Any]) -> str:
    """The walk-forward mode's last line: RLlib's agent, the best rule and the interval of their gap."""
    best = record["best_baseline"]
    low, high = record["versus"][best]["ci95_usd"]
    return (
        f"fold={record['fold']} seeds={len(record['seeds'])} rllib_usd={record['policies'][AGENT]['pnl_usd_mean']:.2f} "
        f"best_baseline_usd={record['policies'][best]['pnl_usd_mean']:.2f} ci95_low_usd={low:.2f} "
        f"ci95_high_usd={high:.2f}"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=240.0, help="wall time of training (the box's main job: 240)")
    p.add_argument("--seed", type=int, default=None, help="the seed (default 0)")
    p.add_argument("--sizing", choices=("cpu", "gpu_host"), default="cpu", help="the network width of that sizing")
    p.add_argument("--env-runners", type=int, default=1)
    p.add_argument("--envs-per-runner", type=int, default=64, help="books per EnvRunner")
    p.add_argument("--fragment", type=int, default=16, help="steps per book a sample")
    p.add_argument("--epochs", type=int, default=1, help="passes over each iteration's batch")
    p.add_argument("--minibatch", type=int, default=1024, help="steps per SGD minibatch")
    p.add_argument("--episodes", type=int, default=256, help="held-out episodes a policy (--data: windows a period)")
    p.add_argument("--num-cpus", type=int, default=None, help="ray.init(num_cpus=...); default all")
    p.add_argument("--torch-threads", type=int, default=1, help="torch threads of the driver (the learner)")
    p.add_argument("--progress", action="store_true", help="a line per training iteration")
    p.add_argument("--json", default=None, help="write the result here")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="a config override, as the driver's --set (e.g. market.horizon=200)")  # fmt: skip
    wf = p.add_argument_group("walk-forward (--data): fold K of a day cache, as the driver's flags pick it")
    wf.add_argument("--data", default=None, metavar="DIR", help="a day cache (python -m lobsim_env.data ingest)")
    wf.add_argument("--days", default=None, metavar="NAMES", help="the days to draw from (comma-separated)")
    wf.add_argument("--blocks", type=int, default=None, metavar="N", help="each day cut into N periods (e.g. 13)")
    wf.add_argument("--holdout", default=None, metavar="NAMES", help="a cross-instrument fold: the test days")
    wf.add_argument("--fold", type=int, default=None, metavar="K", help="the fold (default: the last period)")
    wf.add_argument("--seeds", type=int, nargs="+", default=None, metavar="S", help="one agent a seed (default --seed)")
    wf.add_argument("--validate-every", type=int, default=50, metavar="N",
                    help="training iterations between validations (and after the last; default 50)")  # fmt: skip
    args = p.parse_args(argv)
    if args.data is None:
        given = [f"--{f.replace('_', '-')}" for f in ("days", "blocks", "holdout", "fold", "seeds") if getattr(args, f)]
        if given:
            p.error(f"{', '.join(given)} pick a fold of a day cache: they go with --data DIR")
        args.seed = 0 if args.seed is None else args.seed
        return synthetic(args)
    if args.seed is not None and args.seeds is not None:
        p.error(f"--seed {args.seed} and --seeds {' '.join(map(str, args.seeds))}: give one")
    args.seeds = args.seeds or [0 if args.seed is None else args.seed]
    args.blocks = args.blocks or 1
    if args.episodes < 2 or args.validate_every < 0 or len(set(args.seeds)) != len(args.seeds):
        p.error(f"--episodes={args.episodes} must be >= 2, --validate-every={args.validate_every} >= 0 and "
                f"--seeds {' '.join(map(str, args.seeds))} distinct")  # fmt: skip
    return walkforward(args)


def synthetic(args: argparse.Namespace) -> int:
    result = train(args)
    for name, row in result["heldout"].items():
        print(f"{name:<10} {row['pnl_usd_mean']:>9,.0f} +- {row['pnl_usd_sem']:,.0f}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    agent, oracle = result["heldout"]["agent"]["pnl_usd_mean"], result["heldout"]["oracle"]["pnl_usd_mean"]
    print(
        f"env_steps_per_s={result['env_steps_per_s']:.0f} iterations={result['iterations']} "
        f"heldout_pnl_usd={agent:.0f} oracle_pnl_usd={oracle:.0f} fraction_of_oracle={result['fraction_of_oracle']:.3f}"
    )
    return 0


def walkforward(args: argparse.Namespace) -> int:
    try:
        record = train_fold(args)
    except (driver.UsageError, ConfigError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    text = table([record], record["kind"])
    if args.json:
        doc = {"kind": record["kind"], "folds": [record], "argv": sys.argv[1:]}
        Path(args.json).write_text(json.dumps(doc, indent=1))
    print(text)
    print(fold_line(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

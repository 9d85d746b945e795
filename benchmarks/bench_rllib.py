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

RLlib pins gymnasium 1.2.2 where this project pins 1.4.0, so it runs in a virtual environment of its own
(foxhunt_ray runs on either):

    python3 -m venv .rllib && .rllib/bin/pip install "torch==2.13.0" "ray[rllib]==2.60.0" -e .
    .rllib/bin/python benchmarks/bench_rllib.py --seconds 240 --seed 0 --json out.json    # the box's main job's budget

The environment side (RllibLobEnv, greedy_policy) imports without RLlib and is tested in tests/test_bench_rllib.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
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
from foxhunt_ray.config import market_reward_scale  # noqa: E402
from foxhunt_ray.presets import run_preset  # noqa: E402
from lobsim_env import ENV_ID, LobVectorEnv, MarketConfig  # noqa: E402
from lobsim_env.baselines import POLICIES, run_episodes  # noqa: E402
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


def market_and_stats(sizing: str) -> tuple[MarketConfig, np.ndarray, np.ndarray, float, int]:
    """phase4_3's market under the `learn` settings, the probed observation statistics, the reward scale and the
    sizing's hidden width."""
    run = run_preset(PRESET, settings="learn", sizing=sizing)
    spaces = probe_env(ENV_ID, market=run.market)
    return (
        run.market,
        np.asarray(spaces.obs_mean),
        np.asarray(spaces.obs_std),
        market_reward_scale(run.market),
        run.learner.hidden_dim,
    )


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


def train(args: argparse.Namespace) -> dict[str, Any]:
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

    torch.set_num_threads(args.torch_threads)
    market, mean, std, scale, hidden = market_and_stats(args.sizing)
    cuda = torch.cuda.is_available()
    ray.init(address="local", include_dashboard=False, num_cpus=args.num_cpus, log_to_driver=False)
    try:
        register_env(ENV_NAME, _env_creator)
        batch = args.env_runners * args.envs_per_runner * args.fragment
        env_config = {"market": market, "obs_mean": mean, "obs_std": std, "reward_scale": scale, "seed": args.seed}
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
            .debugging(seed=args.seed)
        )
        algo = config.build_algo()
        start = time.perf_counter()
        iterations, env_steps, rows = 0, 0, []
        while time.perf_counter() - start < args.seconds:
            result = algo.train()
            iterations += 1
            env_steps = int(result["env_runners"]["num_env_steps_sampled_lifetime"])
            ret = result["env_runners"].get("episode_return_mean")
            rows.append(
                {
                    "iteration": iterations,
                    "seconds": time.perf_counter() - start,
                    "env_steps": env_steps,
                    "episode_return_mean": None if ret is None else float(ret),
                }
            )
            if args.progress:
                print(
                    f"  iteration {iterations}: {env_steps:,} env steps, {rows[-1]['seconds']:.0f} s, "
                    f"episode return {ret}",
                    flush=True,
                )
        wall = time.perf_counter() - start
        module = algo.get_module()
        module.eval()

        def logits_of(x: torch.Tensor) -> torch.Tensor:
            return module.forward_inference({"obs": x.to(next(module.parameters()).device)})["action_dist_inputs"]

        table = heldout_table(market, greedy_policy(logits_of, mean, std), args.episodes)
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=240.0, help="wall time of training (the box's main job: 240)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sizing", choices=("cpu", "gpu_host"), default="cpu", help="the network width of that sizing")
    p.add_argument("--env-runners", type=int, default=1)
    p.add_argument("--envs-per-runner", type=int, default=64, help="books per EnvRunner")
    p.add_argument("--fragment", type=int, default=16, help="steps per book a sample")
    p.add_argument("--epochs", type=int, default=1, help="passes over each iteration's batch")
    p.add_argument("--minibatch", type=int, default=1024, help="steps per SGD minibatch")
    p.add_argument("--episodes", type=int, default=256, help="held-out episodes a policy")
    p.add_argument("--num-cpus", type=int, default=None, help="ray.init(num_cpus=...); default all")
    p.add_argument("--torch-threads", type=int, default=1, help="torch threads of the driver (the learner)")
    p.add_argument("--progress", action="store_true", help="a line per training iteration")
    p.add_argument("--json", default=None, help="write the result here")
    args = p.parse_args(argv)
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


if __name__ == "__main__":
    raise SystemExit(main())

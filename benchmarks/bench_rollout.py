"""Rollout worker throughput and the transport's share of it: env step, policy act, msgpack encode and decode
(and, with --ray, a ray.put + ray.get of the payload) per transition.

    python benchmarks/bench_rollout.py [--quick] [--ray]

One process, torch threads 1 (what RolloutWorker sets), default MarketConfig (8 events per step). For each
(policy size, B) it times RolloutWorker.sample(T) whole, then its parts on the same data: the env steps alone
(the worker's actions replayed), PolicyNet.act alone, wire.encode and wire.decode of the payload. Reports
microseconds per transition (one book, one step) and transport % = (encode + decode [+ ray]) / sample.
Target (issue 4): transport under 10 % of rollout time.
"""

from __future__ import annotations

import argparse
import platform
import time

import torch

from actors import wire
from actors.config import RolloutConfig
from actors.rollout import RolloutWorker
from foxhunt_ray.presets import preset
from learner.learner import Learner
from learner.network import identity_obs_stats
from lobsim_env import MarketConfig


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def run(name: str, B: int, T: int, repeats: int, use_ray: bool) -> dict:
    worker = RolloutWorker(RolloutConfig(num_envs=B), MarketConfig(), worker_index=0, seed=0)
    # the rollout's speed, not learning: a standardisation that changes nothing costs the policy what the real one does
    learner = Learner(
        preset(name), obs_dim=worker.obs_dim, n_actions=worker.n_actions, **identity_obs_stats(worker.obs_dim)
    )
    worker.set_weights(learner.policy_weights())
    worker.sample(T)  # warm-up
    sample_s = best_of(lambda: worker.sample(T), repeats)
    payload = worker.sample(T)
    d = wire.decode(payload)
    batch = {k: d[k] for k in d if k != "wire_version"}
    encode_s = best_of(lambda: wire.encode(batch), repeats)
    decode_s = best_of(lambda: wire.decode(payload), repeats)
    env = worker.env
    env_s = best_of(lambda: [env.step(d["actions"][t]) for t in range(T)], repeats)
    act_s = best_of(lambda: [worker.policy.act(d["obs"][t]) for t in range(T)], repeats)
    ray_s = 0.0
    if use_ray:
        import ray

        ray_s = best_of(lambda: ray.get(ray.put(payload)), repeats)
    n = T * B
    us = {k: v / n * 1e6 for k, v in [("sample", sample_s), ("env", env_s), ("act", act_s), ("encode", encode_s),
                                       ("decode", decode_s), ("ray", ray_s)]}  # fmt: skip
    us["transport_pct"] = 100 * (encode_s + decode_s + ray_s) / sample_s
    us["steps_per_s"] = n / sample_s
    us["payload_bytes_per_transition"] = len(payload) / n
    worker.stop()
    return us


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    parser.add_argument("--ray", action="store_true", help="also time ray.put + ray.get of a payload (starts Ray)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.ray:
        import ray

        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    sizes = [("smoke", 64)] if args.quick else [("smoke", 16), ("smoke", 64), ("smoke", 256), ("plan_a_v2", 64),
                                               ("plan_a_v2", 256)]  # fmt: skip
    T, repeats = 64, (2 if args.quick else 3)
    print(f"{platform.node()} {platform.processor() or platform.machine()} torch {torch.__version__} T={T}")
    print(f"{'policy':<10}{'B':>5}{'steps/s':>10}{'sample':>9}{'env':>8}{'act':>8}{'encode':>8}{'decode':>8}"
          f"{'ray':>8}{'bytes':>7}{'transport%':>11}   (us per transition)")  # fmt: skip
    worst = 0.0
    for name, B in sizes:
        r = run(name, B, T, repeats, args.ray)
        worst = max(worst, r["transport_pct"])
        print(f"{name:<10}{B:>5}{r['steps_per_s']:>10,.0f}{r['sample']:>9.2f}{r['env']:>8.2f}{r['act']:>8.2f}"
              f"{r['encode']:>8.3f}{r['decode']:>8.3f}{r['ray']:>8.3f}{r['payload_bytes_per_transition']:>7.0f}"
              f"{r['transport_pct']:>10.2f}%")  # fmt: skip
    print(f"worst_transport_pct={worst:.2f} target<10 {'OK' if worst < 10 else 'MISSED'}")


if __name__ == "__main__":
    main()

"""`python -m foxhunt_ray.local`: train on this machine, Ray in-process (or `--serial`: no Ray at all).

The defaults (preset plan_a_v2 on the synthetic market, 200 updates, 2 rollout workers) finish in about 3 minutes
on a 2-core laptop CPU and use a GPU for the learner when there is one. Flags: foxhunt_ray.driver
(`--help`); docs/running.md walks through a run, its folder, resume and the exit codes.

`python -m foxhunt_ray.local --demo [--episodes N] [--seed S] [--set K=V]` prints the market's yardsticks
instead: the reference policies (flat, random, order-book imbalance, the oracle that reads the latent regime)
scored on the very same seeded episodes, which a trained agent is measured against.
"""

from __future__ import annotations

import argparse
import sys
import time

from foxhunt_ray import driver
from foxhunt_ray.config import ConfigError, RunConfig, apply_overrides


def _ray_init() -> None:
    import ray

    ray.init()  # a local cluster in this process's session: all cores, the dashboard when ray[default] has it


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--demo" in argv:
        return demo([a for a in argv if a != "--demo"])
    return driver.main(argv, prog="python -m foxhunt_ray.local", ray_init=_ray_init)


def demo(argv: list[str]) -> int:
    """The baselines table of the synthetic market."""
    from lobsim_env.baselines import POLICIES, evaluate_policy

    parser = argparse.ArgumentParser(prog="python -m foxhunt_ray.local --demo")
    parser.add_argument("--episodes", type=int, default=64, help="episodes per policy (one book each)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the episodes (the same for every policy)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    errors = [f"--episodes={args.episodes} must be >= 1"] if args.episodes < 1 else []
    try:
        config = apply_overrides(RunConfig(seed=args.seed), args.overrides)
        errors += config.errors()
    except ConfigError as err:
        errors += err.errors
    if errors:
        print(f"error: {ConfigError(errors)}", file=sys.stderr)
        return 1
    market = config.market
    print(
        f"synthetic market: tick {market.tick_size} = ${market.usd_per_tick:g}, "
        f"{market.horizon} steps x {market.events_per_step} events, "
        f"signal_strength {market.synthetic.signal_strength:g}, position limit {market.position_limit}, "
        f"fees maker ${market.maker_fee_usd:g} / taker ${market.taker_fee_usd:g}"
    )
    print(f"{'policy':<10} {'pnl_usd mean':>13} {'± sem':>9} {'fills/ep':>9} {'fees/ep':>9} {'seconds':>8}")
    for name in POLICIES:
        start = time.perf_counter()
        result = evaluate_policy(market, name, args.episodes, args.seed)
        print(
            f"{name:<10} {result['pnl_usd_mean']:>13,.0f} {result['pnl_usd_sem']:>9,.0f} "
            f"{result['fills_mean']:>9.1f} {result['fees_usd_mean']:>9,.0f} {time.perf_counter() - start:>8.2f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

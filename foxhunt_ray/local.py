"""`python -m foxhunt_ray.local`: the main job on one machine.

Until the Ray actor/learner system lands, this runs the market demo: the synthetic limit-order-book market with
its planted signal, and the reference policies scored on the very same seeded episodes (flat, random, the
order-book-imbalance heuristic, and the oracle that reads the latent regime). These are the yardsticks that a
trained agent is measured against.
"""

from __future__ import annotations

import argparse
import sys
import time

from foxhunt_ray.config import ConfigError, RunConfig, apply_overrides
from lobsim_env.baselines import POLICIES, evaluate_policy


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m foxhunt_ray.local", description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=64, help="episodes per policy (one book each)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the episodes (the same for every policy)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override, e.g. --set market.synthetic.signal_strength=0.5 (repeatable)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
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

"""`python -m foxhunt_ray.local`: train on this machine, Ray in-process (or `--serial`: no Ray at all).

The defaults (LOCAL_DEFAULTS): preset phase4_3 with its own settings ('learn') on the synthetic market, 6,000
updates (900 s of training at most), sized for this machine (sizing 'cpu' when torch sees no CUDA device, else
'gpu_host': foxhunt_ray.presets), one rollout worker (on a GPU host, one per core but five: `host_defaults`); with
the evaluation about 4.5 minutes on a 2-core CPU (what it reaches: BENCHMARKS.md, "Learning on the synthetic
market").
Flags: foxhunt_ray.driver (`--help`); docs/running.md walks through a run, its folder, resume and the exit codes.
After a run that ended done or killed, its newest checkpoint plays the fold's held-out episodes beside the
baselines (foxhunt_ray.evaluate, `--eval-episodes N`, default 64; `--no-eval` skips it) and the last line is
`heldout_pnl_usd=<x> oracle_pnl_usd=<y> fraction_of_oracle=<z>`.

`python -m foxhunt_ray.local --demo [--episodes N] [--seed S] [--set K=V]` prints the market's yardsticks
instead: the reference policies (flat, random, order-book imbalance, the oracle that reads the latent regime)
scored on the very same seeded episodes, which a trained agent is measured against.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import signal
import sys
import time
from pathlib import Path

from foxhunt_ray import driver
from foxhunt_ray.config import ConfigError, RunConfig, apply_overrides

LOCAL_DEFAULTS = driver.ENTRY_DEFAULTS["local"]
"""What `python -m foxhunt_ray.local` does with no flags on a machine without a GPU (its row of the entry points'
table, foxhunt_ray.cli.ENTRY_DEFAULTS), each chosen by measurement (BENCHMARKS.md, "Learning on the synthetic
market"): phase4_3 (the seed's last design, ahead of plan_a_v2 in the sweep), one rollout worker (on 2 cores a second
one competes with the learner), and a budget of updates, so that what the agent learns does not hang on how busy the
machine is: 6,000 updates (about 4 minutes of a 2-core box), then the held-out evaluation. 900 s of training is only
a cap: a run that reaches it first says that it trained too little to be judged (`undertrained`). `--steps N` alone
runs N updates with no cap; `--time-limit-s S` alone trains for S seconds. On a GPU host: `host_defaults`."""

GPU_HOST_FREE_CORES = 5
"""Cores a GPU host keeps for the learner actor, the driver, the monitor and Ray's own processes: 11 rollout workers
on 16 cores, what every GPU-host figure in BENCHMARKS.md with rollout policies on the GPU ran; twelve are not
measured."""


def host_defaults(cuda: bool, cores: int, serial: bool) -> driver.EntryDefaults:
    """LOCAL_DEFAULTS for this machine. With a CUDA device (and not --serial), the system of one GPU host (the
    table's row "local_gpu_host": sizing auto gives 'gpu_host', 20,000 updates, 3 payloads waiting at most) with one
    rollout worker per core but GPU_HOST_FREE_CORES (11 on 16 cores)."""
    if not cuda or serial:
        return LOCAL_DEFAULTS
    host = driver.ENTRY_DEFAULTS["local_gpu_host"]
    workers = max(1, cores - GPU_HOST_FREE_CORES)
    return dataclasses.replace(host, driver={**host.driver, "rollout_workers": workers})


LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Ray's own switch for a single-machine instance (its default on macOS and Windows): at "0" every process of the
instance (GCS, raylet, workers, dashboard and its agents, the metrics port) listens on 127.0.0.1 only. Without it
Ray 2.60 resolves even `_node_ip_address="127.0.0.1"` to the machine's address and serves the run's metrics on
every interface (docs/running.md, "What listens on the network")."""


AUTH_MODE_ENV = "RAY_AUTH_MODE"
"""Ray's token authentication switch (Ray >= 2.59). Left unset, `ray.init()` of a local instance turns it on by
itself (making ~/.ray/auth_token when there is none) and logs a warning that reads like a fault; set to "token"
first, the instance is the same and nothing is logged. A value the user set is kept ("disabled" turns it off)."""


def _ray_init() -> None:
    """A Ray instance of this run's own, on loopback: never one that happens to be running here (RAY_ADDRESS or a
    `ray start`; that is what `ray job submit` is for), and nothing another host can reach."""
    os.environ.setdefault(LOOPBACK_ENV, "0")  # read when ray is imported, and by every process it starts
    auth_unset = AUTH_MODE_ENV not in os.environ
    os.environ.setdefault(AUTH_MODE_ENV, "token")  # what Ray picks for a local instance, without its warning
    if os.environ.get("RAY_ADDRESS"):
        print(
            f"RAY_ADDRESS={os.environ['RAY_ADDRESS']} is set; python -m foxhunt_ray.local starts its own Ray on this "
            "machine all the same (to train on that cluster: ray job submit, README.md)",
            file=sys.stderr,
        )
    import ray
    from ray._private import ray_constants

    if os.environ[LOOPBACK_ENV] == "0":
        ray_constants.ENABLE_RAY_CLUSTER = False  # in case ray was imported before the variable was set
    if auth_unset:  # ray read RAY_AUTH_MODE when it was imported: have it read it again, as its own ray.init does
        from ray._raylet import Config

        Config.initialize("")
    # a local instance in this process's session: all cores, the dashboard (127.0.0.1:8265) when ray[default] has it
    context = ray.init(address="local", dashboard_host="127.0.0.1")
    if context.dashboard_url and os.environ[AUTH_MODE_ENV].lower() == "token":
        cli = os.path.join(os.path.dirname(_python()), "ray")
        print(f"(Ray's dashboard asks for its token, which `{cli} get-auth-token` prints)", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--demo" in argv:
        return demo([a for a in argv if a != "--demo"])
    own = argparse.ArgumentParser(add_help=False)
    after_run = own.add_argument_group("after the run (foxhunt_ray.local)")
    after_run.add_argument("--no-eval", action="store_true", help="skip the held-out evaluation of the run")
    after_run.add_argument(
        "--eval-episodes", type=int, default=64, metavar="N", help="held-out episodes a policy (default 64)"
    )
    mine, rest = own.parse_known_args(argv)
    if mine.eval_episodes < 1:
        print(f"error: --eval-episodes={mine.eval_episodes} must be >= 1", file=sys.stderr)
        return 1
    after = None if mine.no_eval else functools.partial(evaluate_and_suggest, episodes=mine.eval_episodes)
    prog = "python -m foxhunt_ray.local"
    import torch

    defaults = host_defaults(torch.cuda.is_available(), os.cpu_count() or 1, serial="--serial" in rest)
    return driver.main(rest, prog=prog, ray_init=_ray_init, after=after, defaults=defaults, parents=[own])


def next_commands(plan: driver.Plan, code: int) -> str:
    """The commands to try after a run, for its env and how it ended, each naming the run's own folder (OUT/latest
    moves with the next run). On the market: the report, a longer held-out evaluation, a resume, a longer run, the
    cluster (on real days: every fold and seed of the walk-forward protocol, and a longer run of this fold); on any
    other env (no held-out evaluation, baseline or oracle there): the report, a resume, the same config on the next
    seed. No resume after a kill: that is refused (it would train past the kill)."""
    from actors.envs import is_market
    from actors.kill_rules import EXIT_KILLED

    d, py, run = plan.driver, _python(), plan.run_dir
    more = f"--time-limit-s {d.time_limit_s * 2:g}" if _time_is_the_budget(d) else f"--steps {d.steps * 2}"
    resume = ("train this run further", f"{py} -m foxhunt_ray.local --resume {run} {more}")
    further = [] if code == EXIT_KILLED else [resume]
    m = plan.config.market
    if is_market(plan.config.env_id) and m.source == "replay":  # real days: the protocol's other folds and seeds
        from foxhunt_ray.walkforward import fold_kind

        def keys(names: tuple[str, ...]) -> str:  # the days' keys, their blocks' '#k' dropped
            return ",".join(sorted({n.partition("#")[0] for n in names}))

        data = f"--data {m.data} --days {keys((*m.days, *m.val_days, *m.eval_days))}"
        data += f" --blocks {m.blocks}" * (m.blocks > 1)
        data += f" --holdout {keys(m.eval_days)}" * fold_kind(m).startswith("cross")
        data += f" --set market.horizon={m.horizon}"
        pairs = [
            ("plots and a table of the run", f"{py} -m foxhunt_ray.report {run}"),
            ("every fold, 5 seeds", f"{py} benchmarks/bench_walkforward.py {data} --seeds 5"),
            *further,
            ("a longer run of this fold", f"{py} -m foxhunt_ray.local {data} --fold {d.fold} --time-limit-s 1800"),
            ("the same job on a cluster", 'README.md, "On a Ray cluster" (ray job submit)'),
        ]
    elif is_market(plan.config.env_id):
        pairs = [
            ("plots and a table of the run", f"{py} -m foxhunt_ray.report {run}"),
            ("a longer held-out evaluation", f"{py} -m foxhunt_ray.evaluate {run} --episodes 256"),
            *further,
            ("a longer run of your own", f"{py} -m foxhunt_ray.local --preset phase4_3 --time-limit-s 1800"),
            ("the same job on a cluster", 'README.md, "On a Ray cluster" (ray job submit)'),
        ]
    else:
        flags = [f"--time-limit-s {d.time_limit_s:g}"] if d.time_limit_s else []
        if not d.time_limit_s or d.steps != LOCAL_DEFAULTS.steps:
            flags.insert(0, f"--steps {d.steps}")
        flags += [f"--rollout-workers {d.rollout_workers}", *["--serial"] * plan.serial]
        if plan.out is not None and plan.out != Path("runs"):  # beside this run, not in the default runs root
            flags.append(f"--out {plan.out}")
        again = f"{py} -m foxhunt_ray.local --config {run}/config.json --seed {plan.config.seed + 1} {' '.join(flags)}"
        pairs = [
            ("plots and a table of the run", f"{py} -m foxhunt_ray.report {run}"),
            *further,
            ("the same config on the next seed", again),
        ]
    width = max(len(label) for label, _ in pairs) + 2
    return "next:\n" + "\n".join(f"  {label + ':':<{width}}{command}" for label, command in pairs)


def _python() -> str:
    """This interpreter as a user would type it here: .venv/bin/python from the checkout, else python."""
    exe = os.path.relpath(sys.executable)
    return exe if not exe.startswith("..") and os.sep in exe else "python"


def evaluate_and_suggest(plan: driver.Plan, code: int, *, episodes: int) -> int:
    """After a run that ended done or killed: its newest checkpoint on the fold's held-out episodes beside flat,
    random, imbalance and the oracle (foxhunt_ray.evaluate; the table, evaluation.json), the next commands, and a
    last line `heldout_pnl_usd=... oracle_pnl_usd=... fraction_of_oracle=...`. Returns the run's exit code."""
    from actors.envs import is_market
    from actors.kill_rules import EXIT_KILLED, EXIT_OK
    from foxhunt_ray.evaluate import EvaluationError, describe, evaluate_run

    run = plan.run_dir
    if code not in (EXIT_OK, EXIT_KILLED):
        return code
    short = undertrained(plan) if code == EXIT_OK else None
    suggestions = next_commands(plan, code)
    if not is_market(plan.config.env_id):
        print(
            f"(no held-out evaluation: foxhunt_ray.evaluate plays the market only, this run trained "
            f"{plan.config.env_id}; its learning shows in episode_return_mean, the mean return of its last 100 "
            "episodes, in diag.jsonl and the report)"
        )
        print(suggestions)
        _say_undertrained(short)
        return code
    market = plan.config.market
    if market.source == "replay" and market.eval_days:
        return _score_fold(plan, code, episodes, suggestions, short)
    print(f"held-out evaluation of the newest checkpoint ({episodes} episodes a policy) ...", flush=True)
    try:
        result = evaluate_run(run, episodes=episodes)
    except EvaluationError as err:
        print(f"no held-out evaluation: {err}", file=sys.stderr)
        return code
    print(describe(result))
    print(suggestions)
    pnl = {name: r["pnl_usd_mean"] for name, r in result["policies"].items()}
    if "oracle" not in pnl:  # a real day: no oracle; its yardsticks are flat, imbalance, quoting and hindsight
        v = result.get("vs_best_baseline")
        _say_undertrained(short)
        _real_day_lines(pnl, result["held_out"], v and v["baseline"], v and v["ci95_usd"])
        return code
    agent, oracle = pnl["agent"], pnl["oracle"]
    fraction = result["oracle_fraction"]
    _say_undertrained(short)
    print(
        f"heldout_pnl_usd={agent:.0f} oracle_pnl_usd={oracle:.0f} "
        f"fraction_of_oracle={'nan' if fraction is None else format(fraction, '.3f')}",
        flush=True,
    )
    return code


def undertrained(plan: driver.Plan) -> str | None:
    """The line that says a run trained too little to be judged: it reached its time cap before its budget of
    updates, with that budget the entry point's own (LOCAL_DEFAULTS: a busy machine makes fewer updates in the
    same time, and what the agent learns shows its updates, not the clock). None where it made its updates, or where
    the time was the budget asked for (--time-limit-s alone, a resume's)."""
    from foxhunt_ray.run_folder import RunFolderError, read_run_file

    d = plan.driver
    if not d.time_limit_s or _time_is_the_budget(d):
        return None
    try:
        summary = json.loads(read_run_file(plan.run_dir / "summary.json"))
        step, status = summary["step"], summary["status"]
    except (OSError, ValueError, KeyError, TypeError, RunFolderError):
        return None
    if step >= d.steps or status != "done":  # 'stopped': a stop asked for, not the cap
        return None
    return (
        f"warning: undertrained: the run reached its {d.time_limit_s:g}-s cap at update {step:,} of its {d.steps:,} "
        f"(this machine trained slower than the figures' did: busy, or smaller); the figures below are not those of "
        f"BENCHMARKS.md, which come from {d.steps:,} updates. Train it to its budget: {_python()} -m "
        f"foxhunt_ray.local --resume {plan.run_dir} --steps {d.steps}"
    )


def _time_is_the_budget(d) -> bool:
    """Whether a run's --time-limit-s is its budget (asked alone: its updates unbounded), not a cap on a budget of
    updates (LOCAL_DEFAULTS' 6,000, or --steps beside it)."""
    return bool(d.time_limit_s) and d.steps >= LOCAL_DEFAULTS.steps_with_a_time_limit


def _say_undertrained(line: str | None) -> None:
    if line:
        sys.stdout.flush()
        print(line, file=sys.stderr, flush=True)


def _score_fold(plan: driver.Plan, code: int, episodes: int, suggestions: str, short: str | None = None) -> int:
    """A run on real days with a test period: its fold scored by the walk-forward protocol (the checkpoint and the
    quoting rule picked on the validation period, the test played once: foxhunt_ray.walkforward), the table, the
    record RUN_DIR/walkforward.json, the next commands and the last two lines."""
    from foxhunt_ray.evaluate import EvaluationError
    from foxhunt_ray.evaluations import write_json
    from foxhunt_ray.walkforward import score_fold, table

    m = plan.config.market
    picked = f"picked on {', '.join(m.val_days)}" if m.val_days else "the newest (fold 1: no validation period)"
    print(f"walk-forward scoring of fold {plan.driver.fold} ({episodes} windows; the checkpoint {picked}) ...")
    try:
        record = score_fold([plan.run_dir], episodes=max(2, episodes))
    except EvaluationError as err:
        print(f"no held-out evaluation: {err}", file=sys.stderr)
        return code
    write_json(plan.run_dir / "walkforward.json", {"kind": record["kind"], "folds": [record]})
    print(table([record], record["kind"]))
    print(suggestions)
    pnl = {name: r["pnl_usd_mean"] for name, r in record["policies"].items()}
    best = record["best_baseline"]
    _say_undertrained(short)
    _real_day_lines(pnl, True, best, record["versus"][best]["ci95_usd"])
    return code


def _real_day_lines(pnl: dict[str, float], held_out: bool, best: str | None, ci95: list[float] | None) -> None:
    """The last two lines of a run on real days: every policy's PnL, then the agent, the best simple rule and the
    interval of the gap between them (the last line; none where there is no interval: one window)."""
    print(
        f"heldout_pnl_usd={pnl['agent']:.2f} flat_usd={pnl['flat']:.2f} imbalance_usd={pnl['imbalance']:.2f} "
        f"quoting_usd={pnl['quoting']:.2f} hindsight_usd={pnl['hindsight']:.2f} held_out={str(held_out).lower()}",
        flush=True,
    )
    if best is not None and ci95 is not None:
        print(
            f"heldout_pnl_usd={pnl['agent']:.2f} best_baseline_usd={pnl[best]:.2f} "
            f"ci95_low_usd={ci95[0]:.2f} ci95_high_usd={ci95[1]:.2f}",
            flush=True,
        )


def demo(argv: list[str]) -> int:
    """The baselines table of the synthetic market, or (--data DIR) of real days: flat, random, imbalance, quoting
    and the hindsight bound (a real day has no oracle)."""
    from lobsim_env.baselines import POLICIES, REAL_DAY_POLICIES, evaluate_policy

    parser = argparse.ArgumentParser(prog="python -m foxhunt_ray.local --demo")
    parser.add_argument("--episodes", type=int, default=64, help="episodes per policy (one book each)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the episodes (the same for every policy)")
    parser.add_argument("--data", default=None, metavar="DIR", help="a day cache: its days' yardsticks instead")
    parser.add_argument("--days", default=None, metavar="NAMES", help="with --data: the days to play (comma-separated)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    errors = [f"--episodes={args.episodes} must be >= 1"] if args.episodes < 1 else []
    try:
        sets = driver.data_sets(args.data, args.days, None)[0] if args.data else []
        config = apply_overrides(RunConfig(seed=args.seed), [*sets, *args.overrides])
        errors += config.errors()
    except (ConfigError, driver.UsageError) as err:
        errors += getattr(err, "errors", None) or [str(err)]
    if errors:
        print(f"error: {ConfigError(errors)}", file=sys.stderr)
        return 1
    market = config.market
    policies = POLICIES
    if market.source == "replay":
        market = dataclasses.replace(
            market, days=market.days + market.val_days + market.eval_days, eval_days=(), val_days=()
        )
        policies = REAL_DAY_POLICIES
        print(
            f"real days {', '.join(market.days)}: tick {market.tick_size:g} = ${market.usd_per_tick:g} a lot, "
            f"{market.horizon} steps x {market.events_per_step} messages, position limit {market.position_limit} "
            f"lots, orders of {market.order_size}, fees maker ${market.maker_fee_usd:g} + {market.maker_fee_bps:g} "
            f"bps / taker ${market.taker_fee_usd:g} + {market.taker_fee_bps:g} bps; hindsight reads the day's "
            "future (a ceiling no agent reaches)"
        )
    else:
        print(
            f"synthetic market: tick {market.tick_size} = ${market.usd_per_tick:g}, "
            f"{market.horizon} steps x {market.events_per_step} events, "
            f"signal_strength {market.synthetic.signal_strength:g}, position limit {market.position_limit}, "
            f"fees maker ${market.maker_fee_usd:g} / taker ${market.taker_fee_usd:g}"
        )
    print(f"{'policy':<10} {'pnl_usd mean':>13} {'± sem':>9} {'fills/ep':>9} {'fees/ep':>9} {'seconds':>8}")
    for name in policies:
        start = time.perf_counter()
        result = evaluate_policy(market, name, args.episodes, args.seed)
        print(
            f"{name:<10} {result['pnl_usd_mean']:>13,.0f} {result['pnl_usd_sem']:>9,.0f} "
            f"{result['fills_mean']:>9.1f} {result['fees_usd_mean']:>9,.0f} {time.perf_counter() - start:>8.2f}",
            flush=True,
        )
    return 0


def _exit(code: int) -> None:
    """Ends the process with the run's exit code: once a stop signal has reached the run (loops.StopSignals), a
    later one of the same burst is ignored while the process exits, instead of ending it another way (143)."""
    from foxhunt_ray.loops import StopSignals

    if StopSignals.signalled:
        for sig in StopSignals.SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
    sys.exit(code)


if __name__ == "__main__":
    _exit(main())

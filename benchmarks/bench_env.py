"""Env throughput on one core: the native LobVectorEnv beside gymnasium's SyncVectorEnv over LobEnv, and
LOBSTER replay messages per second including parsing.

    python benchmarks/bench_env.py [--quick] [--json PATH]

The process pins itself to one CPU and sets the BLAS/OpenMP thread counts to 1 before numpy loads. Actions are
uniform random (pre-drawn), so the agent's order handling is exercised, not just the flow. Steps/s counts
env steps (one book advancing one step), i.e. B x vector steps per second. The SyncVectorEnv at B = 4096 runs
a capped number of steps. Replay is timed as `lobsim_env.lobster.files.load_day(path)` plus
`lobsim_env.lobster.reconstruct.replay(day)` over the sample days (wall clock, best of 3), on what `backend()`
reports (the compiled parser and libdeflate where found; each replay line says which). Env rates are per
CPU-second of this process (what one dedicated core does), with wall-clock rates beside them: on a machine
shared with other jobs the two differ.

Real days: the native env on the replay market (lobsim_env.replay) at B = 4096, 20 messages a step, on the sample
days ingested into a temporary cache (the deepest file of each ticker; `--data DIR` takes a cache of your own),
beside the synthetic market's native rate at B = 4096 measured above in the same run. The last line printed is
`ratio_vs_sync=<native/sync at B=1024> steps_per_s=<native at B=4096> replay_msgs_per_s=<x>
real_steps_per_s=<replay market at B=4096> real_vs_synthetic=<that / steps_per_s>`.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

from lobsim_env import LobEnv, LobVectorEnv, MarketConfig  # noqa: E402
from lobsim_env.lobster import samples  # noqa: E402

DATA = samples.data_dir()


def pin_one_core() -> str:
    if hasattr(os, "sched_setaffinity"):
        cpu = sorted(os.sched_getaffinity(0))[0]
        os.sched_setaffinity(0, {cpu})
        return f"cpu{cpu}"
    return "unpinned"


def time_steps(env, actions: np.ndarray, warmup: int) -> tuple[float, float]:
    """(CPU seconds, wall seconds) per vector step, each the best of the remaining steps split in 3 chunks.

    CPU time (of this pinned, single-threaded process) is what one dedicated core would take; on a shared
    machine the wall time also counts the time other processes held the core.
    """
    for a in actions[:warmup]:
        env.step(a)
    rest = actions[warmup:]
    chunks = np.array_split(rest, min(3, len(rest)))
    best_cpu = best_wall = float("inf")
    for chunk in chunks:
        t, c = time.perf_counter(), time.process_time()
        for a in chunk:
            env.step(a)
        best_cpu = min(best_cpu, (time.process_time() - c) / len(chunk))
        best_wall = min(best_wall, (time.perf_counter() - t) / len(chunk))
    return best_cpu, best_wall


def bench_native(B: int, steps: int, cfg: MarketConfig) -> tuple[float, float]:
    env = LobVectorEnv(B, cfg)
    env.reset(seed=0)
    acts = np.random.default_rng(0).integers(0, 7, (steps + 5, B))
    cpu, wall = time_steps(env, acts, 5)
    return B / cpu, B / wall


def bench_sync(B: int, steps: int, cfg: MarketConfig) -> tuple[float, float]:
    env = gym.vector.SyncVectorEnv([lambda: LobEnv(cfg) for _ in range(B)])
    env.reset(seed=0)
    acts = np.random.default_rng(0).integers(0, 7, (steps + 1, B))
    cpu, wall = time_steps(env, acts, 1)
    return B / cpu, B / wall


def bench_real_days(B: int, steps: int, data: Path | None) -> tuple[float, float, str]:
    """(CPU, wall) env steps/s of the native env on real days, and what it ran on."""
    import tempfile

    from lobsim_env.data import lobster as lobster_source
    from lobsim_env.replay import compiled, replay_config

    with tempfile.TemporaryDirectory() as tmp:
        if data is None:
            data = Path(tmp)
            keep, _ = lobster_source.deepest_per_day(sorted(DATA.glob("LOBSTER_SampleFile_*.zip")))
            lobster_source.ingest(keep, data)
        cfg = replay_config(data, [], events_per_step=20)
        cpu, wall = bench_native(B, steps, cfg)
        what = f"{len(cfg.days)} days ({', '.join(cfg.days)}), {'C step' if compiled() else 'Python step'}"
        return cpu, wall, what


def bench_replay(paths: list[Path]) -> tuple[float, list[dict], str]:
    from lobsim_env.lobster import files
    from lobsim_env.lobster.reconstruct import replay

    backend = files.backend()
    rows, total_msgs, total_s = [], 0, 0.0
    for p in paths:
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            day = files.load_day(p)
            replay(day)
            best = min(best, time.perf_counter() - t)
        rows.append({"file": p.name, "messages": day.n_messages, "seconds": best, "msgs_per_s": day.n_messages / best})
        total_msgs += day.n_messages
        total_s += best
    return total_msgs / total_s, rows, backend


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer steps; under 30 s")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--data", type=Path, default=None, help="a day cache for the real-day rate (default: the samples)")
    args = ap.parse_args(argv)
    core = pin_one_core()
    cfg = MarketConfig()
    sizes = (1, 64, 1024, 4096)
    native_steps = {1: 300, 64: 200, 1024: 60, 4096: 40} if args.quick else {1: 3000, 64: 1500, 1024: 400, 4096: 200}
    sync_steps = {1: 300, 64: 20, 1024: 3, 4096: 2} if args.quick else {1: 3000, 64: 200, 1024: 20, 4096: 4}
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M:%S')} {platform.node()} {platform.machine()} "
        f"python {platform.python_version()} numpy {np.__version__} gymnasium {gym.__version__} pinned {core}"
    )
    print(f"# events_per_step={cfg.events_per_step} horizon={cfg.horizon} random actions")
    print("# steps/s per CPU-second of this pinned process (wall-clock steps/s in parentheses)")
    print(f"{'B':>6} {'native steps/s':>26} {'sync steps/s':>20} {'ratio':>8}")
    results = []
    for B in sizes:
        n, n_wall = bench_native(B, native_steps[B], cfg)
        s, s_wall = bench_sync(B, sync_steps[B], cfg)
        results.append(
            {
                "B": B,
                "native_steps_per_s": n,
                "sync_steps_per_s": s,
                "ratio": n / s,
                "native_wall_steps_per_s": n_wall,
                "sync_wall_steps_per_s": s_wall,
            }
        )
        print(f"{B:>6} {n:>14,.0f} ({n_wall:>9,.0f}) {s:>10,.0f} ({s_wall:>7,.0f}) {n / s:>8.1f}", flush=True)
    files = sorted(DATA.glob("LOBSTER_SampleFile_*.zip"))
    if args.quick:
        files = [f for f in files if "AMZN_2012-06-21_5" in f.name] or files[:1]
    try:
        replay_rate, replay_rows, backend = bench_replay(files)
        for r in replay_rows:
            print(
                f"replay {r['file']}: {r['messages']:,} messages in {r['seconds']:.3f} s = {r['msgs_per_s']:,.0f}/s "
                f"({backend})"
            )
    except (ImportError, FileNotFoundError) as e:  # the replay is another module's; report, do not hide
        print(f"replay not measured: {e!r}", file=sys.stderr)
        replay_rate, replay_rows, backend = float("nan"), [], None
    by_b = {r["B"]: r for r in results}
    try:
        real, real_wall, real_what = bench_real_days(4096, native_steps[4096], args.data)
        print(f"real days {real_what}: B=4096, 20 messages a step: {real:,.0f} env steps/s ({real_wall:,.0f} wall)")
    except (ImportError, FileNotFoundError, ValueError) as e:  # no samples and no --data: say so
        print(f"real days not measured: {e!r}", file=sys.stderr)
        real, real_wall, real_what = float("nan"), float("nan"), None
    if args.json:
        real_days = {"steps_per_s": real, "wall_steps_per_s": real_wall, "what": real_what}
        doc = {"env": results, "replay": replay_rows, "replay_backend": backend, "real_days": real_days}
        args.json.write_text(json.dumps(doc, indent=2))
    synthetic = by_b[4096]["native_steps_per_s"]
    print(
        f"ratio_vs_sync={by_b[1024]['ratio']:.1f} steps_per_s={synthetic:.0f} "
        f"replay_msgs_per_s={replay_rate:.0f} real_steps_per_s={real:.0f} real_vs_synthetic={real / synthetic:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

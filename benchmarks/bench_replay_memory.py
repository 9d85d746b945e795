"""Memory of the replay market's actors: 11 processes, each stepping B books over 1 day or over 30 days of a cache.

    python benchmarks/bench_replay_memory.py [--actors 11] [--books 2048] [--steps 200] [--json PATH]

The 30 days are synthesised from one real sample, and say so: the AMZN level-5 LOBSTER day (155,935 messages,
2012-06-21) ingested once and copied under 30 dates (distinct files, so the page cache holds 30 days; the same
messages, so this measures memory, not a market). Each actor is a process as a rollout actor is: it builds the
native vector env on the replay market (`LobVectorEnv(B, replay_config(...))`), resets every book (windows drawn
across the days) and steps it with random actions, then reads its own /proc/self/status and smaps_rollup:

- RssAnon: the actor's private memory (its arrays, the interpreter, numpy): what must not grow with the days;
- RssFile: the cache's pages this actor has touched, mapped from the page cache, shared by every actor;
- Pss: the actor's proportional share (private, plus each shared page divided by the processes mapping it).

The last line: `actors=<n> days=30 anon_mib_per_actor=<x> anon_vs_one_day=<r> rss_vs_one_day=<r>
pss_mib_per_actor=<x> page_cache_mib=<the 30 days' files>`. RSS counts the shared pages an actor touched, so it
grows with the days its windows reach; the private memory is the figure that says an actor does not copy them.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import multiprocessing as mp  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

DAYS = 30


def _kib(text: str, key: str) -> int:
    for line in text.splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def actor(cache: str, days: int, books: int, steps: int, seed: int, out) -> None:
    import numpy as np

    from lobsim_env import LobVectorEnv
    from lobsim_env.data import layout
    from lobsim_env.replay import replay_config

    names = [m.key for m in layout.list_days(cache)][:days]
    env = LobVectorEnv(books, replay_config(cache, names))
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        env.step(rng.integers(0, 7, books))
    status = Path("/proc/self/status").read_text()
    rollup = Path("/proc/self/smaps_rollup").read_text()
    out.put({k: _kib(status, k) for k in ("VmRSS", "RssAnon", "RssFile")} | {"Pss": _kib(rollup, "Pss")})


def measure(cache: Path, days: int, actors: int, books: int, steps: int) -> dict:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=actor, args=(str(cache), days, books, steps, i, q)) for i in range(actors)]
    for p in procs:
        p.start()
    rows = [q.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    return {k: statistics.median(r[k] for r in rows) / 1024 for k in rows[0]}  # MiB


def build_cache(root: Path) -> int:
    from lobsim_env.data import layout
    from lobsim_env.data import lobster as lobster_source
    from lobsim_env.lobster.samples import sample_zip

    ((m, _),) = lobster_source.ingest([sample_zip("AMZN", 5)], root)
    src = layout.day_dir(root, m)
    size = sum(f.stat().st_size for f in src.iterdir())
    for i in range(1, DAYS):
        date = f"2012-07-{i:02d}"
        dst = src.parent / date
        shutil.copytree(src, dst)
        doc = json.loads((dst / layout.MANIFEST).read_text())
        (dst / layout.MANIFEST).write_text(json.dumps({**doc, "date": date}))
    return size * DAYS


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--actors", type=int, default=11)
    ap.add_argument("--books", type=int, default=2048, help="books per actor (the GPU host's rollout actors: 2048)")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp)
        t = time.perf_counter()
        files = build_cache(cache)
        print(f"# {DAYS} days: the AMZN level-5 sample copied under {DAYS} dates, {files / 2**20:,.0f} MiB of files "
              f"({time.perf_counter() - t:.1f} s)")  # fmt: skip
        print(f"# {args.actors} actors x {args.books} books x {args.steps} steps, 20 messages a step; MiB, median")
        print(f"{'days':>5} {'VmRSS':>9} {'RssAnon':>9} {'RssFile':>9} {'Pss':>9}")
        result = {}
        for days in (1, DAYS):
            r = measure(cache, days, args.actors, args.books, args.steps)
            result[days] = r
            row = f"{days:>5} {r['VmRSS']:>9.1f} {r['RssAnon']:>9.1f} {r['RssFile']:>9.1f} {r['Pss']:>9.1f}"
            print(row, flush=True)
    one, many = result[1], result[DAYS]
    if args.json:
        args.json.write_text(json.dumps({"actors": args.actors, "books": args.books, "days": result}, indent=2))
    print(
        f"actors={args.actors} days={DAYS} anon_mib_per_actor={many['RssAnon']:.1f} "
        f"anon_vs_one_day={many['RssAnon'] / one['RssAnon']:.3f} rss_vs_one_day={many['VmRSS'] / one['VmRSS']:.2f} "
        f"pss_mib_per_actor={many['Pss']:.1f} page_cache_mib={files / 2**20:.0f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

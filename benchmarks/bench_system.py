"""End-to-end throughput of the Ray system and the transport's share of the rollout time.

    python benchmarks/bench_system.py [--steps N] [--presets smoke,plan_a_v2] [--workers 1,2]

1. End to end: `foxhunt_ray.local` in Ray mode (ray.init(num_cpus=<cores>) in this process) for each preset and
   rollout worker count; env steps/s and learner updates/s are read from the run's diag.jsonl over the second
   half of the run (start-up and the replay warm-up excluded).
2. Transport, per transition (one book, one step), with the preset's B x T batch: the sample itself (env step +
   policy act, in a rollout actor), wire.encode (inside sample), the Ray transfer of the payload from the rollout
   actor's process to a second actor's process (ray.get of the ref there, the learner actor's path), and
   wire.decode there. transport % = (encode + transfer + decode) / sample. Target (issue 4): < 10 %.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import ray
import torch

from actors import wire
from actors.monitor import read_diag, step_records
from actors.rollout import RolloutWorker
from foxhunt_ray import driver
from foxhunt_ray.presets import run_preset
from learner.learner import Learner
from lobsim_env import N_ACTIONS
from lobsim_env.core import obs_size


def end_to_end(preset: str, workers: int, steps: int, out: Path) -> dict:
    argv = ["--preset", preset, "--steps", str(steps), "--rollout-workers", str(workers), "--quiet"]
    argv += ["--out", str(out / f"{preset}_{workers}"), "--checkpoint-every", str(10 * steps)]
    code = driver.main(argv)
    if code != 0:
        raise RuntimeError(f"run {argv} exited {code}")
    (run_dir,) = (out / f"{preset}_{workers}").glob("*/0")
    recs = step_records(read_diag(run_dir / "diag.jsonl"))
    a, b = recs[len(recs) // 2], recs[-1]
    dt = b["time"] - a["time"]
    return {"env_steps_per_s": (b["env_steps"] - a["env_steps"]) / dt, "updates_per_s": (b["step"] - a["step"]) / dt}


@ray.remote(num_cpus=0.5)
class Sink:
    """Times what the learner actor does with a payload ref: ray.get (the transfer) and wire.decode."""

    def fetch(self, refs: list) -> tuple[float, float, int]:
        t0 = time.perf_counter()
        payload = ray.get(refs[0])
        t1 = time.perf_counter()
        wire.decode(payload)
        return t1 - t0, time.perf_counter() - t1, len(payload)


@ray.remote(num_cpus=0.5)
class TimedWorker(RolloutWorker):
    def timed_sample(self) -> tuple[float, float, ray.ObjectRef]:
        """(sample seconds, encode seconds, ref of the payload put from this process)."""
        t0 = time.perf_counter()
        payload = self.sample()
        t1 = time.perf_counter()
        batch = wire.decode(payload)  # rebuild the arrays to time encode alone on the same data
        t2 = time.perf_counter()
        wire.encode(batch)
        t3 = time.perf_counter()
        return t1 - t0, t3 - t2, ray.put(payload)


def transport(preset: str, repeats: int) -> dict:
    cfg = run_preset(preset)
    weights = Learner(cfg.learner, obs_dim=obs_size(cfg.market), n_actions=int(N_ACTIONS)).policy_weights()
    worker = TimedWorker.remote(cfg.rollout, cfg.market, worker_index=0, seed=0, weights=weights)
    sink = Sink.remote()
    rows = []
    for _ in range(repeats + 2):
        sample_s, encode_s, ref = ray.get(worker.timed_sample.remote())
        transfer_s, decode_s, nbytes = ray.get(sink.fetch.remote([ref]))
        rows.append((sample_s, encode_s, transfer_s, decode_s, nbytes))
    rows = rows[2:]  # the first calls build the policy and warm the object store path
    n = cfg.rollout.num_envs * cfg.rollout.steps_per_sample
    med = [statistics.median(r[i] for r in rows) / n * 1e6 for i in range(4)]
    ray.kill(worker)
    ray.kill(sink)
    return {
        "B": cfg.rollout.num_envs,
        "T": cfg.rollout.steps_per_sample,
        "sample_us": med[0],
        "encode_us": med[1],
        "transfer_us": med[2],
        "decode_us": med[3],
        "bytes": rows[-1][4],
        "transport_pct": 100 * (med[1] + med[2] + med[3]) / med[0],
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200, help="learner updates per end-to-end run")
    p.add_argument("--presets", default="smoke,plan_a_v2")
    p.add_argument("--workers", default="1,2")
    p.add_argument("--repeats", type=int, default=10, help="timed samples per transport row")
    args = p.parse_args()
    presets = args.presets.split(",")
    cpus = os.cpu_count() or 2
    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}, {cpus} cores, "
        f"torch {torch.__version__}, ray {ray.__version__}, {platform.python_version()}"
    )
    print("| preset | B x T | sample µs | encode µs | Ray transfer µs | decode µs | bytes/payload | transport |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name in presets:
        t = transport(name, args.repeats)
        print(
            f"| {name} | {t['B']} x {t['T']} | {t['sample_us']:.2f} | {t['encode_us']:.3f} | "
            f"{t['transfer_us']:.3f} | {t['decode_us']:.3f} | {t['bytes']:,} | {t['transport_pct']:.1f} % |",
            flush=True,
        )
    print()
    print(f"| preset | rollout workers | env steps/s | learner updates/s | (steps {args.steps}, second half) |")
    print("|---|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in presets:
            for n in (int(w) for w in args.workers.split(",")):
                r = end_to_end(name, n, args.steps, Path(tmp))
                print(f"| {name} | {n} | {r['env_steps_per_s']:,.0f} | {r['updates_per_s']:.2f} | |", flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()

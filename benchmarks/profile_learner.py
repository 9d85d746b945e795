"""The learner actor's host path, profiled without Ray: where its host time per minibatch step goes.

    python benchmarks/profile_learner.py [--preset phase4_3] [--sizing gpu_host] [--calls 40] [--per-call 1,3]

Builds the learner role as the Ray loop does (LearnerWorker, `train(payloads, wait=False)` per call, the newest
payload's steps left running), feeds it real payloads (a RolloutWorker's samples of the preset's market, made
first and replayed in turn), and reports for the timed calls:
- the host time per minibatch step by part (LearnerWorker.timings: stage, launch, sync, weights) and learner_busy,
  the captured updates' CUDA-event time over wall (bench_system's figure, here with no fetch and no Ray);
- cProfile's top functions by own time over the same kind of calls;
- torch.profiler's top host ops (CPU activity) by self time.
It isolates the learner's host work from the rest of the system: with payloads always ready, a learner_busy
below 1 here is host time the learner spends per step that the GPU does not hide. Figures: BENCHMARKS.md, "The
system on one GPU host".
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from actors.learner_worker import LearnerWorker  # noqa: E402
from actors.rollout import RolloutWorker  # noqa: E402
from foxhunt_ray.config import apply_overrides  # noqa: E402
from foxhunt_ray.loops import steps_per_payload  # noqa: E402
from foxhunt_ray.presets import run_preset  # noqa: E402
from learner.network import identity_obs_stats  # noqa: E402


def _delta(after: dict, before: dict) -> dict:
    return {k: after[k] - before[k] for k in after if k != "clock"}


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _timed(worker: LearnerWorker, payloads: list, calls: int, per_call: int) -> dict:
    worker.drain()
    _sync()
    before, t0 = worker.timings(), time.perf_counter()
    for i in range(calls):
        worker.train([payloads[(i * per_call + j) % len(payloads)] for j in range(per_call)], wait=False)
    worker.drain()
    _sync()
    wall = time.perf_counter() - t0
    d = _delta(worker.timings(), before)
    steps = max(d["updates"], 1)
    out = {"wall_s": wall, "updates": d["updates"], "updates_per_s": d["updates"] / wall}
    out["learner_busy"] = d["update_gpu_s"] / wall
    out["update_gpu_ms"] = 1e3 * d["update_gpu_s"] / steps
    out["payload_gpu_ms"] = 1e3 * d["payload_gpu_s"] / steps  # the stream from a payload's first step to its last
    out["h2d_gpu_ms"] = 1e3 * d["h2d_gpu_s"] / steps
    for k in ("decode_s", "stage_s", "launch_s", "sync_s", "weights_s"):
        out[k.replace("_s", "_ms_per_step")] = 1e3 * d[k] / steps
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="phase4_3")
    p.add_argument("--sizing", default="gpu_host")
    p.add_argument("--calls", type=int, default=40, help="timed train() calls")
    p.add_argument("--per-call", default="1,3", help="payloads a call, one timed run each (the Ray loop passes "
                   "those ready, at most --max-payloads-waiting: 3 on a GPU host)")
    p.add_argument("--torch-threads", type=int, default=1, help="torch's CPU threads (1: what Ray gives the learner "
                   "actor, num_cpus=1)")
    p.add_argument("--samples", type=int, default=3, help="distinct payloads made, replayed in turn")
    p.add_argument("--device", default=None, help="default: cuda when there is one (cpu: a check of this script)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a config override, as the "
                   "main job's --set (e.g. learner.q_batch_size=4096)")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.set_num_threads(args.torch_threads)
    per_call = [int(x) for x in str(args.per_call).split(",")]
    cfg = apply_overrides(run_preset(args.preset, sizing=args.sizing), args.set).validate()
    t0 = time.perf_counter()
    roll = RolloutWorker(cfg.rollout, cfg.market, worker_index=0, seed=0)
    stats = identity_obs_stats(roll.obs_dim)  # timed, not trained
    worker = LearnerWorker(cfg.learner, obs_dim=roll.obs_dim, n_actions=roll.n_actions, device=device, **stats)
    roll.set_weights(worker.policy_weights())
    payloads = [roll.sample() for _ in range(args.samples)]
    print(f"{args.samples} payloads of {cfg.rollout.num_envs} books x {cfg.rollout.steps_per_sample} steps "
          f"({payloads[0].nbytes / 1e6:.1f} MB each) in {time.perf_counter() - t0:.1f} s", flush=True)
    # warm-up: replay past its minimum, the graph captured
    per_payload = steps_per_payload(cfg)
    while worker.step < 3 * per_payload or (
        len(worker.learner.replay) < cfg.learner.replay_min_size
    ):
        worker.train(payloads[:1], wait=True)
    worker.drain()
    report = {"preset": args.preset, "sizing": args.sizing, "overrides": args.set, "torch_threads": args.torch_threads,
              "steps_per_payload": per_payload,
              "device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "torch": torch.__version__}
    for k in per_call:
        report[f"timed_{k}_per_call"] = _timed(worker, payloads, args.calls, k)
        print(f"{k} payload(s) a call:", json.dumps(report[f"timed_{k}_per_call"], indent=1), flush=True)

    prof = cProfile.Profile()
    prof.enable()
    _timed(worker, payloads, max(args.calls // 2, 4), per_call[0])
    prof.disable()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(30)
    print(s.getvalue()[:9000], flush=True)

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as tp:
        _timed(worker, payloads, 6, per_call[0])
    table = tp.key_averages().table(sort_by="self_cpu_time_total", row_limit=30)
    print(table, flush=True)
    report["torch_profile_top"] = table
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    for k in per_call:
        t = report[f"timed_{k}_per_call"]
        print(f"per_call={k} updates_per_s={t['updates_per_s']:.1f} learner_busy={t['learner_busy']:.3f} "
              f"launch_ms_per_step={t['launch_ms_per_step']:.3f} update_gpu_ms={t['update_gpu_ms']:.3f}")


if __name__ == "__main__":
    main()

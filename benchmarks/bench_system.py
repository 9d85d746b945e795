"""The whole system under Ray, measured: env steps/s, learner updates/s, and where each role's time goes.

    python benchmarks/bench_system.py --quick            # CPU, smoke preset, ~15 s: CI and the build box
    python benchmarks/bench_system.py --gpu [--seconds 75] [--rollout-workers 11] [--envs-per-worker 4096]
                                      [--minibatch-envs 256] [--policy-device auto] [--set KEY=VALUE ...]
                                      [--data DIR [--days NAMES]]   # on real days of a cache
    python benchmarks/bench_system.py --transport        # the wire's cost per transition (encode, Ray, decode)

`--gpu` and `--quick` run the real driver (`foxhunt_ray.driver.main`: Ray in this process, the rollout actors,
the learner actor and the monitor actor) for `--seconds` of training, then read the run folder:
- env steps/s and updates/s from diag.jsonl over the second half of the run (start-up and warm-up excluded);
- where the time went, per role, from timings.json (actors' own clocks; foxhunt_ray.loops.write_timings): the
  learner actor (idle between calls, fetching payloads, wire checks, staging, queueing steps, waiting for the
  device, the device time of the host-to-device copy and of the steps by CUDA events, weight copies,
  checkpoints), the rollout actors (stepping the books, the policy, encoding, loading weights, and the rest:
  waiting for the driver), the monitor and the driver;
- learner_busy: the fraction of the steady-state wall time (half time to the loop's end, on the learner's clock)
  that the learner's GPU work covers: the CUDA-event time of the captured updates' replays (forward, backward,
  optimiser: no host launch gap can fall inside one) over wall; on a CPU learner, the steps' own time. Near 1,
  the GPU sets the pace; far below, the host or the rollouts do. (The stream's occupancy from a payload's first
  step to its last is reported beside it: it also counts the GPU waiting for the host's launches.)
- the GPU's utilization (nvidia-smi, every 0.5 s, second half) when there is one.
The last line is `env_steps_per_s=<x> updates_per_s=<y> learner_busy=<f>`. Figures: BENCHMARKS.md, "The
system on one GPU host".
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import ray  # noqa: E402
import torch  # noqa: E402

from actors import wire  # noqa: E402
from actors.diag_file import read_diag, step_records  # noqa: E402
from actors.rollout import RolloutWorker  # noqa: E402
from foxhunt_ray import driver  # noqa: E402
from foxhunt_ray.local import GPU_HOST_FREE_CORES  # noqa: E402
from foxhunt_ray.presets import run_preset  # noqa: E402
from foxhunt_ray.run_folder import read_config_doc  # noqa: E402
from learner.learner import Learner  # noqa: E402
from learner.network import identity_obs_stats  # noqa: E402
from lobsim_env import N_ACTIONS  # noqa: E402
from lobsim_env.market import obs_size  # noqa: E402

LEARNER_ROWS = (
    ("idle_s", "idle between calls (waiting for payloads or the driver)"),
    ("fetch_s", "fetch payloads (ray.get)"),
    ("decode_s", "wire checks (decode)"),
    ("stage_s", "stage: copy to pinned buffers + validate"),
    ("launch_s", "queue the steps (host)"),
    ("sync_s", "wait for the device (diag read)"),
    ("weights_s", "policy weight copies"),
    ("checkpoint_s", "checkpoints"),
    ("h2d_gpu_s", "device: host-to-device copy (events)"),
    ("payload_gpu_s", "device: stream from a payload's first step to its last (events; host gaps included)"),
    ("update_gpu_s", "device: the captured updates' replays (events) = learner_busy"),
)
ROLLOUT_ROWS = (
    ("env_s", "step the books"),
    ("act_s", "policy (forward, sampling, copies)"),
    ("encode_s", "encode the payload"),
    ("weights_s", "load broadcast weights"),
)


class GpuSampler:
    """nvidia-smi's utilization.gpu every 0.5 s in a thread, with the time of each reading."""

    def __init__(self):
        self.rows: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._proc = None
        if shutil.which("nvidia-smi"):
            self._proc = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", "-lms", "500"],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self._proc.stdout:
            if line.strip().isdigit():
                self.rows.append((time.time(), float(line)))

    def mean_after(self, t0: float) -> float | None:
        got = [u for t, u in self.rows if t >= t0]
        return statistics.mean(got) if got else None

    def stop(self):
        if self._proc is not None:
            self._proc.terminate()


def system_run(args: argparse.Namespace, out: Path) -> dict:
    steps = args.steps or 10**9
    argv = ["--preset", args.preset, "--steps", str(steps), "--time-limit-s", str(args.seconds), "--quiet"]
    argv += ["--rollout-workers", str(args.rollout_workers), "--out", str(out), "--seed", str(args.seed)]
    argv += ["--checkpoint-every", str(10**9), "--broadcast-every", str(args.broadcast_every)]
    argv += ["--max-payloads-waiting", str(args.max_payloads_waiting)]
    if args.envs_per_worker:
        argv += ["--envs-per-worker", str(args.envs_per_worker)]
    if args.data:
        argv += ["--data", args.data] + (["--days", args.days] if args.days else [])
    sets = list(args.set)
    if args.minibatch_envs is not None:
        sets.append(f"learner.minibatch_envs={args.minibatch_envs}")
    if args.policy_device:
        sets.append(f"rollout.policy_device={args.policy_device}")
    if args.steps_per_sample:
        sets.append(f"rollout.steps_per_sample={args.steps_per_sample}")
    for s in sets:
        argv += ["--set", s]
    gpu = GpuSampler()
    t_start = time.time()
    code = driver.main(argv)
    gpu.stop()
    if code != 0:
        raise SystemExit(f"the run {argv} exited {code}")
    (run_dir,) = out.glob("*/*/0")  # OUT/<code_sha>/<name>/<fold>
    recs = step_records(read_diag(run_dir / "diag.jsonl"))
    config = read_config_doc(run_dir)
    a, b = recs[len(recs) // 2] if recs else None, recs[-1] if recs else None
    if a is None or b["time"] <= a["time"]:
        raise SystemExit(
            f"the run made {len(recs)} updates in {args.seconds} s of training, too few for a second half to measure "
            f"(a busy machine, or a slow Ray start): give it more --seconds ({run_dir})"
        )
    dt = b["time"] - a["time"]
    lags = [r["policy_lag"] for r in recs[len(recs) // 2 :]]
    print(
        f"from diag.jsonl: {b['step']:.0f} updates; second half {(b['env_steps'] - a['env_steps']) / dt:,.0f} env "
        f"steps/s, {(b['step'] - a['step']) / dt:.1f} updates/s, policy lag mean {statistics.mean(lags):.1f} max "
        f"{max(lags):.0f}",
        flush=True,
    )
    timings = json.loads((run_dir / "timings.json").read_text())
    steady = timings["learner_steady"]
    if len(steady) == 2:
        mid, end = steady
        span = end["clock"] - mid["clock"]
        learner_steady = {k: (end[k] - mid[k]) / span for k in end if k != "clock"}
    else:
        learner_steady = {}
    roles = timings["roles"]
    wall = timings["wall_s"]
    learner = roles["learner"]
    busy = learner_steady.get("update_gpu_s", learner["update_gpu_s"] / wall)
    return {
        "argv": argv,
        "config": config,
        "env_steps_per_s": (b["env_steps"] - a["env_steps"]) / dt,
        "updates_per_s": (b["step"] - a["step"]) / dt,
        "updates": b["step"],
        "transitions_per_update": statistics.mean(r["transitions"] for r in recs[len(recs) // 2 :]),
        "policy_lag_mean": statistics.mean(lags),
        "policy_lag_max": max(lags),
        "learner_busy": busy,
        "gpu_util_mean": gpu.mean_after(a["time"]),
        "wall_s": wall,
        "started": t_start,
        "learner_total": {k: v / wall for k, v in learner.items() if k.endswith("_s")},
        "learner_steady": {k: v for k, v in learner_steady.items() if k.endswith("_s")},
        "rollout": {k: v / wall / roles["rollout"]["workers"] for k, v in roles["rollout"].items() if k.endswith("_s")},
        "rollout_workers_reported": roles["rollout"]["workers"],
        "monitor": {k: v / wall for k, v in roles.get("monitor", {}).items()},
        "driver": {k: v / wall for k, v in roles.get("driver", {}).items() if k.endswith("_s")},
    }


def print_report(r: dict) -> None:
    cfg = r["config"]["run"]
    print(
        f"\n{cfg['preset']}: H={cfg['learner']['hidden_dim']}, {r['argv'][r['argv'].index('--rollout-workers') + 1]} "
        f"rollout workers x {cfg['rollout']['num_envs']} books x {cfg['rollout']['steps_per_sample']} steps a "
        f"sample, minibatch_envs={cfg['learner']['minibatch_envs']}, policy_device={cfg['rollout']['policy_device']}"
        f"; {r['updates']:.0f} updates in {r['wall_s']:.0f} s"
    )
    gpu = f"{r['gpu_util_mean']:.0f} %" if r["gpu_util_mean"] is not None else "n/a"
    print(
        f"second half: {r['env_steps_per_s']:,.0f} env steps/s, {r['updates_per_s']:.1f} updates/s, "
        f"{r['transitions_per_update']:,.0f} transitions an update, policy lag mean {r['policy_lag_mean']:.1f} "
        f"max {r['policy_lag_max']:.0f} updates, GPU utilization {gpu}"
    )
    print("\n| role | where the time goes | share of wall (steady) | share of wall (whole loop) |")
    print("|---|---|---:|---:|")
    steady, total = r["learner_steady"], r["learner_total"]
    for key, what in LEARNER_ROWS:
        s = f"{steady[key]:.3f}" if key in steady else ""
        print(f"| learner | {what} | {s} | {total.get(key, 0):.3f} |")
    ro, who = r["rollout"], f"rollout (mean of {r['rollout_workers_reported']})"
    for key, what in ROLLOUT_ROWS:
        print(f"| {who} | {what} | | {ro.get(key, 0):.3f} |")
    rest = 1 - sum(ro.get(k, 0) for k, _ in ROLLOUT_ROWS)
    print(f"| {who} | the rest: waiting for the driver, Ray | | {rest:.3f} |")
    for key, v in r["monitor"].items():
        print(f"| monitor | {key} (diag.jsonl, rules, gauges) | | {v:.3f} |")
    for key, v in r["driver"].items():
        print(f"| driver | {key} | | {v:.3f} |")


def transport(preset: str, repeats: int) -> dict:
    """Per transition: a sample (env + policy), its encode, the Ray transfer to a second actor, its decode."""

    @ray.remote(num_cpus=0.5)
    class Sink:
        def fetch(self, refs: list) -> tuple[float, float, int]:
            t0 = time.perf_counter()
            payload = ray.get(refs[0])
            t1 = time.perf_counter()
            wire.decode(payload)
            return t1 - t0, time.perf_counter() - t1, payload.nbytes

    @ray.remote(num_cpus=0.5)
    class TimedWorker(RolloutWorker):
        def timed_sample(self) -> tuple[float, float, ray.ObjectRef]:
            t0 = time.perf_counter()
            payload = self.sample()
            t1 = time.perf_counter()
            return t1 - t0, self.timings()["encode_s"], ray.put(payload)

    cfg = run_preset(preset).resolved()
    d = obs_size(cfg.market)  # timed, not trained: a standardisation that changes nothing costs what the real one does
    weights = Learner(cfg.learner, obs_dim=d, n_actions=int(N_ACTIONS), **identity_obs_stats(d)).policy_weights()
    worker = TimedWorker.remote(cfg.rollout, cfg.market, worker_index=0, seed=0, weights=weights)
    sink = Sink.remote()
    rows, encoded = [], 0.0
    for _ in range(repeats + 2):
        sample_s, encode_total, ref = ray.get(worker.timed_sample.remote())
        transfer_s, decode_s, nbytes = ray.get(sink.fetch.remote([ref]))
        rows.append((sample_s, encode_total - encoded, transfer_s, decode_s, nbytes))
        encoded = encode_total
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
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--gpu", action="store_true", help="the system at its GPU settings (phase4_3)")
    mode.add_argument("--quick", action="store_true", help="smoke preset on the CPU, a few seconds")
    mode.add_argument("--transport", action="store_true", help="the wire's cost per transition")
    p.add_argument("--preset", default=None)
    p.add_argument("--seconds", type=float, default=None, help="training time (--time-limit-s)")
    p.add_argument("--steps", type=int, default=None,
                   help="end at this many updates, or at --seconds if sooner (a slow start then shortens no run)")
    p.add_argument("--rollout-workers", type=int, default=None)
    p.add_argument("--envs-per-worker", type=int, default=None)
    p.add_argument("--steps-per-sample", type=int, default=None)
    p.add_argument("--minibatch-envs", type=int, default=None)
    p.add_argument("--policy-device", default=None, choices=["auto", "cpu", "cuda"])
    p.add_argument("--broadcast-every", type=int, default=None)
    p.add_argument("--max-payloads-waiting", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", default=None, metavar="DIR", help="real days: a day cache (docs/data.md)")
    p.add_argument("--days", default=None, metavar="NAMES", help="with --data: the days (the driver's --days)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--json", default=None, help="write the report here")
    p.add_argument("--repeats", type=int, default=10, help="--transport: timed samples per row")
    args = p.parse_args()
    cpus = os.cpu_count() or 2
    # loopback only; no dashboard: nothing here serves another host
    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}, {cpus} cores, "
        f"torch {torch.__version__}, ray {ray.__version__}, python {platform.python_version()}, "
        f"GPU {torch.cuda.get_device_name() if torch.cuda.is_available() else 'none'}",
        flush=True,
    )
    if args.transport:
        print("| preset | B x T | sample µs | encode µs | Ray transfer µs | decode µs | bytes/payload | transport |")
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        for name in (args.preset or "smoke,plan_a_v2").split(","):
            t = transport(name, args.repeats)
            print(
                f"| {name} | {t['B']} x {t['T']} | {t['sample_us']:.2f} | {t['encode_us']:.3f} | "
                f"{t['transfer_us']:.3f} | {t['decode_us']:.3f} | {t['bytes']:,} | {t['transport_pct']:.1f} % |",
                flush=True,
            )
        ray.shutdown()
        return
    if args.quick:
        defaults = dict(preset="smoke", seconds=12.0, rollout_workers=2, broadcast_every=4, max_payloads_waiting=4)
    else:
        defaults = dict(
            preset="phase4_3",
            seconds=75.0,
            rollout_workers=max(1, cpus - GPU_HOST_FREE_CORES),  # 11 on 16 cores, what its figures ran
            envs_per_worker=4096,
            minibatch_envs=256,
            broadcast_every=16,
            max_payloads_waiting=max(1, cpus - 4),
        )
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    with tempfile.TemporaryDirectory() as tmp:
        r = system_run(args, Path(tmp))
    ray.shutdown()
    print_report(r)
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=1, default=str))
    print(
        f"env_steps_per_s={r['env_steps_per_s']:.0f} updates_per_s={r['updates_per_s']:.2f} "
        f"learner_busy={r['learner_busy']:.3f}"
    )


if __name__ == "__main__":
    main()

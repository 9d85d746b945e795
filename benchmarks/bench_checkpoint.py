"""What a checkpoint costs when the learner runs on another node than the run folder (issue 15 item 1).

A two-node Ray cluster on this machine (ray.cluster_utils, every port on loopback: tests/test_two_nodes.py says
why not `ray start`), the learner actor on the second node (custom resource `learner_node`) at a preset's sizing
with its replay full (a long run's steady state: the checkpoint holds the replay), the monitor actor on the
driver's node. Per checkpoint:

- serialise: the learner's `checkpoint()` (state dict to bytes, in its process, on its node);
- to the run folder: those bytes through the object store to the driver's node and written there by the monitor
  actor (`keep_checkpoint`: a temporary file, fsync, rename, pruning), the path the run takes now;
- of which the write: the monitor's own time for the file;
- local write: the same bytes written on one node (what the learner did before, on its own disk), for scale.

    .venv/bin/python benchmarks/bench_checkpoint.py [--preset plan_a_v2] [--sizing gpu] [--repeats 3]

The last line is `checkpoint_mb=... serialise_s=... to_run_folder_s=... write_s=... local_write_s=...`.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # before ray is imported: every port on 127.0.0.1
os.environ.setdefault("RAY_AUTH_MODE", "token")
os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="plan_a_v2")
    p.add_argument("--sizing", default="gpu")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)

    import ray
    import ray._private.utils as ray_utils
    from ray.cluster_utils import Cluster

    from actors.checkpoints import Checkpoint, write_checkpoint
    from actors.envs import probe_env
    from actors.kill_rules import KillConfig
    from foxhunt_ray import remote
    from foxhunt_ray.presets import run_preset

    config = run_preset(args.preset, sizing=args.sizing).resolved()
    spaces = probe_env(config.env_id, market=config.market, env_kwargs=config.env_kwargs)
    top = Path(tempfile.mkdtemp(prefix="r2b", dir="/tmp"))
    write = ray_utils.write_ray_address  # keep the head's address out of the machine's default temp dir
    ray_utils.write_ray_address = lambda address, temp_dir=None: write(address, str(top / "h"))
    store = 1024 * 2**20
    cluster = Cluster(
        initialize_head=True,
        head_node_args=dict(num_cpus=2, temp_dir=str(top / "h"), include_dashboard=False, object_store_memory=store),
    )
    cluster.add_node(num_cpus=1, resources={"learner_node": 1}, temp_dir=str(top / "w"), object_store_memory=store)
    ray.init(address=cluster.address, log_to_driver=False)
    try:

        class FullReplay(remote.RayLearnerWorker):
            def fill(self) -> int:
                self.learner.replay.size = self.learner.replay.capacity  # what a checkpoint of a long run holds
                return self.learner.replay.capacity

        learner = ray.remote(num_cpus=1, resources={"learner_node": 1})(FullReplay).remote(
            config.learner,
            obs_dim=spaces.obs_dim,
            n_actions=spaces.n_actions,
            device="cpu",
            obs_mean=spaces.obs_mean,
            obs_std=spaces.obs_std,
        )
        capacity = ray.get(learner.fill.remote())
        monitor = remote.MonitorHandle(top / "run", KillConfig(), None, stamp={})  # on the driver's node
        here = ray.get_runtime_context().get_node_id()
        there = ray.get(learner.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id()))
        if here == there:
            raise SystemExit("the learner landed on the driver's node: no transfer to measure")
        rows = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            ref = learner.checkpoint.remote()
            ray.wait([ref], fetch_local=False)  # serialised, in the learner node's object store
            t1 = time.perf_counter()
            before = ray.get(monitor.actor.timings.remote())["checkpoint_write_s"]
            ray.get(monitor.keep_checkpoint(ref))
            t2 = time.perf_counter()
            write_s = ray.get(monitor.actor.timings.remote())["checkpoint_write_s"] - before
            rows.append((t1 - t0, t2 - t1, write_s))
        data = ray.get(learner.checkpoint.remote()).data
        local = []
        for i in range(args.repeats):
            t0 = time.perf_counter()
            write_checkpoint(top / "local", Checkpoint(step=i + 1, data=data))
            local.append(time.perf_counter() - t0)
        monitor.close()
    finally:
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(top, ignore_errors=True)
    mb = len(data) / 2**20
    med = [statistics.median(col) for col in zip(*rows, strict=True)]
    print(
        f"{args.preset} sizing {args.sizing}: hidden_dim {config.learner.hidden_dim}, replay {capacity:,} x obs "
        f"{spaces.obs_dim}; checkpoint {mb:.1f} MiB; median of {args.repeats}: serialise {med[0]:.3f} s, to the "
        f"run folder on the driver's node {med[1]:.3f} s (of which the write {med[2]:.3f} s), local write "
        f"{statistics.median(local):.3f} s"
    )
    print(
        f"checkpoint_mb={mb:.1f} serialise_s={med[0]:.3f} to_run_folder_s={med[1]:.3f} write_s={med[2]:.3f} "
        f"local_write_s={statistics.median(local):.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

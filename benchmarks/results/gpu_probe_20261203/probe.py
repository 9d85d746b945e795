"""Probe on the H200 host (no Ray): where the learner's time goes per rollout shape, how fast rollout processes
step with the policy on the CPU vs on the GPU, and how GPU-policy rollouts slow the learner's graph replays."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing as mp
import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())
OUT = os.environ.get("OUT", "/tmp")


def log(*a):
    print(*a, flush=True)
    with open(f"{OUT}/probe.log", "a") as f:
        print(*a, file=f)


def weights_dict(H=512):
    import torch

    from learner.network import PolicyNet

    torch.manual_seed(0)
    net = PolicyNet(32, 7, H, 2)
    return {"version": 0, "obs_dim": 32, "n_actions": 7, "hidden_dim": H, "encoder_layers": 2,
            "state": net.state_dict()}


def rollout_proc(idx, B, mode, dur, barrier, q):
    import numpy as np
    import torch

    os.sched_setaffinity(0, {idx % os.cpu_count()})
    torch.set_num_threads(1)
    from actors.config import RolloutConfig
    from actors.rollout import RolloutWorker
    from lobsim_env import MarketConfig

    w = RolloutWorker(RolloutConfig(num_envs=B, steps_per_sample=64), MarketConfig(), worker_index=idx, seed=0,
                      weights=weights_dict())
    act_s = [0.0]
    if mode == "gpu":
        dev = torch.device("cuda")
        pol = w.policy.to(dev)
        pinned = torch.empty(B, 32).pin_memory()

        def act(obs, generator=None):
            t0 = time.perf_counter()
            with torch.no_grad():
                pinned.copy_(torch.from_numpy(obs))
                x = pinned.to(dev, non_blocking=True)
                lp = torch.log_softmax(pol(x), -1).cpu()
            a = torch.multinomial(lp.exp(), 1, generator=generator).squeeze(-1)
            out = a.numpy().astype(np.int64), lp.gather(-1, a[:, None]).squeeze(-1).numpy()
            act_s[0] += time.perf_counter() - t0
            return out

        w.policy.act = act
    elif mode == "random":
        rng = np.random.default_rng(idx)

        def act(obs, generator=None):
            return rng.integers(0, 7, len(obs)), np.full(len(obs), -1.9, np.float32)

        w.policy.act = act
    else:
        orig = w.policy.act

        def act(obs, generator=None):
            t0 = time.perf_counter()
            r = orig(obs, generator=generator)
            act_s[0] += time.perf_counter() - t0
            return r

        w.policy.act = act
    w.sample(64)
    barrier.wait()
    act_s[0] = 0.0
    t0 = time.perf_counter()
    steps = 0
    enc = 0.0
    while time.perf_counter() - t0 < dur:
        p = w.sample(64)
        steps += 64 * B
    el = time.perf_counter() - t0
    q.put((idx, steps / el, act_s[0] / el, len(p)))


def rollouts(n, B, mode, dur=8.0, learner_fn=None):
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(n + 1)
    q = ctx.Queue()
    procs = [ctx.Process(target=rollout_proc, args=(i + 2, B, mode, dur, barrier, q)) for i in range(n)]
    for p in procs:
        p.start()
    barrier.wait()
    extra = learner_fn() if learner_fn else None
    res = [q.get(timeout=120) for _ in procs]
    for p in procs:
        p.join()
    tot = sum(r[1] for r in res)
    act = statistics.mean(r[2] for r in res)
    log(f"ROLLOUT mode={mode} n={n} B={B}: total {tot:,.0f} steps/s, per worker {tot / n:,.0f}, act share {act:.2f}, "
        f"payload {res[0][3] / 1e6:.1f} MB" + (f", learner during: {extra}" if extra else ""))
    return tot


def learner_probe():
    import torch

    from benchmarks.gpu_check import learner_batch
    from foxhunt_ray.presets import preset
    from learner import replay as R
    from learner.learner import Learner

    cfg = preset("phase4_3")
    results = {}
    for T, B in [(8, 128), (64, 128), (64, 256), (64, 512), (64, 1024)]:
        lrn = Learner(cfg, obs_dim=32, n_actions=7, device="cuda", seed=0)
        batches = [{k: (v.numpy() if torch.is_tensor(v) else v) for k, v in
                    learner_batch(T, B, 32, 7, seed=s).items()} for s in range(4)]
        for i in range(12):
            lrn.update(batches[i % 4])
        torch.cuda.synchronize()
        # wall per update, as today (one sync each)
        t0 = time.perf_counter()
        n = 40
        for i in range(n):
            lrn.update(batches[i % 4])
        wall = (time.perf_counter() - t0) / n * 1e3
        # host pieces
        hs = {"validate": 0.0, "nstep": 0.0, "replay_add": 0.0}
        for i in range(n):
            b = batches[i % 4]
            t0 = time.perf_counter()
            host = R.rollout_from_batch(b, obs_dim=32, n_actions=7)
            t1 = time.perf_counter()
            ns = R.nstep_transitions(host, cfg.gamma, cfg.n_step, cfg.reward_scale)
            t2 = time.perf_counter()
            lrn.replay.add({k: v.to("cuda", non_blocking=True) for k, v in ns.items()})
            torch.cuda.synchronize()
            t3 = time.perf_counter()
            hs["validate"] += (t1 - t0) / n * 1e3
            hs["nstep"] += (t2 - t1) / n * 1e3
            hs["replay_add"] += (t3 - t2) / n * 1e3
        # pure GPU time of the captured graph, replayed back to back
        st = lrn.graph.shapes[(T, B)]
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(3):
            st.graph.replay()
        e0.record()
        for _ in range(n):
            st.graph.replay()
        e1.record()
        torch.cuda.synchronize()
        gpu = e0.elapsed_time(e1) / n
        results[(T, B)] = dict(wall_ms=wall, gpu_ms=gpu, **hs)
        log(f"LEARNER T={T} B={B}: wall/update {wall:.2f} ms, graph GPU {gpu:.2f} ms, host validate "
            f"{hs['validate']:.2f} nstep {hs['nstep']:.2f} replay_add+sync {hs['replay_add']:.2f} ms; "
            f"graph capacity {T * B / gpu * 1e3 / 1e6:.2f} M transitions/s")
        if (T, B) in ((64, 128), (64, 512)):
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(5):
                    st.graph.replay()
                torch.cuda.synchronize()
            tab = prof.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=70)
            log(f"TOP KERNELS T={T} B={B} (5 replays)\n{tab}")
        del lrn
        torch.cuda.empty_cache()
    return results


def graph_timer(T=64, B=256, dur=7.0):
    """A learner replaying its graph during rollouts: returns the GPU ms per replay."""
    import torch

    from benchmarks.gpu_check import learner_batch
    from foxhunt_ray.presets import preset
    from learner.learner import Learner

    lrn = Learner(preset("phase4_3"), obs_dim=32, n_actions=7, device="cuda", seed=0)
    b = {k: (v.numpy() if torch.is_tensor(v) else v) for k, v in learner_batch(T, B, 32, 7, seed=0).items()}
    for _ in range(12):
        lrn.update(b)
    st = lrn.graph.shapes[(T, B)]
    torch.cuda.synchronize()

    def run():
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        n = 0
        e0.record()
        while time.perf_counter() - t0 < dur:
            for _ in range(10):
                st.graph.replay()
            n += 10
            e1.record()
            e1.synchronize()
        return f"graph T={T} B={B} {e0.elapsed_time(e1) / n:.2f} ms/replay"

    return run


if __name__ == "__main__":
    import torch

    log("torch", torch.__version__, torch.cuda.get_device_name(), "cores", os.cpu_count())
    stage = sys.argv[1] if len(sys.argv) > 1 else "all"
    if stage in ("all", "learner"):
        learner_probe()
    if stage in ("all", "rollout"):
        timer = graph_timer()
        log("LEARNER ALONE:", timer())
        rollouts(14, 4096, "random")
        rollouts(14, 2048, "cpu")
        rollouts(14, 2048, "gpu", learner_fn=timer)
        rollouts(14, 4096, "gpu")
        rollouts(7, 4096, "gpu")

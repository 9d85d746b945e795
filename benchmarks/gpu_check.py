"""The GPU machine's one script: build the kernels, run them under compute-sanitizer, time them.

    python benchmarks/gpu_check.py build                  # build (cached) and load the extension
    python benchmarks/gpu_check.py sanitize               # each op fwd+bwd once at B=128 (under compute-sanitizer)
    python benchmarks/gpu_check.py ops     --json F       # per-op time: kernels vs eager vs compiled reference
    python benchmarks/gpu_check.py learner --json F       # full Learner.update: graph / cuda / eager / compile modes
    python benchmarks/gpu_check.py update  --json F       # the captured update: kernels vs reference ops, fp32/TF32
    python benchmarks/gpu_check.py kernels --json F       # what one captured update's kernels are, by name and group
    python benchmarks/gpu_check.py regions --json F       # the update's kernels by the learner code that launches them
                                          [--shapes]      # ... each named with the op and input shapes that launched it
    python benchmarks/gpu_check.py census  --json F       # (CPU, no GPU needed) the captured update's launches, counted

The numbers are tests, skipped without CUDA: the kernels (every op against the float64 reference, gradients,
opcheck) in tests/test_kernels_cuda.py, on the shared harness in learner/ops/checks.py, which `sanitize` runs
once; the CUDA learner (the captured graph against eager, minibatch steps against one update each, TF32) in
tests/test_learner_cuda.py. This script keeps the build, the sanitizer's workload and the timings.
`python3 -m benchmarks.gpu_host` runs pytest on them and these stages as named steps in one call, logs under $OUT.
`--device cpu` runs ops/learner on the CPU (the reference against the CPU op implementations) to test this script.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.rollouts import torch_rollout  # noqa: E402
from learner import ops  # noqa: E402
from learner.ops import reference as ref  # noqa: E402
from learner.ops.checks import F32, F64, SIZES, check_size, make_inputs  # noqa: E402

# -------------------------------------------------------------------------------------------- sanitize


def run_sanitize(device: str) -> None:
    """Each op forward and backward once at B=128, H=512 in float32 and float64 (under compute-sanitizer)."""
    cfg = SIZES[1]
    for dtype in (F32, F64):
        results: list[dict] = []
        check_size(cfg, dtype, device, seed=7, results=results)
        torch.cuda.synchronize()
        print(dtype, "ops run:", len(results), "within tolerance:", sum(r["ok"] for r in results))


# ---------------------------------------------------------------------------------------------- timing


def bench(fn, reps: int = 200, warmup: int = 20) -> float:
    """Median of per-call device time in ms (CUDA events around each call); host clock on CPU."""
    for _ in range(warmup):
        fn()
    times = []
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    else:
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def op_cases(x: dict) -> dict:
    """name -> (callable(impl), bytes moved at least) with impl = ops module or reference module."""
    n = lambda t: t.numel() * t.element_size()  # noqa: E731
    ins = [x[k].detach().clone().requires_grad_() for k in ("h", "w_v", "b_v", "w_a", "b_a")]
    lg, qn = x["logits"].clone().requires_grad_(), x["quantiles"].clone().requires_grad_()
    q, th = x["q"].clone().requires_grad_(), x["theta"].clone().requires_grad_()
    ends = x["terminated"] | x["truncated"]
    tgt = x["soft_target"].clone()
    ih = [x[k].detach().clone().requires_grad_() for k in ("h", "pre", "w_out", "b_out")]

    def dueling_fwd_bwd(m):
        _v, _a, qq = m.dueling_forward(*ins)
        torch.autograd.grad(qq, ins, x["grad_q"])

    return {
        "dueling_forward": (
            lambda m: m.dueling_forward(*[t.detach() for t in ins]),
            n(x["h"]) + n(x["w_a"]) + 3 * n(x["grad_q"]),
        ),
        "dueling_fwd+bwd": (dueling_fwd_bwd, 3 * n(x["h"]) + 3 * n(x["w_a"]) + 4 * n(x["grad_q"])),
        "dueling_bellman_target": (
            lambda m: m.dueling_bellman_target(x["q_online_next"], x["q_target_next"], x["reward"], x["discount"]),
            2 * n(x["q"]) + 3 * n(x["reward"]),
        ),
        "dueling_huber_loss+grad": (
            lambda m: torch.autograd.grad(m.dueling_huber_loss(q, x["action"], x["y"]), q),
            2 * n(x["q"]) + 2 * n(x["y"]),
        ),
        "c51_project": (
            lambda m: m.c51_project(x["next_probs"], x["reward"], x["discount"], -10.0, 10.0),
            2 * n(x["next_probs"]),
        ),
        "iqn_loss+grad": (
            lambda m: torch.autograd.grad(m.iqn_quantile_huber_loss(th, x["tau"], x["target"]), th),
            3 * n(x["theta"]) + n(x["target"]),
        ),
        "ensemble_q_fwd+bwd": (
            lambda m: torch.autograd.grad(m.ensemble_q(lg, x["support"], qn, 0.5), (lg, qn), x["grad_ens"]),
            3 * n(x["logits"]) + 2 * n(x["quantiles"]),
        ),
        "gae": (
            lambda m: m.gae(x["rewards"], x["values"], x["next_values"], x["terminated"], ends, 0.99, 0.95),
            5 * n(x["rewards"]) + 2 * x["terminated"].numel(),
        ),
        "iqn_head_fwd+bwd": (
            lambda m: torch.autograd.grad(m.iqn_head(*ih), ih, x["grad_iqn"]),
            3 * n(x["pre"]) + 2 * n(x["h"]),
        ),
        "soft_update_": (lambda m: m.soft_update_(tgt, x["soft_online"], 0.005), 3 * n(tgt)),
    }


def device_time(fn, n: int = 20) -> tuple[float, float]:
    """(summed kernel time in µs, kernel launches) per call, from torch.profiler's device events."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return sum(e.device_time_total for e in kernels) / n, len(kernels) / n


def measure_ceilings(device: str) -> dict:
    if device != "cuda":
        return {"copy_GBps": math.nan, "fp32_matmul_TFLOPs": math.nan}
    src = torch.randn(256 * 2**20, device=device)  # 1 GiB
    dst = torch.empty_like(src)
    copy_ms = bench(lambda: dst.copy_(src), reps=20, warmup=3)
    a = torch.randn(8192, 8192, device=device)
    b = torch.randn(8192, 8192, device=device)
    mm_ms = bench(lambda: a @ b, reps=10, warmup=3)
    nbytes = 2 * src.numel() * src.element_size()  # read + write
    return {
        "copy_GBps": nbytes / copy_ms / 1e6,
        "fp32_matmul_TFLOPs": 2 * 8192**3 / mm_ms / 1e9,
        "tf32_allowed": torch.backends.cuda.matmul.allow_tf32,
    }


def run_ops(device: str, json_path: str | None) -> None:
    ceilings = measure_ceilings(device)
    cfg = SIZES[2]
    x = {k: (v.float() if v.is_floating_point() else v) for k, v in make_inputs(cfg, device, 5).items()}
    rows = []
    for name, (fn, nbytes) in op_cases(x).items():
        row = {"op": name, **cfg, "bytes": nbytes}
        ops.set_backend("cuda" if device == "cuda" else "reference")
        row["kernel_ms"] = bench(lambda fn=fn: fn(ops))
        row["eager_ref_ms"] = bench(lambda fn=fn: fn(ref))
        if device == "cuda":
            row["kernel_device_us"], row["kernel_launches"] = device_time(lambda fn=fn: fn(ops))
            row["ref_device_us"], row["ref_launches"] = device_time(lambda fn=fn: fn(ref))
        row["floor_ms"] = nbytes / (ceilings["copy_GBps"] * 1e6)
        rows.append(row)
    # torch.compile is compared on the whole Learner.update (stage `learner`), where it matters.
    # "ms" = wall per call (host-bound at these sizes); "dev us" = summed kernel time per call; "k" = launches.
    print(
        f"{'op @ B=1024 f32':<24}{'kern ms':>9}{'ref ms':>9}{'kern dev us':>12}{'k':>4}{'ref dev us':>11}{'k':>4}"
        f"{'floor us':>9}"
    )
    for r in rows:
        print(
            f"{r['op']:<24}{r['kernel_ms']:>9.4f}{r['eager_ref_ms']:>9.4f}{r.get('kernel_device_us', math.nan):>12.2f}"
            f"{r.get('kernel_launches', 0):>4.0f}{r.get('ref_device_us', math.nan):>11.2f}"
            f"{r.get('ref_launches', 0):>4.0f}"
            f"{r['floor_ms'] * 1e3:>9.2f}"
        )
    if json_path:
        Path(json_path).write_text(json.dumps({"ceilings": ceilings, "ops": rows}, indent=1))


def market_shapes(preset_name: str) -> tuple[int, int]:
    """(obs_dim, n_actions) of the preset's own market: the learner is timed at the shapes it trains at."""
    from foxhunt_ray.presets import run_preset
    from lobsim_env.market import N_ACTIONS, obs_size

    return obs_size(run_preset(preset_name).market), N_ACTIONS


def run_update(device: str, json_path: str | None, preset_name: str, reps: int) -> None:
    """Issue 12, part 3: one learner update at T x B = 8 x 128 and 64 x 128 (q_batch 1024), the custom kernels
    against the reference ops inside the same CUDA graph, each with float32 and TF32 matmuls.

    graph_ms: CUDA-event time of `reps` back-to-back replays of the captured update, per replay (the GPU's
    work alone). pipelined_ms: wall time per update the way the learner worker runs them (validated, pinned
    rollouts queued with Learner.start_updates, diags read every 8 updates), i.e. max(host, device) per step.
    kernels: kernels executed per replay (torch.profiler)."""
    import dataclasses

    from foxhunt_ray.presets import preset
    from learner.learner import Learner
    from learner.network import identity_obs_stats
    from learner.replay import BATCH_DTYPES, rollout_from_batch

    obs_dim, n_actions = market_shapes(preset_name)
    report: dict = {"preset": preset_name, "q_batch": 1024, "obs_dim": obs_dim, "n_actions": n_actions, "rows": []}
    for T, B in ((8, 128), (64, 128)):
        batches = [torch_rollout(T, B, obs_dim, n_actions, seed=s) for s in range(4)]
        hosts = [rollout_from_batch(b, obs_dim=obs_dim, n_actions=n_actions) for b in batches]
        hosts = [dataclasses.replace(h, **{k: getattr(h, k).pin_memory() for k in BATCH_DTYPES}) for h in hosts]
        for backend in ("cuda", "reference"):
            for precision in ("highest", "high"):
                ops.set_backend(backend)
                cfg = dataclasses.replace(
                    preset(preset_name), q_batch_size=1024, replay_min_size=1024, matmul_precision=precision
                )
                lrn = Learner(
                    cfg, obs_dim=obs_dim, n_actions=n_actions, device=device, seed=0, **identity_obs_stats(obs_dim)
                )
                for i in range(6):
                    lrn.update(batches[i % 4])
                st = lrn.graph.shapes[(T, B)]
                torch.cuda.synchronize()
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                for _ in range(reps):
                    st.graph.replay()
                e1.record()
                torch.cuda.synchronize()
                graph_ms = e0.elapsed_time(e1) / reps
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                    for _ in range(3):
                        st.graph.replay()
                    torch.cuda.synchronize()
                kernels = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA) / 3
                pending: list = []
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for i in range(reps):
                    pending += lrn.start_updates(hosts[i % 4])
                    if len(pending) >= 8:
                        lrn.finish_updates(pending)
                        pending = []
                lrn.finish_updates(pending)
                pipelined_ms = (time.perf_counter() - t0) * 1e3 / reps
                row = {
                    "T": T,
                    "B": B,
                    "ops": backend,
                    "matmul": precision,
                    "graph_ms": graph_ms,
                    "pipelined_ms": pipelined_ms,
                    "kernels": kernels,
                    "backend": ops.backend(),
                }
                report["rows"].append(row)
                print(json.dumps(row), flush=True)
                del lrn, st
                torch.cuda.empty_cache()
    ops.set_backend("cuda")
    print(
        f"{'T x B':<9}{'matmul':<9}{'kernels ms':>11}{'ref ms':>9}{'ratio':>7}{'kernels pipelined':>19}"
        f"{'ref pipelined':>15}"
    )
    by = {(r["T"], r["B"], r["ops"], r["matmul"]): r for r in report["rows"]}
    for T, B in ((8, 128), (64, 128)):
        for precision in ("highest", "high"):
            k, r = by[(T, B, "cuda", precision)], by[(T, B, "reference", precision)]
            print(
                f"{T}x{B:<7}{precision:<9}{k['graph_ms']:>11.3f}{r['graph_ms']:>9.3f}"
                f"{r['graph_ms'] / k['graph_ms']:>7.2f}"
                f"{k['pipelined_ms']:>19.3f}{r['pipelined_ms']:>15.3f}"
            )
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=1))


KERNEL_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "custom",
        (
            "foxhunt",
            "c51_project",
            "dueling_",
            "ensemble_q",
            "gae_kernel",
            "iqn_head",
            "iqn_rows",
            "mean_kernel",
            "nstep_returns",
            "replay_write",
            "soft_update",
        ),
    ),
    ("matmul", ("gemm", "cutlass", "xmma", "cublas", "sm90_", "splitk")),
    ("optimizer", ("adam", "multi_tensor", "foreach")),
    ("reduce", ("reduce",)),
    ("memcpy", ("memcpy", "memset")),
    ("elementwise", ("elementwise", "vectorized", "unrolled", "index", "scatter", "gather", "where", "cat")),
)
"""Kernel name fragments -> the group `kernels` counts them in (first match wins; else 'other')."""


def kernel_group(name: str) -> str:
    low = name.lower()
    return next((g for g, keys in KERNEL_GROUPS if any(k in low for k in keys)), "other")


def run_kernel_profile(device: str, json_path: str | None, preset_name: str, reps: int) -> None:
    """Issue 12, part 3: where one captured update's GPU time goes. For T x B = 8 x 128 and 64 x 128 (q_batch
    1024, float32 matmuls), custom kernels and reference ops: every kernel of `reps` graph replays under
    torch.profiler, as kernels and microseconds per replay, by group (KERNEL_GROUPS) and by name (the top 40)."""
    import dataclasses

    from foxhunt_ray.presets import preset
    from learner.learner import Learner
    from learner.network import identity_obs_stats

    if device != "cuda":
        raise SystemExit("gpu_check.py kernels profiles the captured CUDA graph: run it on a CUDA device")
    obs_dim, n_actions = market_shapes(preset_name)
    report: dict = {"preset": preset_name, "q_batch": 1024, "reps": reps, "rows": []}
    for T, B in ((8, 128), (64, 128)):
        batches = [torch_rollout(T, B, obs_dim, n_actions, seed=s) for s in range(4)]
        for backend in ("cuda", "reference"):
            ops.set_backend(backend)
            cfg = dataclasses.replace(preset(preset_name), q_batch_size=1024, replay_min_size=1024)
            lrn = Learner(
                cfg, obs_dim=obs_dim, n_actions=n_actions, device=device, seed=0, **identity_obs_stats(obs_dim)
            )
            for i in range(6):
                lrn.update(batches[i % 4])
            st = lrn.graph.shapes[(T, B)]
            torch.cuda.synchronize()
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(reps):
                    st.graph.replay()
                torch.cuda.synchronize()
            by_name: dict[str, list[float]] = {}
            for e in prof.events():
                if e.device_type == torch.autograd.DeviceType.CUDA:
                    n_us = by_name.setdefault(e.name, [0.0, 0.0])
                    n_us[0] += 1 / reps
                    n_us[1] += e.device_time_total / reps
            groups: dict[str, list[float]] = {}
            for name, (n, us) in by_name.items():
                g = groups.setdefault(kernel_group(name), [0.0, 0.0])
                g[0] += n
                g[1] += us
            top = sorted(by_name.items(), key=lambda kv: -kv[1][1])[:40]
            row = {
                "T": T,
                "B": B,
                "ops": backend,
                "kernels": round(sum(n for n, _ in by_name.values()), 1),
                "kernel_us": round(sum(us for _, us in by_name.values()), 1),
                "groups": {g: {"kernels": round(n, 1), "us": round(us, 1)} for g, (n, us) in sorted(groups.items())},
                "top": [
                    {"name": short_kernel_name(k, 200), "group": kernel_group(k), "n": round(n, 2), "us": round(us, 2)}
                    for k, (n, us) in top
                ],
            }
            report["rows"].append(row)
            print(f"{T}x{B} {backend}: {row['kernels']} kernels, {row['kernel_us']} us per replay", flush=True)
            for g, v in row["groups"].items():
                print(f"  {g:<12}{v['kernels']:>8.1f}{v['us']:>10.1f} us", flush=True)
            for t in row["top"][:25]:
                print(f"    {t['us']:>8.1f} us {t['n']:>6.1f}x  [{t['group']}] {t['name'][:110]}", flush=True)
            del lrn, st
            torch.cuda.empty_cache()
    ops.set_backend("cuda")
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=1))


REGIONS = {
    "_policy_losses": "on-policy losses (encoder, heads, GAE, policy_losses)",
    "_q_losses": "Q losses (encoders, C51, IQN, dueling)",
    "_main_loss": "main loss (weighted sum)",
    "_backprop": "backward (autograd.grad, one concatenation a network)",
    "_backward": "grad norms, finiteness (+ backward w/o _backprop)",
    "_guarded_step": "guard: snapshot, clip, Adam, Polyak, undo",
    "_fused_guarded_step": "guard as one op (ops.guarded_adam_)",
    "_apply": "host guard (the CPU's): skip, clip, Adam, undo",
}
"""Learner and Optimiser (learner/optim.py) methods whose launches `regions` counts apart (a launch belongs to the
innermost one running); the rest of Learner.update (the replay write and gather, the diag stack) is 'the rest of
update'."""
_NOISE = ("void ", "at::native::", "(anonymous namespace)::", "std::", "c10::", "at::cuda::", "cutlass::", "foxhunt::")


def short_kernel_name(name: str, width: int = 150) -> str:
    """A kernel's name without its namespaces and return type, so the functor of an elementwise kernel shows."""
    for noise in _NOISE:
        name = name.replace(noise, "")
    return " ".join(name.split())[:width]


def attribute_to_regions(spans: list[tuple[str, float, float]], items: list[tuple[float, str, float]]) -> dict:
    """{region: {item name: [count, total]}} for items (start, name, value) by the innermost span (name, start, end)
    whose interval holds the item's start (launches from the autograd thread fall in the backward's span by time);
    items outside every span go to 'the rest of update'."""
    out: dict[str, dict[str, list[float]]] = {}
    for start, name, value in items:
        inside = [(e - s, r) for r, s, e in spans if s <= start <= e]
        region = min(inside)[1] if inside else "the rest of update"
        slot = out.setdefault(region, {}).setdefault(name, [0.0, 0.0])
        slot[0] += 1
        slot[1] += value
    return out


def mark_regions(obj, methods=tuple(REGIONS)) -> None:
    """Wrap each of obj's `methods` it has so that torch.profiler records its span as 'region<method name>'."""
    for method in methods:
        if hasattr(obj, method):
            fn = getattr(obj, method)

            def wrapped(*a, _fn=fn, _name=method, **k):
                with torch.profiler.record_function("region" + _name):
                    return _fn(*a, **k)

            setattr(obj, method, wrapped)


def run_regions(
    device: str, json_path: str | None, preset_name: str, T: int, B: int, reps: int, shapes: bool = False
) -> dict:
    """Issue 12, part 3: which learner code launches the update's kernels. The eager update (the graph's body, op for
    op; cuda_graph off so the CPU ops that launch each kernel are seen) at T x B, q_batch 1024, under torch.profiler
    for `reps` updates, custom kernels and reference ops: per REGIONS entry, kernels and device µs an update, and its
    costliest kernels. On the CPU (to test this) the leaf CPU ops stand in for kernels. `shapes`: each kernel is
    named with the op that launched it and that op's input shapes ("kernel <- aten::sum [[32768, 512], []]"), so
    that kernels of one name (four column sums, say) are told apart by the tensors they read."""
    import dataclasses

    from foxhunt_ray.presets import preset
    from learner.learner import Learner
    from learner.network import identity_obs_stats

    obs_dim, n_actions = market_shapes(preset_name)
    batches = [torch_rollout(T, B, obs_dim, n_actions, seed=s) for s in range(4)]
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    report: dict = {"preset": preset_name, "T": T, "B": B, "q_batch": 1024, "reps": reps, "rows": []}
    previous = ops._State.mode
    for backend in ("cuda", "reference") if device == "cuda" else ("reference",):
        ops.set_backend(backend)
        cfg = dataclasses.replace(preset(preset_name), q_batch_size=1024, replay_min_size=1024, cuda_graph=False)
        lrn = Learner(cfg, obs_dim=obs_dim, n_actions=n_actions, device=device, seed=0, **identity_obs_stats(obs_dim))
        spans: list[tuple[str, float, float]] = []
        mark_regions(lrn)
        mark_regions(lrn.optim)
        for i in range(6):
            lrn.update(batches[i % 4])
        if device == "cuda":
            torch.cuda.synchronize()
        with torch.profiler.profile(activities=activities, record_shapes=shapes) as prof:
            for i in range(reps):
                lrn.update(batches[i % 4])
            if device == "cuda":
                torch.cuda.synchronize()
        items: list[tuple[float, str, float]] = []
        for e in prof.events():
            if e.name.startswith("region_"):
                spans.append((e.name[len("region") :], e.time_range.start, e.time_range.end))
            elif device == "cuda":
                op = f" <- {e.name} {e.input_shapes}" if shapes else ""
                items += [
                    (e.time_range.start, short_kernel_name(k.name, 70 if shapes else 150) + op, k.duration)
                    for k in e.kernels
                ]
            elif not e.cpu_children and e.name.startswith("aten::"):
                items.append((e.time_range.start, f"{e.name} {e.input_shapes}" if shapes else e.name, e.cpu_time_total))
        by_region = attribute_to_regions(spans, items)
        row = {"ops": backend, "regions": {}}
        print(f"{T}x{B} {backend} (eager update, {reps} updates): per update", flush=True)
        for region, names in sorted(by_region.items(), key=lambda kv: -sum(v[1] for v in kv[1].values())):
            n, us = sum(v[0] for v in names.values()) / reps, sum(v[1] for v in names.values()) / reps
            top = sorted(names.items(), key=lambda kv: -kv[1][1])[:12]
            label = REGIONS.get(region, region)
            row["regions"][region] = {
                "label": label,
                "kernels": round(n, 1),
                "us": round(us, 1),
                "top": [{"name": k, "n": round(c / reps, 2), "us": round(t / reps, 2)} for k, (c, t) in top],
            }
            print(f"  {label:<45}{n:>8.1f} kernels{us:>10.1f} us", flush=True)
            for k, (c, t) in top[: 12 if shapes else 8]:
                print(f"      {t / reps:>8.1f} us {c / reps:>6.1f}x  {k[: 180 if shapes else 120]}", flush=True)
        report["rows"].append(row)
        del lrn
    ops.set_backend(previous)
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=1))
    return report


NO_LAUNCH = frozenset(
    "aten::" + name
    for name in (
        "view as_strided empty empty_strided empty_like reshape _reshape_alias _unsafe_view expand expand_as t "
        "transpose permute unsqueeze squeeze squeeze_ unsqueeze_ select slice narrow unbind split split_with_sizes "
        "chunk unflatten flatten contiguous detach alias lift_fresh resolve_conj resolve_neg result_type to "
        "_to_copy diagonal movedim view_as type_as broadcast_tensors new_empty new_empty_strided resize_ set_ "
        "item _local_scalar_dense is_nonzero size stride matmul linear _has_compatible_shallow_copy_type"
    ).split()
)
"""CPU ops that launch no kernel of their own on CUDA (views, metadata, wrappers whose children launch)."""


def run_census(json_path: str | None, preset_name: str, T: int, B: int) -> dict:
    """Issue 12, part 3, without a GPU: the launches of the captured update, counted on the CPU. The graph's body
    (GraphUpdate(capture=False), the device guard, replay sampled, Q losses on) runs at T x B, q_batch 1024, with
    every learner op taking its custom op (the CPU registrations of torch.ops.foxhunt.*, each counted as one
    launch, its insides not) and torch.profiler records the leaf CPU ops that would launch a kernel on CUDA,
    by REGIONS entry. A proxy, not a measurement: a GEMM counts once whatever cuBLAS splits it into, and an
    elementwise op once whatever TensorIterator does; it moves when a change adds or removes launches."""
    import dataclasses

    from foxhunt_ray.presets import preset
    from learner import graph as G
    from learner.learner import Learner
    from learner.network import identity_obs_stats

    obs_dim, n_actions = market_shapes(preset_name)
    batches = [torch_rollout(T, B, obs_dim, n_actions, seed=s) for s in range(3)]
    use_kernels = ops._use_kernels
    ops._use_kernels = lambda t: True  # the custom ops' CPU registrations stand in for their kernels
    try:
        cfg = dataclasses.replace(
            preset(preset_name), q_batch_size=1024, replay_min_size=1024, cuda_graph=False, nan_guard="fused"
        )
        lrn = Learner(cfg, obs_dim=obs_dim, n_actions=n_actions, device="cpu", seed=0, **identity_obs_stats(obs_dim))
        lrn.graph = G.GraphUpdate(lrn, capture=False)
        mark_regions(lrn)
        mark_regions(lrn.optim)
        mark_regions(lrn.graph, ("_body",))
        steps = 0
        while len(lrn.replay) < cfg.replay_min_size or steps < 2:  # then every step takes the graph's body
            lrn.update(batches[steps % 3])
            steps += 1
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
            lrn.update(batches[steps % 3])
    finally:
        ops._use_kernels = use_kernels
    spans, items = [], []
    for e in prof.events():
        if e.name.startswith("region_"):
            spans.append((e.name[len("region") :], e.time_range.start, e.time_range.end))
    for e in prof.events():
        inside = e.cpu_parent
        while inside is not None and not inside.name.startswith("foxhunt::"):
            inside = inside.cpu_parent
        if inside is not None or not e.name.startswith(("aten::", "foxhunt::")) or e.name in NO_LAUNCH:
            continue
        if e.name.startswith("aten::") and any(
            c.name.startswith("aten::") and c.name not in NO_LAUNCH for c in e.cpu_children
        ):
            continue  # a composite: its children are the launches
        items.append((e.time_range.start, f"{e.name} {e.input_shapes}"[:110], 1.0))
    by_region = attribute_to_regions(spans, items)
    by_region.pop("the rest of update", None)  # the host's work around the body: not in the graph
    total = sum(v[0] for names in by_region.values() for v in names.values())
    report = {"preset": preset_name, "T": T, "B": B, "q_batch": 1024, "launches": total, "regions": {}}
    print(f"{T}x{B} {preset_name}: {total:.0f} launches in the captured update's body (CPU census)")
    for region, names in sorted(by_region.items(), key=lambda kv: -sum(v[0] for v in kv[1].values())):
        n = sum(v[0] for v in names.values())
        label = REGIONS.get(region, "the rest of the body (replay gather, diag stack)")
        top = sorted(names.items(), key=lambda kv: -kv[1][0])
        report["regions"][region] = {"label": label, "launches": n, "ops": {k: int(c) for k, (c, _) in top}}
        print(f"  {label:<55}{n:>5.0f}")
        for k, (c, _) in top[:10]:
            print(f"      {c:>3.0f}x  {k}")
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=1))
    return report


def run_learner(device: str, json_path: str | None, preset_name: str, T: int, B: int, reps: int) -> None:
    import dataclasses

    from foxhunt_ray.presets import preset
    from learner.learner import Learner
    from learner.network import identity_obs_stats

    obs_dim, n_actions = market_shapes(preset_name)
    cfg = dataclasses.replace(preset(preset_name), q_batch_size=1024, replay_min_size=1024)
    batches = [torch_rollout(T, B, obs_dim, n_actions, seed=s) for s in range(4)]
    if device == "cuda":  # the rollout arrives from actors on the host; pinned like the learner actor's queue
        batches = [{k: (v.pin_memory() if torch.is_tensor(v) else v) for k, v in b.items()} for b in batches]
    # cuda_graph: the Learner's CUDA path (kernels + one captured graph per update); cuda_kernels: the same
    # without the graph; reference_graph: the graph over the pure-PyTorch reference ops (the graph's share).
    modes = [
        "cuda_graph",
        "cuda_kernels",
        "reference_graph",
        "eager_reference",
        "compile_default",
        "compile_reduce_overhead",
    ]
    if device != "cuda":
        modes = ["eager_reference", "compile_default"]
    ceilings = measure_ceilings(device)
    report = {
        "preset": preset_name,
        "T": T,
        "B_rollout": B,
        "q_batch": cfg.q_batch_size,
        "hidden": cfg.hidden_dim,
        "obs_dim": obs_dim,
        "n_actions": n_actions,
        "ceilings": ceilings,
        "modes": {},
    }
    for mode in modes:
        ops.set_backend("cuda" if mode.startswith("cuda") else "reference")
        mode_cfg = dataclasses.replace(cfg, cuda_graph=mode.endswith("graph"))
        learner = Learner(
            mode_cfg, obs_dim=obs_dim, n_actions=n_actions, device=device, seed=0, **identity_obs_stats(obs_dim)
        )
        update = learner.update
        entry: dict = {"backend": ops.backend()}
        restore: dict = {}
        try:
            if "compile" in mode:
                torch._dynamo.reset()  # else a later mode reuses graphs compiled under another ops backend
                restore = compile_pieces(learner, "default" if mode.endswith("compile_default") else "reduce-overhead")
                entry["compiled"] = "network methods + loss functions (whole update: see compile_pieces)"
            t0 = time.perf_counter()
            for i in range(6):  # fills replay past replay_min_size; compiles; warms caches
                diag = update(batches[i % 4])
            entry["warmup_s"] = time.perf_counter() - t0
            times = []
            for i in range(reps):
                if device == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                diag = update(batches[i % 4])  # returns floats: the update ends in a device sync
                times.append((time.perf_counter() - t0) * 1e3)
            entry.update(
                {
                    "median_ms": statistics.median(times),
                    "p10_ms": sorted(times)[len(times) // 10],
                    "p90_ms": sorted(times)[9 * len(times) // 10],
                    "q_trained": diag.get("q_trained"),
                    "nan_abort_step": diag.get("nan_abort_step"),
                    "l_dueling": diag.get("l_dueling"),
                }
            )
            if device == "cuda":
                table = str(Path(json_path).with_name(f"profile_{mode}.txt")) if json_path else None
                entry.update(profile_updates(update, batches, table if mode.startswith("cuda") else None))
                if learner.graph is not None:
                    entry["graph_captures"] = learner.graph.captures
                entry.update(count_floor(learner, batches[0], ceilings) if mode == "eager_reference" else {})
        except Exception as exc:
            entry["error"] = repr(exc)[:500]
        finally:
            for (module, name), fn in restore.items():
                setattr(module, name, fn)
        report["modes"][mode] = entry
        print(mode, json.dumps(entry), flush=True)
        if json_path:  # written after every mode, so a run stopped at its time limit keeps what it measured
            Path(json_path).write_text(json.dumps(report, indent=1))
        del learner, update
        if device == "cuda":
            torch.cuda.empty_cache()
    best_compiled = min(
        (m.get("median_ms", math.inf) for k, m in report["modes"].items() if k.startswith("compile")), default=math.inf
    )
    for path in ("cuda_graph", "cuda_kernels"):
        ms = report["modes"].get(path, {}).get("median_ms", math.nan)
        report[f"speedup_{path}_vs_best_compiled"] = best_compiled / ms if ms else math.nan
    print(f"\nLearner.update {preset_name}, rollout T={T} B={B}, q_batch=1024, H={cfg.hidden_dim}, {reps} updates")
    print(
        f"{'mode':<26}{'median ms':>10}{'p10':>8}{'p90':>8}{'kernels/upd':>12}{'host launches':>14}"
        f"{'device busy ms':>15}{'syncs':>7}"
    )
    for mode, e in report["modes"].items():
        print(
            f"{mode:<26}{e.get('median_ms', math.nan):>10.3f}{e.get('p10_ms', math.nan):>8.2f}"
            f"{e.get('p90_ms', math.nan):>8.2f}{e.get('kernels_per_update', math.nan):>12}"
            f"{e.get('host_launch_calls_per_update', math.nan):>14}"
            f"{e.get('device_busy_ms_per_update', math.nan):>15.3f}{e.get('host_syncs_per_update', math.nan):>7}"
        )
        if "error" in e:
            print(f"  {mode} ERROR: {e['error']}")
    print(f"CUDA graph path vs best torch.compile: {report['speedup_cuda_graph_vs_best_compiled']:.2f}x (target >= 2x)")
    print(f"CUDA path without graph vs best torch.compile: {report['speedup_cuda_kernels_vs_best_compiled']:.2f}x")
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=1))


def compile_pieces(learner, mode: str) -> dict:
    """torch.compile every network method and loss function the update calls, each on its own.

    Compiling `learner.update` whole fails: its two backward calls (main loss, then the dueling loss) run
    through one compiled autograd node, and the second finds the saved tensors freed. Pieces keep the
    graphs apart; what stays eager is the glue (replay, Adam on the flat buffer, the NaN guard).
    Returns {(owner, name): original} to undo the module-level patches.
    """
    from learner import diag as D
    from learner import losses as L

    def c(fn):
        return torch.compile(fn, mode=mode, dynamic=False)

    for net in (learner.net, learner.main.target):
        net.encoder = c(net.encoder)
        for method in ("c51_logits", "value", "q_ens", "iqn"):
            setattr(net, method, c(getattr(net, method)))
    if learner.dueling is not None:
        for trainable in (learner.dueling,):
            trainable.net.forward = c(trainable.net.forward)
            trainable.target.forward = c(trainable.target.forward)
    restore = {}
    for module, names in (
        (
            L,
            (
                "c51_target",
                "c51_cross_entropy",
                "iqn_loss",
                "ppo_clip_loss",
                "entropy",
                "distill_kl",
                "value_mse",
                "dueling_loss",
                "gae",
            ),
        ),
        (D, ("qpa",)),
    ):
        for name in names:
            restore[(module, name)] = getattr(module, name)
            setattr(module, name, c(getattr(module, name)))
    return restore


def profile_updates(update, batches, table_path: str | None = None) -> dict:
    """Kernels, device-busy time and host syncs per update (torch.profiler over 5 updates)."""
    from torch.profiler import ProfilerActivity, profile

    n = 5
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(n):
            update(batches[i % 4])
        torch.cuda.synchronize()
    events = prof.events()
    device = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    kernels = [e for e in device if "memcpy" not in e.name.lower() and "memset" not in e.name.lower()]
    syncs = [e for e in events if e.name in ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")]
    # What the host issues: a graph replay is one cudaGraphLaunch for all the kernels it holds.
    launch_api = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaGraphLaunch", "cudaMemcpyAsync", "cudaMemsetAsync")
    launches = [e for e in events if e.name in launch_api]
    graph_launches = [e for e in events if e.name == "cudaGraphLaunch"]
    if table_path:
        Path(table_path).write_text(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40))
    return {
        "kernels_per_update": len(kernels) / n,
        "device_busy_ms_per_update": sum(e.device_time_total for e in device) / 1e3 / n,
        "host_syncs_per_update": len(syncs) / n,
        "host_launch_calls_per_update": len(launches) / n,
        "graph_launches_per_update": len(graph_launches) / n,
    }


def count_floor(learner, batch, ceilings) -> dict:
    """FLOPs (matmuls, torch's counter) and compulsory bytes (each distinct storage touched, once)."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import FlopCounterMode

    class Touched(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.storages: dict[int, int] = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in torch.utils._pytree.tree_leaves((args, kwargs, out)):
                if isinstance(t, torch.Tensor) and t.is_cuda:
                    st = t.untyped_storage()
                    self.storages[st.data_ptr()] = max(self.storages.get(st.data_ptr(), 0), st.nbytes())
            return out

    flops = FlopCounterMode(display=False)
    touched = Touched()
    with flops, touched:
        learner.update(batch)
    total_flops = flops.get_total_flops()
    total_bytes = sum(touched.storages.values())
    return {
        "flops": total_flops,
        "compulsory_bytes": total_bytes,
        "floor_flops_ms": total_flops / (ceilings["fp32_matmul_TFLOPs"] * 1e9),
        "floor_bytes_ms": total_bytes / (ceilings["copy_GBps"] * 1e6),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    stages = ["build", "sanitize", "ops", "learner", "update", "kernels", "regions", "census"]
    parser.add_argument("stage", choices=stages)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--json")
    parser.add_argument("--preset", default="phase4_3")
    parser.add_argument("--T", type=int, default=8)
    parser.add_argument("--B", type=int, default=128)
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--shapes", action="store_true", help="regions: name each kernel with its op and input shapes")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, cuda available: {torch.cuda.is_available()}", flush=True)
    if args.stage == "census":
        run_census(args.json, args.preset, args.T, args.B)
        return 0
    if args.device == "cuda":
        t0 = time.perf_counter()
        ops.load_extension(verbose=args.stage == "build")
        print(f"extension ready in {time.perf_counter() - t0:.1f} s: {ops.backend()}", flush=True)
        ops.set_backend("cuda")
    else:
        ops.set_backend("reference")
    if args.stage == "sanitize":
        run_sanitize(args.device)
    elif args.stage == "ops":
        run_ops(args.device, args.json)
    elif args.stage == "update":
        run_update(args.device, args.json, args.preset, args.reps)
    elif args.stage == "kernels":
        run_kernel_profile(args.device, args.json, args.preset, min(args.reps, 20))
    elif args.stage == "learner":
        run_learner(args.device, args.json, args.preset, args.T, args.B, args.reps)
    elif args.stage == "regions":
        run_regions(args.device, args.json, args.preset, args.T, args.B, min(args.reps, 10), shapes=args.shapes)
    return 0


if __name__ == "__main__":
    sys.exit(main())

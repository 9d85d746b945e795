"""The kernels' numbers: every foxhunt op against the float64 reference at one size, with its gradients.

A built extension is checked with `check_size` on CUDA tensors: one row per output and gradient, each within
TOL of the reference computed in float64 (or no worse than the reference itself in that dtype), and bitwise
repeats. On a machine with a GPU:

    from learner.ops.checks import F32, SIZES, check_size
    rows = []
    check_size(SIZES[1], F32, "cuda", seed=0, results=rows)
    assert all(r["ok"] for r in rows), [r for r in rows if not r["ok"]]

tests/test_kernels_cuda.py runs it at every size in `SIZES` and both dtypes; benchmarks/gpu_check.py runs it
once at SIZES[1] under compute-sanitizer (`sanitize`) and times the ops on `make_inputs`. On CPU tensors the ops
take the reference, so `check_size(..., device="cpu")` tests this harness itself (tests/test_kernels_cuda.py
does, on every machine).
"""

from __future__ import annotations

import math

import torch

from learner import ops
from learner.ops import reference as ref

F32, F64 = torch.float32, torch.float64
TOL = {F32: 2e-5, F64: 1e-12}  # ‖kernel − ref64‖/‖ref64‖; float32 sums of ≤ 1k terms land near 1e-6


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().double(), want.detach().double()
    if not torch.isfinite(got).all():
        return math.inf
    denom = want.norm().item()
    diff = (got - want).norm().item()
    return diff / denom if denom > 0 else diff


def poison(*like: tuple[tuple[int, ...], torch.dtype], device) -> None:
    """Leave NaN in the caching allocator's blocks of these sizes, where the op's outputs will land next."""
    blocks = [torch.full(shape, math.nan, dtype=dtype, device=device) for shape, dtype in like]
    del blocks


def make_inputs(cfg: dict, device, seed: int) -> dict[str, torch.Tensor]:
    """Fresh float64 inputs for every op at one size (cast per dtype by the caller)."""
    g = torch.Generator(device=device).manual_seed(seed)
    B, H, N, Z, T, T2, S = (cfg[k] for k in ("B", "H", "N", "Z", "T", "T2", "steps"))

    def randn(*shape, scale=1.0):
        return torch.randn(*shape, generator=g, device=device, dtype=F64) * scale

    def rand(*shape):
        return torch.rand(*shape, generator=g, device=device, dtype=F64)

    return {
        "h": randn(B, H),
        "w_v": randn(H, scale=H**-0.5),
        "b_v": randn(1),
        "w_a": randn(H, N, scale=H**-0.5),
        "b_a": randn(N),
        "grad_v": randn(B),
        "grad_a": randn(B, N),
        "grad_q": randn(B, N),
        "q_online_next": randn(B, N),
        "q_target_next": randn(B, N),
        "reward": randn(B, scale=3.0),
        "discount": torch.where(rand(B) < 0.1, 0.0, 0.99**3),
        "q": randn(B, N, scale=2.0),
        "action": torch.randint(0, N, (B,), generator=g, device=device),
        "y": randn(B, scale=2.0),
        "next_probs": torch.softmax(randn(B, Z), dim=1),
        "theta": randn(B, T),
        "tau": rand(B, T),
        "target": randn(B, T2),
        "logits": randn(B, N, Z),
        "support": torch.linspace(-10, 10, Z, dtype=F64, device=device),
        "quantiles": randn(B, T, N),
        "grad_ens": randn(B, N),
        "rewards": randn(S, B),
        "values": randn(S, B),
        "next_values": randn(S, B),
        "terminated": rand(S, B) < 0.05,
        "truncated": rand(S, B) < 0.05,
        "pre": randn(B, T, H),
        "w_out": randn(N, H, scale=H**-0.5),
        "b_out": randn(N),
        "grad_iqn": randn(B, T, N),
        "valid": rand(S, B) < 0.9,
        "roll_obs": randn(S + 1, B, 8),
        "roll_actions": torch.randint(0, N, (S, B), generator=g, device=device),
        "soft_target": randn(B * H + 3),
        "soft_online": randn(B * H + 3),
        "pl_logits": randn(B, N),
        "pl_behaviour_logp": -rand(B) * 2 - 0.3,
        "pl_valid": (rand(B) < 0.85) | (torch.arange(B, device=device) == 0),  # at least one valid row
    }


def guarded_adam_case(src: dict, dtype, device, case: str, step: bool = True) -> tuple[dict, tuple]:
    """ops.guarded_adam_ (or, in float64 on the CPU, what the reference gives) on fresh copies of two networks'
    state made from src: {"params", "grads", ...: [main, dueling]} after the step, and its (stats, healthy). The
    main net clips (max norm 1), the dueling head does not; case "nan_grad" puts a NaN in the head's gradient,
    "inf_lr" gives the main net an infinite learning rate. step=False: the state before the step."""
    main, head = src["soft_online"], src["w_a"].reshape(-1)

    def net(v, k):
        return v.to(device=device, dtype=dtype).clone() * k

    state = {
        "params": [net(main, 1.0), net(head, 1.0)],
        "grads": [net(src["soft_target"], 3.0), net(head.flip(0), 0.01)],
        "exp_avgs": [net(main.flip(0), 0.1), net(head, 0.1)],
        "exp_avg_sqs": [net(main.square(), 0.01), net(head.square(), 0.01)],
        "steps": [torch.tensor(4.0, device=device), torch.tensor(0.0, device=device)],
        "targets": [net(src["soft_target"], 1.0), net(head, 0.5)],
    }
    if case == "nan_grad":
        state["grads"][1][-1] = math.nan
    if not step:
        return state, ()
    lr_main = math.inf if case == "inf_lr" else 1e-3
    lrs = [torch.tensor(lr_main, device=device), torch.tensor(3e-4, dtype=F64, device=device)]
    n = main.numel()
    checks = [src["reward"][0].to(device=device, dtype=dtype), src["y"][0].to(device=device, dtype=dtype)]
    out = ops.guarded_adam_(
        state["params"], state["grads"], state["exp_avgs"], state["exp_avg_sqs"], state["steps"], state["targets"],
        lrs, checks, [n // 3, n // 2, n], [1.0, 1e9], beta1=0.9, beta2=0.999, eps=1e-8, tau=0.005,
    )  # fmt: skip
    return state, out


def check_size(cfg: dict, dtype, device, seed: int, results: list) -> None:
    """Append one row per check to `results`: {"op", "what", "dtype", **cfg, "ok"} and, for numbers, "rel_err"
    (‖got − ref64‖/‖ref64‖ within TOL[dtype], or 4x the reference's own error in this dtype). Covers every op
    forward and backward (dueling, its Bellman target and Huber loss, C51, the IQN loss, ensemble_q, iqn_head,
    GAE, n-step returns, the replay write, the soft update), outputs poisoned with NaN first, and bitwise repeats."""
    x64 = make_inputs(cfg, device, seed)
    # The truth: the reference in float64 on the dtype-rounded inputs, so only kernel arithmetic is measured.
    x = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in x64.items()}
    xt = {k: (v.double() if v.is_floating_point() else v) for k, v in x.items()}
    B, N = cfg["B"], cfg["N"]

    def record(op, what, got, want, ref32=None):
        err = rel_err(got, want)
        row = {"op": op, "what": what, "dtype": str(dtype).removeprefix("torch."), **cfg, "rel_err": err}
        if ref32 is not None:
            row["ref_same_dtype_rel_err"] = rel_err(ref32, want)
        # Never worse than the reference itself in this dtype (C51 positions b = (Tz − v_min)/Δz carry an
        # absolute rounding error of ~Z·ε in float32, whoever computes them).
        row["ok"] = bool(err <= max(TOL[dtype], 4 * row.get("ref_same_dtype_rel_err", 0.0)))
        results.append(row)

    def flag(what, ok):  # a yes/no check of guarded_adam_
        row = {"op": "guarded_adam_", "what": what, "dtype": str(dtype).removeprefix("torch."), **cfg}
        results.append({**row, "rel_err": 0.0 if ok else math.inf, "ok": bool(ok)})

    def leaves(*names, src):
        return [src[n].detach().clone().requires_grad_() for n in names]

    # dueling forward + backward (through autograd, i.e. the decompose-and-backward kernel)
    names = ("h", "w_v", "b_v", "w_a", "b_a")
    ins, ins_t = leaves(*names, src=x), leaves(*names, src=xt)
    poison(((B,), dtype), ((B, N), dtype), ((B, N), dtype), device=device)
    out = ops.dueling_forward(*ins)
    out_t = ref.dueling_forward(*ins_t)
    for label, got, want in zip(("v", "a", "q"), out, out_t, strict=True):
        record("dueling_forward", label, got, want, ref.dueling_forward(*[t.detach() for t in ins])["vaq".index(label)])
    gvaq = (x["grad_v"], x["grad_a"], x["grad_q"])
    grads = torch.autograd.grad(out, ins, gvaq)
    grads_t = torch.autograd.grad(out_t, ins_t, tuple(g.double() for g in gvaq))
    for name, got, want in zip(names, grads, grads_t, strict=True):
        record("dueling_backward", f"grad_{name}", got, want)
    # only Q used (the learner's case): unused V/A grads arrive as None
    out = ops.dueling_forward(*ins)
    grads = torch.autograd.grad(out[2], ins, x["grad_q"])
    grads_t = torch.autograd.grad(ref.dueling_forward(*ins_t)[2], ins_t, xt["grad_q"])
    for name, got, want in zip(names, grads, grads_t, strict=True):
        record("dueling_backward", f"grad_{name}|q_only", got, want)

    poison(((B,), dtype), device=device)
    got = ops.dueling_bellman_target(x["q_online_next"], x["q_target_next"], x["reward"], x["discount"])
    want = ref.dueling_bellman_target(xt["q_online_next"], xt["q_target_next"], xt["reward"], xt["discount"])
    record("dueling_bellman_target", "y", got, want)

    q, q_t = leaves("q", src=x)[0], leaves("q", src=xt)[0]
    poison(((), dtype), ((B, N), dtype), device=device)
    loss = ops.dueling_huber_loss(q, x["action"], x["y"], 1.0)
    loss_t = ref.dueling_huber_loss(q_t, xt["action"], xt["y"], 1.0)
    record("dueling_huber_loss", "loss", loss, loss_t)
    record("dueling_huber_loss", "grad_q", torch.autograd.grad(loss, q)[0], torch.autograd.grad(loss_t, q_t)[0])

    poison(((B, cfg["Z"]), dtype), device=device)
    got = ops.c51_project(x["next_probs"], x["reward"], x["discount"], -10.0, 10.0)
    want = ref.c51_project(xt["next_probs"], xt["reward"], xt["discount"], -10.0, 10.0)
    record(
        "c51_project", "target", got, want, ref.c51_project(x["next_probs"], x["reward"], x["discount"], -10.0, 10.0)
    )

    th, th_t = leaves("theta", src=x)[0], leaves("theta", src=xt)[0]
    poison(((), dtype), ((B, cfg["T"]), dtype), ((B,), dtype), device=device)
    loss = ops.iqn_quantile_huber_loss(th, x["tau"], x["target"], 1.0)
    loss_t = ref.iqn_quantile_huber_loss(th_t, xt["tau"], xt["target"], 1.0)
    record("iqn_quantile_huber_loss", "loss", loss, loss_t)
    record(
        "iqn_quantile_huber_loss", "grad_theta", torch.autograd.grad(loss, th)[0], torch.autograd.grad(loss_t, th_t)[0]
    )

    def check_ensemble(lg, qn, lg_t, qn_t, suffix: str) -> None:
        poison(((B, N), dtype), device=device)
        got = ops.ensemble_q(lg, x["support"], qn, 0.5)
        want = ref.ensemble_q(lg_t, xt["support"], qn_t, 0.5)
        record("ensemble_q", f"q_ens{suffix}", got, want)
        g_got = torch.autograd.grad(got, (lg, qn), x["grad_ens"])
        g_want = torch.autograd.grad(want, (lg_t, qn_t), xt["grad_ens"])
        record("ensemble_q_backward", f"grad_logits{suffix}", g_got[0], g_want[0])
        record("ensemble_q_backward", f"grad_quantiles{suffix}", g_got[1], g_want[1])

    check_ensemble(*leaves("logits", "quantiles", src=x), *leaves("logits", "quantiles", src=xt), "")
    # The learner's shape: the IQN mean over fixed midpoints arrives as one tau, quantiles [B, 1, N].
    qn1, qn1_t = (t[:, :1, :].detach().clone().requires_grad_() for t in (x["quantiles"], xt["quantiles"]))
    lg1, lg1_t = (t.detach().clone().requires_grad_() for t in (x["logits"], xt["logits"]))
    check_ensemble(lg1, qn1, lg1_t, qn1_t, "|T1")

    # IQN head (forward through the kernel, backward through autograd, i.e. iqn_head_backward)
    names = ("h", "pre", "w_out", "b_out")
    ih, ih_t = leaves(*names, src=x), leaves(*names, src=xt)
    poison(((B, cfg["T"], N), dtype), device=device)
    got = ops.iqn_head(*ih)
    want = ref.iqn_head(*ih_t)
    record("iqn_head", "q", got, want, ref.iqn_head(*[t.detach() for t in ih]))
    poison(((B, cfg["H"]), dtype), ((B, cfg["T"], cfg["H"]), dtype), device=device)
    grads = torch.autograd.grad(got, ih, x["grad_iqn"])
    grads_t = torch.autograd.grad(want, ih_t, xt["grad_iqn"])
    for name, g_got, g_want in zip(names, grads, grads_t, strict=True):
        record("iqn_head_backward", f"grad_{name}", g_got, g_want)
    del got, want, grads, grads_t
    ih1 = torch.autograd.grad(ops.iqn_head(*ih), ih, x["grad_iqn"])
    ih2 = torch.autograd.grad(ops.iqn_head(*ih), ih, x["grad_iqn"])
    same_ih = all(torch.equal(p, r) for p, r in zip(ih1, ih2, strict=True))
    results.append({"op": "iqn_head", "what": "bitwise_repeat", "dtype": str(dtype), **cfg, "ok": bool(same_ih)})
    del ih1, ih2

    ends = x["terminated"] | x["truncated"]
    poison(((cfg["steps"], B), dtype), ((cfg["steps"], B), dtype), device=device)
    got = ops.gae(x["rewards"], x["values"], x["next_values"], x["terminated"], ends, 0.99, 0.95)
    want = ref.gae(xt["rewards"], xt["values"], xt["next_values"], x["terminated"], ends, 0.99, 0.95)
    record("gae", "advantages", got[0], want[0])
    record("gae", "returns", got[1], want[1])

    # n-step returns and the replay write (the learner's per-payload and per-step host work, as kernels)
    got = ops.nstep_returns(x["rewards"], x["valid"], x["terminated"], x["truncated"], 0.99, 3, 0.5)
    want = ref.nstep_returns(xt["rewards"], x["valid"], x["terminated"], x["truncated"], 0.99, 3, 0.5)
    record("nstep_returns", "ret", got[0], want[0])
    record("nstep_returns", "discount", got[1], want[1])
    exact = torch.equal(got[2], want[2])
    results.append({"op": "nstep_returns", "what": "next_row_exact", "dtype": str(dtype), **cfg, "ok": exact})
    flat = x["valid"].reshape(-1).nonzero().squeeze(1)
    cap = max(1, flat.numel() + 5)
    cursor = cap - 3  # wraps
    ring = {
        "obs": torch.zeros(cap, 8, dtype=dtype, device=device),
        "action": torch.zeros(cap, dtype=torch.int64, device=device),
        "ret": torch.zeros(cap, dtype=dtype, device=device),
        "discount": torch.zeros(cap, dtype=dtype, device=device),
        "next_obs": torch.zeros(cap, 8, dtype=dtype, device=device),
    }
    ring_ref = {k: v.clone() for k, v in ring.items()}
    ops.replay_write_(ring, x["roll_obs"], x["roll_actions"], got, flat, cursor)
    ref.replay_write_(*ring_ref.values(), x["roll_obs"], x["roll_actions"], *got, flat, cursor)
    same = all(torch.equal(ring[k], ring_ref[k]) for k in ring)
    results.append({"op": "replay_write_", "what": "rows_exact", "dtype": str(dtype), **cfg, "ok": bool(same)})

    for offset in (0, 1):  # offset 1 breaks 16-byte alignment: the scalar path
        tgt, onl = x["soft_target"][offset:].clone(), x["soft_online"][offset:].clone()
        tgt_t = xt["soft_target"][offset:].clone()
        ops.soft_update_(tgt, onl, 0.005)
        ref.soft_update_(tgt_t, xt["soft_online"][offset:], 0.005)
        record("soft_update_", f"target|offset{offset}", tgt, tgt_t)

    # the on-policy losses: the ten stats, and the gradients of a learner-like weighting through autograd
    pl = ("pl_logits", "grad_v")  # logits [B, N] and values [B], the differentiable inputs
    for flip in (False, True):
        (lg, vl), (lg_t, vl_t) = leaves(*pl, src=x), leaves(*pl, src=xt)

        def rest(src, flip=flip):
            return (src["q"], src["y"], src["reward"], src["action"], src["pl_behaviour_logp"], x["pl_valid"])

        poison(((10,), dtype), ((3, B, N), dtype), ((B,), dtype), device=device)
        q_, r_, a_, act, beh, val = rest(x)
        got = ops.policy_losses(lg, q_, vl, r_, a_, act, beh, val, clip=0.2, temperature=0.5, normalize=True,
                                flip_distill=flip)  # fmt: skip
        q_, r_, a_, act, beh, val = rest(xt)
        want = ref.policy_losses(lg_t, q_, vl_t, r_, a_, act, beh, val, 0.2, 0.5, True, flip)
        tag = "|flip" if flip else ""
        record("policy_losses", f"stats{tag}", torch.stack(list(got)), torch.stack(list(want)))
        w = torch.tensor([1.0, -0.01, 0.1, 0.5], dtype=F64, device=device)
        g_got = torch.autograd.grad((torch.stack(list(got[:4])) * w.to(dtype)).sum(), (lg, vl))
        g_want = torch.autograd.grad((torch.stack(list(want[:4])) * w).sum(), (lg_t, vl_t))
        record("policy_losses", f"grad_logits{tag}", g_got[0], g_want[0])
        record("policy_losses", f"grad_values{tag}", g_got[1], g_want[1])

    # the guarded Adam step over two networks (the main net's three groups, the dueling head): healthy, a NaN
    # gradient, and an infinite learning rate (non-finite new parameters); the reference in float64 on the CPU
    for case in ("healthy", "nan_grad", "inf_lr"):
        got_state, got_out = guarded_adam_case(x, dtype, device, case)
        want_state, want_out = guarded_adam_case(xt, F64, "cpu", case)
        if case == "healthy":
            record("guarded_adam_", "stats", got_out[0], want_out[0].to(device))
            for name in ("params", "grads", "exp_avgs", "exp_avg_sqs", "steps", "targets"):
                got, want = (torch.cat([t.reshape(-1) for t in st[name]]) for st in (got_state, want_state))
                record("guarded_adam_", name, got, want.to(device))
        else:  # nothing but the gradients' clipping written: the state as it was, bit for bit
            before, _ = guarded_adam_case(x, dtype, device, case, step=False)
            kept = all(
                torch.equal(a, b) for k in before if k != "grads" for a, b in zip(before[k], got_state[k], strict=True)
            )
            flag(f"restored|{case}", kept)
        flag(f"healthy|{case}", bool(got_out[1]) == bool(want_out[1]) == (case == "healthy"))

    # Run-to-run determinism (no atomics anywhere): a second call gives the same bits.
    a1 = ops.c51_project(x["next_probs"], x["reward"], x["discount"], -10.0, 10.0)
    poison(((B, cfg["Z"]), dtype), device=device)
    a2 = ops.c51_project(x["next_probs"], x["reward"], x["discount"], -10.0, 10.0)
    l1 = ops.iqn_quantile_huber_loss(x["theta"], x["tau"], x["target"])
    l2 = ops.iqn_quantile_huber_loss(x["theta"], x["tau"], x["target"])
    d1 = torch.autograd.grad(ops.dueling_forward(*ins)[2], ins, x["grad_q"])
    d2 = torch.autograd.grad(ops.dueling_forward(*ins)[2], ins, x["grad_q"])
    pl_args = (x["q"], x["grad_v"], x["y"], x["reward"], x["action"], x["pl_behaviour_logp"], x["pl_valid"])
    p1, p2 = (
        torch.stack(list(ops.policy_losses(x["pl_logits"], *pl_args, clip=0.2, temperature=0.5, normalize=True)))
        for _ in range(2)
    )
    same = torch.equal(a1, a2) and torch.equal(l1, l2) and all(torch.equal(p, r) for p, r in zip(d1, d2, strict=True))
    same = same and torch.equal(p1, p2)
    g1, g2 = (guarded_adam_case(x, dtype, device, "healthy") for _ in range(2))
    same = same and all(torch.equal(a, b) for k in g1[0] for a, b in zip(g1[0][k], g2[0][k], strict=True))
    same = same and torch.equal(g1[1][0], g2[1][0])
    results.append({"op": "all", "what": "bitwise_repeat", "dtype": str(dtype), **cfg, "ok": bool(same)})


CHECKS_PER_SIZE = 58  # the rows check_size records: every op's outputs and gradients, and the bitwise repeat

SIZES = [  # a one-row edge, the learner's shapes (B = 128, 1024), odd sizes past every tile, a wide batch, and the
    # market's seven actions with H past one warp of iqn_head packs, taus not a multiple of 4, B not of 8
    {"B": 1, "H": 37, "N": 2, "Z": 2, "T": 1, "T2": 3, "steps": 1},
    {"B": 128, "H": 512, "N": 9, "Z": 51, "T": 32, "T2": 32, "steps": 16},
    {"B": 1024, "H": 512, "N": 9, "Z": 51, "T": 32, "T2": 32, "steps": 64},
    {"B": 333, "H": 1000, "N": 70, "Z": 1100, "T": 300, "T2": 200, "steps": 5},
    {"B": 4096, "H": 512, "N": 3, "Z": 101, "T": 64, "T2": 64, "steps": 128},
    {"B": 33, "H": 132, "N": 7, "Z": 11, "T": 5, "T2": 3, "steps": 3},
]

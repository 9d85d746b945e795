"""The learner's hot paths as ops: CUDA kernels where built, the pure-PyTorch reference everywhere else.

Call these functions, never `torch.ops.foxhunt.*` directly: each validates its inputs (shapes, dtypes,
devices, with an error naming the tensor and the fix) and then runs the `foxhunt::` custom op on CUDA
tensors when the extension is loaded, or `learner.ops.reference` otherwise. `backend()` says which path is
active and why.

Backend choice: `FOXHUNT_OPS` = "auto" (default: build the extension on the first call with a CUDA
tensor, fall back to the reference if that fails), "cuda" (build or raise) or "reference" (never build);
`set_backend()` changes it at run time. The build is cached in `FOXHUNT_EXT_DIR` (default <repo>/build/foxhunt_ext
in a checkout, ~/.cache/foxhunt_ray/ext for an installed wheel, which carries the sources: cuda_sources()), so only
the first process on a machine pays for nvcc.
"""

from __future__ import annotations

import itertools
import os
import threading
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor

from learner.ops import library, reference  # noqa: F401 - importing library registers the foxhunt:: schemas

__all__ = [
    "PolicyLosses",
    "backend",
    "c51_project",
    "dueling_bellman_target",
    "dueling_forward",
    "dueling_huber_loss",
    "ensemble_q",
    "gae",
    "guarded_adam_",
    "iqn_head",
    "iqn_quantile_huber_loss",
    "load_extension",
    "nstep_returns",
    "policy_losses",
    "replay_write_",
    "set_backend",
    "soft_update_",
    "uses_kernels",
]

REPO_ROOT = Path(__file__).resolve().parents[2]


def cuda_sources() -> Path:
    """The kernels' sources (kernels/*.cu, binding/*.cpp): a checkout's cuda/, or learner/ops/csrc/ of an installed
    wheel (pyproject.toml maps cuda/ there)."""
    for root in (REPO_ROOT / "cuda", Path(__file__).resolve().parent / "csrc"):
        if (root / "kernels").is_dir() and (root / "binding").is_dir():
            return root
    raise RuntimeError(
        f"the CUDA sources are neither in {REPO_ROOT / 'cuda'} (a checkout) nor in "
        f"{Path(__file__).resolve().parent / 'csrc'} (an installed wheel): reinstall foxhunt-ray"
    )


def default_build_dir() -> Path:
    """Where the extension is built unless FOXHUNT_EXT_DIR says: <checkout>/build/foxhunt_ext, or for an installed
    package the user's cache (~/.cache/foxhunt_ray/ext: site-packages may not be writable)."""
    if (REPO_ROOT / "cuda").is_dir():
        return REPO_ROOT / "build" / "foxhunt_ext"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "foxhunt_ray" / "ext"


_MODES = ("auto", "cuda", "reference")


class _State:
    mode: str = os.environ.get("FOXHUNT_OPS", "auto")
    loaded: bool = False
    reason: str = "not decided yet: no op has run on a CUDA tensor"
    lock = threading.Lock()


if _State.mode not in _MODES:
    raise ValueError(f"FOXHUNT_OPS={_State.mode!r} must be one of {_MODES}; unset it for 'auto'")


def set_backend(mode: str) -> None:
    """'auto', 'cuda' (load the extension now, raising if it cannot be built) or 'reference'."""
    if mode not in _MODES:
        raise ValueError(f"backend mode={mode!r} must be one of {_MODES}")
    _State.mode = mode
    if mode == "cuda":
        load_extension()


def backend() -> str:
    """Which path the ops take on CUDA tensors, and why (CPU tensors always take the reference)."""
    if _State.mode == "reference":
        return "reference: forced by FOXHUNT_OPS/set_backend('reference')"
    if _State.loaded:
        return f"cuda: {_State.reason}"
    if not torch.cuda.is_available():
        return "reference: no CUDA device visible to torch"
    return f"reference: {_State.reason}"


def load_extension(verbose: bool = False) -> None:
    """Build (once, cached) and load the CUDA kernels' torch binding; raises RuntimeError on failure."""
    with _State.lock:
        if _State.loaded:
            return
        if not torch.cuda.is_available():
            raise RuntimeError("cannot load the foxhunt CUDA extension: torch sees no CUDA device")
        from torch.utils import cpp_extension

        src = cuda_sources()
        kernels = sorted((src / "kernels").glob("*.cu"))
        bindings = sorted((src / "binding").glob("*.cpp"))
        build_dir = Path(os.environ.get("FOXHUNT_EXT_DIR") or default_build_dir())
        build_dir.mkdir(parents=True, exist_ok=True)
        major, minor = torch.cuda.get_device_capability()
        # One architecture, the one present: building for torch's whole default list costs minutes.
        os.environ.setdefault("TORCH_CUDA_ARCH_LIST", f"{major}.{minor}")
        cpp_extension.load(
            name="foxhunt_cuda_ext",
            sources=[str(p) for p in bindings + kernels],
            extra_include_paths=[str(src / "kernels")],
            extra_cflags=["-O3"],
            extra_cuda_cflags=["-O3", "-lineinfo"],
            build_directory=str(build_dir),
            is_python_module=False,
            verbose=verbose,
        )
        _State.loaded = True
        _State.reason = f"foxhunt_cuda_ext built for sm_{major}{minor} in {build_dir}"


def _use_kernels(t: Tensor) -> bool:
    if not t.is_cuda or _State.mode == "reference":
        return False
    if not _State.loaded:
        try:
            load_extension()
        except Exception as exc:  # auto mode falls back; cuda mode must not
            if _State.mode == "cuda":
                raise
            _State.mode = "reference"
            _State.reason = f"building the CUDA extension failed ({type(exc).__name__}: {exc})"
            return False
    return True


def uses_kernels(t: Tensor) -> bool:
    """Whether the ops run their CUDA kernels on tensors like t (in "auto" mode the first call builds the
    extension; a failed build falls back to the reference, as every op does)."""
    return _use_kernels(t)


# ---- input checks: host-side metadata only, never a device sync ------------------------------------------


def _check(name: str, t: Tensor, shape: tuple, like: Tensor | None = None, floating: bool = True) -> None:
    if not isinstance(t, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != len(shape) or any(
        want is not None and got != want for got, want in zip(t.shape, shape, strict=True)
    ):
        want = "[" + ", ".join("?" if s is None else str(s) for s in shape) + "]"
        raise ValueError(f"{name} has shape {list(t.shape)}, expected {want}")
    if floating and t.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"{name} has dtype {t.dtype}; pass float32 (or float64)")
    if like is not None:
        if floating and t.dtype != like.dtype:
            raise TypeError(f"{name} has dtype {t.dtype} but the other inputs are {like.dtype}; cast it")
        if t.device != like.device:
            raise ValueError(f"{name} is on {t.device} but the other inputs are on {like.device}; move it")


def _check_mask(name: str, mask: Tensor, like: Tensor, like_name: str) -> None:
    """A bool mask of like's shape, on like's device (gae, nstep_returns)."""
    _check(name, mask, tuple(like.shape), floating=False)
    if mask.dtype != torch.bool:
        raise TypeError(f"{name} has dtype {mask.dtype}; pass a bool mask")
    if mask.device != like.device:
        raise ValueError(f"{name} is on {mask.device} but {like_name} are on {like.device}; move it")


def dueling_forward(
    h: Tensor, w_v: Tensor, b_v: Tensor, w_a: Tensor, b_a: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """(V[B], A[B,N], Q[B,N]) with Q = V + A − mean_a A; differentiable w.r.t. h and all four weights."""
    _check("h", h, (None, None))
    _rows, hidden = h.shape
    _check("w_v", w_v, (hidden,), h)
    _check("b_v", b_v, (1,), h)
    _check("w_a", w_a, (hidden, None), h)
    _check("b_a", b_a, (w_a.shape[1],), h)
    if _use_kernels(h):
        return torch.ops.foxhunt.dueling_forward(h, w_v, b_v, w_a, b_a)
    return reference.dueling_forward(h, w_v, b_v, w_a, b_a)


def dueling_bellman_target(
    q_online_next: Tensor, q_target_next: Tensor, reward: Tensor, discount: Tensor
) -> Tensor:
    """y[B] = reward + discount·q_target_next[argmax_a q_online_next] (first max on ties); no gradient."""
    _check("q_online_next", q_online_next, (None, None))
    _check("q_target_next", q_target_next, tuple(q_online_next.shape), q_online_next)
    _check("reward", reward, (q_online_next.shape[0],), q_online_next)
    _check("discount", discount, (q_online_next.shape[0],), q_online_next)
    if _use_kernels(q_online_next):
        return torch.ops.foxhunt.dueling_bellman_target(q_online_next, q_target_next, reward, discount)
    return reference.dueling_bellman_target(q_online_next, q_target_next, reward, discount)


def _check_kappa(kappa: float) -> None:
    if not kappa > 0:
        raise ValueError(f"kappa={kappa!r} must be > 0 (the Huber threshold)")


def dueling_huber_loss(q: Tensor, action: Tensor, y: Tensor, kappa: float = 1.0) -> Tensor:
    """Scalar mean_b huber_κ(q[b, action_b] − y_b); differentiable w.r.t. q.

    On the CUDA path an action outside [0, N) makes the loss NaN (a kernel cannot raise without a sync),
    which the learner's non-finite guard turns into a skipped step.
    """
    _check("q", q, (None, None))
    _check("action", action, (q.shape[0],), floating=False)
    if action.dtype != torch.int64:
        raise TypeError(f"action has dtype {action.dtype}; pass int64 (action.long())")
    if action.device != q.device:
        raise ValueError(f"action is on {action.device} but q is on {q.device}; move it")
    _check("y", y, (q.shape[0],), q)
    _check_kappa(kappa)
    if _use_kernels(q):
        return torch.ops.foxhunt.dueling_huber_loss(q, action, y, float(kappa))[0]
    return reference.dueling_huber_loss(q, action, y, kappa)


def c51_project(next_probs: Tensor, reward: Tensor, discount: Tensor, v_min: float, v_max: float) -> Tensor:
    """target[B,Z]: r + discount·z projected onto linspace(v_min, v_max, Z), clamped; no gradient."""
    _check("next_probs", next_probs, (None, None))
    if next_probs.shape[1] < 2:
        raise ValueError(f"next_probs has {next_probs.shape[1]} atoms; C51 needs Z >= 2")
    _check("reward", reward, (next_probs.shape[0],), next_probs)
    _check("discount", discount, (next_probs.shape[0],), next_probs)
    if not v_min < v_max:
        raise ValueError(f"v_min={v_min!r} must be < v_max={v_max!r}")
    if _use_kernels(next_probs):
        return torch.ops.foxhunt.c51_project(next_probs, reward, discount, float(v_min), float(v_max))
    return reference.c51_project(next_probs, reward, discount, v_min, v_max)


def iqn_quantile_huber_loss(theta: Tensor, tau: Tensor, target: Tensor, kappa: float = 1.0) -> Tensor:
    """Scalar mean_b Σ_i mean_j |τ_i − 1{u_ij<0}|·huber_κ(u_ij)/κ, u_ij = target_j − θ_i; grad w.r.t. θ."""
    _check("theta", theta, (None, None))
    _check("tau", tau, tuple(theta.shape), theta)
    _check("target", target, (theta.shape[0], None), theta)
    _check_kappa(kappa)
    if _use_kernels(theta):
        return torch.ops.foxhunt.iqn_quantile_huber_loss(theta, tau, target, float(kappa))[0]
    return reference.iqn_quantile_huber_loss(theta, tau, target, kappa)


IQN_HEAD_MAX_ACTIONS = 16
"""The iqn_head kernel keeps one accumulator per action in registers; wider action sets take the reference."""


def iqn_head(h: Tensor, pre: Tensor, w_out: Tensor, b_out: Tensor) -> Tensor:
    """q[B,T,N] = (h[B,1,H] * relu(pre[B,T,H])) W_out[N,H]^T + b_out; differentiable w.r.t. all four.

    The IQN head after its tau embedding (pre = Linear(cos-embedding(tau))); the kernel never writes the
    [B,T,H] product, which is the biggest tensor of a learner update."""
    _check("h", h, (None, None))
    rows, hidden = h.shape
    _check("pre", pre, (rows, None, hidden), h)
    _check("w_out", w_out, (None, hidden), h)
    _check("b_out", b_out, (w_out.shape[0],), h)
    if _use_kernels(h) and 1 <= w_out.shape[0] <= IQN_HEAD_MAX_ACTIONS:
        return torch.ops.foxhunt.iqn_head(h, pre, w_out, b_out)
    return reference.iqn_head(h, pre, w_out, b_out)


def ensemble_q(c51_logits: Tensor, support: Tensor, iqn_quantiles: Tensor, w: float) -> Tensor:
    """q_ens[B,N] = w·Σ_z softmax_z(logits)·z + (1−w)·mean_T quantiles; grad w.r.t. logits and quantiles."""
    _check("c51_logits", c51_logits, (None, None, None))
    rows, n_actions, n_atoms = c51_logits.shape
    _check("support", support, (n_atoms,), c51_logits)
    _check("iqn_quantiles", iqn_quantiles, (rows, None, n_actions), c51_logits)
    if not 0.0 <= w <= 1.0:
        raise ValueError(f"ensemble weight w={w!r} must be in [0, 1]")
    if _use_kernels(c51_logits):
        return torch.ops.foxhunt.ensemble_q(c51_logits, support, iqn_quantiles, float(w))
    return reference.ensemble_q(c51_logits, support, iqn_quantiles, w)


class PolicyLosses(NamedTuple):
    """policy_losses' result (reference.POLICY_LOSS_NAMES), each a 0-dim tensor."""

    l_pi: Tensor
    entropy: Tensor
    l_distill: Tensor
    l_v: Tensor
    approx_kl: Tensor
    clip_frac: Tensor
    qpa: Tensor
    adv_mean: Tensor
    v_mean: Tensor
    q_mean: Tensor


def policy_losses(
    logits: Tensor,
    q_ens: Tensor,
    values: Tensor,
    returns: Tensor,
    adv: Tensor,
    actions: Tensor,
    behaviour_logp: Tensor,
    valid: Tensor,
    *,
    clip: float,
    temperature: float,
    normalize: bool,
    flip_distill: bool = False,
) -> PolicyLosses:
    """The on-policy losses and their diagnostics over R rollout rows (reference.policy_losses says what each is);
    l_pi, entropy and l_distill are differentiable w.r.t. logits[R, N], l_v w.r.t. values[R]."""
    _check("logits", logits, (None, None))
    rows, n_actions = logits.shape
    _check("q_ens", q_ens, (rows, n_actions), logits)
    for name, t in (("values", values), ("returns", returns), ("adv", adv), ("behaviour_logp", behaviour_logp)):
        _check(name, t, (rows,), logits)
    _check("actions", actions, (rows,), floating=False)
    if actions.dtype != torch.int64:
        raise TypeError(f"actions has dtype {actions.dtype}; pass int64 (actions.long())")
    _check_mask("valid", valid, values, "values")
    if not clip > 0 or not temperature > 0:
        raise ValueError(f"clip={clip!r} and temperature={temperature!r} must both be > 0")
    args = (logits, q_ens, values, returns, adv, actions, behaviour_logp, valid)
    if _use_kernels(logits):
        stats, _, _ = torch.ops.foxhunt.policy_losses(
            *args, float(clip), float(temperature), bool(normalize), bool(flip_distill)
        )
        return PolicyLosses(*stats.unbind(0))
    return PolicyLosses(*reference.policy_losses(*args, clip, temperature, normalize, flip_distill))


def gae(
    rewards: Tensor,
    values: Tensor,
    next_values: Tensor,
    terminated: Tensor,
    episode_end: Tensor,
    gamma: float,
    lam: float,
) -> tuple[Tensor, Tensor]:
    """(advantages[T,B], returns[T,B]); terminated cuts the bootstrap, episode_end cuts the trace."""
    _check("values", values, (None, None))
    _check("rewards", rewards, tuple(values.shape), values)
    _check("next_values", next_values, tuple(values.shape), values)
    for name, mask in (("terminated", terminated), ("episode_end", episode_end)):
        _check_mask(name, mask, values, "values")
    if not (0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0):
        raise ValueError(f"gamma={gamma!r} and lam={lam!r} must both be in [0, 1]")
    if _use_kernels(values):
        return torch.ops.foxhunt.gae(
            rewards, values, next_values, terminated, episode_end, float(gamma), float(lam)
        )
    return reference.gae(rewards, values, next_values, terminated, episode_end, gamma, lam)


def nstep_returns(
    rewards: Tensor, valid: Tensor, terminated: Tensor, truncated: Tensor, gamma: float, n: int, reward_scale: float
) -> tuple[Tensor, Tensor, Tensor]:
    """(ret, discount, next_row), each [T, B], of every step of a [T, B] rollout (learner.replay.nstep_returns)."""
    _check("rewards", rewards, (None, None))
    for name, mask in (("valid", valid), ("terminated", terminated), ("truncated", truncated)):
        _check_mask(name, mask, rewards, "the rewards")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma={gamma!r} must be in [0, 1]")
    if not (isinstance(n, int) and 1 <= n <= 1024):
        raise ValueError(f"n={n!r} must be an int in [1, 1024]")
    if _use_kernels(rewards):
        return torch.ops.foxhunt.nstep_returns(
            rewards, valid, terminated, truncated, float(gamma), int(n), float(reward_scale)
        )
    return reference.nstep_returns(rewards, valid, terminated, truncated, gamma, n, reward_scale)


def replay_write_(
    data: dict[str, Tensor],
    obs: Tensor,
    actions: Tensor,
    returns: tuple[Tensor, Tensor, Tensor],
    flat_idx: Tensor,
    cursor: int,
) -> None:
    """In place, in one launch: replay ring rows (cursor + i) % C <- the n-step transition of rollout step
    flat_idx[i] = t * B + b (obs[T+1, B, D], actions[T, B] and `returns` = nstep_returns of the rollout);
    `data` holds the ring's obs, action, ret, discount and next_obs (learner.replay.ReplayBuffer.data)."""
    ret, discount, next_row = returns
    d_obs = data["obs"]
    _check("actions", actions, (None, None), floating=False)
    t_len, b = actions.shape
    _check("obs", obs, (t_len + 1, b, d_obs.shape[1]), d_obs)
    _check("ret", ret, (t_len, b), d_obs)
    _check("discount", discount, (t_len, b), d_obs)
    _check("next_row", next_row, (t_len, b), floating=False)
    _check("flat_idx", flat_idx, (None,), floating=False)
    if flat_idx.numel() > d_obs.shape[0] or not 0 <= cursor < d_obs.shape[0]:
        raise ValueError(
            f"replay_write_: {flat_idx.numel()} transitions at cursor {cursor} in a ring of {d_obs.shape[0]}: pass at "
            "most the ring's capacity (the newest ones), from a cursor inside it"
        )
    args = (data["obs"], data["action"], data["ret"], data["discount"], data["next_obs"])
    if _use_kernels(d_obs):
        torch.ops.foxhunt.replay_write_(*args, obs, actions, ret, discount, next_row, flat_idx, int(cursor))
    else:
        reference.replay_write_(*args, obs, actions, ret, discount, next_row, flat_idx, cursor)


def guarded_adam_(
    flats: list[Tensor],
    grads: list[Tensor],
    exp_avgs: list[Tensor],
    exp_avg_sqs: list[Tensor],
    steps: list[Tensor],
    targets: list[Tensor],
    lrs: list[Tensor],
    checks: list[Tensor],
    group_ends: list[int],
    max_norms: list[float],
    *,
    beta1: float,
    beta2: float,
    eps: float,
    tau: float,
) -> tuple[Tensor, Tensor]:
    """The learner's device-guarded optimizer step over up to 4 networks' flat buffers, in place, with no host sync
    (reference.guarded_adam_ says what it computes and returns): gradient norms, clipping, Adam, the Polyak update,
    all undone unless the losses in `checks`, the gradients and the new parameters are finite. Three launches a
    network on CUDA. flats, grads, exp_avgs, exp_avg_sqs, targets: contiguous [n_k] buffers of one float dtype;
    steps: float32 scalars on their device, lrs float32 or float64 ones; checks: scalars of the flats' dtype;
    group_ends: network 0's group boundaries (at most 8, rising); max_norms: one clip norm a network."""
    nets = len(flats)
    if not 1 <= nets <= 4:
        raise ValueError(f"guarded_adam_ takes 1 to 4 networks, got {nets}")
    lists = {"grads": grads, "exp_avgs": exp_avgs, "exp_avg_sqs": exp_avg_sqs, "steps": steps, "targets": targets}
    for name, seq in {**lists, "lrs": lrs, "max_norms": max_norms}.items():
        if len(seq) != nets:
            raise ValueError(f"{name} has {len(seq)} entries; pass one a network ({nets}, as flats)")
    for k, flat in enumerate(flats):
        _check(f"flats[{k}]", flat, (None,), flats[0])
        for name in ("grads", "exp_avgs", "exp_avg_sqs", "targets"):
            t = lists[name][k]
            _check(f"{name}[{k}]", t, tuple(flat.shape), flat)
            if not t.is_contiguous():
                raise ValueError(f"{name}[{k}] must be contiguous: it is updated in place")
        if not flat.is_contiguous():
            raise ValueError(f"flats[{k}] must be contiguous: it is updated in place")
        for name, t, dtypes in ((f"steps[{k}]", steps[k], "float32"), (f"lrs[{k}]", lrs[k], "float32 or float64")):
            _check(name, t, (), floating=False)
            if str(t.dtype).removeprefix("torch.") not in dtypes.split(" or ") or t.device != flat.device:
                raise TypeError(f"{name} must be a {dtypes} scalar on {flat.device}, got {t.dtype} on {t.device}")
        if not max_norms[k] > 0:
            raise ValueError(f"max_norms[{k}]={max_norms[k]!r} must be > 0")
    if len(checks) > 4:
        raise ValueError(f"guarded_adam_ takes at most 4 checks, got {len(checks)}")
    for c, t in enumerate(checks):
        _check(f"checks[{c}]", t, (), flats[0])
    ends = [int(e) for e in group_ends]
    n0 = flats[0].numel()
    if len(ends) > 8 or any(b < a for a, b in itertools.pairwise([0, *ends])) or (ends and ends[-1] > n0):
        raise ValueError(f"group_ends={ends} must be at most 8 rising boundaries within flats[0]'s {n0} values")
    args = (flats, grads, exp_avgs, exp_avg_sqs, steps, targets, lrs, checks, ends, [float(m) for m in max_norms])
    scalars = (float(beta1), float(beta2), float(eps), float(tau))
    if _use_kernels(flats[0]):
        return torch.ops.foxhunt.guarded_adam_(*args, *scalars)
    return reference.guarded_adam_(*args, *scalars)


def soft_update_(target_flat: Tensor, online_flat: Tensor, tau: float) -> None:
    """In place, in one launch: target_flat ← (1−τ)·target_flat + τ·online_flat (both flat, contiguous)."""
    _check("target_flat", target_flat, (None,))
    _check("online_flat", online_flat, tuple(target_flat.shape), target_flat)
    if not (target_flat.is_contiguous() and online_flat.is_contiguous()):
        raise ValueError("target_flat and online_flat must be contiguous flat buffers")
    if not 0.0 <= tau <= 1.0:
        raise ValueError(f"tau={tau!r} must be in [0, 1]")
    if _use_kernels(target_flat):
        torch.ops.foxhunt.soft_update_(target_flat, online_flat, float(tau))
    else:
        reference.soft_update_(target_flat, online_flat, tau)

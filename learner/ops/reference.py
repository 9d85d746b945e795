"""Pure-PyTorch reference of every foxhunt op: the semantics the CUDA kernels must reproduce.

Each function works on any device and in float32 or float64, is differentiable exactly where the op is
(and nowhere else: non-differentiable inputs are detached so the reference and the custom op agree), and
is what `learner.ops` runs when no CUDA extension is loaded. They are written to be read beside docs/design.md,
not to be fast; torch.compile of them is the baseline the kernels are measured against.
"""

from __future__ import annotations

import itertools

import torch
from torch import Tensor
from torch.optim.adam import adam as _adam


def dueling_forward(
    h: Tensor, w_v: Tensor, b_v: Tensor, w_a: Tensor, b_a: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """V = h·w_v + b_v, A = h·W_a + b_a, Q = V + A − mean_a A (the identifiable dueling composition)."""
    v = h @ w_v + b_v
    a = h @ w_a + b_a
    q = v.unsqueeze(1) + a - a.mean(dim=1, keepdim=True)
    return v, a, q


def dueling_bellman_target(
    q_online_next: Tensor, q_target_next: Tensor, reward: Tensor, discount: Tensor
) -> Tensor:
    """Double-DQN target y = r + discount·Q_tgt(s', argmax_a Q_online(s', a)); first max wins ties.

    `discount` is γⁿ(1−done) per row, so a terminal transition passes discount 0 and y = r.
    """
    a_star = torch.argmax(q_online_next.detach(), dim=1, keepdim=True)  # argmax returns the first max
    q_at = q_target_next.detach().gather(1, a_star).squeeze(1)
    return reward.detach() + discount.detach() * q_at


def huber(u: Tensor, kappa: float) -> Tensor:
    """Huber with threshold kappa: ½u² inside |u| ≤ κ, κ(|u| − ½κ) outside (slope ±κ)."""
    abs_u = u.abs()
    return torch.where(abs_u <= kappa, 0.5 * u * u, kappa * (abs_u - 0.5 * kappa))


def dueling_huber_loss(q: Tensor, action: Tensor, y: Tensor, kappa: float = 1.0) -> Tensor:
    """Mean over the batch of huber_κ(Q(s, a_b) − y_b); y is a target, so no gradient reaches it."""
    q_taken = q.gather(1, action.long().unsqueeze(1)).squeeze(1)
    return huber(q_taken - y.detach(), kappa).mean()


def c51_project(next_probs: Tensor, reward: Tensor, discount: Tensor, v_min: float, v_max: float) -> Tensor:
    """Categorical projection of r + discount·z onto the support linspace(v_min, v_max, Z).

    Atom j's mass goes to its neighbours l = ⌊b⌋ and u = ⌈b⌉ of its position b = (Tz − v_min)/Δz in
    proportion to closeness; when b lands on an atom (l == u) it all goes there (the classic
    `m_l += p(u − b)` alone would drop it). Tz is clamped to [v_min, v_max] first.
    """
    p = next_probs.detach()
    n_atoms = p.shape[1]
    delta_z = (v_max - v_min) / (n_atoms - 1)
    support = torch.linspace(v_min, v_max, n_atoms, dtype=p.dtype, device=p.device)
    tz = (reward.detach().unsqueeze(1) + discount.detach().unsqueeze(1) * support).clamp(v_min, v_max)
    b = ((tz - v_min) / delta_z).clamp(0, n_atoms - 1)  # clamp again: rounding can overshoot Z−1
    lower = b.floor()
    upper = b.ceil()
    on_atom = (lower == upper).to(p.dtype)
    target = torch.zeros_like(p)
    target.scatter_add_(1, lower.long(), p * (upper - b + on_atom))
    target.scatter_add_(1, upper.long(), p * (b - lower))
    return target


def iqn_quantile_huber_loss(theta: Tensor, tau: Tensor, target: Tensor, kappa: float = 1.0) -> Tensor:
    """Quantile Huber loss: mean_b Σ_i mean_j |τ_i − 1{u_ij<0}|·huber_κ(u_ij)/κ, u_ij = target_j − θ_i.

    Only θ (the online quantiles) gets a gradient; τ are samples and target is the target net's.
    """
    u = target.detach().unsqueeze(1) - theta.unsqueeze(2)  # [B, T, T']
    weight = (tau.detach().unsqueeze(2) - (u.detach() < 0).to(theta.dtype)).abs()
    per_pair = weight * huber(u, kappa) / kappa
    return per_pair.mean(dim=2).sum(dim=1).mean()


def ensemble_q(c51_logits: Tensor, support: Tensor, iqn_quantiles: Tensor, w: float) -> Tensor:
    """q_ens = w·E_C51[Q] + (1−w)·mean_τ IQN, both uncentred (Plan A v2); no gradient to the support."""
    expected_c51 = (torch.softmax(c51_logits, dim=2) * support.detach()).sum(dim=2)
    return w * expected_c51 + (1.0 - w) * iqn_quantiles.mean(dim=1)


def iqn_head(h: Tensor, pre: Tensor, w_out: Tensor, b_out: Tensor) -> Tensor:
    """q[B,T,N] = (h[B,1,H] * relu(pre[B,T,H])) W_out[N,H]^T + b_out: the IQN head after its tau embedding."""
    return torch.nn.functional.linear(h[:, None, :] * torch.relu(pre), w_out, b_out)


def iqn_head_backward(grad: Tensor, h: Tensor, pre: Tensor, w_out: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(grad_h[B,H], grad_pre[B,T,H], grad_w_out[N,H], grad_b_out[N]) of iqn_head; relu' is 0 where pre <= 0."""
    phi = torch.relu(pre)
    dx = grad @ w_out  # [B, T, H]
    grad_pre = torch.where(pre <= 0, 0.0, dx * h[:, None, :])
    grad_h = (dx * phi).sum(1)
    n_actions, hidden = w_out.shape
    grad_w_out = grad.reshape(-1, n_actions).T @ (h[:, None, :] * phi).reshape(-1, hidden)
    return grad_h, grad_pre, grad_w_out, grad.sum((0, 1))


def nstep_returns(
    rewards: Tensor, valid: Tensor, terminated: Tensor, truncated: Tensor, gamma: float, n: int, reward_scale: float
) -> tuple[Tensor, Tensor, Tensor]:
    """(ret, discount, next_row), each [T, B], of every step of a time-major rollout; no gradient.

    ret = sum_{k<m} gamma^k r_{t+k} * reward_scale, m <= n steps, stopping at an episode end, an invalid next step
    or the end of the rollout; discount = gamma^m, or 0 if step t+m-1 terminated; next_row = (t + m) * B + b, the
    flat row of obs[T+1, B] the step bootstraps from. Elementwise per env column.
    """
    t_len, b = rewards.shape
    dev = rewards.device
    t_idx = torch.arange(t_len, device=dev)[:, None].expand(t_len, b)
    ret = torch.zeros(t_len, b, dtype=rewards.dtype, device=dev)
    steps = torch.zeros(t_len, b, dtype=torch.int64, device=dev)
    alive = valid.clone()
    end = terminated | truncated
    for k in range(n):
        tk = t_idx + k
        inside = tk < t_len
        tkc = tk.clamp(max=t_len - 1)
        take = alive & inside
        ret += torch.where(take, (gamma**k) * rewards.gather(0, tkc) * reward_scale, 0.0)
        steps += take.long()
        next_valid = valid.gather(0, (tkc + 1).clamp(max=t_len - 1)) & (tk + 1 < t_len)
        alive = take & ~end.gather(0, tkc) & next_valid
    last = t_idx + steps - 1
    term_last = terminated.gather(0, last.clamp(min=0))
    discount = torch.where(term_last, 0.0, torch.pow(torch.full_like(ret, gamma), steps.to(ret.dtype)))
    next_row = (t_idx + steps) * b + torch.arange(b, device=dev)
    return ret, discount, next_row


def replay_write_(
    d_obs: Tensor,
    d_action: Tensor,
    d_ret: Tensor,
    d_discount: Tensor,
    d_next_obs: Tensor,
    obs: Tensor,
    actions: Tensor,
    ret: Tensor,
    discount: Tensor,
    next_row: Tensor,
    flat_idx: Tensor,
    cursor: int,
) -> None:
    """In place: ring rows (cursor + i) % C <- the n-step transition of rollout step flat_idx[i] (t * B + b)."""
    obs_rows = obs.reshape(-1, obs.shape[-1])
    idx = (cursor + torch.arange(flat_idx.numel(), device=d_obs.device)) % d_obs.shape[0]
    d_obs[idx] = obs_rows[flat_idx]
    d_action[idx] = actions.reshape(-1)[flat_idx]
    d_ret[idx] = ret.reshape(-1)[flat_idx]
    d_discount[idx] = discount.reshape(-1)[flat_idx]
    d_next_obs[idx] = obs_rows[next_row.reshape(-1)[flat_idx]]


def gae(
    rewards: Tensor,
    values: Tensor,
    next_values: Tensor,
    terminated: Tensor,
    episode_end: Tensor,
    gamma: float,
    lam: float,
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over [T, B], backwards in time, no gradient.

    `terminated` cuts the bootstrap (the next state's value is 0); `episode_end` (terminated or truncated)
    cuts the recursion, so a truncated step still bootstraps from next_values but starts a fresh trace.
    """
    rewards, values, next_values = rewards.detach(), values.detach(), next_values.detach()
    not_terminal = 1.0 - terminated.to(values.dtype)
    not_end = 1.0 - episode_end.to(values.dtype)
    deltas = rewards + gamma * not_terminal * next_values - values
    advantages = torch.empty_like(values)
    running = torch.zeros_like(values[0])
    for t in range(values.shape[0] - 1, -1, -1):
        running = deltas[t] + gamma * lam * not_end[t] * running
        advantages[t] = running
    return advantages, advantages + values


def soft_update_(target_flat: Tensor, online_flat: Tensor, tau: float) -> None:
    """Polyak update in place: target ← (1−τ)·target + τ·online, as target + τ·(online − target)."""
    with torch.no_grad():
        target_flat.lerp_(online_flat, tau)


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
    beta1: float,
    beta2: float,
    eps: float,
    tau: float,
) -> tuple[Tensor, Tensor]:
    """The learner's device-guarded optimizer step over its networks' flat buffers, in place; what
    Optimiser._guarded_step (learner/optim.py) does with torch.optim.Adam, on explicit state (tests/test_graph.py,
    composed_vs_fused, checks the two agree bit for bit on the CPU).

    Per network k: its gradient's norm (and network 0's group norms, group g = flats[0][group_ends[g-1]:group_ends[g]]),
    the gradient clipped to max_norms[k] as torch.nn.utils.clip_grad_norm_ does, one Adam step (torch's, no weight
    decay or amsgrad: the step count first, then the moments and the parameters) with learning rate lrs[k], and the
    Polyak update of targets[k] with tau. healthy: every checks scalar (the losses), every gradient and every new
    parameter finite; where not healthy, the parameters, moments, step counts and targets are put back (the
    gradients stay clipped). Returns (stats, healthy): stats = network 0's G group norms, total norm, finite flag
    (its gradient and the checks finite) and step + 1, then per further network its total norm, finite flag and
    step + 1; healthy a bool scalar.
    """
    with torch.no_grad():
        bounds = [0, *group_ends]
        stats: list[Tensor] = [grads[0][a:b].norm() for a, b in itertools.pairwise(bounds)]
        healthy = torch.ones((), dtype=torch.bool, device=flats[0].device)
        for c in checks:
            healthy = healthy & torch.isfinite(c)
        for k, grad in enumerate(grads):
            finite = torch.isfinite(grad).all() & (healthy if k == 0 else True)
            stats += [grad.norm(), finite.to(grad.dtype), (steps[k] + 1).to(grad.dtype)]
        for grad in grads:
            healthy = healthy & torch.isfinite(grad).all()
        snaps = [(f.clone(), t.clone(), m.clone(), v.clone(), s.clone())
                 for f, t, m, v, s in zip(flats, targets, exp_avgs, exp_avg_sqs, steps, strict=True)]  # fmt: skip
        for k, grad in enumerate(grads):
            total = torch.nn.utils.get_total_norm([grad])
            grad.mul_(torch.clamp(max_norms[k] / (total + 1e-6), max=1.0))
            _adam(
                [flats[k]], [grad], [exp_avgs[k]], [exp_avg_sqs[k]], [], [steps[k]],
                capturable=steps[k].is_cuda, amsgrad=False, beta1=beta1, beta2=beta2,
                lr=lrs[k] if steps[k].is_cuda else float(lrs[k]), weight_decay=0.0, eps=eps, maximize=False,
            )  # fmt: skip
        for flat in flats:
            healthy = healthy & torch.isfinite(flat).all()
        for flat, target in zip(flats, targets, strict=True):
            soft_update_(target, flat, tau)
        for now, before in zip(zip(flats, targets, exp_avgs, exp_avg_sqs, steps, strict=True), snaps, strict=True):
            for t, b in zip(now, before, strict=True):
                torch.where(healthy, t, b, out=t)
        return torch.stack(stats), healthy


# Closed-form gradients. The CPU implementations of the custom ops use these, and the CUDA kernels compute
# the same expressions in the same pass as their forward; tests check each against autograd of the above.


def dueling_backward(
    grad_v: Tensor | None,
    grad_a: Tensor | None,
    grad_q: Tensor | None,
    h: Tensor,
    w_v: Tensor,
    w_a: Tensor,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Decompose-and-backward: through the Jacobian of Q = V + A − mean_a A, then to weights and h.

    grad_V = Σ_a grad_Q (plus any direct grad_V); grad_A = grad_Q − mean_a grad_Q (plus any direct
    grad_A), so the gradient reaching A sums to zero over actions when only Q is used. Returns
    (grad_h, grad_w_v, grad_b_v, grad_w_a, grad_b_a).
    """
    n_rows, n_actions = h.shape[0], w_a.shape[1]
    g_v = torch.zeros(n_rows, dtype=h.dtype, device=h.device)
    g_a = torch.zeros(n_rows, n_actions, dtype=h.dtype, device=h.device)
    if grad_v is not None:
        g_v = g_v + grad_v
    if grad_a is not None:
        g_a = g_a + grad_a
    if grad_q is not None:
        g_v = g_v + grad_q.sum(dim=1)
        g_a = g_a + grad_q - grad_q.mean(dim=1, keepdim=True)
    grad_h = g_v.unsqueeze(1) * w_v + g_a @ w_a.T
    return grad_h, h.T @ g_v, g_v.sum().reshape(1), h.T @ g_a, g_a.sum(dim=0)


def dueling_huber_loss_and_grad(q: Tensor, action: Tensor, y: Tensor, kappa: float) -> tuple[Tensor, Tensor]:
    """(loss, d loss / d q): the gradient is clamp(Q(s,a_b) − y_b, −κ, κ)/B at the taken action, else 0."""
    rows = q.shape[0]
    index = action.long().unsqueeze(1)
    diff = q.detach().gather(1, index).squeeze(1) - y.detach()
    loss = huber(diff, kappa).mean()
    grad_q = torch.zeros_like(q).scatter_(1, index, (diff.clamp(-kappa, kappa) / rows).unsqueeze(1))
    return loss, grad_q


def iqn_quantile_huber_loss_and_grad(
    theta: Tensor, tau: Tensor, target: Tensor, kappa: float
) -> tuple[Tensor, Tensor]:
    """(loss, d loss / d θ): d/dθ_i = −(1/B)(1/T') Σ_j |τ_i − 1{u_ij<0}|·clamp(u_ij, −κ, κ)/κ."""
    theta = theta.detach()
    u = target.detach().unsqueeze(1) - theta.unsqueeze(2)
    weight = (tau.detach().unsqueeze(2) - (u < 0).to(theta.dtype)).abs()
    loss = (weight * huber(u, kappa) / kappa).mean(dim=2).sum(dim=1).mean()
    grad = -(weight * u.clamp(-kappa, kappa)).mean(dim=2) / (kappa * theta.shape[0])
    return loss, grad


def ensemble_q_backward(
    grad: Tensor, c51_logits: Tensor, support: Tensor, n_quantiles: int, w: float
) -> tuple[Tensor, Tensor]:
    """(grad_logits, grad_quantiles): softmax Jacobian w·g·p_z·(z − E[z]) and the mean's (1−w)·g/T."""
    probs = torch.softmax(c51_logits.detach(), dim=2)
    expected = (probs * support).sum(dim=2, keepdim=True)
    grad_logits = w * grad.unsqueeze(2) * probs * (support - expected)
    grad_quantiles = ((1.0 - w) / n_quantiles * grad).unsqueeze(1).expand(-1, n_quantiles, -1).contiguous()
    return grad_logits, grad_quantiles


# ---- the on-policy losses (learner.losses re-exports them) and their fused op ----------------------------


def masked_mean(x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean of x over the rows where mask[R] (bool) is True, and over any trailing dims; the plain mean if None.

    torch.where, not x * weight: a weight of 0 on an inf or NaN row would still give NaN. Those rows get a
    zero gradient, but a backward through an op that went non-finite on them still multiplies 0 by inf: the
    inputs on masked-out rows must be finite and tame (the Learner neutralises its invalid rows). The row
    count stays a tensor, so no host sync and no data-dependent shape: a CUDA graph can capture it.
    """
    if mask is None:
        return x.mean()
    rows = mask.view(-1, *([1] * (x.ndim - 1)))
    per_row = x.numel() // mask.numel()
    n = mask.sum(dtype=x.dtype)  # exact: an integer count
    return torch.where(rows, x, 0.0).sum() / (n if per_row == 1 else n * per_row)


def normalize_advantages(adv: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """(A - mean A) / (std A + 1e-8) over the rows in mask (population std); a single row is left as it is.

    One row has std 0: standardising it would zero its advantage, and with it the whole policy gradient.
    """
    mean = masked_mean(adv, mask)
    std = masked_mean((adv - mean).pow(2), mask).sqrt()
    count = mask.sum() if mask is not None else torch.full((), adv.numel(), device=adv.device)
    return torch.where(count > 1, (adv - mean) / (std + 1e-8), adv)


def ppo_clip_loss(
    logp: torch.Tensor,
    behaviour_logp: torch.Tensor,
    advantages: torch.Tensor,
    clip: float,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PPO clipped surrogate -mean(min(r A, clip(r, 1-eps, 1+eps) A)), r = pi/pi_behaviour.

    The ratio is against the behaviour log-prob the rollout actor recorded with its lagged policy copy.
    Returns (loss, approx_kl, clip_frac); the last two are diagnostics (no grad). Means over the rows in
    `mask` (every row if None); the other rows must still be finite (see masked_mean).
    """
    log_ratio = logp - behaviour_logp
    ratio = log_ratio.exp()
    surrogate = torch.min(ratio * advantages, ratio.clamp(1.0 - clip, 1.0 + clip) * advantages)
    with torch.no_grad():
        approx_kl = masked_mean((ratio - 1.0) - log_ratio, mask)  # the k3 estimator: unbiased, always >= 0
        clip_frac = masked_mean(((ratio - 1.0).abs() > clip).to(ratio.dtype), mask)
    return -masked_mean(surrogate, mask), approx_kl, clip_frac


def entropy(logits: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean entropy -sum_a p_a log p_a of softmax(logits[B, N]) over the rows in mask (every row if None)."""
    logp = torch.log_softmax(logits, dim=-1)
    return -masked_mean((logp.exp() * logp).sum(-1), mask)


def distill_kl(
    q_ens: torch.Tensor, logits: torch.Tensor, temperature: float, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Q->pi distillation KL(softmax(q_ens/T) || pi), mean over the rows in mask; q_ens is detached here.

    Detaching keeps the policy from pulling the Q heads towards itself: Q teaches pi, never the reverse.
    """
    log_q = torch.log_softmax(q_ens.detach() / temperature, dim=-1)
    log_pi = torch.log_softmax(logits, dim=-1)
    return masked_mean((log_q.exp() * (log_q - log_pi)).sum(-1), mask)


def value_mse(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """V_scalar regression: mean (V(s) - R)^2 against the GAE returns, over the rows in mask."""
    return masked_mean((values - returns.detach()).pow(2), mask)


POLICY_LOSS_NAMES = (
    "l_pi",
    "entropy",
    "l_distill",
    "l_v",
    "approx_kl",
    "clip_frac",
    "qpa",
    "adv_mean",
    "v_mean",
    "q_mean",
)
"""What policy_losses returns, in order: the four on-policy losses (differentiable w.r.t. the logits, and l_v
w.r.t. the values), then diagnostics: PPO's approx KL and clip fraction, the q_pi_agree mean, and the masked means
of the raw advantages, the values and q_ens."""


def policy_losses(
    logits: Tensor,
    q_ens: Tensor,
    values: Tensor,
    returns: Tensor,
    adv: Tensor,
    actions: Tensor,
    behaviour_logp: Tensor,
    valid: Tensor,
    clip: float,
    temperature: float,
    normalize: bool,
    flip_distill: bool = False,
) -> tuple[Tensor, ...]:
    """The learner's on-policy losses over R rollout rows, the rows where valid[R] counting (POLICY_LOSS_NAMES).

    logits, q_ens [R, N]; values, returns, adv, behaviour_logp [R]; actions [R] int64. The advantages are
    standardised over the valid rows when `normalize`. An invalid row acts as action 0 with a behaviour log-prob
    equal to pi's own (ratio exactly 1), so nothing on it can overflow. Distillation pulls pi towards
    softmax(q_ens / T), or softmax(-q_ens / T) with `flip_distill` (a test-only fault that makes the qpa rule fire);
    qpa and q_mean read q_ens itself. Gradients reach logits (l_pi, entropy, l_distill) and values (l_v) only.
    """
    from learner.diag import qpa_rows  # learner.diag imports torch alone; here to keep this module's imports bare

    q, adv = q_ens.detach(), adv.detach()
    adv_mean = masked_mean(adv, valid)
    if normalize:
        adv = normalize_advantages(adv, valid)
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, torch.where(valid, actions, 0).reshape(-1, 1)).squeeze(-1)
    behaviour = torch.where(valid, behaviour_logp.detach(), logp.detach())
    l_pi, approx_kl, clip_frac = ppo_clip_loss(logp, behaviour, adv, clip, valid)
    ent = entropy(logits, valid)
    l_distill = distill_kl(-q if flip_distill else q, logits, temperature, valid)
    l_v = value_mse(values, returns, valid)
    qpa = masked_mean(qpa_rows(q, logp_all.detach()), valid)
    return (
        l_pi,
        ent,
        l_distill,
        l_v,
        approx_kl,
        clip_frac,
        qpa,
        adv_mean,
        masked_mean(values.detach(), valid),
        masked_mean(q, valid),
    )


def policy_losses_grads(
    logits: Tensor,
    q_ens: Tensor,
    values: Tensor,
    returns: Tensor,
    adv: Tensor,
    actions: Tensor,
    behaviour_logp: Tensor,
    valid: Tensor,
    clip: float,
    temperature: float,
    normalize: bool,
    flip_distill: bool = False,
) -> tuple[Tensor, Tensor, Tensor]:
    """policy_losses' values stacked [10], and in closed form what the CUDA kernel writes in the same pass: the
    gradients of l_pi, entropy and l_distill w.r.t. the logits [3, R, N] and of l_v w.r.t. the values [R], zero on
    invalid rows. With n valid rows, p = softmax(logits), t = softmax(±q_ens / T), H a row's entropy:
    d l_pi = -g r (onehot(a) - p) / n, with g = A where torch.min's gradient reaches the ratio r (inside the clip
    range, or where r A is the smaller term), else 0; d entropy = -p (log p + H) / n;
    d l_distill = (p sum(t) - t) / n; d l_v = 2 (v - R) / n. tests/test_ops_library.py checks them against autograd."""
    with torch.no_grad():
        stats = torch.stack(
            policy_losses(
                logits, q_ens, values, returns, adv, actions, behaviour_logp, valid, clip, temperature, normalize,
                flip_distill,
            )
        )  # fmt: skip
        n = valid.sum(dtype=logits.dtype)
        a = adv
        if normalize:
            a = normalize_advantages(adv, valid)
        lp = torch.log_softmax(logits, dim=-1)
        p = lp.exp()
        act = torch.where(valid, actions, 0)
        logp_a = lp.gather(-1, act[:, None]).squeeze(-1)
        ratio = (logp_a - torch.where(valid, behaviour_logp, logp_a)).exp()
        s1, s2 = ratio * a, ratio.clamp(1.0 - clip, 1.0 + clip) * a
        reached = ((ratio >= 1.0 - clip) & (ratio <= 1.0 + clip)) | (s1 < s2)
        coef = -torch.where(reached, a, 0.0) * ratio / n
        g_pi = coef[:, None] * (torch.nn.functional.one_hot(act, logits.shape[1]).to(logits.dtype) - p)
        h = -(p * lp).sum(-1, keepdim=True)
        g_ent = -p * (lp + h) / n
        t = torch.softmax((-q_ens if flip_distill else q_ens) / temperature, dim=-1)
        g_kl = (p * t.sum(-1, keepdim=True) - t) / n
        rows = valid[:, None]
        grads = torch.stack([torch.where(rows, g, 0.0) for g in (g_pi, g_ent, g_kl)])
        g_v = torch.where(valid, 2.0 * (values - returns) / n, 0.0)
    return stats, grads, g_v

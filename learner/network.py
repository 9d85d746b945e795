"""The learner's network: shared encoder -> C51 | IQN | pi | V_scalar, plus the encapsulated DuelingQHead.

Layout (docs/design.md): encoder obs -> h[B,H]; C51 logits [B,N,Z]; IQN quantiles [B,T,N] from a 64-feature
cosine embedding of tau multiplied into h; policy logits [B,N]; V_scalar [B]. The DuelingQHead has its own
weights, its own RNG for initialisation and sees only a detached h: it must not perturb the other heads at
all (the seed's Phase 4; every earlier way of mixing dueling into C51/IQN collapsed qpa on the cluster).

Those earlier ways are kept as ablation switches (LearnerConfig.c51_scalar_v, .iqn_dueling): each adds one
Linear(H, 1) head, built AFTER the Plan A v2 heads from the same seeded stream, so the shared heads start from
the very weights plan_a_v2 starts from; with the switches off MainNet is Plan A v2's, parameter for parameter.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from learner import ops
from learner.config import LearnerConfig

IQN_EMBED_DIM = 64
"""Cosine features of tau: cos(pi * i * tau), i = 0..63 (IQN paper)."""
HEAD_GROUPS: tuple[str, ...] = ("encoder", "c51", "iqn", "pi", "v")
"""Parameter groups of MainNet (Plan A v2), in order; grad norms are reported per group."""


class Encoder(nn.Sequential):
    """obs -> h[B, H]: `layers` Linear+ReLU layers; with obs_norm, each observation column is standardised first.

    The standardisation (LearnerConfig.obs_norm) is fixed, not learned: x * obs_scale + obs_shift, where
    obs_scale = 1 / std and obs_shift = -mean / std of the column as a probe of the env measured it before training
    (actors.envs.probe_env; `set_obs_norm_`). They are persistent buffers, so a checkpoint's network and the
    weights a rollout actor loads carry them; they are not parameters (Adam never moves them). Without obs_norm
    the encoder is the plain MLP, parameter for parameter and key for key.
    """

    def __init__(self, obs_dim: int, hidden_dim: int, layers: int, *, obs_norm: bool = False):
        mods: list[nn.Module] = []
        width = obs_dim
        for _ in range(layers):
            mods += [nn.Linear(width, hidden_dim), nn.ReLU()]
            width = hidden_dim
        super().__init__(*mods)
        self.obs_norm = bool(obs_norm)
        if self.obs_norm:  # the identity until set_obs_norm_
            self.register_buffer("obs_scale", torch.ones(obs_dim))
            self.register_buffer("obs_shift", torch.zeros(obs_dim))

    @torch.no_grad()
    def set_obs_norm_(self, mean: Sequence[float] | np.ndarray, std: Sequence[float] | np.ndarray) -> None:
        """Standardise by these per-column statistics (ValueError naming the problem: wrong length, not finite,
        std <= 0, or an encoder built without obs_norm)."""
        if not self.obs_norm:
            raise ValueError("this encoder was built without obs_norm: build it with obs_norm=True to standardise")
        d = self.obs_scale.numel()
        m, s = np.asarray(mean, np.float64), np.asarray(std, np.float64)
        if m.shape != (d,) or s.shape != (d,):
            raise ValueError(f"observation mean {m.shape} and std {s.shape} must both be ({d},), one per column")
        if not (np.isfinite(m).all() and np.isfinite(s).all() and (s > 0).all()):
            raise ValueError(f"observation mean and std must be finite with std > 0; got mean {m}, std {s}")
        self.obs_scale.copy_(torch.as_tensor(1.0 / s, dtype=self.obs_scale.dtype))
        self.obs_shift.copy_(torch.as_tensor(-m / s, dtype=self.obs_shift.dtype))

    @torch.no_grad()
    def load_obs_norm_(self, saved: dict) -> None:
        """Standardise as a checkpoint's 'obs_norm' entry says (its obs_scale and obs_shift, checked beforehand by
        obs_norm_problem), written in place: a captured CUDA graph keeps reading the same buffers."""
        self.obs_scale.copy_(saved["obs_scale"])
        self.obs_shift.copy_(saved["obs_shift"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.obs_norm:
            x = torch.addcmul(self.obs_shift, x, self.obs_scale)  # (x - mean) / std as one op
        return super().forward(x)


def obs_norm_problem(saved: object, obs_dim: int) -> str | None:
    """Why a checkpoint's 'obs_norm' entry (the encoder's standardisation) cannot be loaded, or None."""
    if not isinstance(saved, dict):
        return f"it has no obs_norm statistics (got {type(saved).__name__}), though its learner.obs_norm is on"
    for key in ("obs_scale", "obs_shift"):
        v = saved.get(key)
        if not torch.is_tensor(v) or not v.is_floating_point() or tuple(v.shape) != (obs_dim,):
            got = tuple(v.shape) if torch.is_tensor(v) else type(v).__name__
            return f"obs_norm.{key} must be a float tensor of ({obs_dim},), got {got}"
        if not torch.isfinite(v).all():
            return f"obs_norm.{key} is not finite"
    return None


def identity_obs_stats(obs_dim: int) -> dict[str, list[float]]:
    """Learner's obs_mean / obs_std keywords for a standardisation that changes nothing (mean 0, std 1): for a
    learner whose statistics a checkpoint will replace, or one timed rather than trained."""
    return {"obs_mean": [0.0] * obs_dim, "obs_std": [1.0] * obs_dim}


def encoder_mlp(obs_dim: int, hidden_dim: int, layers: int, *, obs_norm: bool = False) -> Encoder:
    """obs -> h[B, H]: `layers` Linear+ReLU layers (Encoder), standardising the observation first with obs_norm."""
    return Encoder(obs_dim, hidden_dim, layers, obs_norm=obs_norm)


def cosine_frequencies(like: torch.Tensor) -> torch.Tensor:
    """[64]: pi * i for i = 0..63, in like's dtype, on like's device."""
    return math.pi * torch.arange(IQN_EMBED_DIM, device=like.device, dtype=like.dtype)


def cosine_features(tau: torch.Tensor, freq: torch.Tensor) -> torch.Tensor:
    """[B, T] -> [B, T, 64]: cos(pi * i * tau) for i = 0..63, freq = cosine_frequencies(tau) (IQNHead keeps it)."""
    return torch.cos(freq * tau[..., None])


def quantile_midpoints(batch: int, n: int, like: torch.Tensor) -> torch.Tensor:
    """Fixed taus (i + 0.5)/n, [batch, n]: a deterministic, RNG-free mean over tau (acting, diagnostics)."""
    tau = (torch.arange(n, device=like.device, dtype=like.dtype) + 0.5) / n
    return tau.expand(batch, n)


class _CosEmbed(torch.autograd.Function):
    """pre = Linear(cos-embedding(tau)) = feats @ W^T + b, whose feature 0 is cos(0 * pi * tau) = 1 exactly: the
    bias's gradient (the sum of grad_pre over the rows) is then column 0 of the weight's gradient (grad_pre^T @
    feats), so the backward reads grad_pre once, in that GEMM, not twice (the GEMM and a column sum of the same
    [B*T, H] tensor: 32,768 x 512 floats a step at phase4_3's q_batch). The same values, summed in the GEMM's order,
    for every finite tau (the learner's are drawn in [0, 1)); a non-finite one makes its feature 0 NaN either way."""

    @staticmethod
    def forward(ctx, feats: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(feats, weight)
        return F.linear(feats, weight, bias)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        feats, weight = ctx.saved_tensors
        grad_feats = grad.matmul(weight) if ctx.needs_input_grad[0] else None
        grad_w = grad_b = None
        if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
            grad_w = grad.reshape(-1, grad.shape[-1]).t().mm(feats.reshape(-1, feats.shape[-1]))
            grad_b = grad_w[:, 0].contiguous()
        return grad_feats, grad_w, grad_b


class IQNHead(nn.Module):
    """quantiles[B, T, N] = Linear(h * ReLU(Linear(cos-embedding(tau)))); on CUDA the part after the embedding is
    one kernel (ops.iqn_head)."""

    def __init__(self, hidden_dim: int, n_actions: int):
        super().__init__()
        self.embed = nn.Linear(IQN_EMBED_DIM, hidden_dim)
        self.out = nn.Linear(hidden_dim, n_actions)
        self._constants: dict[tuple, torch.Tensor] = {}  # _constant's; never saved, rebuilt on demand

    def _constant(self, name: str, n: int, like: torch.Tensor) -> torch.Tensor:
        """The cosine frequencies ('freq') or the cosine features of n fixed midpoints ('midpoints', [1, n, 64]) in
        like's dtype and device, made once by the very ops that made them on every call (so the same values): a
        captured update would otherwise replay about 9 kernels a step for them. Not kept while a CUDA graph is
        being captured (the graph's warm-up step, eager, makes them first)."""
        key = (name, n, like.device, like.dtype)
        value = self._constants.get(key)
        if value is None:
            freq = cosine_frequencies(like)
            value = freq if name == "freq" else cosine_features(quantile_midpoints(1, n, like), freq)
            if not (like.is_cuda and torch.cuda.is_current_stream_capturing()):
                self._constants[key] = value
        return value

    def features(self, h: torch.Tensor, tau: torch.Tensor | int) -> torch.Tensor:
        """h * ReLU(Linear(cos-embedding(tau))): [B, T, H], what the output layer (and a dueling V) reads.

        tau an int n: the mean of the features over the n fixed midpoints (i + 0.5)/n, as [B, 1, H]. Every head
        on the features is affine in them, so its output on this mean IS its mean over the midpoints, at the
        cost of one tau instead of n: q_ens, qpa and the double-DQN a* need only that mean.
        """
        phi = self._midpoints_phi(tau, h)[:, None, :] if isinstance(tau, int) else torch.relu(self.embed_taus(tau))
        return h[:, None, :] * phi

    def _midpoints_phi(self, n: int, like: torch.Tensor) -> torch.Tensor:
        """[1, H]: ReLU(Linear(cos-embedding)) averaged over the n fixed midpoints (i + 0.5)/n."""
        return torch.relu(self.embed(self._constant("midpoints", n, like))).mean(1)

    def embed_taus(self, tau: torch.Tensor) -> torch.Tensor:
        """[B, T] sampled taus -> pre[B, T, H] = self.embed(cos-embedding(tau)), its bias's gradient read off the
        weight's (_CosEmbed)."""
        return _CosEmbed.apply(cosine_features(tau, self._constant("freq", 0, tau)), self.embed.weight, self.embed.bias)

    def forward(self, h: torch.Tensor, tau: torch.Tensor | int) -> torch.Tensor:
        if isinstance(tau, int):
            # out(h * phi) with phi [H] the midpoints' mean is h @ (W_out * phi)^T + b_out: phi folded into the
            # [N, H] weight instead of a [B, 1, H] product written and read again (same math, rounded in another order)
            return F.linear(h, self.out.weight * self._midpoints_phi(tau, h), self.out.bias)[:, None, :]
        # sampled taus: the product with h and the output layer in one op (ops.iqn_head; the same math as
        # self.out(self.features(h, tau)), op for op on the reference path)
        return ops.iqn_head(h, self.embed_taus(tau), self.out.weight, self.out.bias)


class MainNet(nn.Module):
    """Encoder + C51 + IQN + pi + V_scalar (Plan A v2), plus the ablation heads its switches ask for.

    Parameter order follows `self.groups`: HEAD_GROUPS, then c51_v (c51_scalar_v) and iqn_v (iqn_dueling).
    Every consumer reads the heads through c51_logits, iqn_quantiles and iqn_consumer_quantiles, so a switch
    changes a head's output for all of them at once (as the seed's kernels did).
    """

    def __init__(
        self,
        obs_dim: int,
        n_actions: int,
        hidden_dim: int,
        encoder_layers: int,
        n_atoms: int,
        *,
        c51_scalar_v: bool = False,
        iqn_dueling: str = "off",
        obs_norm: bool = False,
    ):
        super().__init__()
        if iqn_dueling not in ("off", "composed", "dual"):
            raise ValueError(f"iqn_dueling={iqn_dueling!r} must be 'off', 'composed' or 'dual'")
        self.n_actions, self.n_atoms, self.iqn_dueling = n_actions, n_atoms, iqn_dueling
        self.encoder = encoder_mlp(obs_dim, hidden_dim, encoder_layers, obs_norm=obs_norm)
        self.c51 = nn.Linear(hidden_dim, n_actions * n_atoms)
        self.iqn = IQNHead(hidden_dim, n_actions)
        self.pi = nn.Linear(hidden_dim, n_actions)
        self.v = nn.Linear(hidden_dim, 1)
        groups = list(HEAD_GROUPS)
        # Built last: the Plan A v2 heads above have drawn their initial weights already.
        self.c51_v: nn.Linear | None = None
        self.iqn_v: nn.Linear | None = None
        if c51_scalar_v:
            self.c51_v = nn.Linear(hidden_dim, 1)
            groups.append("c51_v")
        if iqn_dueling != "off":
            self.iqn_v = nn.Linear(hidden_dim, 1)
            groups.append("iqn_v")
        self.groups: tuple[str, ...] = tuple(groups)

    def c51_logits(self, h: torch.Tensor) -> torch.Tensor:
        """[B, N, Z]. With c51_scalar_v (Phase 2 v2) the head's output is read as A and composed per atom:
        V(s) + A(s,a,z) - mean_a A(s,a,z). V cancels in every softmax over z, so it never gets a gradient
        (pearl_scalar_v_with_categorical_ce_is_noop); the per-atom centring does not cancel: it forces
        prod_a p(z|s,a) to be the same for every atom z, a constraint plain C51 does not have."""
        a = self.c51(h).view(h.shape[0], self.n_actions, self.n_atoms)
        if self.c51_v is None:
            return a
        return self.c51_v(h)[:, :, None] + a - a.mean(1, keepdim=True)

    def iqn_split(self, h: torch.Tensor, tau: torch.Tensor | int) -> tuple[torch.Tensor, torch.Tensor]:
        """(V[B, T, 1], A[B, T, N]) of the dueling IQN (Phase 3.1): both read h * phi(tau); A keeps its bias."""
        if self.iqn_v is None:
            raise RuntimeError("iqn_split needs a MainNet built with iqn_dueling='composed' or 'dual'")
        x = self.iqn.features(h, tau)
        return self.iqn_v(x), self.iqn.out(x)

    def iqn_quantiles(self, h: torch.Tensor, tau: torch.Tensor | int) -> torch.Tensor:
        """[B, T, N]: what the IQN quantile Huber loss trains (and its target and double-DQN a* read); tau an
        int n: the mean over n fixed midpoints, [B, 1, N] (IQNHead.features).

        Plan A v2: the head's output. Dueling IQN: the composed Q(s,a,tau) = V + A - mean_a A, centred so that
        mean_a Q(s,., tau) = V(s, tau) at every tau."""
        if self.iqn_v is None:
            return self.iqn(h, tau)
        v, a = self.iqn_split(h, tau)
        return v + a - a.mean(-1, keepdim=True)

    def iqn_consumer_quantiles(self, h: torch.Tensor, tau: torch.Tensor | int) -> torch.Tensor:
        """[B, T, N]: what q_ens (hence distillation, qpa) sees of IQN.

        'composed' (Phase 3.1) hands the consumers the centred Q the loss trains; 'dual' (3.1-fix) hands them
        the raw A + bias, uncentred like Plan A v2's output, while the loss still trains composed Q. Raw A has
        Plan A v2's shape, but its gradient sums to zero over actions, so its weights learn deviations, not Q
        values (pearl_complement_internal_loss_vs_external_consumers and its addendum)."""
        if self.iqn_dueling == "dual":
            return self.iqn_split(h, tau)[1]
        return self.iqn_quantiles(h, tau)

    def value(self, h: torch.Tensor) -> torch.Tensor:
        return self.v(h).squeeze(-1)

    def pi_value(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(pi's logits [B, N], V_scalar [B]) = (self.pi(h), self.value(h)) as one product with h: the backward then
        makes h's gradient with one GEMM instead of two GEMMs and an add of [B, H] tensors, and reads h once for the
        two weight gradients (the same math; the sums may round in another order)."""
        w = torch.cat([self.pi.weight, self.v.weight])
        b = torch.cat([self.pi.bias, self.v.bias])
        logits, v = F.linear(h, w, b).split([self.n_actions, 1], dim=-1)
        return logits, v.squeeze(-1)

    def q_ens(self, h: torch.Tensor, support: torch.Tensor, w: float, n_taus: int) -> torch.Tensor:
        """w * E_C51[Q] + (1-w) * mean_tau IQN, IQN at the fixed quantile midpoints; both uncentred in Plan A v2."""
        # the midpoint mean as one tau: ensemble_q's mean over a single tau is that mean
        return ops.ensemble_q(self.c51_logits(h), support, self.iqn_consumer_quantiles(h, n_taus), w)

    def v_iqn(self, h: torch.Tensor, n_taus: int) -> torch.Tensor:
        """V_IQN(s) = mean_a E_tau Q(s, a, tau) [B] of the composed IQN Q, tau at the fixed midpoints (Phase 3.2):
        exactly mean_tau V(s, tau) by the dueling identity, in IQN's scale, not C51's or V_scalar's."""
        return self.iqn_quantiles(h, n_taus).mean((1, 2))


def main_net(cfg: LearnerConfig, obs_dim: int, n_actions: int) -> MainNet:
    """The MainNet a learner of `cfg` trains: its sizes and its ablation switches (the one place that maps the
    config to the network, for the Learner and for anything rebuilding a checkpoint's network)."""
    return MainNet(
        obs_dim,
        n_actions,
        cfg.hidden_dim,
        cfg.encoder_layers,
        cfg.n_atoms,
        c51_scalar_v=cfg.c51_scalar_v,
        iqn_dueling=cfg.iqn_dueling,
        obs_norm=cfg.obs_norm != "off",
    )


NET_FIELDS: tuple[str, ...] = ("hidden_dim", "encoder_layers", "n_atoms", "c51_scalar_v", "iqn_dueling", "obs_norm")
"""The LearnerConfig fields main_net reads: a checkpoint's network is rebuilt exactly when these agree."""


class PolicyNet(nn.Module):
    """What a rollout actor needs: encoder + policy head, loadable from Learner.policy_weights()["state"]."""

    def __init__(self, obs_dim: int, n_actions: int, hidden_dim: int, encoder_layers: int, *, obs_norm: bool = False):
        super().__init__()
        self.encoder = encoder_mlp(obs_dim, hidden_dim, encoder_layers, obs_norm=obs_norm)
        self.pi = nn.Linear(hidden_dim, n_actions)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.pi(self.encoder(obs))

    @torch.no_grad()
    def act(
        self,
        obs: np.ndarray | torch.Tensor,
        *,
        generator: torch.Generator | None = None,
        greedy: bool = False,
    ) -> tuple[np.ndarray, np.ndarray]:
        """obs[B, D] -> (action[B] int64, logp[B] float32) as numpy; samples pi unless greedy.

        Runs where the net's parameters are (the generator must live there too); obs may be numpy or a tensor
        anywhere. On a GPU the action and its log-prob come back in one copy (an action index is exact in float32).
        """
        x = torch.as_tensor(obs, dtype=torch.float32)
        if x.ndim != 2:
            raise ValueError(f"PolicyNet.act: obs must be [B, obs_dim], got shape {tuple(x.shape)}")
        device = self.pi.weight.device
        logp_all = torch.log_softmax(self(x.to(device)), dim=-1)
        if greedy:
            action = logp_all.argmax(-1)
        else:
            action = torch.multinomial(logp_all.exp(), 1, generator=generator).squeeze(-1)
        logp = logp_all.gather(-1, action[:, None]).squeeze(-1)
        if device.type != "cpu":
            both = torch.stack((action.to(logp.dtype), logp)).cpu().numpy()
            return both[0].astype(np.int64), both[1].astype(np.float32)
        return action.numpy().astype(np.int64), logp.numpy().astype(np.float32)


class DuelingQHead(nn.Module):
    """Independent dueling head: V = h.w_v + b_v, A = h W_a + b_a, Q = V + A - mean_a A.

    Initialised (Xavier uniform, zero biases) from its OWN generator, so creating it leaves the RNG stream
    of every other head untouched; fed a detached h, so its loss reaches only w_v, b_v, w_a, b_a.
    """

    def __init__(self, hidden_dim: int, n_actions: int, *, seed: int):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        bound_v = math.sqrt(6.0 / (hidden_dim + 1))
        bound_a = math.sqrt(6.0 / (hidden_dim + n_actions))
        self.w_v = nn.Parameter(torch.empty(hidden_dim).uniform_(-bound_v, bound_v, generator=g))
        self.b_v = nn.Parameter(torch.zeros(1))
        self.w_a = nn.Parameter(torch.empty(hidden_dim, n_actions).uniform_(-bound_a, bound_a, generator=g))
        self.b_a = nn.Parameter(torch.zeros(n_actions))

    def forward(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(V[B], A[B,N], Q[B,N]) in one fused op."""
        return ops.dueling_forward(h, self.w_v, self.b_v, self.w_a, self.b_a)


def flatten_parameters_(module: nn.Module) -> tuple[nn.Parameter, torch.Tensor]:
    """Rebinds every parameter of `module` as a view into one flat buffer; returns (flat, flat_grad).

    One buffer per network makes the Polyak soft update one op (ops.soft_update_), the finiteness check of
    parameters and gradients one reduction, and the NaN-guard snapshot one copy. Each parameter's .grad is a
    view into flat_grad, so backward accumulates straight into it. Optimise `flat`, not the module.
    """
    params = list(module.parameters())
    ref = params[0]
    total = sum(p.numel() for p in params)
    flat = torch.empty(total, dtype=ref.dtype, device=ref.device)
    grad = torch.zeros_like(flat)
    offset = 0
    for p in params:
        n = p.numel()
        flat[offset : offset + n].copy_(p.data.reshape(-1))
        p.data = flat[offset : offset + n].view_as(p)
        p.grad = grad[offset : offset + n].view_as(p)
        offset += n
    master = nn.Parameter(flat)
    master.grad = grad
    return master, grad


def group_slices(module: nn.Module, groups: tuple[str, ...]) -> dict[str, slice]:
    """Slice of each top-level child's parameters in the flat buffer built by flatten_parameters_."""
    out: dict[str, slice] = {}
    offset = 0
    for name in groups:
        n = sum(p.numel() for p in getattr(module, name).parameters())
        out[name] = slice(offset, offset + n)
        offset += n
    if offset != sum(p.numel() for p in module.parameters()):
        raise RuntimeError(f"groups {groups} do not cover {type(module).__name__}'s parameters in order")
    return out


POLICY_PREFIXES = ("encoder.", "pi.")
"""The MainNet state entries a PolicyNet holds: the encoder and the policy head."""


def policy_weights(net: MainNet, cfg: LearnerConfig, obs_dim: int, n_actions: int, *, version: int = 0) -> dict:
    """The policy-weights dict, the one format of a policy that travels (what Learner.policy_weights hands the
    rollout actors, what an evaluation builds its greedy policy from; policy_from_weights reads it): the PolicyNet's
    sizes, `net`'s encoder + pi state copied to the CPU, and the policy version (the learner step of the weights)."""
    state = {k: v.detach().cpu().clone() for k, v in net.state_dict().items() if k.startswith(POLICY_PREFIXES)}
    return {
        "version": version,
        "obs_dim": obs_dim,
        "n_actions": n_actions,
        "hidden_dim": cfg.hidden_dim,
        "encoder_layers": cfg.encoder_layers,
        "state": state,
    }


def policy_from_weights(weights: dict) -> PolicyNet:
    """Builds a PolicyNet from a policy_weights dict (Learner.policy_weights()) and loads its state strictly."""
    missing = [k for k in ("obs_dim", "n_actions", "hidden_dim", "encoder_layers", "state") if k not in weights]
    if missing:
        raise ValueError(f"policy weights lack {missing}; pass what Learner.policy_weights() returns")
    # The standardisation travels as the encoder's buffers in the state (LearnerConfig.obs_norm): the state says
    # whether the policy has it.
    obs_norm = "encoder.obs_scale" in weights["state"]
    net = PolicyNet(
        weights["obs_dim"], weights["n_actions"], weights["hidden_dim"], weights["encoder_layers"], obs_norm=obs_norm
    )
    net.load_state_dict(weights["state"])
    return net

"""LearnerConfig: network sizes, losses, optimiser and replay of the learner (DESIGN.md, learner section).

Sizes are config; the semantics (which head feeds which loss) are fixed in code, except for the switches that
replay the seed's failed designs as ablations (c51_scalar_v, iqn_dueling, iqn_baseline: all off in Plan A v2
and Phase 4). `errors()` returns every bad value with the fix, and the caller (foxhunt_ray.config.RunConfig)
raises them together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

DuelingMode = Literal["off", "diagnostic", "baseline"]
DUELING_MODES: tuple[str, ...] = ("off", "diagnostic", "baseline")
IqnDueling = Literal["off", "composed", "dual"]
IQN_DUELING_MODES: tuple[str, ...] = ("off", "composed", "dual")
IqnBaseline = Literal["off", "v_iqn", "blend"]
IQN_BASELINES: tuple[str, ...] = ("off", "v_iqn", "blend")
MATMUL_PRECISIONS: tuple[str, ...] = ("highest", "high")


@dataclass(kw_only=True, frozen=True)
class LearnerConfig:
    """Everything the Learner is built from; obs_dim and n_actions come from the environment."""

    # --- network ---
    hidden_dim: int = 512
    """H: width of the shared encoder's output h and of its hidden layers."""
    encoder_layers: int = 2
    """Number of Linear+ReLU layers in the encoder MLP (obs -> H -> ... -> H)."""
    n_atoms: int = 51
    """Z: number of C51 atoms on linspace(v_min, v_max, Z)."""
    v_min: float = -10.0
    """Lowest C51 support value (in scaled reward units)."""
    v_max: float = 10.0
    """Highest C51 support value."""
    iqn_taus: int = 32
    """T: quantile fractions sampled for the online IQN quantiles."""
    iqn_target_taus: int = 32
    """T': quantile fractions sampled for the IQN target quantiles."""
    huber_kappa: float = 1.0
    """kappa of the IQN quantile Huber and the dueling Huber losses."""
    ensemble_w: float = 0.5
    """w in q_ens = w*E_C51[Q] + (1-w)*mean_tau IQN."""
    # --- returns ---
    gamma: float = 0.99
    """Discount of the Q losses (n-step Bellman targets) and of GAE."""
    n_step: int = 3
    """n of the n-step returns stored in replay for C51, IQN and the dueling head."""
    gae_lambda: float = 0.95
    """lambda of GAE."""
    reward_scale: float | Literal["auto"] = 1.0
    """Rewards are multiplied by this before learning, so returns fit the C51 support. 'auto': derived from the
    market's units when the RunConfig is built (foxhunt_ray.config.market_reward_scale; 1.0 for other envs), and
    recorded there as the number; a Learner needs the number."""
    minibatch_envs: int = 0
    """Split each rollout's B envs into minibatches of this many envs (whole trajectories), one learner step each,
    in order (0: the whole rollout is one step). Smaller steps, more of them per env step: what lets one GPU
    learner keep pace with many rollout workers (BENCHMARKS.md, "The system on one GPU host")."""
    # --- PPO, value, distillation ---
    ppo_clip: float = 0.2
    """epsilon of the PPO clipped surrogate."""
    normalize_advantages: bool = True
    """Standardise GAE advantages over the valid steps of the batch before the surrogate."""
    entropy_coef: float = 0.01
    """Weight of the entropy bonus (subtracted from the loss)."""
    value_coef: float = 0.5
    """Weight of the V_scalar MSE."""
    distill_temperature: float = 1.0
    """T in KL(softmax(q_ens / T) || pi)."""
    distill_coef: float = 0.1
    """Weight of the Q->pi distillation KL."""
    c51_coef: float = 1.0
    """Weight of the C51 cross-entropy."""
    iqn_coef: float = 1.0
    """Weight of the IQN quantile Huber loss."""
    dueling_mode: DuelingMode = "off"
    """off: no dueling head; diagnostic: trains, V_dq only logged; baseline: V_dq is the GAE baseline."""
    # --- the seed's failed designs, kept as ablation switches (foxhunt_ray/presets.py; docs/learner.md) ---
    c51_scalar_v: bool = False
    """Phase 2 v2: C51 logits = V(s) + A(s,a,z) - mean_a A(s,a,z) with a scalar V head; V gets no gradient
    (pearl_scalar_v_with_categorical_ce_is_noop), but the per-atom centring does change C51."""
    iqn_dueling: IqnDueling = "off"
    """Phase 3.1: IQN split into V(s,tau) + A(s,a,tau) - mean_a A; 'composed' feeds the centred Q to q_ens,
    'dual' feeds the raw A + bias (3.1-fix); the Huber loss trains composed Q in both
    (pearl_complement_internal_loss_vs_external_consumers)."""
    iqn_baseline: IqnBaseline = "off"
    """Phase 3.2: GAE baseline 'v_iqn' = mean_a E_tau Q_IQN, or 'blend' (3.2c) alpha*V_scalar + (1-alpha)*V_IQN;
    needs iqn_dueling (pearl_complement_architectures_must_be_calibrated_when_mixed)."""
    alpha_start_step: int = 200
    """Phase 3.2c blend: alpha = 1 (baseline exactly V_scalar) at learner steps <= this (seed: 2000 of 20k)."""
    alpha_end_step: int = 1000
    """Phase 3.2c blend: alpha falls linearly to 0 at this learner step, then stays 0 (seed: 10000 of 20k)."""
    # --- optimiser ---
    lr: float = 2.5e-4
    """Adam learning rate of the main network (encoder, C51, IQN, pi, V_scalar)."""
    dueling_lr: float = 2.5e-4
    """Adam learning rate of the dueling head (its own optimiser)."""
    adam_eps: float = 1e-5
    """Adam epsilon, both optimisers."""
    grad_clip: float = 10.0
    """Max global gradient norm of the main network."""
    dueling_grad_clip: float = 10.0
    """Max gradient norm of the dueling head, clipped on its own so it never couples to the main net."""
    polyak_tau: float = 0.005
    """Soft update target <- tau*online + (1-tau)*target, after every applied step."""
    # --- replay ---
    replay_capacity: int = 262_144
    """Transitions held in the device-resident uniform replay."""
    replay_min_size: int = 1024
    """Q losses start once replay holds this many transitions (before that they are 0)."""
    q_batch_size: int = 1024
    """Transitions sampled from replay per update for C51, IQN and the dueling head."""
    # --- execution ---
    cuda_graph: bool = True
    """On CUDA only: replay the whole device side of a steady-state update as one captured CUDA graph
    (learner/graph.py). Same losses and guard; masked reductions instead of indexed ones. No effect on CPU."""
    matmul_precision: Literal["highest", "high"] = "highest"
    """On CUDA only, the learner's float32 matmuls (torch.set_float32_matmul_precision, set around each step):
    "highest" is full float32; "high" lets them use TF32 tensor cores (about 1e-3 relative per product). The
    losses and kill-rule diagnostics stay within the tolerances tests/test_learner_cuda.py states. No effect on
    CPU, and not part of what a checkpoint must match."""
    # --- test-only fault injection ---
    inject_nan_at: int | None = None
    """Test only: poison the loss at this learner step to exercise the NaN guard."""
    flip_distill_sign: bool = False
    """Test only: distil pi towards softmax(-q_ens/T), forcing q/pi disagreement (qpa collapse)."""

    def errors(self) -> list[str]:
        """Every problem as 'learner.field=value must ...'; empty when the config is usable."""
        errs: list[str] = []

        def need(cond: bool, name: str, rule: str) -> None:
            if not cond:
                errs.append(f"learner.{name}={getattr(self, name)!r} {rule}")

        for name in (
            "hidden_dim",
            "encoder_layers",
            "n_atoms",
            "iqn_taus",
            "iqn_target_taus",
            "n_step",
            "replay_capacity",
            "q_batch_size",
        ):
            v = getattr(self, name)
            need(isinstance(v, int) and not isinstance(v, bool) and v >= 1, name, "must be an int >= 1")
        need(isinstance(self.n_atoms, int) and self.n_atoms >= 2, "n_atoms", "must be >= 2 (a support)")
        floats = (
            "v_min",
            "v_max",
            "huber_kappa",
            "ensemble_w",
            "gamma",
            "gae_lambda",
            "ppo_clip",
            "entropy_coef",
            "value_coef",
            "distill_temperature",
            "distill_coef",
            "c51_coef",
            "iqn_coef",
            "lr",
            "dueling_lr",
            "adam_eps",
            "grad_clip",
            "dueling_grad_clip",
            "polyak_tau",
        )
        bad = set()
        if self.reward_scale == "auto":
            need(
                False,
                "reward_scale",
                "must be resolved to a number before a Learner is built: a RunConfig does it from its market "
                "(foxhunt_ray.config), or give a number > 0",
            )
            bad.add("reward_scale")
        elif (
            isinstance(self.reward_scale, bool)
            or not isinstance(self.reward_scale, (int, float))
            or not math.isfinite(self.reward_scale)
        ):
            need(False, "reward_scale", "must be a finite number > 0 or 'auto' (derived from the market's units)")
            bad.add("reward_scale")
        for name in floats:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                need(False, name, "must be a finite number")
                bad.add(name)
        ok = lambda *names: not (bad & set(names))  # noqa: E731 (checks only run on numbers)
        if ok("v_min", "v_max"):
            need(self.v_max > self.v_min, "v_max", f"must be > learner.v_min={self.v_min!r}")
        for name in (
            "huber_kappa",
            "reward_scale",
            "ppo_clip",
            "distill_temperature",
            "lr",
            "dueling_lr",
            "adam_eps",
            "grad_clip",
            "dueling_grad_clip",
        ):
            if ok(name):
                need(getattr(self, name) > 0, name, "must be > 0")
        for name in ("entropy_coef", "value_coef", "distill_coef", "c51_coef", "iqn_coef"):
            if ok(name):
                need(getattr(self, name) >= 0, name, "must be >= 0")
        for name in ("ensemble_w", "gamma", "gae_lambda"):
            if ok(name):
                need(0 <= getattr(self, name) <= 1, name, "must be in [0, 1]")
        if ok("polyak_tau"):
            need(0 < self.polyak_tau <= 1, "polyak_tau", "must be in (0, 1]")
        need(self.dueling_mode in DUELING_MODES, "dueling_mode", f"must be one of {list(DUELING_MODES)}")
        need(isinstance(self.c51_scalar_v, bool), "c51_scalar_v", "must be a bool")
        need(self.iqn_dueling in IQN_DUELING_MODES, "iqn_dueling", f"must be one of {list(IQN_DUELING_MODES)}")
        need(self.iqn_baseline in IQN_BASELINES, "iqn_baseline", f"must be one of {list(IQN_BASELINES)}")
        if self.iqn_baseline in IQN_BASELINES[1:]:
            need(
                self.iqn_dueling != "off",
                "iqn_baseline",
                "needs learner.iqn_dueling='composed' or 'dual' (V_IQN is the dueling IQN's V)",
            )
            need(
                self.dueling_mode != "baseline",
                "iqn_baseline",
                "conflicts with learner.dueling_mode='baseline' (V_dq is then the GAE baseline): pick one",
            )
        steps_ok = True
        for name in ("alpha_start_step", "alpha_end_step"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                need(False, name, "must be an int >= 0")
                steps_ok = False
        if steps_ok:
            need(
                self.alpha_end_step > self.alpha_start_step,
                "alpha_end_step",
                f"must be > learner.alpha_start_step={self.alpha_start_step}",
            )
        need(
            isinstance(self.minibatch_envs, int)
            and not isinstance(self.minibatch_envs, bool)
            and self.minibatch_envs >= 0,
            "minibatch_envs",
            "must be an int >= 0 (0: the whole rollout is one step)",
        )
        need(
            isinstance(self.replay_min_size, int)
            and not isinstance(self.replay_min_size, bool)
            and self.replay_min_size >= 1,
            "replay_min_size",
            "must be an int >= 1",
        )
        if not errs:
            need(
                self.q_batch_size <= self.replay_capacity,
                "q_batch_size",
                f"must be <= learner.replay_capacity={self.replay_capacity}",
            )
            need(
                self.replay_min_size <= self.replay_capacity,
                "replay_min_size",
                f"must be <= learner.replay_capacity={self.replay_capacity}",
            )
        need(
            self.inject_nan_at is None or (isinstance(self.inject_nan_at, int) and self.inject_nan_at >= 1),
            "inject_nan_at",
            "must be None or a learner step >= 1",
        )
        need(isinstance(self.flip_distill_sign, bool), "flip_distill_sign", "must be a bool")
        need(isinstance(self.normalize_advantages, bool), "normalize_advantages", "must be a bool")
        need(isinstance(self.cuda_graph, bool), "cuda_graph", "must be a bool")
        need(self.matmul_precision in MATMUL_PRECISIONS, "matmul_precision", f"must be one of {MATMUL_PRECISIONS}")
        return errs

    def validate(self) -> LearnerConfig:
        """Returns self when valid; raises ValueError listing every problem otherwise."""
        if errs := self.errors():
            raise ValueError("invalid learner config:\n  " + "\n  ".join(errs))
        return self

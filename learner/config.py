"""LearnerConfig: network sizes, losses, optimiser and replay of the learner (docs/design.md, "The learner").

Sizes are config; the semantics (which head feeds which loss) are fixed in code, except for the switches that
replay the seed's failed designs as ablations (c51_scalar_v, iqn_dueling, iqn_baseline: all off in Plan A v2
and Phase 4). Each field's own rule is in its type (lobsim_env.validation); `errors()` returns every bad value
with the fix, the rules that tie fields together last, and the caller (foxhunt_ray.config.RunConfig) raises them
together.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields
from typing import Annotated, Literal

from lobsim_env.validation import Bool, ConfigError, Int, Number, OneOf, field_errors

DuelingMode = Literal["off", "diagnostic", "baseline"]
DUELING_MODES: tuple[str, ...] = ("off", "diagnostic", "baseline")
IqnDueling = Literal["off", "composed", "dual"]
IQN_DUELING_MODES: tuple[str, ...] = ("off", "composed", "dual")
IqnBaseline = Literal["off", "v_iqn", "blend"]
IQN_BASELINES: tuple[str, ...] = ("off", "v_iqn", "blend")
MATMUL_PRECISIONS: tuple[str, ...] = ("highest", "high")
OBS_NORMS: tuple[str, ...] = ("off", "probe")
NAN_GUARDS: tuple[str, ...] = ("auto", "host", "composed", "fused")


@dataclass(kw_only=True, frozen=True)
class LearnerConfig:
    """Everything the Learner is built from; obs_dim and n_actions come from the environment."""

    # --- network ---
    hidden_dim: Annotated[int, Int(ge=1)] = 512
    """H: width of the shared encoder's output h and of its hidden layers."""
    encoder_layers: Annotated[int, Int(ge=1)] = 2
    """Number of Linear+ReLU layers in the encoder MLP (obs -> H -> ... -> H)."""
    obs_norm: Annotated[Literal["off", "probe"], OneOf(OBS_NORMS)] = "off"
    """"probe": the encoder standardises each observation column, (x - mean) / std, by the statistics a probe of
    the env measured before training (actors.envs.probe_env: uniform random actions on the first training books);
    fixed for the run and saved with its checkpoints. Columns of very different scales (the market's price
    offsets against its trade and depth flows, 10 to 20 times smaller) then reach the first layer alike, as the
    Adam steps on their weights assume. "off": the raw observation."""
    n_atoms: Annotated[int, Int(ge=2, why="a support")] = 51
    """Z: number of C51 atoms on linspace(v_min, v_max, Z)."""
    v_min: Annotated[float, Number()] = -10.0
    """Lowest C51 support value (in scaled reward units)."""
    v_max: Annotated[float, Number()] = 10.0
    """Highest C51 support value."""
    iqn_taus: Annotated[int, Int(ge=1)] = 32
    """T: quantile fractions sampled for the online IQN quantiles."""
    iqn_target_taus: Annotated[int, Int(ge=1)] = 32
    """T': quantile fractions sampled for the IQN target quantiles."""
    huber_kappa: Annotated[float, Number(gt=0)] = 1.0
    """kappa of the IQN quantile Huber and the dueling Huber losses."""
    ensemble_w: Annotated[float, Number(ge=0, le=1)] = 0.5
    """w in q_ens = w*E_C51[Q] + (1-w)*mean_tau IQN."""
    # --- returns ---
    gamma: Annotated[float, Number(ge=0, le=1)] = 0.99
    """Discount of the Q losses (n-step Bellman targets) and of GAE."""
    n_step: Annotated[int, Int(ge=1)] = 3
    """n of the n-step returns stored in replay for C51, IQN and the dueling head."""
    gae_lambda: Annotated[float, Number(ge=0, le=1)] = 0.95
    """lambda of GAE."""
    reward_scale: float | Literal["auto"] = 1.0
    """Rewards are multiplied by this before learning, so returns fit the C51 support. 'auto': derived from the
    market's units when the RunConfig is built (foxhunt_ray.config.market_reward_scale; 1.0 for other envs), and
    recorded there as the number; a Learner needs the number."""
    minibatch_envs: Annotated[int, Int(ge=0, why="0: the whole rollout is one step")] = 0
    """Split each rollout's B envs into minibatches of this many envs (whole trajectories), one learner step each,
    in order (0: the whole rollout is one step). Smaller steps, more of them per env step: what lets one GPU
    learner keep pace with many rollout workers (BENCHMARKS.md, "The system on one GPU host")."""
    ppo_epochs: Annotated[int, Int(ge=1)] = 1
    """Passes over each rollout's minibatches, as PPO's epochs: every pass makes one learner step per minibatch, in
    the same order (the clipped surrogate against the rollout's behaviour log-probs, so later passes see ratios off
    1; the Q heads on a fresh replay sample each step). The rollout's transitions enter replay on the first pass
    only. 1: each rollout once, the seed's; k multiplies the learner steps a payload makes by k."""
    # --- PPO, value, distillation ---
    ppo_clip: Annotated[float, Number(gt=0)] = 0.2
    """epsilon of the PPO clipped surrogate."""
    normalize_advantages: Annotated[bool, Bool()] = True
    """Standardise GAE advantages over the valid steps of the batch before the surrogate."""
    entropy_coef: Annotated[float, Number(ge=0)] = 0.01
    """Weight of the entropy bonus (subtracted from the loss)."""
    value_coef: Annotated[float, Number(ge=0)] = 0.5
    """Weight of the V_scalar MSE."""
    distill_temperature: Annotated[float, Number(gt=0)] = 1.0
    """T in KL(softmax(q_ens / T) || pi)."""
    distill_coef: Annotated[float, Number(ge=0)] = 0.1
    """Weight of the Q->pi distillation KL."""
    c51_coef: Annotated[float, Number(ge=0)] = 1.0
    """Weight of the C51 cross-entropy."""
    iqn_coef: Annotated[float, Number(ge=0)] = 1.0
    """Weight of the IQN quantile Huber loss."""
    dueling_mode: Annotated[DuelingMode, OneOf(DUELING_MODES)] = "off"
    """off: no dueling head; diagnostic: trains, V_dq only logged; baseline: V_dq is the GAE baseline."""
    # --- the seed's failed designs, kept as ablation switches (foxhunt_ray/presets.py; docs/learner.md) ---
    c51_scalar_v: Annotated[bool, Bool()] = False
    """Phase 2 v2: C51 logits = V(s) + A(s,a,z) - mean_a A(s,a,z) with a scalar V head; V gets no gradient
    (pearl_scalar_v_with_categorical_ce_is_noop), but the per-atom centring does change C51."""
    iqn_dueling: Annotated[IqnDueling, OneOf(IQN_DUELING_MODES)] = "off"
    """Phase 3.1: IQN split into V(s,tau) + A(s,a,tau) - mean_a A; 'composed' feeds the centred Q to q_ens,
    'dual' feeds the raw A + bias (3.1-fix); the Huber loss trains composed Q in both
    (pearl_complement_internal_loss_vs_external_consumers)."""
    iqn_baseline: Annotated[IqnBaseline, OneOf(IQN_BASELINES)] = "off"
    """Phase 3.2: GAE baseline 'v_iqn' = mean_a E_tau Q_IQN, or 'blend' (3.2c) alpha*V_scalar + (1-alpha)*V_IQN;
    needs iqn_dueling (pearl_complement_architectures_must_be_calibrated_when_mixed)."""
    alpha_start_step: Annotated[int, Int(ge=0)] = 200
    """Phase 3.2c blend: alpha = 1 (baseline exactly V_scalar) at learner steps <= this (seed: 2000 of 20k)."""
    alpha_end_step: Annotated[int, Int(ge=0)] = 1000
    """Phase 3.2c blend: alpha falls linearly to 0 at this learner step, then stays 0 (seed: 10000 of 20k)."""
    # --- optimiser ---
    lr: Annotated[float, Number(gt=0)] = 2.5e-4
    """Adam learning rate of the main network (encoder, C51, IQN, pi, V_scalar)."""
    dueling_lr: Annotated[float, Number(gt=0)] = 2.5e-4
    """Adam learning rate of the dueling head (its own optimiser)."""
    lr_decay_to: Annotated[float, Number(ge=0, le=1)] = 1.0
    """lr and dueling_lr at the run's end, as a fraction of themselves: 1 keeps them constant; below 1 they fall
    linearly with the run's progress (Learner.set_progress: the larger of the steps done and the time budget
    spent, from the driver), as CleanRL's PPO anneals its learning rate."""
    adam_eps: Annotated[float, Number(gt=0)] = 1e-5
    """Adam epsilon, both optimisers."""
    grad_clip: Annotated[float, Number(gt=0)] = 10.0
    """Max global gradient norm of the main network."""
    dueling_grad_clip: Annotated[float, Number(gt=0)] = 10.0
    """Max gradient norm of the dueling head, clipped on its own so it never couples to the main net."""
    polyak_tau: Annotated[float, Number(gt=0, le=1)] = 0.005
    """Soft update target <- tau*online + (1-tau)*target, after every applied step."""
    # --- replay ---
    replay_capacity: Annotated[int, Int(ge=1)] = 262_144
    """Transitions held in the device-resident uniform replay."""
    replay_min_size: Annotated[int, Int(ge=1)] = 1024
    """Q losses start once replay holds this many transitions (before that they are 0)."""
    q_batch_size: Annotated[int, Int(ge=1)] = 1024
    """Transitions sampled from replay per update for C51, IQN and the dueling head."""
    # --- execution ---
    cuda_graph: Annotated[bool, Bool()] = True
    """On CUDA only: replay the whole device side of a steady-state update as one captured CUDA graph
    (learner/graph.py). Same losses and guard; masked reductions instead of indexed ones. No effect on CPU."""
    matmul_precision: Annotated[Literal["highest", "high"], OneOf(MATMUL_PRECISIONS)] = "highest"
    """On CUDA only, the learner's float32 matmuls (torch.set_float32_matmul_precision, set around each step):
    "highest" is full float32; "high" lets them use TF32 tensor cores (about 1e-3 relative per product). The
    losses and kill-rule diagnostics stay within the tolerances tests/test_learner_cuda.py states. No effect on
    CPU, and not part of what a checkpoint must match."""
    nan_guard: Annotated[Literal["auto", "host", "composed", "fused"], OneOf(NAN_GUARDS)] = "auto"
    """How a step that is not finite is kept from landing (learner/optim.py): "host" syncs, then skips it, changing
    nothing; "composed" always steps and undoes it on the device with torch.where (no sync: what a CUDA graph
    captures); "fused" is the composed guard as one op (ops.guarded_adam_). All three train bit-identically on the
    CPU (tests/test_graph.py). "auto": the host guard off CUDA; on CUDA the fused guard where the ops run their
    kernels, else the composed one. A captured CUDA graph step cannot sync: with "host" it takes auto's device guard.
    Not part of what a checkpoint must match."""

    def errors(self) -> list[str]:
        """Every problem as 'learner.field=value must ...'; empty when the config is usable."""
        bad = field_errors(self, "learner")
        errs = list(bad.values())

        def need(cond: bool, name: str, rule: str) -> None:
            if not cond:
                errs.append(f"learner.{name}={getattr(self, name)!r} {rule}")

        def ok(*names: str) -> bool:  # the rules between fields only run on fields that kept their own
            return not bad.keys() & set(names)

        if self.reward_scale == "auto":
            need(
                False,
                "reward_scale",
                "must be resolved to a number before a Learner is built: a RunConfig does it from its market "
                "(foxhunt_ray.config), or give a number > 0",
            )
        elif (
            isinstance(self.reward_scale, bool)
            or not isinstance(self.reward_scale, (int, float))
            or not math.isfinite(self.reward_scale)
        ):
            need(False, "reward_scale", "must be a finite number > 0 or 'auto' (derived from the market's units)")
        else:
            need(self.reward_scale > 0, "reward_scale", "must be > 0")
        if ok("v_min", "v_max"):
            need(self.v_max > self.v_min, "v_max", f"must be > learner.v_min={self.v_min!r}")
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
        if ok("alpha_start_step", "alpha_end_step"):
            need(
                self.alpha_end_step > self.alpha_start_step,
                "alpha_end_step",
                f"must be > learner.alpha_start_step={self.alpha_start_step}",
            )
        for name in ("q_batch_size", "replay_min_size"):
            if ok(name, "replay_capacity"):
                need(
                    getattr(self, name) <= self.replay_capacity,
                    name,
                    f"must be <= learner.replay_capacity={self.replay_capacity}",
                )
        return errs

    def validate(self) -> LearnerConfig:
        """Returns self when valid; raises ConfigError listing every problem otherwise."""
        if errs := self.errors():
            raise ConfigError(errs, "learner config")
        return self


@dataclass(kw_only=True, frozen=True)
class FaultInjection:
    """Test-only faults a Learner makes on purpose, to exercise the kill rules end to end. The Learner takes it as
    its own argument: it is not part of LearnerConfig, so it is never part of what a checkpoint must match. The
    driver builds it from --inject-nan-at and --flip-distill-sign and records it in config.json as "faults"."""

    inject_nan_at: Annotated[int | None, Int(ge=1, none_ok=True, why="a learner step")] = None
    """Poison the loss at this learner step (the NaN guard and the non_finite rule fire)."""
    flip_distill_sign: Annotated[bool, Bool()] = False
    """Distil pi towards softmax(-q_ens/T), forcing q/pi disagreement (the qpa rule fires)."""

    def errors(self) -> list[str]:
        """Every bad value as 'faults.field=value must ...'."""
        return list(field_errors(self, "faults").values())


NO_FAULTS = FaultInjection()
CONFIG_DEFAULTS: dict = {f.name: f.default for f in fields(LearnerConfig)}
"""Every LearnerConfig field's default: what a checkpoint written before a field existed ran with (every new field
defaults to what the code did before it)."""
RETIRED_FIELDS = frozenset({"inject_nan_at", "flip_distill_sign"})
"""LearnerConfig fields that moved to FaultInjection: a checkpoint or config.json of older code may hold them."""
CHECKPOINT_FORMAT = "foxhunt_ray.learner/1"
"""The format of a learner's state_dict (Learner.state_dict): its checkpoints carry it and its config."""
EXECUTION_ONLY = frozenset({"cuda_graph", "matmul_precision", "nan_guard"})
"""LearnerConfig fields that change how, not what, a learner computes: a checkpoint loads across them."""


def config_differences(cfg: LearnerConfig, saved: dict) -> list[str]:
    """The LearnerConfig fields on which a checkpoint's saved config (its 'config' entry) differs from cfg, those
    that only change how it computes (EXECUTION_ONLY) left out: a checkpoint loads only into a learner with none.
    A field added since the checkpoint was written is absent from its config: it ran with the default (every new
    field defaults to what the code did before it existed). The fields that moved to FaultInjection
    (RETIRED_FIELDS) are not compared: they were never part of what a learner computes."""
    mine, theirs = dataclasses.asdict(cfg), {**CONFIG_DEFAULTS, **saved}
    ignored = EXECUTION_ONLY | RETIRED_FIELDS
    return sorted(k for k in (set(mine) | set(theirs)) - ignored if mine.get(k) != theirs.get(k))

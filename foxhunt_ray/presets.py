"""Named configs (DESIGN.md, Presets): `run_preset(name)` is the full RunConfig, `preset(name)` its LearnerConfig.

plan_a_v2 is the production baseline the seed protected through ten failed cluster runs; phase4_2 and
phase4_3 differ from it ONLY in dueling_mode, so a comparison between them measures the dueling head alone.
The seed's failed designs (phase2_v2, phase3_1, phase3_2, phase3_2c, phase3_1_fix) differ from it only in the
ablation switches (c51_scalar_v, iqn_dueling, iqn_baseline).
"""

from __future__ import annotations

import dataclasses

from actors.rollout import RolloutConfig
from foxhunt_ray.config import RunConfig
from learner.config import LearnerConfig
from lobsim_env.config import MarketConfig

_PLAN_A_V2 = LearnerConfig(hidden_dim=512, dueling_mode="off")

_PRESETS: dict[str, LearnerConfig] = {
    # C51 + IQN aux + pi + V_scalar: the production baseline.
    "plan_a_v2": _PLAN_A_V2,
    # + DuelingQHead trained in diagnostic mode: V_dq is logged, PPO still uses V_scalar.
    "phase4_2": dataclasses.replace(_PLAN_A_V2, dueling_mode="diagnostic"),
    # + V_dq and V_dq(s_{t+1}) as the GAE baseline; V_scalar still trains for comparison.
    "phase4_3": dataclasses.replace(_PLAN_A_V2, dueling_mode="baseline"),
    # The seed's failed designs, as ablations of plan_a_v2 (docs/learner.md, "The seed's experiments"):
    # Phase 2 v2, scalar V on the C51 atom logits: pearl_scalar_v_with_categorical_ce_is_noop.
    "phase2_v2": dataclasses.replace(_PLAN_A_V2, c51_scalar_v=True),
    # Phase 3.1, IQN V/A split, composed (centred) Q into q_ens: pearl_complement_internal_loss_vs_external_consumers.
    "phase3_1": dataclasses.replace(_PLAN_A_V2, iqn_dueling="composed"),
    # Phase 3.2, 3.1 + V_IQN as the GAE baseline: pearl_complement_architectures_must_be_calibrated_when_mixed.
    "phase3_2": dataclasses.replace(_PLAN_A_V2, iqn_dueling="composed", iqn_baseline="v_iqn"),
    # Phase 3.2c, 3.2 with alpha*V_scalar + (1-alpha)*V_IQN, alpha 1 -> 0 over alpha_start_step..alpha_end_step:
    # at alpha = 1 it is 3.1 exactly, and collapsed all the same (the smoking gun that 3.1 was the breakage).
    "phase3_2c": dataclasses.replace(_PLAN_A_V2, iqn_dueling="composed", iqn_baseline="blend"),
    # Phase 3.1-fix, raw A + bias into q_ens, composed Q into the Huber loss: the addendum of
    # pearl_complement_internal_loss_vs_external_consumers (A's gradient sums to 0 over actions).
    "phase3_1_fix": dataclasses.replace(_PLAN_A_V2, iqn_dueling="dual"),
    # Tiny sizes for tests and CI: an update takes milliseconds on a CPU. Dueling on, so every path runs.
    "smoke": LearnerConfig(
        hidden_dim=32,
        encoder_layers=2,
        n_atoms=11,
        iqn_taus=8,
        iqn_target_taus=8,
        q_batch_size=64,
        replay_capacity=8192,
        replay_min_size=64,
        dueling_mode="diagnostic",
    ),
}

PRESET_NAMES: tuple[str, ...] = tuple(_PRESETS)


def preset(name: str) -> LearnerConfig:
    """The LearnerConfig of preset `name`; raises ValueError listing the valid names otherwise."""
    if name not in _PRESETS:
        raise ValueError(f"unknown preset {name!r}; valid presets: {list(PRESET_NAMES)}")
    return _PRESETS[name]


# Full run configs. smoke is sized so that a serial run of a few hundred updates takes seconds on a 2-core CPU:
# 4 books x 16 steps per batch and short episodes (so pnl_cum_usd moves within a smoke run).
_RUN_PRESETS: dict[str, RunConfig] = {
    name: RunConfig(preset=name, learner=cfg) for name, cfg in _PRESETS.items() if name != "smoke"
}
_RUN_PRESETS["smoke"] = RunConfig(
    preset="smoke",
    market=MarketConfig(horizon=200),
    learner=_PRESETS["smoke"],
    rollout=RolloutConfig(num_envs=4, steps_per_sample=16),
)


def run_preset(name: str) -> RunConfig:
    """The full RunConfig (market, learner, rollout, kill) of preset `name`; ValueError listing names otherwise."""
    if name not in _RUN_PRESETS:
        raise ValueError(f"unknown preset {name!r}; valid presets: {list(PRESET_NAMES)}")
    return _RUN_PRESETS[name]

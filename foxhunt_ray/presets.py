"""Named configs (DESIGN.md, Presets): `run_preset(name)` is the full RunConfig, `preset(name)` its LearnerConfig.

plan_a_v2 is the production baseline the seed protected through ten failed cluster runs; phase4_2 and
phase4_3 differ from it ONLY in dueling_mode, so a comparison between them measures the dueling head alone.
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

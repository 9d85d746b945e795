"""Named configs (DESIGN.md, Presets): `run_preset(name)` is the full RunConfig, `preset(name)` its LearnerConfig.

A run's config is three named choices, each recorded in config.json (`preset`, `settings`, `sizing`):

- the preset: the experiment's structure. plan_a_v2 is the production baseline the seed protected through ten
  failed cluster runs; phase4_2 and phase4_3 differ from it ONLY in dueling_mode, so a comparison between them
  measures the dueling head alone. The seed's failed designs (phase2_v2, phase3_1, phase3_2, phase3_2c,
  phase3_1_fix) differ from it only in the ablation switches (c51_scalar_v, iqn_dueling, iqn_baseline).
- the settings group (SETTINGS): the learning rates, the reward scale and what the agent observes. 'learn' (the
  default) is what learns on the synthetic market: lr = dueling_lr = 3e-3, chosen by the sweep of
  benchmarks/learning_sweep.py, reward_scale 'auto', derived from the market's units
  (foxhunt_ray.config.market_reward_scale), the depth flow near the mid in the observation (market.depth_flow_ticks
  5), the observation standardised by the statistics a probe of the env measured (learner.obs_norm 'probe'), and
  the policy distilled towards softmax(q_ens / 0.3) rather than softmax(q_ens) (learner.distill_temperature); what
  each of these gained: BENCHMARKS.md, "Learning on the synthetic market" and "The best observation-only rule".
  'seed' is the seed's own values (lr 2.5e-4,
  reward_scale 1, distillation temperature 1, its observation without the depth flow, not standardised), for anyone
  reproducing it: in the sweep they barely moved in 13,500 updates.
- the sizing (SIZINGS): widths and batch shapes. 'gpu' is the presets' production size, the seed's (H = 512,
  16 books a rollout worker: the shape of its cluster of many small workers); 'gpu_host' the same network fed the
  way one GPU host keeps its GPU busy (2,048 books a worker, the learner stepping 256 of them at a time); 'cpu'
  the sizes a 2-core CPU updates about 25 times a second (H = 128, the sweep's). `python -m foxhunt_ray.local`
  picks 'gpu_host' when torch sees a CUDA device and 'cpu' when not (`--sizing` chooses).

The settings and the sizing touch the same fields of every preset, so the pairs above still differ in their
switch alone under any of them. `smoke` is the tests' preset: its own tiny sizes (sizing 'smoke') and the seed's
settings; it exercises every code path, it is not meant to learn.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from actors.config import RolloutConfig
from foxhunt_ray.config import ConfigError, RunConfig, apply_overrides
from learner.config import LearnerConfig
from lobsim_env.config import MarketConfig

SETTINGS: dict[str, dict[str, dict[str, Any]]] = {
    # what learns on the synthetic market (BENCHMARKS.md, "Learning on the synthetic market")
    # the depth flow: on the box's main job 0.72 of the oracle against 0.57 without it, six seeds paired
    # the observation standardised by its probed statistics (learner.obs_norm): on the box's main job 0.76 against
    # 0.69 of the oracle without it, ten seeds paired, better on eight (BENCHMARKS.md, "Learning on the
    # synthetic market")
    # the distillation temperature 0.3: on the GPU host seeds 0-6 at 0.850-0.894 of the oracle (mean 0.878) against
    # 0.720-0.897 (0.853) at 1, the box's main job 0.751 to 0.818 on three seeds (BENCHMARKS.md, "Learning on
    # the synthetic market")
    "learn": {
        "learner": {
            "lr": 3e-3,
            "dueling_lr": 3e-3,
            "reward_scale": "auto",
            "obs_norm": "probe",
            "distill_temperature": 0.3,
        },
        "market": {"depth_flow_ticks": 5},
    },
    # the seed's values (its GPU production runs; its observation had no depth flow and was not standardised)
    "seed": {
        "learner": {
            "lr": 2.5e-4,
            "dueling_lr": 2.5e-4,
            "reward_scale": 1.0,
            "obs_norm": "off",
            "distill_temperature": 1.0,
        },
        "market": {"depth_flow_ticks": 0},
    },
}
"""Settings groups: section -> field -> value, applied on top of a preset (`run_preset(name, settings=...)`)."""

SIZINGS: dict[str, dict[str, dict[str, Any]]] = {
    # the production size, the seed's: H = 512, replay batch 1024, 32/32 IQN taus, 16 books x 64 steps a rollout
    "gpu": {
        "learner": {"hidden_dim": 512, "q_batch_size": 1024, "iqn_taus": 32, "iqn_target_taus": 32},
        "rollout": {"num_envs": 16, "steps_per_sample": 64},
    },
    # one GPU host (16 cores, 11 rollout workers): the network of 'gpu'; a worker samples 2,048 books x 64 steps
    # with the policy on the GPU, and the learner steps 256 books (16,384 transitions) at a time. 4,096 books ran
    # more env steps a second, but a sample took twice as long: twice the policy lag, distillation-loss spikes on
    # the stalest payloads, and runs that scored far less of the oracle (BENCHMARKS.md, "The system on one
    # GPU host")
    "gpu_host": {
        "learner": {
            "hidden_dim": 512,
            "q_batch_size": 1024,
            "iqn_taus": 32,
            "iqn_target_taus": 32,
            "minibatch_envs": 256,
        },
        "rollout": {"num_envs": 2048, "steps_per_sample": 64},
    },
    # what a 2-core CPU trains at about 25 updates a second: one update's rollout is 64 books x 16 steps
    "cpu": {
        "learner": {"hidden_dim": 128, "q_batch_size": 256, "iqn_taus": 16, "iqn_target_taus": 16},
        "rollout": {"num_envs": 64, "steps_per_sample": 16},
    },
}
"""Sizings: section -> field -> value, applied on top of a preset (`run_preset(name, sizing=...)`)."""

SIZING_NAMES: tuple[str, ...] = (*SIZINGS, "smoke")

_PLAN_A_V2 = LearnerConfig(dueling_mode="off")

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


def _check(name: str, settings: str | None, sizing: str | None) -> None:
    if name not in _PRESETS:
        raise ValueError(f"unknown preset {name!r}; valid presets: {list(PRESET_NAMES)}")
    if settings is not None and settings not in SETTINGS:
        raise ValueError(f"unknown settings {settings!r}; valid settings: {list(SETTINGS)}")
    if sizing is not None and sizing not in SIZING_NAMES:
        raise ValueError(f"unknown sizing {sizing!r}; valid sizings: {list(SIZING_NAMES)}")
    if name == "smoke" and sizing not in (None, "smoke"):
        raise ValueError(f"sizing {sizing!r} does not fit preset 'smoke' (it has its own sizes): drop the sizing")
    if name != "smoke" and sizing == "smoke":
        raise ValueError(f"sizing 'smoke' is the smoke preset's own; for preset {name!r} pick one of {list(SIZINGS)}")


def _apply(config: RunConfig, group: dict[str, dict[str, Any]]) -> RunConfig:
    return dataclasses.replace(
        config, **{sec: dataclasses.replace(getattr(config, sec), **fields) for sec, fields in group.items()}
    )


def run_preset(name: str, *, settings: str | None = None, sizing: str | None = None) -> RunConfig:
    """The full RunConfig (market, learner, rollout, kill) of preset `name` with a settings group and a sizing
    (default: 'learn' and 'gpu'; smoke: 'seed' and its own sizes), both recorded in it. learner.reward_scale may
    be 'auto' here: RunConfig.validate() (the driver too) resolves it from the market, after any override.
    ValueError naming the valid names for an unknown one."""
    _check(name, settings, sizing)
    if name == "smoke":
        # 4 books x 16 steps per batch and short episodes (so pnl_cum_usd moves within a smoke run): a serial run
        # of a few hundred updates takes seconds on a 2-core CPU.
        config = RunConfig(
            preset="smoke",
            settings=settings or "seed",
            sizing="smoke",
            market=MarketConfig(horizon=200),
            learner=_PRESETS["smoke"],
            rollout=RolloutConfig(num_envs=4, steps_per_sample=16),
        )
        return _apply(config, SETTINGS[settings]) if settings not in (None, "seed") else config
    settings, sizing = settings or "learn", sizing or "gpu"
    config = RunConfig(preset=name, settings=settings, sizing=sizing, learner=_PRESETS[name])
    return _apply(_apply(config, SIZINGS[sizing]), SETTINGS[settings])


def name_errors(config: RunConfig) -> list[str]:
    """The config's preset, settings and sizing names that are none of this module's, as `--set preset=...` can
    leave them (the --preset, --settings and --sizing flags and a --config file refuse an unknown name
    themselves); each error names the value and the valid names. A name records what built the config: an
    unknown one would label a run with a preset that does not exist."""
    errs = []
    for key, valid in (("preset", PRESET_NAMES), ("settings", tuple(SETTINGS)), ("sizing", SIZING_NAMES)):
        value = getattr(config, key)
        if value not in valid and (key == "preset" or value is not None):
            errs.append(
                f"{key}={value!r} is not one of {list(valid)}: name a {key} with --{key} NAME (a --set {key}=... "
                "only relabels the config)"
            )
    return errs


def with_overrides(config: RunConfig, overrides: list[str]) -> tuple[RunConfig, list[str]]:
    """(config with every override that can be applied, the errors of those that cannot): `apply_overrides`, but
    an unknown key or a value of the wrong type leaves that one override out instead of the whole config, so the
    caller can still check every other value (`RunConfig.errors()`) and name all the bad ones at once."""
    try:
        return apply_overrides(config, overrides), []
    except ConfigError as err:
        errs = list(err.errors)
    good = []
    for item in overrides:
        try:
            apply_overrides(config, [item])
        except ConfigError:
            continue
        good.append(item)
    try:
        return apply_overrides(config, good), errs
    except ConfigError as err:  # not expected: each applies alone; keep the preset's config and every error
        return config, errs + [e for e in err.errors if e not in errs]


def preset(name: str, *, settings: str | None = None, sizing: str | None = None) -> LearnerConfig:
    """The LearnerConfig of `run_preset(name, ...)`, its reward scale resolved for the preset's own market;
    ValueError listing the valid names otherwise."""
    return run_preset(name, settings=settings, sizing=sizing).validate().learner

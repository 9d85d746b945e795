"""Presets that learn with their own defaults (issue 13): the reward scale from the market's units, the named
settings groups ('learn', 'seed') and sizings ('gpu', 'gpu_host', 'cpu'), which of them a run gets and where it is
recorded."""

from __future__ import annotations

import dataclasses
import json

import pytest

from actors.config import RolloutConfig
from foxhunt_ray import driver
from foxhunt_ray.config import ConfigError, RunConfig, apply_overrides, from_dict, market_reward_scale
from foxhunt_ray.local import LOCAL_DEFAULTS
from foxhunt_ray.presets import PRESET_NAMES, SETTINGS, SIZINGS, preset, run_preset
from learner.config import LearnerConfig
from lobsim_env.config import MarketConfig

PAIRS = {  # preset -> the fields it may differ from plan_a_v2 in (its switch)
    "phase4_2": {"dueling_mode"},
    "phase4_3": {"dueling_mode"},
    "phase2_v2": {"c51_scalar_v"},
    "phase3_1": {"iqn_dueling"},
    "phase3_2": {"iqn_dueling", "iqn_baseline"},
    "phase3_2c": {"iqn_dueling", "iqn_baseline"},
    "phase3_1_fix": {"iqn_dueling"},
}


# ---------------------------------------------------------------------------------- the reward scale


def test_market_reward_scale_is_half_a_tick_of_the_largest_position():
    market = MarketConfig()
    assert (market.usd_per_tick, market.position_limit) == (12.5, 5)
    assert market_reward_scale(market) == pytest.approx(2 / 62.5)  # 0.032: the mid moves in half ticks
    assert market_reward_scale(MarketConfig(usd_per_tick=0.01, position_limit=100)) == pytest.approx(2.0)


def test_where_one_orders_fee_outweighs_half_a_tick_the_fee_is_the_unit():
    """Binance spot BTCUSDT's contract (tick $0.01, lot 1e-5 BTC, 10 bps, orders of 60 lots near $61,672): half a tick
    at 300 lots is $0.000015 and one order's fee $0.037; the tick's unit would make a fee 2,500 units."""
    spot = MarketConfig(
        usd_per_tick=1e-7, position_limit=300, order_size=60, taker_fee_usd=0.0, taker_fee_bps=10.0,
        reference_price_ticks=6_167_223,
    )  # fmt: skip
    assert market_reward_scale(spot) == pytest.approx(1 / (60 * 1e-3 * 6_167_223 * 1e-7))  # 1 / $0.037
    # per-contract fees count too, and a fee below half a tick leaves the tick's unit alone
    assert market_reward_scale(MarketConfig(order_size=2, taker_fee_usd=40.0)) == pytest.approx(1 / 80)
    assert market_reward_scale(MarketConfig(reference_price_ticks=20_000, taker_fee_bps=1.0)) == pytest.approx(2 / 62.5)


def test_auto_reward_scale_is_resolved_from_the_market_and_recorded_as_a_number():
    config = run_preset("phase4_3")
    assert config.learner.reward_scale == "auto"  # unresolved until validated: a --set of the market comes first
    assert config.validate().learner.reward_scale == pytest.approx(0.032)
    assert preset("phase4_3").reward_scale == pytest.approx(0.032)
    # the market as overridden, not the preset's
    wider = apply_overrides(config, ["market.usd_per_tick=25", "market.position_limit=4"]).validate()
    assert wider.learner.reward_scale == pytest.approx(0.02)
    # any other env keeps its rewards as they are; an explicit number is kept
    assert apply_overrides(config, ['env_id="CartPole-v1"']).validate().learner.reward_scale == 1.0
    assert apply_overrides(config, ["learner.reward_scale=0.04"]).validate().learner.reward_scale == 0.04
    # recorded resolved: config.json holds the number, and reads back as it
    saved = json.loads(config.validate().to_json())
    assert saved["learner"]["reward_scale"] == pytest.approx(0.032)
    assert from_dict(RunConfig, saved).validate() == config.validate()


def test_reward_scale_errors_name_the_value_and_the_fix():
    errs = LearnerConfig(reward_scale="auto").errors()
    assert any("learner.reward_scale='auto' must be resolved" in e and "RunConfig" in e for e in errs), errs
    with pytest.raises(ConfigError, match=r"learner.reward_scale='autoo' must be one of: float, 'auto'"):
        apply_overrides(run_preset("plan_a_v2"), ["learner.reward_scale=autoo"])
    with pytest.raises(ConfigError, match=r"learner.reward_scale=-1.0 must be > 0"):
        apply_overrides(run_preset("plan_a_v2"), ["learner.reward_scale=-1"]).validate()


# ---------------------------------------------------------------------------------- settings and sizings


def test_learn_settings_are_every_presets_default():
    for name in PRESET_NAMES:
        if name == "smoke":
            continue
        cfg = run_preset(name).validate()
        assert (cfg.settings, cfg.sizing) == ("learn", "gpu")
        assert (cfg.learner.lr, cfg.learner.dueling_lr) == (3e-3, 3e-3)
        assert cfg.learner.reward_scale == pytest.approx(0.032)
        assert cfg.learner.obs_norm == "probe"  # the observation standardised by its probed statistics
        assert cfg.learner.distill_temperature == 0.3  # the policy distilled towards a sharper softmax of q_ens
        assert cfg.learner.hidden_dim == 512  # the production width (issue 12 trains it on a GPU)


def test_seed_settings_and_gpu_sizing_reproduce_the_seeds_values():
    """The values every preset had before issue 13: LearnerConfig's and RolloutConfig's own defaults."""
    for name in PRESET_NAMES:
        if name == "smoke":
            continue
        cfg = run_preset(name, settings="seed", sizing="gpu").validate()
        switches = {f: getattr(cfg.learner, f) for f in ("dueling_mode", "c51_scalar_v", "iqn_dueling", "iqn_baseline")}
        assert cfg.learner == LearnerConfig(hidden_dim=512, **switches), name
        assert cfg.rollout == RolloutConfig() and (cfg.settings, cfg.sizing) == ("seed", "gpu")
        assert (cfg.learner.lr, cfg.learner.reward_scale, cfg.learner.q_batch_size) == (2.5e-4, 1.0, 1024)
        assert cfg.learner.distill_temperature == 1.0
        assert cfg.market == MarketConfig()  # the seed's observation: no depth flow


def test_learn_settings_observe_the_depth_flow_under_every_preset_and_sizing():
    """What learned on the box (BENCHMARKS.md, "The best observation-only rule"): every preset's market
    under 'learn' is the market's own with the depth flow near the mid, 5 ticks, and nothing else changed."""
    for name in PRESET_NAMES:
        sizings = [None] if name == "smoke" else list(SIZINGS)
        for sizing in sizings:
            market = run_preset(name, settings="learn", sizing=sizing).validate().market
            own = run_preset(name, settings="seed", sizing=sizing).market
            assert market == dataclasses.replace(own, depth_flow_ticks=5), (name, sizing)
    assert run_preset("phase4_3").market.depth_flow_ticks == 5 and run_preset("smoke").market.depth_flow_ticks == 0


def test_gpu_host_sizing_is_gpus_network_fed_by_wide_workers_in_learner_steps_of_256_books():
    """What reached 0.78-0.83 of the oracle in 150 s on 3 seeds on the H100 host (BENCHMARKS.md, "Learning on
    the synthetic market"; commit fc72e7b): 2,048 books a worker, half the policy lag of 4,096."""
    host, gpu = run_preset("phase4_3", sizing="gpu_host").validate(), run_preset("phase4_3", sizing="gpu").validate()
    assert dataclasses.replace(host.learner, minibatch_envs=0) == gpu.learner and host.learner.minibatch_envs == 256
    assert (host.rollout.num_envs, host.rollout.steps_per_sample) == (2048, 64) and host.sizing == "gpu_host"
    assert host.rollout.num_envs % host.learner.minibatch_envs == 0  # every payload splits into whole steps


def test_cpu_sizing_is_the_sweeps_sizes():
    cfg = run_preset("phase4_3", sizing="cpu").validate()
    lrn = cfg.learner
    assert (lrn.hidden_dim, lrn.q_batch_size, lrn.iqn_taus, lrn.iqn_target_taus) == (128, 256, 16, 16)
    assert (cfg.rollout.num_envs, cfg.rollout.steps_per_sample) == (64, 16) and cfg.sizing == "cpu"


@pytest.mark.parametrize("settings", list(SETTINGS))
@pytest.mark.parametrize("sizing", list(SIZINGS))
def test_preset_pairs_differ_only_in_their_switch_under_every_group(settings, sizing):
    base = dataclasses.asdict(preset("plan_a_v2", settings=settings, sizing=sizing))
    for name, switch in PAIRS.items():
        cfg = run_preset(name, settings=settings, sizing=sizing).validate()
        diff = {k for k, v in dataclasses.asdict(cfg.learner).items() if base[k] != v}
        assert diff == switch, name
        other = run_preset("plan_a_v2", settings=settings, sizing=sizing)
        assert (cfg.rollout, cfg.market) == (other.rollout, other.market)


def test_smoke_keeps_its_own_sizes_and_unknown_names_are_refused():
    smoke = run_preset("smoke").validate()
    assert (smoke.settings, smoke.sizing, smoke.learner.hidden_dim, smoke.learner.lr) == ("seed", "smoke", 32, 2.5e-4)
    assert smoke.learner.reward_scale == 1.0
    assert run_preset("smoke", settings="learn").validate().learner.lr == 3e-3
    with pytest.raises(ValueError, match=r"sizing 'cpu' does not fit preset 'smoke'.*drop the sizing"):
        run_preset("smoke", sizing="cpu")
    with pytest.raises(ValueError, match=r"unknown settings 'fast'; valid settings: \['learn', 'seed'\]"):
        run_preset("plan_a_v2", settings="fast")
    with pytest.raises(ValueError, match=r"unknown sizing 'tpu'; valid sizings: \['gpu', 'gpu_host', 'cpu', 'smoke'\]"):
        run_preset("plan_a_v2", sizing="tpu")


# ---------------------------------------------------------------------------------- what a run gets


def _plan(argv, tmp_path, defaults=LOCAL_DEFAULTS):
    args = driver.parse_args([*argv, "--out", str(tmp_path)], "test", defaults)
    return driver.resolve(args)


def test_local_picks_the_cpu_sizing_without_cuda_and_records_it(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    plan = _plan([], tmp_path)
    cfg = plan.config
    assert (cfg.preset, cfg.settings, cfg.sizing, cfg.learner.hidden_dim) == ("phase4_3", "learn", "cpu", 128)
    assert plan.driver.rollout_workers == 1
    assert "torch sees no CUDA device" in plan.sizing_reason
    assert (plan.driver.time_limit_s, plan.driver.steps) == (900.0, 6_000)  # a budget of updates, a cap of time
    header = driver.describe(plan)
    assert "settings learn: lr 0.003, dueling_lr 0.003, reward_scale 0.032 (from the market" in header
    assert header.split("\n")[0].endswith("observation standardised (learner.obs_norm), distillation temperature 0.3")
    assert "sizing cpu (torch sees no CUDA device" in header and "hidden_dim 128" in header
    assert "budget 900 s of training or update 6,000, whichever comes first" in header
    driver.write_config(plan)
    run = json.loads((plan.run_dir / "config.json").read_text())["run"]
    assert (run["settings"], run["sizing"], run["learner"]["hidden_dim"]) == ("learn", "cpu", 128)
    assert run["learner"]["reward_scale"] == pytest.approx(0.032)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    plan = _plan(["--fold", "1"], tmp_path)
    assert (plan.config.sizing, plan.config.learner.hidden_dim) == ("gpu_host", 512)
    assert "torch sees a CUDA device" in plan.sizing_reason
    plan = _plan(["--fold", "2", "--sizing", "cpu", "--settings", "seed", "--steps", "50"], tmp_path)
    assert (plan.config.sizing, plan.config.settings, plan.config.learner.lr) == ("cpu", "seed", 2.5e-4)
    assert (plan.driver.steps, plan.driver.time_limit_s) == (50, 0.0)  # steps given: no budget unless asked
    assert "budget update 50 (no time limit)" in driver.describe(plan)
    assert "distillation temperature 1\n" in driver.describe(plan)  # the seed's


def test_local_on_a_gpu_host_runs_the_host_system_and_on_a_cpu_one_worker(tmp_path, monkeypatch):
    import torch

    from foxhunt_ray.local import host_defaults

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    plan = _plan([], tmp_path, defaults=host_defaults(cuda=True, cores=16, serial=False))
    assert (plan.config.sizing, plan.driver.rollout_workers, plan.driver.max_payloads_waiting) == ("gpu_host", 11, 3)
    assert (plan.config.rollout.num_envs, plan.config.learner.minibatch_envs) == (2048, 256)
    assert (plan.driver.steps, plan.driver.time_limit_s) == (20_000, 900.0)  # what its 150-s figures made
    flags = ["--fold", "1", "--rollout-workers", "3", "--max-payloads-waiting", "5"]  # flags still win
    plan = _plan(flags, tmp_path, defaults=host_defaults(cuda=True, cores=16, serial=False))
    assert (plan.driver.rollout_workers, plan.driver.max_payloads_waiting) == (3, 5)
    assert host_defaults(cuda=True, cores=4, serial=False).rollout_workers == 1
    assert host_defaults(cuda=True, cores=16, serial=True) == LOCAL_DEFAULTS  # serial: one worker in this process
    assert host_defaults(cuda=False, cores=16, serial=False) == LOCAL_DEFAULTS
    assert "max_payloads_waiting" not in LOCAL_DEFAULTS.driver  # on a CPU: DriverConfig's own
    assert _plan(["--fold", "2"], tmp_path).driver.max_payloads_waiting == 4


def test_job_keeps_the_presets_production_size_and_200_updates(tmp_path):
    plan = _plan([], tmp_path, defaults=driver.EntryDefaults())
    assert (plan.config.sizing, plan.config.learner.hidden_dim, plan.driver.steps) == ("gpu", 512, 200)
    assert plan.driver.time_limit_s == 0.0 and plan.sizing_reason.startswith("the default here")
    assert (plan.config.preset, plan.driver.rollout_workers) == ("plan_a_v2", 2)


def test_smoke_with_a_sizing_and_resume_with_a_group_are_refused(tmp_path):
    with pytest.raises(driver.UsageError, match=r"--sizing=gpu: sizing 'gpu' does not fit preset 'smoke'"):
        _plan(["--preset", "smoke", "--sizing", "gpu"], tmp_path)
    assert _plan(["--preset", "smoke"], tmp_path).config.sizing == "smoke"  # auto: smoke's own sizes
    with pytest.raises(driver.UsageError, match=r"drop \['--settings'\]"):
        driver.resolve(driver.parse_args(["--resume", str(tmp_path), "--settings", "seed"], "test"))

"""The run config: every bad value is named, all at once; JSON and overrides round-trip exactly."""

import json

import pytest

from foxhunt_ray.config import ConfigError, RunConfig, apply_overrides, from_dict


def test_default_config_is_valid_and_round_trips_through_json():
    config = RunConfig().validate()
    assert from_dict(RunConfig, json.loads(config.to_json())) == config


def test_overrides_parse_values_into_their_field_types():
    config = apply_overrides(RunConfig(), ["learner.lr=1e-3", "seed=7", "market.synthetic.signal_strength=0"])
    assert config.learner.lr == 1e-3
    assert config.seed == 7
    assert config.market.synthetic.signal_strength == 0.0
    assert isinstance(config.market.synthetic.signal_strength, float)


def test_override_errors_are_collected_and_name_the_key_and_the_fix():
    with pytest.raises(ConfigError) as info:
        apply_overrides(RunConfig(), ["learner.nope=1", "junk", "market.tick_size=\"x\""])
    errors = info.value.errors
    assert len(errors) == 3
    assert "learner.nope" in errors[0] and "learner.lr" in errors[0]  # lists the valid keys at that level
    assert "section.field=value" in errors[1]
    assert "market.tick_size='x' must be float" in errors[2]


def test_validation_collects_every_bad_value_across_sections():
    config = apply_overrides(
        RunConfig(),
        ["seed=-1", "learner.lr=-1", "learner.hidden_dim=0", "market.horizon=0", "rollout.num_envs=0",
         "kill.qpa_ema_min=5"],
    )
    with pytest.raises(ConfigError) as info:
        config.validate()
    text = str(info.value)
    for bad in ("seed=-1", "learner.lr=-1.0", "learner.hidden_dim=0", "market.horizon=0", "rollout.num_envs=0",
                "kill.qpa_ema_min=5"):
        assert bad in text
    assert len(info.value.errors) == 6


def test_from_dict_rejects_unknown_keys_and_wrong_shapes():
    with pytest.raises(ConfigError) as info:
        from_dict(RunConfig, {"seed": 1, "learner": 5, "bogus": True})
    errors = info.value.errors
    assert any("bogus is not a field of RunConfig" in e for e in errors)
    assert any("learner must be a mapping" in e for e in errors)

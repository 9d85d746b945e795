"""lobsim_env.validation: a config field's rule in its type, one helper that words every message the same way, and
one base class for every bad-input error."""

from __future__ import annotations

import ast
import dataclasses
import math
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import pytest

from actors.config import RolloutConfig
from actors.kill_rules import KillConfig
from actors.wire import WireLimits
from foxhunt_ray.config import RunConfig
from foxhunt_ray.plan import DriverConfig
from learner.config import LearnerConfig
from lobsim_env.config import HORIZON_WHY, MarketConfig, MarketConfigError, SyntheticConfig
from lobsim_env.validation import Bool, ConfigError, InputError, Int, Number, OneOf, Rule, field_errors

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = (LearnerConfig, RolloutConfig, MarketConfig, SyntheticConfig, KillConfig, WireLimits, DriverConfig, RunConfig)


@dataclass(kw_only=True, frozen=True)
class Example:
    count: Annotated[int, Int(ge=1)] = 1
    steps: Annotated[int, Int(ge=0, why="0: none")] = 0
    levels: Annotated[int, Int(ge=1, le=10)] = 5
    at: Annotated[int | None, Int(ge=1, none_ok=True)] = None
    rate: Annotated[float, Number(gt=0)] = 1.0
    share: Annotated[float, Number(ge=0, le=1)] = 0.5
    decay: Annotated[float, Number(ge=0, lt=1, why="an EMA")] = 0.9
    fee: Annotated[float, Number(why="USD")] = 0.0
    mode: Annotated[str, OneOf(("a", "b"))] = "a"
    flag: Annotated[bool, Bool()] = False
    free: int = 0
    """No rule: never checked here."""


def test_a_good_config_has_no_field_errors():
    assert field_errors(Example(), "ex") == {}


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"count": 0}, "ex.count=0 must be an int >= 1"),
        ({"count": 2.0}, "ex.count=2.0 must be an int >= 1"),
        ({"count": True}, "ex.count=True must be an int >= 1"),
        ({"steps": -1}, "ex.steps=-1 must be an int >= 0 (0: none)"),
        ({"levels": 11}, "ex.levels=11 must be an int in 1..10"),
        ({"at": 0}, "ex.at=0 must be None or an int >= 1"),
        ({"rate": 0.0}, "ex.rate=0.0 must be > 0"),
        ({"rate": math.nan}, "ex.rate=nan must be a finite number"),
        ({"rate": math.inf}, "ex.rate=inf must be a finite number"),
        ({"rate": True}, "ex.rate=True must be a finite number"),
        ({"rate": "1"}, "ex.rate='1' must be a finite number"),
        ({"share": 1.5}, "ex.share=1.5 must be in [0, 1]"),
        ({"decay": 1.0}, "ex.decay=1.0 must be in [0, 1) (an EMA)"),
        ({"fee": None}, "ex.fee=None must be a finite number (USD)"),
        ({"mode": "c"}, "ex.mode='c' must be one of ['a', 'b']"),
        ({"flag": 1}, "ex.flag=1 must be a bool"),
    ],
)
def test_each_rule_names_the_value_and_what_it_must_be(kw, message):
    assert field_errors(Example(**kw), "ex") == {next(iter(kw)): message}


def test_messages_come_in_field_order_and_without_a_section_name_the_bare_field():
    bad = Example(flag=0, count=0, free=-5)
    assert list(field_errors(bad, "ex").values()) == ["ex.count=0 must be an int >= 1", "ex.flag=0 must be a bool"]
    assert field_errors(bad, "") == {"count": "count=0 must be an int >= 1", "flag": "flag=0 must be a bool"}


def test_accepted_values_at_the_bounds():
    ok = Example(count=1, steps=0, levels=10, at=1, share=0, decay=0, rate=1e-300, fee=-3, mode="b", flag=True)
    assert field_errors(ok, "ex") == {}


@pytest.mark.parametrize("cls", CONFIGS, ids=lambda c: c.__name__)
def test_every_number_field_of_every_config_carries_its_rule(cls):
    """A new int, float or bool field gets a rule in its type (or is checked by its config's own code, listed here),
    so that no value passes unchecked."""
    checked_in_code = {
        (LearnerConfig, "reward_scale"),  # a number or 'auto'
        (DriverConfig, "time_limit_s"),  # a number of seconds >= 0, worded so in DriverConfig.errors()
        (DriverConfig, "checkpoint_interval_s"),
        (DriverConfig, "sample_timeout_s"),
        (DriverConfig, "learner_timeout_s"),
        (DriverConfig, "monitor_timeout_s"),
    }
    hints = typing.get_type_hints(cls, include_extras=True)
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        plain = typing.get_args(hint)[0] if typing.get_origin(hint) is Annotated else hint
        options = typing.get_args(plain) if typing.get_origin(plain) in (typing.Union, types.UnionType) else (plain,)
        if not set(options) & {int, float, bool} or (cls, f.name) in checked_in_code:
            continue
        rules = [m for m in getattr(hint, "__metadata__", ()) if isinstance(m, Rule)]
        assert rules, f"{cls.__name__}.{f.name}: give it a rule, e.g. Annotated[int, Int(ge=1)]"


def test_config_errors_are_input_errors_and_value_errors():
    with pytest.raises(MarketConfigError) as info:
        MarketConfig(horizon=0).validate()
    assert isinstance(info.value, ConfigError) and isinstance(info.value, InputError)
    horizon = f"market.horizon=0 must be an int in 1..16777216 ({HORIZON_WHY})"  # MAX_HORIZON, 2**24
    assert isinstance(info.value, ValueError) and info.value.errors == [horizon]
    assert str(info.value) == f"invalid market config:\n  {horizon}"
    with pytest.raises(ConfigError) as info:
        LearnerConfig(hidden_dim=0).validate()
    assert str(info.value) == "invalid learner config:\n  learner.hidden_dim=0 must be an int >= 1"
    with pytest.raises(ConfigError) as info:
        RunConfig(seed=-1).validate()
    assert str(info.value) == "invalid config:\n  seed=-1 must be an int >= 0"


def _error_classes() -> dict[str, tuple[str, list[str]]]:
    """Class name -> (module file, base names) for every class named *Error in the project's packages."""
    out = {}
    for pkg in ("actors", "learner", "lobsim_env", "foxhunt_ray"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ClassDef) and node.name.endswith("Error"):
                    bases = [b.id if isinstance(b, ast.Name) else ast.unparse(b) for b in node.bases]
                    out[node.name] = (str(path.relative_to(ROOT)), bases)
    return out


def test_every_error_class_of_the_project_derives_from_input_error():
    classes = _error_classes()
    assert {"InputError", "ConfigError", "MarketConfigError", "EnvError", "WireError"} <= classes.keys()
    good = {"InputError"}
    while True:  # a class is good when one of its bases is
        more = {name for name, (_, bases) in classes.items() if good & set(bases)} - good
        if not more:
            break
        good |= more
    bad = {f"{path}: {name}({', '.join(bases)})" for name, (path, bases) in classes.items() if name not in good}
    assert not bad, "derive these from lobsim_env.validation.InputError (a ValueError):\n  " + "\n  ".join(sorted(bad))

"""One way to check a config's fields, and the base class of every error about bad input.

A config is a frozen dataclass, and each field's own rule is part of its type, as `typing.Annotated` metadata:

    num_envs: Annotated[int, Int(ge=1)] = 16
    gamma: Annotated[float, Number(ge=0, le=1)] = 0.99

`field_errors(config, "rollout")` checks every such field and returns, for each one that breaks its rule, a
message naming the value and what it must be, as every config of the project words it:
"rollout.num_envs=0 must be an int >= 1". A config's `errors()` starts from these and then adds, as plain code,
the rules that tie fields together (learner.v_max > learner.v_min; minibatch_envs divides num_envs), skipping
those whose fields already failed their own rule.

Every bad-input error of the project (a config, a command line, a file, an env, a payload) derives from
`InputError`, a ValueError: code that catches ValueError still does, and a caller that wants to tell a user's
mistake from a bug catches InputError. `ConfigError` is the one raised for a config, listing every bad value.

Why here: every config must reach this module (the market's in lobsim_env; the learner's, the rollout's, the
kill rules', the wire's, the driver's and the run's above it), and imports between the project's folders point
down only, so it lives in the bottom package, lobsim_env. It imports nothing from the project, so it sits below
the rest of lobsim_env too, and either market may use it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import typing
from dataclasses import dataclass


class InputError(ValueError):
    """Bad input: a config value, a command line, a file, an env, a payload. The message names the value and the
    fix. Every such error class of the project derives from this one (tests/test_validation.py checks it)."""


class ConfigError(InputError):
    """A config with one or more bad values; `errors` lists each, naming the value and the fix."""

    def __init__(self, errors: list[str], what: str = "config"):
        self.errors = list(errors)
        super().__init__(f"invalid {what}:\n  " + "\n  ".join(self.errors))


class Rule:
    """A field's own rule; `problem(value)` is None when the value keeps it, else what it must be ("must be ...")."""

    def problem(self, value: object) -> str | None:
        raise NotImplementedError


def _with_why(text: str, why: str) -> str:
    return f"{text} ({why})" if why else text


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Int(Rule):
    """An int (never a bool) >= ge, and <= le when le is given; with none_ok, None too."""

    ge: int
    le: int | None = None
    none_ok: bool = False
    why: str = ""
    """Shown in parentheses after the rule: why the bound, or what the value means."""

    def problem(self, value: object) -> str | None:
        if value is None and self.none_ok:
            return None
        if _is_int(value) and self.ge <= value and (self.le is None or value <= self.le):
            return None
        span = f">= {self.ge}" if self.le is None else f"in {self.ge}..{self.le}"
        return _with_why(f"must be {'None or ' if self.none_ok else ''}an int {span}", self.why)


@dataclass(frozen=True)
class Number(Rule):
    """A finite int or float (never a bool), within the bounds given: gt or ge below, lt or le above."""

    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None
    why: str = ""
    """Shown in parentheses after the rule: why the bounds, or the unit."""

    def problem(self, value: object) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            return _with_why("must be a finite number", self.why)
        inside = (
            (self.gt is None or value > self.gt)
            and (self.ge is None or value >= self.ge)
            and (self.lt is None or value < self.lt)
            and (self.le is None or value <= self.le)
        )
        return None if inside else _with_why(f"must be {self._span()}", self.why)

    def _span(self) -> str:
        """'> 0', '>= 0', '< 1', '<= 1', or with both ends an interval: 'in [0, 1)'."""
        low = (self.gt, "(", ">") if self.gt is not None else (self.ge, "[", ">=") if self.ge is not None else None
        high = (self.lt, ")", "<") if self.lt is not None else (self.le, "]", "<=") if self.le is not None else None
        if low and high:
            return f"in {low[1]}{low[0]}, {high[0]}{high[1]}"
        bound, _, op = low or high
        return f"{op} {bound}"


@dataclass(frozen=True)
class OneOf(Rule):
    """One of the given values."""

    choices: tuple

    def problem(self, value: object) -> str | None:
        return None if value in self.choices else f"must be one of {list(self.choices)}"


@dataclass(frozen=True)
class Bool(Rule):
    """True or False (not 0, 1 or a string)."""

    def problem(self, value: object) -> str | None:
        return None if isinstance(value, bool) else "must be a bool"


def field_errors(config: object, section: str) -> dict[str, str]:
    """{field: message} for each field of the dataclass `config` whose value breaks its rule, in the order of the
    fields; a message reads "<section>.<field>=<value!r> must ..." ("<field>=..." when section is "")."""
    prefix = f"{section}." if section else ""
    out = {}
    for name, rule in _rules(type(config)):
        value = getattr(config, name)
        if (problem := rule.problem(value)) is not None:
            out[name] = f"{prefix}{name}={value!r} {problem}"
    return out


@functools.cache
def _rules(cls: type) -> tuple[tuple[str, Rule], ...]:
    """(field, rule) for each field of cls whose type is Annotated with a Rule."""
    hints = typing.get_type_hints(cls, include_extras=True)
    return tuple(
        (f.name, extra)
        for f in dataclasses.fields(cls)
        for extra in getattr(hints[f.name], "__metadata__", ())
        if isinstance(extra, Rule)
    )

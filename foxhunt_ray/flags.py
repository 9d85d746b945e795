"""A setting's command line from its dataclass field: the small helper that turns a typed config into flags.

A field annotated with a `Flag` (`steps: Annotated[int, Int(ge=1), Flag("learner updates")] = 200`) is one
setting: its type and default are the field's, its rule the `Int` (lobsim_env.validation), its help the `Flag`.
`add_flags` makes it a flag (`--steps`, parsed as the field's type, `None` when left out) and a line of `--help`;
`given` reads back the flags that were given. The same field is a `--set section.field=VALUE` key and a
`--config` key by its name (foxhunt_ray.config.from_dict, foxhunt_ray.cli). Nothing here knows a setting by name.

Why a helper of our own rather than a library (tyro, simple-parsing): the GPU host has no network, so a dependency
must be pure Python and carried by the device bundle; the driver keeps flags that are not fields (--resume,
--data, ...) and rules across them (a resume refuses the flags that choose a config, an entry point's budget of
time applies only when --steps is left out), which a generated parser would have to be bent around; and the
command line it makes must stay exactly the one users and tests know. This is about 80 lines of argparse.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Flag:
    """The command line of a config field: its help line, in which `{default}` is the entry point's default (else
    " (default X)" is added, unless `show_default` is False); `metavar` as argparse shows it; `resume`: whether a
    resume may change it (False for what places a run); `example`: a JSON object field's, for its error."""

    help: str
    metavar: str | None = None
    resume: bool = True
    show_default: bool = True
    example: str = ""


def flag_name(field: str) -> str:
    """--max-payloads-waiting for max_payloads_waiting."""
    return "--" + field.replace("_", "-")


@functools.cache
def flagged(cls: type) -> tuple[tuple[str, Flag, type], ...]:
    """(field, its Flag, its plain type) for each field of dataclass `cls` annotated with a Flag, in field order."""
    hints = typing.get_type_hints(cls, include_extras=True)
    out = []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        spec = next((m for m in getattr(tp, "__metadata__", ()) if isinstance(m, Flag)), None)
        if spec is not None:
            out.append((f.name, spec, typing.get_args(tp)[0]))  # a Flag is in an Annotated: its first argument
    return tuple(out)


def field_default(cls: type, name: str) -> Any:
    """The default of field `name` of dataclass `cls`."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    return f.default_factory() if f.default is dataclasses.MISSING else f.default


def shown(value: Any) -> str:
    """A default as --help shows it: 6,000; 0.5; 300."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


def _parser(tp: Any) -> Callable[[str], Any]:
    """argparse's `type` for a field type: int, float, str; a JSON object's text stays text (read by the caller)."""
    return tp if tp in (int, float) else str


def add_flags(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    cls: type,
    defaults: Mapping[str, Any] | None = None,
    texts: Mapping[str, str] | None = None,
) -> None:
    """One flag per Flag field of `cls`: parsed as the field's type, None when left out. Its --help line shows the
    default: `texts[name]` when given (an entry point's rule), else `defaults[name]`, else the field's own."""
    for name, spec, tp in flagged(cls):
        if texts and name in texts:
            default = texts[name]
        else:
            default = shown(defaults[name] if defaults and name in defaults else field_default(cls, name))
        text = spec.help
        if spec.show_default:
            text = text.format(default=default) if "{default}" in spec.help else f"{text} (default {default})"
        parser.add_argument(
            flag_name(name), dest=name, type=_parser(tp), default=None, metavar=spec.metavar, help=text
        )


def given(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """{field: value} of the Flag fields of `cls` whose flag was given (a JSON object's flag: still its text)."""
    return {name: getattr(args, name) for name, _, _ in flagged(cls) if getattr(args, name, None) is not None}


def json_object(text: str) -> dict | None:
    """The value of a JSON object field's flag, None when the text is no JSON object."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None

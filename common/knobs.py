"""Settings declared once: a dataclass field that carries its own help, range, choices and flag.

A run's knob was declared in up to four places (the field, a table of ranges, the
command's click option, a table from the option to the key), and the copies drifted.
Now the field is the one place, as mlx-lm's TrainingArgs and TRL's GRPOConfig declare
theirs: `knob(...)` returns a `dataclasses.field` whose metadata holds the rest, and the
checks, the click options (common/options.py `knob_option`) and the flag-to-key tables are
read off it (`declared`). A knob that several settings share (the seed, the dtype) is
declared once on its own (`declare`) or in the settings it belongs to, and the others
take it over with `knob_like`, so its range and choices stay one.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from common.errors import UserError

KNOB = "knob"  # the metadata key a knob's declaration lives under


@dataclass(frozen=True)
class Range:
    """Inclusive bounds; `open_low` refuses the low end itself (a learning rate of 0 trains nothing),
    and a `high` of None leaves the top open (a count no run reaches, like --save-every's)."""

    low: float
    high: float | None
    open_low: bool = False

    def holds(self, value: float) -> bool:
        above = value > self.low if self.open_low else value >= self.low
        return above and (self.high is None or value <= self.high)

    def __str__(self) -> str:
        low = f"{'>' if self.open_low else '>='} {self.low}"
        return low if self.high is None else f"{low} and <= {self.high}"


@dataclass(frozen=True)
class Knob:
    """What a setting is besides its type and default: said in `--help`, checked on every value."""

    help: str
    range: Range | None = None
    choices: tuple[str, ...] = ()
    flag: str | None = None  # the command-line flag that sets it, if one does


def _knob(help: str, range: tuple[float, float | None] | None = None, open_low: bool = False,
          choices: tuple[str, ...] = (), flag: str | None = None) -> Knob:
    return Knob(help, Range(*range, open_low=open_low) if range is not None else None, tuple(choices), flag)


def knob(default: Any, help: str, range: tuple[float, float | None] | None = None, open_low: bool = False,
         choices: tuple[str, ...] = (), flag: str | None = None) -> Any:
    """A dataclass field with `default` that declares the knob: `range` (inclusive, `open_low` to
    refuse the low end, a high of None for no top), `choices` for a string, and the `flag` that
    sets it on the command line."""
    return knob_field(default, _knob(help, range, open_low, choices, flag))


def knob_field(default: Any, spec: Knob, **metadata: Any) -> Any:
    """A dataclass field with `default` declared by `spec` (and any other `metadata` its owner reads)."""
    return dataclasses.field(default=default, metadata={KNOB: spec, **metadata})


@dataclass(frozen=True)
class Declared:
    """One knob as found in a settings tree: its dotted key, type, default and declaration."""

    key: str
    kind: Any  # the field's type: int, float, str, bool, or one of them | None
    default: Any
    knob: Knob

    @property
    def optional(self) -> bool:
        """Whether None is a value of it (`int | None`: a default computed from other knobs)."""
        return typing.get_origin(self.kind) in (typing.Union, types.UnionType) and type(None) in self.kind.__args__

    @property
    def base(self) -> type:
        """Its type without None."""
        if not self.optional:
            return self.kind
        (base,) = [arg for arg in self.kind.__args__ if arg is not type(None)]
        return base


def declare(key: str, kind: Any, default: Any, help: str, **spec: Any) -> Declared:
    """A knob declared on its own (`spec` as `knob` takes it), for the settings and commands that
    share it: they take it over with `knob_like` and `knob_option`."""
    return Declared(key, kind, default, _knob(help, **spec))


_SAME = object()


def knob_like(entry: Declared, default: Any = _SAME, **changes: Any) -> Any:
    """A field declared as `entry` is, in other settings: the same range and choices, with its own
    `default` if given, and `help` or `flag` changed where `changes` says (flag=None: none)."""
    return knob_field(entry.default if default is _SAME else default, dataclasses.replace(entry.knob, **changes))


def declared(cls: type, prefix: str = "") -> Iterator[Declared]:
    """Every knob of the settings dataclass `cls` and of those it nests, by dotted key ("grpo.kl_coef")."""
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        kind = hints[field.name]
        if dataclasses.is_dataclass(kind):
            yield from declared(kind, f"{prefix}{field.name}.")
        elif KNOB in field.metadata:
            yield Declared(prefix + field.name, kind, field.default, field.metadata[KNOB])


def knobs_of(cls: type) -> dict[str, Declared]:
    """The knobs of `cls` by key, to look one up (`knob_like`) or walk them all."""
    return {entry.key: entry for entry in declared(cls)}


def checked(entry: Declared, value: Any, what: str) -> Any:
    """`value` as the knob `entry` allows it (a float from an int), or a UserError that starts with `what`,
    the name the user knows it by (a flag, or a config file and key)."""
    kind, spec = entry.base, entry.knob
    if value is None and entry.optional:
        return value
    if kind is bool:
        if not isinstance(value, bool):
            raise UserError(f"{what} must be true or false, got {shown(value)}")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserError(f"{what} must be a whole number, got {shown(value)}{_text_number(value, int)}")
    elif kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            raise UserError(f"{what} must be a number, got {shown(value)}{_text_number(value, float)}")
        value = float(value)
    elif kind is str:
        if not isinstance(value, str):
            raise UserError(f"{what} must be a string, got {shown(value)}")
        if spec.choices and value not in spec.choices:
            raise UserError(f"{what} must be one of {', '.join(spec.choices)}, got {shown(value)}")
        return value
    if spec.range is not None and not spec.range.holds(value):
        raise UserError(f"{what} must be {spec.range}, got {shown(value)}")
    return value


def _text_number(value: Any, kind: type) -> str:
    """Why a number that came as text was refused, and what to write instead ("" for anything else):
    YAML reads 1e3 as a string (an exponent needs a point and a sign: 1.0e+3), JSON a quoted number."""
    if not isinstance(value, str):
        return ""
    try:
        number = float(value)
    except ValueError:
        return ""
    if not math.isfinite(number):
        return ""
    write = str(int(number)) if kind is int and number.is_integer() else repr(number)
    why = "YAML reads an exponent as text unless written like 1.0e+3" if "e" in value.lower() else "it is quoted"
    return f" (text, not a number: {why}; write {write})"


def check_knobs(settings: Any, names: Mapping[str, str] | None = None) -> None:
    """Every knob of the flat settings dataclass `settings` as its declaration allows, each named
    by `names` (key -> name), else by its flag, else by its key."""
    for entry in declared(type(settings)):
        checked(entry, getattr(settings, entry.key), (names or {}).get(entry.key) or entry.knob.flag or entry.key)


def shown(value: Any) -> str:
    """A value as the user wrote it in JSON or YAML (true, null), not as Python shows it (True, None)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    try:
        return json.dumps(value) if not isinstance(value, str) else repr(value)
    except (TypeError, ValueError):
        return str(value)


def param_name(flag: str) -> str:
    """The click parameter a flag fills: --group-size -> group_size."""
    return flag.lstrip("-").replace("-", "_")

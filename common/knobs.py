"""Settings declared once: a dataclass field that carries its own help, range, choices and flag.

A run's knob was declared in up to four places (the field, a table of ranges, the
command's click option, a table from the option to the key), and the copies drifted.
Now the field is the one place, as mlx-lm's TrainingArgs and TRL's GRPOConfig declare
theirs: `knob(...)` returns a `dataclasses.field` whose metadata holds the rest, and the
checks, the click options and the flag-to-key tables are read off it (`declared`).
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any, Iterator

KNOB = "knob"  # the metadata key a knob's declaration lives under


@dataclass(frozen=True)
class Range:
    """Inclusive bounds; `open_low` refuses the low end itself (a learning rate of 0 trains nothing)."""

    low: float
    high: float
    open_low: bool = False

    def holds(self, value: float) -> bool:
        above = value > self.low if self.open_low else value >= self.low
        return above and value <= self.high

    def __str__(self) -> str:
        return f"{'>' if self.open_low else '>='} {self.low} and <= {self.high}"


@dataclass(frozen=True)
class Knob:
    """What a setting is besides its type and default: said in `--help`, checked on every value."""

    help: str
    range: Range | None = None
    choices: tuple[str, ...] = ()
    flag: str | None = None  # the command-line flag that sets it, if one does


def knob(default: Any, help: str, range: tuple[float, float] | None = None, open_low: bool = False,
         choices: tuple[str, ...] = (), flag: str | None = None) -> Any:
    """A dataclass field with `default` that declares the knob: `range` (inclusive, `open_low` to
    refuse the low end), `choices` for a string, and the `flag` that sets it on the command line."""
    declared_range = Range(*range, open_low=open_low) if range is not None else None
    return dataclasses.field(default=default,
                             metadata={KNOB: Knob(help, declared_range, tuple(choices), flag)})


@dataclass(frozen=True)
class Declared:
    """One knob as found in a settings tree: its dotted key, type, default and declaration."""

    key: str
    kind: type
    default: Any
    knob: Knob


def declared(cls: type, prefix: str = "") -> Iterator[Declared]:
    """Every knob of the settings dataclass `cls` and of those it nests, by dotted key ("grpo.kl_coef")."""
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        kind = hints[field.name]
        if dataclasses.is_dataclass(kind):
            yield from declared(kind, f"{prefix}{field.name}.")
        elif KNOB in field.metadata:
            yield Declared(prefix + field.name, kind, field.default, field.metadata[KNOB])


def param_name(flag: str) -> str:
    """The click parameter a flag fills: --group-size -> group_size."""
    return flag.lstrip("-").replace("-", "_")

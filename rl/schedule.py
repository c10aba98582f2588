"""The phase schedule: "grpo:4,ei:1" = four GRPO steps, then one expert-iteration step, repeated.

The phase of a step depends only on the step number, so a resumed run picks up the
cycle exactly where the interrupted one left it.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.errors import UserError

PHASES = ("grpo", "ei")


@dataclass(frozen=True)
class Schedule:
    parts: tuple[tuple[str, int], ...]

    @property
    def cycle(self) -> int:
        return sum(n for _, n in self.parts)

    def position(self, step: int) -> int:
        """Where `step` (0-based) falls in the cycle."""
        return step % self.cycle

    def phase(self, step: int) -> str:
        position = self.position(step)
        for name, n in self.parts:
            if position < n:
                return name
            position -= n
        raise AssertionError("unreachable: position < cycle")

    def __str__(self) -> str:
        return ",".join(f"{name}:{n}" for name, n in self.parts)


def parse_schedule(text: str, what: str = "schedule") -> Schedule:
    """'grpo:4,ei:1' -> Schedule; anything else is a one-line UserError saying what is wrong, that
    starts with `what`: the name the user gave it by (a flag, or a config file and its key)."""
    if not isinstance(text, str) or not text.strip():
        raise UserError(f"{what} {text!r} is empty; expected e.g. 'grpo:4,ei:1'")
    parts = []
    for item in text.split(","):
        name, sep, count = item.strip().partition(":")
        name = name.strip().lower()
        if name not in PHASES:
            raise UserError(f"{what} {text!r}: unknown phase {name!r} (phases: {', '.join(PHASES)})")
        if not sep:
            raise UserError(f"{what} {text!r}: {item.strip()!r} needs a step count, e.g. '{name}:2'")
        count = count.strip()
        if not count.isdigit() or int(count) < 1:
            raise UserError(f"{what} {text!r}: the step count of {name!r} must be a whole number >= 1, "
                            f"got {count!r}")
        parts.append((name, int(count)))
    return Schedule(tuple(parts))

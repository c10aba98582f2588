"""What a player answers at a position, and the interface every player implements.

The solver always answers with a word. A language model answers with text that may
not parse; `Move.failure` names why (the kinds are those of `llm.format`), and the
harness counts those answers as invalid instead of playing them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from llm.format import Rejection
from solver.policy import Policy
from solver.state import GameState


@dataclass(frozen=True)
class Move:
    guess: str | None
    text: str | None = None
    failure: str | None = None


class Player(Protocol):
    name: str

    def moves(self, states: list[GameState], rejected: list[tuple[Rejection, ...]]) -> list[Move]:
        """One move for each (unfinished) game, in the same order; `rejected` holds each
        game's answers refused since its last played guess."""


class SolverPlayer:
    """Adapts a state -> guess policy to the batched `Player` interface."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.name = policy.name

    def moves(self, states: list[GameState], rejected: list[tuple[Rejection, ...]]) -> list[Move]:
        return [Move(self.policy.choose(state)) for state in states]

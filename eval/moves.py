"""The interface every player implements: a batch of positions in, one `Move` each out.

A `Move` (llm/format.py, beside the answer kinds its `failure` names) is a word from the
solver, or a language model's text that may not parse; the harness counts the answers
that do not as invalid instead of playing them.
"""

from __future__ import annotations

from typing import Protocol

from llm.format import Move, Rejection
from solver.policy import Policy
from solver.state import GameState


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

"""What a player answers at a position, and the interfaces players implement.

The solver always answers with a word. A language model answers with text that may
not parse; `Move.failure` names why (the kinds are those of `llm.format`), and the
harness counts those answers as invalid instead of playing them.

The harness plays every game as a stream (`StreamPlayer`): it asks for a game's move
and hands the next position back as soon as that move is played, so a language model
can keep its batch full instead of waiting, round after round, for the slowest answer
(llm/player.py). A player that answers a list of positions at once (`RoundPlayer`: the
solver, scripted test players) is played in lock step through `LockStep`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from llm.format import Rejection
from solver.policy import Policy
from solver.state import GameState


@dataclass(frozen=True)
class Move:
    guess: str | None
    text: str | None = None
    failure: str | None = None


@runtime_checkable
class StreamPlayer(Protocol):
    name: str

    def ask(self, game: int, state: GameState, rejected: tuple[Rejection, ...]) -> None:
        """Queue game number `game`'s move at `state`; `rejected` holds its answers refused
        since its last played guess."""

    def answered(self) -> list[tuple[int, Move]]:
        """Wait until at least one queued position has its move: those (game, move), in an
        order the player fixes (the same every run). Empty when nothing is queued."""

    def close(self) -> None:
        """Free what answering held (no more positions will be asked)."""


class RoundPlayer(Protocol):
    name: str

    def moves(self, states: list[GameState], rejected: list[tuple[Rejection, ...]]) -> list[Move]:
        """One move for each (unfinished) game, in the same order; `rejected` holds each
        game's answers refused since its last played guess."""


Player = StreamPlayer | RoundPlayer


class LockStep:
    """A round player as a stream: the positions asked since the last answers are answered
    together, in the order asked, so every round is one `moves` call."""

    def __init__(self, player: RoundPlayer) -> None:
        self.player = player
        self.name = player.name
        self._asked: list[tuple[int, GameState, tuple[Rejection, ...]]] = []

    def ask(self, game: int, state: GameState, rejected: tuple[Rejection, ...]) -> None:
        self._asked.append((game, state, rejected))

    def answered(self) -> list[tuple[int, Move]]:
        asked, self._asked = self._asked, []
        if not asked:
            return []
        moves = self.player.moves([state for _, state, _ in asked], [rejected for _, _, rejected in asked])
        return [(game, move) for (game, _, _), move in zip(asked, moves)]

    def close(self) -> None:
        self._asked = []


def as_stream(player: Player) -> StreamPlayer:
    """The player as the harness plays it: a round player goes through `LockStep`."""
    return player if isinstance(player, StreamPlayer) else LockStep(player)


class SolverPlayer:
    """Adapts a state -> guess policy to the batched `RoundPlayer` interface."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.name = policy.name

    def moves(self, states: list[GameState], rejected: list[tuple[Rejection, ...]]) -> list[Move]:
        return [Move(self.policy.choose(state)) for state in states]

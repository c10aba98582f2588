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
    """A player that answers a batch of positions at once (the solver, scripted players)."""

    name: str

    def moves(self, states: list[GameState], rejected: list[tuple[Rejection, ...]]) -> list[Move]:
        """One move for each (unfinished) game, in the same order; `rejected` holds each
        game's answers refused since its last played guess."""


class GamePlayer(Protocol):
    """A player asked for each game's next move, by the game's number, as soon as its last one is
    played (a language model draws each answer's tokens from the game and the answer's number);
    it may answer the open games together or each as it is ready."""

    name: str

    def submit(self, game: int, state: GameState, rejected: tuple[Rejection, ...]) -> None:
        """Ask for game number `game`'s next move; `rejected`: its answers refused since its last
        played guess."""

    def finished(self) -> list[tuple[int, Move]]:
        """(game, move) of the asked moves that are ready: at least one while any is open."""


class InRounds:
    """A batch `Player` as a `GamePlayer`: the moves asked since the last `finished` are
    answered together, one batch a round."""

    def __init__(self, player: Player) -> None:
        self.player, self.name = player, player.name
        self._asked: list[tuple[int, GameState, tuple[Rejection, ...]]] = []

    def submit(self, game: int, state: GameState, rejected: tuple[Rejection, ...]) -> None:
        self._asked.append((game, state, rejected))

    def finished(self) -> list[tuple[int, Move]]:
        asked, self._asked = self._asked, []
        moves = self.player.moves([state for _, state, _ in asked], [rejected for _, _, rejected in asked])
        return [(game, move) for (game, _, _), move in zip(asked, moves)]


def by_game(player: Player | GamePlayer) -> GamePlayer:
    """`player` itself when it takes moves game by game, else its batches of moves in rounds."""
    return player if hasattr(player, "submit") else InRounds(player)


class SolverPlayer:
    """Adapts a state -> guess policy to the batched `Player` interface."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.name = policy.name

    def moves(self, states: list[GameState], rejected: list[tuple[Rejection, ...]]) -> list[Move]:
        return [Move(self.policy.choose(state)) for state in states]

"""The model's own naming states: where it wrote ` Only` in games it played with its head.

The naming head was fitted at the teacher's thoughts (rl/naming_head.py); in play the model
writes its own, and the head reads the state they leave. Head RL trains at those states: the
model plays whole games on training secrets with its head, and every answer where the head
named a word leaves a record of the position (secret, turns, refusals shown), the hidden state
at ` Only`, the words banned there and the word named. The model is frozen, so a state stays
valid however the head changes; only the words drawn from it do.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common.errors import UserError
from common.fileio import atomic_write
from eval.endgame import EndgamePosition
from eval.harness import GameRecord, play_games
from llm.format import Rejection
from llm.generation import SamplingSettings
from solver.setup import Setup
from solver.state import GameState


@dataclass(frozen=True)
class NamingRecords:
    """Recorded naming states: the positions, their hidden states (n, hidden), the banned words'
    indices at each (into the head's word list) and the word the head named (-1: none whole)."""

    positions: list[EndgamePosition]
    states: np.ndarray
    banned: list[np.ndarray]
    named: np.ndarray

    def __len__(self) -> int:
        return len(self.positions)

    def save(self, path: Path) -> None:
        keys = np.array([p.key for p in self.positions])
        lengths = np.array([len(b) for b in self.banned], dtype=np.int64)
        flat = np.concatenate(self.banned) if self.banned else np.zeros(0, np.int64)

        def write(tmp: str) -> None:
            with open(tmp, "wb") as f:
                np.savez(f, keys=keys, states=self.states, banned=flat, banned_lengths=lengths, named=self.named)

        atomic_write(path, write)

    @classmethod
    def load(cls, path: Path, setup: Setup) -> NamingRecords:
        """Records saved by `save`, their positions rebuilt from the keys on `setup`'s lists."""
        import zipfile

        try:
            with np.load(path) as saved:
                keys, states, flat, lengths, named = (saved[k] for k in ("keys", "states", "banned",
                                                                         "banned_lengths", "named"))
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as err:
            raise UserError(f"{path} is not a file of naming records ({type(err).__name__}); delete it to "
                            "play the games again") from err
        banned = np.split(flat, np.cumsum(lengths)[:-1]) if len(lengths) else []
        return cls([position_of_key(str(k), setup) for k in keys], states, banned, named)


def position_of_key(key: str, setup: Setup) -> EndgamePosition:
    """The position an `EndgamePosition.key` names (secret:guess=pattern,...|refused=failure,...)."""
    from solver.feedback import parse_pattern

    secret, rest = key.split(":", 1)
    turns, _, refused = rest.partition("|")
    state = setup.start
    for turn in filter(None, turns.split(",")):
        guess, pattern = turn.split("=")
        state = state.play(guess, parse_pattern(pattern))
    rejected = tuple(Rejection(None if g == "None" else g, failure)
                     for g, failure in (r.split("=") for r in filter(None, refused.split(","))))
    return EndgamePosition(secret, state, rejected)


class SteeringRecorder:
    """The steer of `steered_model` that keeps each answer's processor beside its position."""

    def __init__(self, steer) -> None:
        self.steer = steer
        self.made: list[tuple[GameState, tuple[Rejection, ...], object]] = []

    def __call__(self, state: GameState, refused: tuple[Rejection, ...]):
        processor = self.steer(state, refused)
        self.made.append((state, refused, processor))
        return processor


def records_of(recorder: SteeringRecorder, games: list[GameRecord]) -> NamingRecords:
    """The positions where the head fired, each tied to its game's secret by its turns (a position
    that two games with different secrets share is left out: its secret is not known)."""
    secrets_at: dict[tuple, set[str]] = {}
    for game in games:
        for depth in range(len(game.state.turns) + 1):
            secrets_at.setdefault(history_key_of(game.state.turns[:depth]), set()).add(game.secret)
    positions, states, banned, named = [], [], [], []
    for state, refused, processor in recorder.made:
        secrets = secrets_at.get(history_key_of(state.turns), set())
        if processor.state is None or len(secrets) != 1 or not state.turns:
            continue
        positions.append(EndgamePosition(next(iter(secrets)), state, refused))
        states.append(processor.state)
        banned.append(np.flatnonzero(processor.banned))
        named.append(-1 if processor.named is None else processor.named)
    hidden = states[0].shape[0] if states else 0
    return NamingRecords(positions, np.array(states, dtype=np.float32).reshape(len(states), hidden), banned,
                         np.array(named, dtype=np.int64))


def history_key_of(turns) -> tuple:
    return tuple((t.guess, t.pattern) for t in turns)


def play_recording(model, tokenizer, head, setup: Setup, secrets: list[str], sampling: SamplingSettings,
                   seed: int, batch_size: int, show_progress: bool) -> tuple[NamingRecords, list[GameRecord]]:
    """The model plays one game per secret with its head; the naming states it left, and the games."""
    from llm.player import ModelPlayer
    from llm.word_steering import steered_model

    publisher, steer = steered_model(model, tokenizer, head, setup.lists.allowed, setup.start.secret_words)
    recorder = SteeringRecorder(steer)
    player = ModelPlayer(publisher, tokenizer, "head rollouts", sampling, seed, batch_size, steer=recorder)
    games = play_games(player, setup, secrets, measure_moves=False, show_progress=show_progress)
    return records_of(recorder, games), games

"""`play`: a model plays one secret, or suggests the next guess of a game a person is playing.

The game is eval's own: the player is `ModelSpec.player` (with the naming head beside the adapter,
as eval plays), and the loop is eval/harness.py `play_games`. Answer n of eval's game g draws its
tokens from `answer_seed(seed, g, n)` (llm/player.py), so `play --word W --seed S --game G` plays
the game that `eval --seed S` records as its game G when that game's secret is W (its
`per_game[G]`); G is 0 by default. Beside each answer stands what the solver would play there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from eval.harness import MAX_INVALID_IN_A_ROW, GameRecord, play_games, refusal
from eval.moves import GamePlayer
from eval.run import ModelSpec
from llm.format import Move, Rejection, parse_answer
from llm.naming_head import HEAD_FILE, player_head
from solver.entropy import guess_score
from solver.feedback import pattern_to_string
from solver.policy import EntropySolver
from solver.setup import Setup
from solver.solve_views import solver_advice
from solver.state import GameState


@dataclass(frozen=True)
class Answer:
    """One of the model's answers as `play` shows it: the guess it was for (1-6), its text and
    thought, what the game did with it, and the solver's move at the same position."""

    turn: int
    text: str | None
    thought: str | None  # the text inside <think>, when the answer has the strict form
    guess: str | None
    failure: str | None  # why it was not played (llm/format.py), None when played
    candidates_before: int
    pattern: int | None = None  # the tiles, once played against a secret
    candidates_after: int | None = None
    bits: float | None = None  # the guess's expected information at the position, when played
    expected_left: float | None = None
    solver: dict | None = None  # the solver's next_guess, entropy_bits and expected_left there

    def to_json(self) -> dict:
        shown = {key: value for key, value in self.__dict__.items() if key != "pattern"}
        return {**shown, "pattern": None if self.pattern is None else pattern_to_string(self.pattern)}


def answer_at(state: GameState, move: Move, solver: EntropySolver | None = None,
              after: GameState | None = None) -> Answer:
    """`move` answered at `state` (and the game `after` it, when it was played against a secret),
    with `solver`'s move there when one is given."""
    failure = refusal(move, state)
    advice = solver_advice(solver, state) if solver is not None else None
    bits = expected = None
    if failure is None:
        bits, expected = guess_score(state.matrix, state.lists.index(move.guess), state.candidates)
        bits, expected = round(bits, 4), round(expected, 3)
    played = after is not None and failure is None
    return Answer(len(state.turns) + 1, move.text, parse_answer(move.text or "").thought, move.guess, failure,
                  int(len(state.candidates)), after.turns[-1].pattern if played else None,
                  int(len(after.candidates)) if played else None, bits, expected,
                  advice and {key: advice.get(key) for key in ("next_guess", "entropy_bits", "expected_left")})


class AsGame:
    """`player` asked for one game as eval's game `number`: a model draws that game's answers."""

    def __init__(self, player: GamePlayer, number: int) -> None:
        self.player, self.number, self.name = player, number, player.name

    def submit(self, game: int, state: GameState, rejected: tuple[Rejection, ...]) -> None:
        self.player.submit(game + self.number, state, rejected)

    def finished(self) -> list[tuple[int, Move]]:
        return [(game - self.number, move) for game, move in self.player.finished()]


def model_player(setup: Setup, spec: ModelSpec, seed: int) -> GamePlayer:
    """The player eval makes of `spec` for `setup`'s lists, drawing with `seed` (the model loaded)."""
    return spec.player(seed, setup.lists.allowed, setup.start.secret_words)


def play_secret_game(setup: Setup, player: GamePlayer, word: str, game: int,
                     show: Callable[[Answer], None]) -> tuple[GameRecord, list[Answer]]:
    """`player` (`model_player`) plays `word` as eval's game `game`; `show` gets each answer as it
    is played. The record (eval's, `GameRecord.to_json`) and every answer as shown."""
    player = AsGame(player, game)
    solver = setup.solver()
    answers: list[Answer] = []

    def on_move(_: int, before: GameState, record: GameRecord) -> None:
        move = record.moves[-1]
        answers.append(answer_at(before, Move(move.guess, move.text, move.failure), solver, record.state))
        show(answers[-1])

    (record,) = play_games(player, setup, [word], measure_moves=True, show_progress=False, on_move=on_move)
    return record, answers


class ModelAdviser:
    """The model's next guess at the positions a person reports, beside the solver's: up to
    MAX_INVALID_IN_A_ROW answers a position, each refused one named in the next prompt as a game
    names it. `player`'s (`model_player`) answers are numbered as one game's (eval's game 0), so
    the same positions in the same order get the same answers."""

    def __init__(self, setup: Setup, player: GamePlayer) -> None:
        self.player = player
        self.solver = setup.solver()

    def __call__(self, state: GameState) -> dict:
        """The solver's advice (solve_views `solver_advice`), the model's answers (`Answer`s) and
        its guess (`next_guess`: None when none of them could be played or the game is over)."""
        advice = {"solver": solver_advice(self.solver, state), "answers": [], "next_guess": None}
        rejected: tuple[Rejection, ...] = ()
        while advice["solver"]["next_guess"] is not None and len(rejected) < MAX_INVALID_IN_A_ROW:
            self.player.submit(0, state, rejected)
            ((_, move),) = self.player.finished()
            answer = answer_at(state, move)  # the solver's advice is the position's, shown once
            advice["answers"].append(answer)
            if answer.failure is None:
                advice["next_guess"] = answer.guess
                break
            rejected += (Rejection(move.guess, answer.failure),)
        return advice


def head_line(spec: ModelSpec) -> str:
    """Which naming head names the model's words, and why none when none does."""
    if spec.head:
        return f"naming head: {spec.head}"
    saved = player_head(spec.model, spec.adapter)
    if saved:
        return f"naming head: off (--no-naming-head; {saved} not used)"
    if spec.adapter is None:
        return "naming head: none (no --adapter, and no head in --model's folder)"
    return f"naming head: none ({spec.adapter} has no {HEAD_FILE})"

"""The one place that plays games for scoring.

Each unfinished game asks the player for its next move, by the game's number, as soon as its
last one is played (eval/moves.py `GamePlayer`); a language model answers every open game
in one batched generation a round, as a player of batches does (`InRounds`). An
answer that does not parse, is not an accepted word, or repeats a guess is counted
and not played, and the next prompt names it; three such answers in a row lose the game.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from common.progress import progress_bar
from eval.moves import GamePlayer, Player, by_game
from llm.format import ALREADY_GUESSED as REPEAT
from llm.format import FORMAT_FAILURES, Move, Rejection
from llm.format import NOT_ALLOWED as INVALID_WORD
from solver.entropy import guess_score, score_guesses
from solver.feedback import pattern_to_string
from solver.setup import Setup
from solver.state import MAX_GUESSES, GameState

MAX_INVALID_IN_A_ROW = 3
LOSS_GUESSES = 7  # what a lost game counts in a mean over all games


@dataclass
class MoveRecord:
    guess: str | None
    failure: str | None
    text: str | None = None
    consistent: bool | None = None
    regret_bits: float | None = None
    regret_expected: float | None = None


@dataclass
class GameRecord:
    secret: str
    state: GameState
    moves: list[MoveRecord] = field(default_factory=list)
    rejected: tuple[Rejection, ...] = ()  # answers refused since the last played guess

    @property
    def invalid_streak(self) -> int:
        return len(self.rejected)

    @property
    def over(self) -> bool:
        return self.state.over or self.invalid_streak >= MAX_INVALID_IN_A_ROW

    def to_json(self) -> dict:
        return {
            "secret": self.secret,
            "won": self.state.won,
            "guesses": len(self.state.turns) if self.state.won else None,
            "turns": [{"guess": t.guess, "pattern": pattern_to_string(t.pattern)} for t in self.state.turns],
            "invalid_answers": sum(m.failure is not None for m in self.moves),
            "lost_to_invalid": self.invalid_streak >= MAX_INVALID_IN_A_ROW,
            "moves": [m.__dict__ for m in self.moves],
        }


# Called after each answer is applied: (game number, the state it answered, the game since).
OnMove = Callable[[int, GameState, GameRecord], None]


class RegretMeter:
    """How much worse a guess is than the best one at the same position.

    Memoised by candidate set: every game shares the opening position.
    """

    def __init__(self, setup: Setup) -> None:
        self.setup = setup
        self._best: dict[bytes, tuple[float, float]] = {}
        self._rows = np.arange(len(setup.lists.allowed), dtype=np.int64)

    def regret(self, state: GameState, guess: str) -> tuple[float, float]:
        key = state.candidates.tobytes()
        if key not in self._best:
            entropy, expected = score_guesses(self.setup.matrix, self._rows, state.candidates)
            self._best[key] = (float(entropy.max()), float(expected.min()))
        best_bits, best_expected = self._best[key]
        bits, expected = guess_score(self.setup.matrix, self.setup.lists.index(guess), state.candidates)
        return max(0.0, best_bits - bits), max(0.0, expected - best_expected)


def play_games(player: Player | GamePlayer, setup: Setup, secrets: list[str], measure_moves: bool = True,
               show_progress: bool = True, on_move: OnMove | None = None) -> list[GameRecord]:
    """Play one game per secret (game i is `secrets[i]`); returns the records in the order of `secrets`.

    `on_move(i, before, game)` is called after each answer of game i is applied, with the state it
    answered (`play` shows each turn as it is played, from this same loop that eval's games run).
    The progress counts turns (`_settled_turns`), the unit every answer round advances."""
    columns = setup.lists.secrets(setup.secret_kind)
    index = {w: i for i, w in enumerate(columns)}
    games = [GameRecord(secret, setup.start) for secret in secrets]
    meter = RegretMeter(setup) if measure_moves else None
    per_game = by_game(player)
    progress = progress_bar("turns", disable=not show_progress)
    with progress:
        task = progress.add_task(_games_over(player.name, 0, len(games)), total=MAX_GUESSES * len(games))
        for number, game in enumerate(games):
            per_game.submit(number, game.state, game.rejected)
        open_games = len(games)
        while open_games:
            for number, move in per_game.finished():
                game = games[number]
                before, settled = game.state, _settled_turns(game)
                _apply(game, move, setup, index[game.secret], meter)
                if on_move is not None:
                    on_move(number, before, game)
                open_games -= game.over
                progress.update(task, advance=_settled_turns(game) - settled,
                                description=_games_over(player.name, len(games) - open_games, len(games)))
                if not game.over:
                    per_game.submit(number, game.state, game.rejected)
    return games


def _settled_turns(game: GameRecord) -> int:
    """How many of the game's MAX_GUESSES turns are behind it: those played, and all of them once it
    is over. A batched eval plays every game at once, so a count of finished games stood at 3 of 64
    while all 64 were under way, and its rate and ETA with it; turns advance with every played
    guess from the first round on, and reach MAX_GUESSES a game exactly when the last one ends."""
    return MAX_GUESSES if game.over else len(game.state.turns)


def _games_over(name: str, over: int, games: int) -> str:
    return f"{name}, {over}/{games} games over"


def refusal(move: Move, state: GameState) -> str | None:
    """Why the game does not play `move` at `state` (its parse failure, a word not allowed, a repeat),
    or None when it is played: the one rule for every player's answers."""
    if move.failure is not None:
        return move.failure
    if move.guess is None or not state.lists.is_allowed(move.guess):
        return INVALID_WORD
    return REPEAT if move.guess in state.guesses else None


def _apply(game: GameRecord, move: Move, setup: Setup, column: int, meter: RegretMeter | None) -> None:
    state = game.state
    failure = refusal(move, state)
    record = MoveRecord(move.guess, failure, move.text)
    game.moves.append(record)
    if failure is not None:
        game.rejected += (Rejection(move.guess, failure),)
        return
    game.rejected = ()
    if meter is not None:
        record.consistent = state.constraints.allows(move.guess)
        record.regret_bits, record.regret_expected = meter.regret(state, move.guess)
    row = setup.lists.index(move.guess)
    game.state = state.play(move.guess, int(setup.matrix[row, column]))


RATE_FIGURES = ("format_valid_rate", "invalid_word_rate", "repeat_rate", "refused_again_rate", "consistency_rate",
                "later_consistency_rate")


def rate_counts(moves: list[MoveRecord]) -> dict[str, tuple[int, int]]:
    """(count, total) of each per-answer rate in one game's moves.

    A rate over many games is the sum of their counts over the sum of their totals; kept per
    game so that a paired comparison (eval/paired.py) can resample games and recompute it."""
    played = [m for m in moves if m.failure is None]
    measured = [m for m in played if m.consistent is not None]
    # Every opener fits the (empty) feedback: the rate after it is the one that shows feedback being used.
    later = [m for m in played[1:] if m.consistent is not None]
    # The answer right after a refused one: does the model give the refused word again?
    retries = [(a, b) for a, b in zip(moves, moves[1:]) if a.failure is not None]
    return {
        "format_valid_rate": (sum(m.failure not in FORMAT_FAILURES for m in moves), len(moves)),
        "invalid_word_rate": (sum(m.failure == INVALID_WORD for m in moves), len(moves)),
        "repeat_rate": (sum(m.failure == REPEAT for m in moves), len(moves)),
        "refused_again_rate": (sum(b.guess is not None and b.guess == a.guess for a, b in retries), len(retries)),
        "consistency_rate": (sum(bool(m.consistent) for m in measured), len(measured)),
        "later_consistency_rate": (sum(bool(m.consistent) for m in later), len(later)),
    }


def summarise(games: list[GameRecord], seconds: float, setup_seconds: float = 0.0) -> dict:
    """Win rate, guess histogram and per-move quality figures, as plain JSON data.

    `mean_guesses` is over the games won; `mean_guesses_loss_as_7` counts a lost game as
    LOSS_GUESSES. `seconds` times the games; `setup_seconds` what the player did before the
    first one (a model: loading it, with its naming head; the solver: loading its kernels and
    choosing its opener, a walk of its whole decision tree that decides most positions the games
    then look up)."""
    wins = [len(g.state.turns) for g in games if g.state.won]
    counts = [rate_counts(g.moves) for g in games]
    totals = {key: (sum(c[key][0] for c in counts), sum(c[key][1] for c in counts)) for key in RATE_FIGURES}
    moves = [m for g in games for m in g.moves]
    measured = [m for m in moves if m.failure is None and m.consistent is not None]

    def rate(count: int, total: int) -> float | None:
        return round(count / total, 4) if total else None

    figures = win_figures([len(g.state.turns) if g.state.won else None for g in games])
    return {
        "games": len(games),
        "wins": figures["wins"],
        "win_rate": rate(len(wins), len(games)),
        "mean_guesses": figures["mean_guesses"],
        "mean_guesses_loss_as_7": round((sum(wins) + LOSS_GUESSES * (len(games) - len(wins))) / len(games), 4)
        if games else None,
        "max_guesses": max(wins) if wins else None,
        "failures": len(games) - len(wins),
        "histogram": figures["histogram"],
        "seconds": round(seconds, 3),
        "setup_seconds": round(setup_seconds, 3),
        "games_per_second": round(len(games) / seconds, 2) if seconds > 0 else None,
        "games_per_minute": round(60 * len(games) / seconds, 1) if seconds > 0 else None,
        "answers": len(moves),
        **{key: rate(*totals[key]) for key in RATE_FIGURES},
        "mean_regret_bits": round(float(np.mean([m.regret_bits for m in measured])), 4) if measured else None,
        "mean_regret_expected_left": round(float(np.mean([m.regret_expected for m in measured])), 3) if measured else None,
        "lost_to_invalid": sum(g.invalid_streak >= MAX_INVALID_IN_A_ROW for g in games),
        **where_lost(games),
    }


def win_figures(guesses: list[int | None]) -> dict:
    """Wins, the mean guesses of a win and the games by guesses needed ("X": lost), from each game's
    guesses (None: lost): what eval reports for its games, and for the solver's beside a model's."""
    wins = [n for n in guesses if n is not None]
    histogram = {str(n): wins.count(n) for n in range(1, 7)}
    histogram["X"] = len(guesses) - len(wins)
    return {"wins": len(wins), "mean_guesses": round(float(np.mean(wins)), 4) if wins else None,
            "histogram": histogram}


def candidates_before_each_turn(state: GameState) -> list[int]:
    """How many secrets fitted the clues when each of the game's guesses was made, and after the
    last one (one more entry than turns)."""
    replay = GameState(state.lists, state.matrix, state.secret_kind)
    counts = [len(replay.candidates)]
    for turn in state.turns:
        replay = replay.play(turn.guess, turn.pattern)
        counts.append(len(replay.candidates))
    return counts


def where_lost(games: list[GameRecord]) -> dict:
    """Where games are lost: the lost ones by the candidates left after their last guess (one left:
    lost at the naming; 2-6: in the endgame; more: in the middle), and of the games that got down
    to one candidate, how many won with the next guess (the in-game closing rate)."""
    lost = [g for g in games if not g.state.won and g.invalid_streak < MAX_INVALID_IN_A_ROW]
    left = [len(g.state.candidates) for g in lost]
    reached = closed = 0
    for game in games:
        counts = candidates_before_each_turn(game.state)
        guessed_at = counts[:-1] if game.state.won else counts  # after a win, the one left is the secret found
        if 1 in guessed_at:
            reached += 1
            closed += game.state.won and guessed_at.index(1) == len(game.state.turns) - 1
    return {"lost_one_left": left.count(1), "lost_two_to_six_left": sum(2 <= n <= 6 for n in left),
            "lost_seven_or_more_left": sum(n > 6 for n in left), "reached_one_left": reached,
            "closed_from_one_left": int(closed)}


def evaluate(player: Player | GamePlayer, setup: Setup, secrets: list[str], measure_moves: bool = True,
             show_progress: bool = True, setup_seconds: float = 0.0) -> tuple[dict, list[GameRecord]]:
    start = time.perf_counter()
    games = play_games(player, setup, secrets, measure_moves, show_progress)
    return summarise(games, time.perf_counter() - start, setup_seconds), games

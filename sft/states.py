"""Start states: positions with 0 to N earlier turns, not all of them played by the solver.

Seed 001 saw win rates jump once prompts carried 0-4 turns of history, so SFT data and
RL start from positions whose earlier turns the solver or a weaker stand-in played
(llm/histories.py says who and why). Endgame start states continue such a history
until only a few candidates are left: the positions an SFT model reaches and loses.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llm.histories import (DEFAULT_OFF_POLICY, ENDGAME_CANDIDATES, ENDGAME_TRIES, SOLVER, endgame_history,
                           history_guess, pick_player)
from common.errors import UserError
from eval.endgame import EndgamePosition
from llm.format import Rejection
from solver.feedback import WIN
from solver.policy import Policy
from solver.setup import Setup
from solver.state import MAX_GUESSES, GameState

MAX_DRILL_DEPTH = MAX_GUESSES - 1  # positions after 5 moves still have a guess to teach
MODEL = "model"  # who played the turns of a model's own games (model_game_states)


@dataclass(frozen=True)
class StartState:
    """A game to continue: its secret, the position, and who played each earlier turn."""

    secret: str
    state: GameState
    players: tuple[str, ...]
    rejected: tuple[Rejection, ...] = ()  # answers refused since the last played guess, named in the prompt

    @property
    def off_policy_turns(self) -> int:
        return sum(p != SOLVER for p in self.players)


def secret_columns(setup: Setup) -> dict[str, int]:
    """Column of each secret in the pattern matrix."""
    return {word: i for i, word in enumerate(setup.lists.secrets(setup.secret_kind))}


def sample_start_state(setup: Setup, solver: Policy, secret: str, column: int, rng: np.random.Generator,
                       max_history: int, off_policy: float = DEFAULT_OFF_POLICY, min_history: int = 0) -> StartState:
    """Play min_history..max_history earlier turns (uniformly many) against `secret` at matrix `column`.

    History never wins the game: a solver move that would win ends the history early
    and the other players avoid the secret, so at least one guess is always left to make.
    """
    most = min(max_history, MAX_GUESSES - 1)
    turns = int(rng.integers(min(min_history, most), most + 1))
    state, players = setup.start, []
    for _ in range(turns):
        player = pick_player(rng, off_policy)
        guess = history_guess(player, state, solver, secret, column, rng)
        if guess is None:
            break
        state = state.play(guess, int(setup.matrix[setup.lists.index(guess), column]))
        players.append(player)
    return StartState(secret, state, tuple(players))


def sample_start_states(setup: Setup, solver: Policy, secrets: list[str] | tuple[str, ...], n: int,
                        rng: np.random.Generator, max_history: int = 4,
                        off_policy: float = DEFAULT_OFF_POLICY, min_history: int = 0) -> list[StartState]:
    """`n` start states, each for a secret drawn uniformly (with replacement) from `secrets`."""
    columns = secret_columns(setup)
    picks = rng.integers(0, len(secrets), size=n)
    return [sample_start_state(setup, solver, secrets[i], columns[secrets[i]], rng, max_history, off_policy,
                               min_history) for i in picks]


def sample_endgame_states(setup: Setup, solver: Policy, secrets: list[str] | tuple[str, ...], n: int,
                          rng: np.random.Generator, max_candidates: int = ENDGAME_CANDIDATES,
                          off_policy: float = DEFAULT_OFF_POLICY) -> list[StartState]:
    """`n` endgame start states (llm/histories.py `endgame_history`), each for a secret drawn
    uniformly (with replacement) from `secrets`; a draw whose history won first is drawn again."""
    columns = secret_columns(setup)
    chosen: list[StartState] = []
    for _ in range(ENDGAME_TRIES * n):
        if len(chosen) == n:
            break
        secret = secrets[int(rng.integers(len(secrets)))]
        found = endgame_history(setup, solver, secret, columns[secret], rng, max_candidates, off_policy)
        if found is not None:
            chosen.append(StartState(secret, *found))
    if len(chosen) < n:
        raise UserError(f"only {len(chosen)} of {n} endgame positions were found in {ENDGAME_TRIES * n} games; "
                        "are the secrets and word lists tiny?")
    return chosen


def model_game_states(positions: list[EndgamePosition], secrets: list[str] | tuple[str, ...]) -> list[StartState]:
    """Start states at a model's own endgame positions (eval/endgame.py `model_positions`), with the
    refusals it had been shown there.

    The GPU SFT start repeats an earlier guess in 0.75% of its answers at the teacher's endgame
    positions but in 167 of 434 at the one-candidate positions of its own games, and gives a
    refused word again in 38% of its answers there: the loop that loses its games lives in its
    own histories (results/endgame-rl/), so this is where RL can meet it. Positions of secrets
    outside `secrets` (held-out ones) are refused, not skipped: they must never train.
    """
    allowed = set(secrets)
    outside = sorted({p.secret for p in positions} - allowed)
    if outside:
        raise UserError(f"the games file plays {len(outside)} secrets that may not train (e.g. {outside[0]}): "
                        "give games on training secrets (eval --split train)")
    if not positions:
        raise UserError("the games file has no endgame positions to start from")
    return [StartState(p.secret, p.state, (MODEL,) * len(p.state.turns), p.rejected) for p in positions]


def frequent_positions(setup: Setup, expert: Policy, secrets: list[str] | tuple[str, ...], k: int,
                       depth: int = 1) -> list[StartState]:
    """The positions the expert's own games reach most often: at each depth 1..`depth` (turns
    played), the `k` positions the most `secrets` lead to, most common first (ties: the
    earlier feedback patterns), shallowest depth first.

    A model that plays the expert's moves reaches one of these in most games: after RAISE,
    40 of the 129 second-guess positions cover 81% of the answers. Deeper positions show what
    follows the drilled second guess (a model drilled on it alone answered it again at turn 3;
    drilling depth 2 too did not stop that: results/rl-drill/, D4). Each carries the first
    secret (in list order) that leads there, so it can be played and scored like any start
    state; a game the expert has won by then leads nowhere.
    """
    columns = secret_columns(setup)
    moves: dict[tuple[int, ...], str] = {}  # the expert's move after each pattern sequence, memoised
    reached: list[dict[tuple[int, ...], list]] = [{} for _ in range(depth)]  # patterns -> [count, secret, state]
    for secret in secrets:
        state, patterns = setup.start, ()
        for level in reached:
            if patterns not in moves:
                moves[patterns] = expert.choose(state)
            guess = moves[patterns]
            pattern = int(setup.matrix[setup.lists.index(guess), columns[secret]])
            if pattern == WIN:
                break
            patterns += (pattern,)
            if patterns not in level:
                level[patterns] = [0, secret, state.play(guess, pattern)]
            level[patterns][0] += 1
            state = level[patterns][2]
    chosen = []
    for level in reached:
        top = sorted(level, key=lambda key: (-level[key][0], key))[:k]
        chosen.extend(StartState(level[key][1], level[key][2], (SOLVER,) * len(key)) for key in top)
    return chosen

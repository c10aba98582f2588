"""Start states: positions with 0 to N earlier turns, not all of them played by the solver.

A model trained only on the solver's own positions never sees the states its own
mistakes lead to, and seed 001 saw win rates jump once prompts carried 0-4 turns of
history. So each earlier turn is played by the solver or, with probability
`off_policy`, by a stand-in for a weaker player: a random word that still fits the
feedback (a plausible human guess) or a random accepted word (a careless one). The
SFT generator and RL both draw their start states here; the SFT generator also draws
here the refused answers some of its prompts name.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llm.format import ALREADY_GUESSED, NOT_ALLOWED, NOT_FIVE_LETTERS, Rejection
from solver.feedback import WIN
from solver.policy import Policy
from solver.setup import Setup
from solver.state import MAX_GUESSES, GameState

SOLVER, CANDIDATE, RANDOM = "solver", "candidate", "random"
DEFAULT_REJECTED = 0.2  # share of examples whose prompt names answers refused at that turn
CANDIDATE_SHARE = 2 / 3  # of the off-policy turns; the rest are random accepted words
DEFAULT_OFF_POLICY = 0.5
MAX_DRILL_DEPTH = MAX_GUESSES - 1  # positions after 5 moves still have a guess to teach


@dataclass(frozen=True)
class StartState:
    """A game to continue: its secret, the position, and who played each earlier turn."""

    secret: str
    state: GameState
    players: tuple[str, ...]

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
        player = _pick_player(rng, off_policy)
        guess = _history_guess(player, state, solver, secret, column, rng)
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


def sample_rejections(state: GameState, rng: np.random.Generator, share: float = DEFAULT_REJECTED
                      ) -> tuple[Rejection, ...]:
    """With probability `share`, one or two answers refused at `state`, of the kinds a model
    gets wrong: an earlier guess again, a real-looking word of 4 or 6 letters, a 5-letter
    non-word. They teach what to do after a refusal: eval and RL name the refused answers
    in the next prompt, and an unchanged model answers them again."""
    if share <= 0 or rng.random() >= share:
        return ()
    count = 1 if rng.random() < 0.7 else 2
    refused: list[Rejection] = []
    for _ in range(count):
        kinds = [NOT_FIVE_LETTERS, NOT_ALLOWED] + ([ALREADY_GUESSED] if state.turns else [])
        kind = kinds[int(rng.integers(len(kinds)))]
        word = _refused_word(kind, state, rng)
        if word is not None and all(r.guess != word for r in refused):
            refused.append(Rejection(word, kind))
    return tuple(refused)


def _refused_word(kind: str, state: GameState, rng: np.random.Generator) -> str | None:
    """A word refused for `kind` at `state`, derived from a candidate so it looks like the
    near misses models write (`tone`, `bronch`, `marve`); None if none was found."""
    if kind == ALREADY_GUESSED:
        return state.guesses[int(rng.integers(len(state.guesses)))]
    near = state.secret_words[int(state.candidates[rng.integers(len(state.candidates))])]
    if kind == NOT_FIVE_LETTERS:
        return near[:4] if rng.random() < 0.5 else near + "sedry"[int(rng.integers(5))]
    for _ in range(20):
        spot, letter = int(rng.integers(5)), chr(ord("a") + int(rng.integers(26)))
        word = near[:spot] + letter + near[spot + 1:]
        if not state.lists.is_allowed(word):
            return word
    return None


def _pick_player(rng: np.random.Generator, off_policy: float) -> str:
    if rng.random() >= off_policy:
        return SOLVER
    return CANDIDATE if rng.random() < CANDIDATE_SHARE else RANDOM


def _history_guess(player: str, state: GameState, solver: Policy, secret: str, column: int,
                   rng: np.random.Generator) -> str | None:
    """The word `player` plays at `state`, or None to stop the history before a win."""
    if player == SOLVER:
        guess = solver.choose(state)
        return None if guess == secret else guess
    if player == CANDIDATE:
        others = state.candidates[state.candidates != column]
        return state.secret_words[int(others[rng.integers(len(others))])] if len(others) else None
    allowed = state.lists.allowed
    while True:
        guess = allowed[int(rng.integers(len(allowed)))]
        if guess != secret and guess not in state.guesses:
            return guess

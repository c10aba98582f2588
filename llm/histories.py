"""How the positions a model is asked about are made: who played the earlier turns, and
which refused answers the prompt names.

A model trained only on the teacher's own positions never sees the states its own
mistakes lead to, so each earlier turn is played by the teacher or, with probability
`off_policy`, by a stand-in for a weaker player: a random word that still fits the
feedback (a plausible human guess) or a random accepted word (a careless one). SFT
data, RL start states and eval's endgame benchmark all draw their histories here, so
the three see positions made the same way.
"""

from __future__ import annotations

import numpy as np

from llm.format import ALREADY_GUESSED, NOT_ALLOWED, NOT_FIVE_LETTERS, Rejection
from solver.policy import Policy
from solver.setup import Setup
from solver.state import GameState

SOLVER, CANDIDATE, RANDOM = "solver", "candidate", "random"
DEFAULT_REJECTED = 0.2  # share of examples whose prompt names answers refused at that turn
CANDIDATE_SHARE = 2 / 3  # of the off-policy turns; the rest are random accepted words
DEFAULT_OFF_POLICY = 0.5
ENDGAME_CANDIDATES = 6  # "endgame": at most this many candidates left
ENDGAME_TRIES = 20  # histories drawn per endgame position wanted before giving up
RANDOM_TRIES = 64  # draws of a careless word before falling back to a scan of the list


def pick_player(rng: np.random.Generator, off_policy: float) -> str:
    """Who plays the next earlier turn: the teacher, or one of the two stand-ins."""
    if rng.random() >= off_policy:
        return SOLVER
    return CANDIDATE if rng.random() < CANDIDATE_SHARE else RANDOM


def history_guess(player: str, state: GameState, teacher: Policy, secret: str, column: int,
                  rng: np.random.Generator) -> str | None:
    """The word `player` plays at `state`, or None to stop the history before a win (or
    when the player has no word left to play)."""
    if player == SOLVER:
        guess = teacher.choose(state)
        return None if guess == secret else guess
    if player == CANDIDATE:
        others = state.candidates[state.candidates != column]
        return state.secret_words[int(others[rng.integers(len(others))])] if len(others) else None
    allowed, played = state.lists.allowed, set(state.guesses)
    for _ in range(RANDOM_TRIES):
        guess = allowed[int(rng.integers(len(allowed)))]
        if guess != secret and guess not in played:
            return guess
    # A tiny word list can leave no other word: draw from the ones left, or stop.
    left = [w for w in allowed if w != secret and w not in played]
    return left[int(rng.integers(len(left)))] if left else None


def endgame_history(setup: Setup, teacher: Policy, secret: str, column: int, rng: np.random.Generator,
                    max_candidates: int = ENDGAME_CANDIDATES, off_policy: float = DEFAULT_OFF_POLICY
                    ) -> tuple[GameState, tuple[str, ...]] | None:
    """Play earlier turns against `secret` (at matrix `column`) until 1..`max_candidates`
    candidates are left with a guess still to make: (that position, who played each turn),
    or None when this history won or ran out of guesses first (draw again).

    An SFT model loses there: it reaches one candidate in 99 of 128 games and names it
    first in 5 (../shared/adapters/gpu-sft-2400), so these are the positions to teach.
    """
    state, players = setup.start, []
    while not state.over:
        if state.turns and len(state.candidates) <= max_candidates:
            return state, tuple(players)
        player = pick_player(rng, off_policy)
        guess = history_guess(player, state, teacher, secret, column, rng)
        if guess is None:
            return None
        state = state.play(guess, int(setup.matrix[setup.lists.index(guess), column]))
        players.append(player)
    return None


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
        word = refused_word(kind, state, rng)
        if word is not None and all(r.guess != word for r in refused):
            refused.append(Rejection(word, kind))
    return tuple(refused)


def refused_word(kind: str, state: GameState, rng: np.random.Generator) -> str | None:
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



"""Game state: what has been played, what is known, and which secrets remain.

This is the one description of a Wordle position. Prompts, chain-of-thought text,
rewards and the solver all read it, so the rules for turning feedback into knowledge
live here and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from common.errors import UserError
from solver.feedback import GREEN, GREY, WIN, YELLOW, feedback_reference, pattern_to_digits
from solver.words import WordLists, check_word_shape

MAX_GUESSES = 6


@dataclass(frozen=True)
class Turn:
    guess: str
    pattern: int

    @property
    def tiles(self) -> list[int]:
        return pattern_to_digits(self.pattern)


@dataclass
class Constraints:
    """Everything the feedback so far says about the secret, letter by letter.

    `greens`: position -> letter. `banned`: letter -> positions it is known not to
    occupy. `min_count` / `max_count`: bounds on how often a letter occurs
    (`max_count` only where a grey tile pinned it down; 0 means absent).
    """

    greens: dict[int, str] = field(default_factory=dict)
    banned: dict[str, set[int]] = field(default_factory=dict)
    min_count: dict[str, int] = field(default_factory=dict)
    max_count: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_turns(cls, turns: tuple[Turn, ...] | list[Turn]) -> "Constraints":
        known = cls()
        for turn in turns:
            tiles = turn.tiles
            shown: dict[str, int] = {}
            for pos, (letter, tile) in enumerate(zip(turn.guess, tiles)):
                if tile == GREEN:
                    known.greens[pos] = letter
                else:
                    known.banned.setdefault(letter, set()).add(pos)
                if tile != GREY:
                    shown[letter] = shown.get(letter, 0) + 1
            for letter, count in shown.items():
                known.min_count[letter] = max(known.min_count.get(letter, 0), count)
            for pos, (letter, tile) in enumerate(zip(turn.guess, tiles)):
                if tile == GREY:
                    exact = shown.get(letter, 0)
                    known.max_count[letter] = min(known.max_count.get(letter, 5), exact)
        return known

    @property
    def absent(self) -> list[str]:
        return sorted(letter for letter, most in self.max_count.items() if most == 0)

    @property
    def present(self) -> list[str]:
        """Letters known to be in the secret, in alphabetical order."""
        return sorted(letter for letter, least in self.min_count.items() if least > 0)

    def allows(self, word: str) -> bool:
        """True if `word` satisfies every constraint (i.e. it could still be the secret)."""
        for pos, letter in self.greens.items():
            if word[pos] != letter:
                return False
        for letter, positions in self.banned.items():
            if any(word[pos] == letter for pos in positions):
                return False
        for letter, least in self.min_count.items():
            if word.count(letter) < least:
                return False
        for letter, most in self.max_count.items():
            if word.count(letter) > most:
                return False
        return True

    def describe(self) -> list[str]:
        """Plain-English sentences, one per fact, positions counted from 1."""
        lines = []
        if self.greens:
            pattern = "".join(self.greens.get(i, "_").upper() for i in range(5))
            lines.append(f"Known positions: {pattern}.")
        for letter in self.present:
            least = self.min_count[letter]
            most = self.max_count.get(letter)
            not_at = sorted(p + 1 for p in self.banned.get(letter, set()))
            green_at = [p + 1 for p, l in sorted(self.greens.items()) if l == letter]
            if most == least:
                count = f"exactly {_times(least)}"
            else:
                count = f"at least {_times(least)}"
            parts = [f"{letter.upper()} is in the word {count}"]
            if green_at:
                parts.append(f"at position {_join(green_at)}")
            if not_at:
                parts.append(f"not at position {_join(not_at)}")
            lines.append(", ".join(parts) + ".")
        if self.absent:
            lines.append(f"Not in the word: {', '.join(l.upper() for l in self.absent)}.")
        return lines


def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def _join(numbers: list[int]) -> str:
    words = [str(n) for n in numbers]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


class GameState:
    """A position: the turns played and the secrets still consistent with them.

    `candidates` are indices into the secret list (answers or allowed, as chosen by
    `secret_kind`), filtered exactly with the pattern matrix.
    """

    def __init__(
        self,
        lists: WordLists,
        matrix: np.ndarray,
        secret_kind: str = "answers",
        turns: tuple[Turn, ...] = (),
        candidates: np.ndarray | None = None,
    ) -> None:
        self.lists = lists
        self.matrix = matrix
        self.secret_kind = secret_kind
        self.turns = turns
        if candidates is None:
            candidates = np.arange(matrix.shape[1], dtype=np.int64)
            for turn in turns:
                row = matrix[lists.index(turn.guess)]
                candidates = candidates[row[candidates] == turn.pattern]
        self.candidates = candidates

    def play(self, guess: str, pattern: int) -> "GameState":
        row = self.matrix[self.lists.index(guess)]
        kept = self.candidates[row[self.candidates] == pattern]
        return GameState(self.lists, self.matrix, self.secret_kind, self.turns + (Turn(guess, pattern),), kept)

    @property
    def secret_words(self) -> tuple[str, ...]:
        return self.lists.secrets(self.secret_kind)

    def candidate_words(self, limit: int | None = None) -> list[str]:
        words = self.secret_words
        chosen = self.candidates if limit is None else self.candidates[:limit]
        return [words[i] for i in chosen]

    @property
    def guesses(self) -> list[str]:
        return [t.guess for t in self.turns]

    @property
    def won(self) -> bool:
        return bool(self.turns) and self.turns[-1].pattern == WIN

    @property
    def guesses_left(self) -> int:
        return MAX_GUESSES - len(self.turns)

    @property
    def over(self) -> bool:
        return self.won or self.guesses_left <= 0

    @cached_property
    def constraints(self) -> Constraints:
        return Constraints.from_turns(self.turns)

    def is_consistent(self, word: str) -> bool:
        """Could `word` be the secret given all feedback so far (exact rule)?"""
        return all(feedback_reference(t.guess, word) == t.pattern for t in self.turns)


def state_from_history(lists: WordLists, matrix: np.ndarray, history: list[tuple[str, int]],
                       secret_kind: str = "answers") -> GameState:
    """Replay user-typed (guess, pattern) pairs; errors for unknown words or no candidates left."""
    state = GameState(lists, matrix, secret_kind)
    if len(history) > MAX_GUESSES:
        raise UserError(f"a game has at most {MAX_GUESSES} guesses; the history has {len(history)}")
    for guess, pattern in history:
        if state.won:
            raise UserError(f"the game was already won by {state.turns[-1].guess!r}; nothing may follow it")
        check_word_shape(guess)
        lists.index(guess)
        state = state.play(guess, pattern)
        if len(state.candidates) == 0:
            played = ", ".join(f"{t.guess}:{_tiles_text(t.pattern)}" for t in state.turns)
            raise UserError(f"no {secret_kind} word fits the feedback {played}: check the tiles")
    return state


def _tiles_text(pattern: int) -> str:
    return "".join("bgy"[{GREY: 0, GREEN: 1, YELLOW: 2}[t]] for t in pattern_to_digits(pattern))

"""Word lists: loading, validation, and letter codes for numba.

The solver works on numpy arrays of letter codes (a=0 .. z=25, shape (n, 5), uint8);
the rest of the project works on words. `WordLists` keeps both views of one pair of
lists (secrets that can be answers, guesses that are accepted) together with a
fingerprint used to key every cache derived from them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from common.errors import UserError
from common.fileio import read_text

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
DEFAULT_ANSWERS = DATA_DIR / "answers.txt"
DEFAULT_ALLOWED = DATA_DIR / "allowed.txt"
WORD_LENGTH = 5


def encode(words: list[str]) -> np.ndarray:
    """Words -> (n, 5) uint8 letter codes."""
    if not words:
        return np.zeros((0, WORD_LENGTH), dtype=np.uint8)
    raw = np.frombuffer("".join(words).encode("ascii"), dtype=np.uint8)
    return (raw.reshape(-1, WORD_LENGTH) - ord("a")).astype(np.uint8)


def decode(codes: np.ndarray) -> str:
    return bytes(np.asarray(codes, dtype=np.uint8) + ord("a")).decode("ascii")


def read_word_file(path: str | Path) -> list[str]:
    """Read one word per line; lowercase, dedupe, sort. Bad lines name file and line."""
    path = Path(path)
    text = read_text(path, "word list")
    words = set()
    for number, line in enumerate(text.splitlines(), start=1):
        word = line.strip().lower()
        if not word:
            continue
        if len(word) != WORD_LENGTH or not word.isascii() or not word.isalpha():
            raise UserError(f"{path}:{number}: {line.strip()!r} is not a 5-letter a-z word")
        words.add(word)
    if not words:
        raise UserError(f"{path}: the word list is empty")
    return sorted(words)


@dataclass(frozen=True)
class WordLists:
    """Possible secrets (`answers`) and accepted guesses (`allowed`, a superset)."""

    answers: tuple[str, ...]
    allowed: tuple[str, ...]
    _index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {w: i for i, w in enumerate(self.allowed)})

    @cached_property
    def answer_codes(self) -> np.ndarray:
        return encode(list(self.answers))

    @cached_property
    def allowed_codes(self) -> np.ndarray:
        return encode(list(self.allowed))

    @cached_property
    def answer_rows(self) -> np.ndarray:
        """Index in `allowed` of each answer (answers are guesses too)."""
        return np.array([self._index[w] for w in self.answers], dtype=np.int64)

    @cached_property
    def fingerprint(self) -> str:
        digest = hashlib.sha256()
        digest.update("\n".join(self.answers).encode())
        digest.update(b"|")
        digest.update("\n".join(self.allowed).encode())
        return digest.hexdigest()[:16]

    def is_allowed(self, word: str) -> bool:
        return word in self._index

    def index(self, word: str) -> int:
        """Row of `word` in `allowed`; UserError if it is not accepted."""
        check_word_shape(word)
        try:
            return self._index[word]
        except KeyError:
            raise UserError(f"{word!r} is not in the allowed word list") from None

    def secrets(self, which: str) -> tuple[str, ...]:
        if which == "answers":
            return self.answers
        if which == "allowed":
            return self.allowed
        raise UserError(f"unknown secret list {which!r}: use 'answers' or 'allowed'")


def check_word_shape(word: str) -> None:
    if len(word) != WORD_LENGTH:
        raise UserError(f"{word!r} has {len(word)} letters; Wordle words have 5")
    if not (word.isascii() and word.isalpha() and word.islower()):
        raise UserError(f"{word!r} must be 5 letters a-z")


def load_word_lists(answers: str | Path | None = None, allowed: str | Path | None = None) -> WordLists:
    """The default lists, or user files validated line by line."""
    answers_path = Path(answers) if answers else DEFAULT_ANSWERS
    allowed_path = Path(allowed) if allowed else DEFAULT_ALLOWED
    answer_words = read_word_file(answers_path)
    allowed_words = read_word_file(allowed_path)
    allowed_set = set(allowed_words)
    missing = [w for w in answer_words if w not in allowed_set]
    if missing:
        raise UserError(
            f"{answers_path}: {len(missing)} answer(s) not in {allowed_path}, e.g. {missing[0]!r}"
        )
    return WordLists(tuple(answer_words), tuple(allowed_words))


_DEFAULT: WordLists | None = None


def default_word_lists() -> WordLists:
    """The shipped lists, loaded once per process."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = load_word_lists()
    return _DEFAULT

"""Exact Wordle feedback, encoded as one number 0..242.

Rules with repeated letters: greens first; then, left to right, a letter is yellow
only while the secret still has unmatched copies of it, otherwise grey. A pattern is
read as a base-3 number with the first tile most significant (0 grey, 1 yellow,
2 green), so the digits of `pattern_to_digits(code)` are the tiles in order and
242 ("22222") is a win.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from common.errors import UserError

WIN = 242
GREY, YELLOW, GREEN = 0, 1, 2
_LETTER_TILES = {"b": GREY, "x": GREY, "-": GREY, ".": GREY, "y": YELLOW, "g": GREEN}


@njit(cache=True, inline="always")
def feedback_code(guess: np.ndarray, secret: np.ndarray, unmatched: np.ndarray) -> int:
    """Pattern code of `guess` against `secret`; `unmatched` is a zeroed int8[26] scratch.

    The scratch array is left zeroed again, so a caller can reuse one per thread.
    """
    green = 0
    for i in range(5):
        if guess[i] == secret[i]:
            green |= 1 << i
        else:
            unmatched[secret[i]] += 1
    code = 0
    for i in range(5):
        tile = 0
        if green & (1 << i):
            tile = 2
        elif unmatched[guess[i]] > 0:
            tile = 1
            unmatched[guess[i]] -= 1
        code = code * 3 + tile
    for i in range(5):
        unmatched[secret[i]] = 0
    return code


@njit(cache=True, inline="always")
def tiles_matched(a: int, b: int) -> int:
    """How many of the five tiles two pattern codes share (5 when they are the same pattern)."""
    same = 0
    for _ in range(5):
        if a % 3 == b % 3:
            same += 1
        a //= 3
        b //= 3
    return same


@njit(cache=True)
def feedback_one(guess: np.ndarray, secret: np.ndarray) -> int:
    return feedback_code(guess, secret, np.zeros(26, dtype=np.int8))


def feedback(guess: str, secret: str) -> int:
    """Pattern code of two words (convenience wrapper around the numba kernel)."""
    from solver.words import encode

    codes = encode([guess, secret])
    return int(feedback_one(codes[0], codes[1]))


def feedback_reference(guess: str, secret: str) -> int:
    """Slow, obviously-correct pure-Python feedback: the oracle tests compare against."""
    tiles = [GREY] * 5
    remaining: dict[str, int] = {}
    for i, (g, s) in enumerate(zip(guess, secret)):
        if g == s:
            tiles[i] = GREEN
        else:
            remaining[s] = remaining.get(s, 0) + 1
    for i, g in enumerate(guess):
        if tiles[i] != GREEN and remaining.get(g, 0) > 0:
            tiles[i] = YELLOW
            remaining[g] -= 1
    return digits_to_pattern(tiles)


def digits_to_pattern(tiles: list[int]) -> int:
    code = 0
    for tile in tiles:
        code = code * 3 + tile
    return code


def pattern_to_digits(code: int) -> list[int]:
    tiles = []
    for _ in range(5):
        tiles.append(code % 3)
        code //= 3
    return tiles[::-1]


def pattern_to_string(code: int) -> str:
    """242 -> '22222'."""
    return "".join(str(t) for t in pattern_to_digits(code))


def parse_pattern(text: str) -> int:
    """'20100' or 'gybbb' (g green, y yellow, b/x/-/. grey) -> pattern code."""
    raw = text.strip().lower()
    if len(raw) != 5:
        raise UserError(f"feedback {text!r} must have 5 tiles, like 20100 or gybbb")
    tiles = []
    for ch in raw:
        if ch in "012":
            tiles.append(int(ch))
        elif ch in _LETTER_TILES:
            tiles.append(_LETTER_TILES[ch])
        else:
            raise UserError(
                f"feedback {text!r}: {ch!r} is not a tile (use 0/1/2 or b/y/g for grey/yellow/green)"
            )
    return digits_to_pattern(tiles)

"""The held-out secrets: a fixed slice of every list that training never sees.

Membership depends only on the word (a hash), so the split is the same on every
machine, for every seed, and stays put when a user adds words to a list. SFT and RL
exclude these words; eval draws from them by default.
"""

from __future__ import annotations

import hashlib
import random

HELD_OUT_PER_MILLE = 100  # 10% of each list


def is_held_out(word: str) -> bool:
    digest = hashlib.sha256(f"wordle-rl-heldout:{word}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % 1000 < HELD_OUT_PER_MILLE


def held_out(words: tuple[str, ...] | list[str]) -> list[str]:
    return [w for w in words if is_held_out(w)]


def trainable(words: tuple[str, ...] | list[str]) -> list[str]:
    return [w for w in words if not is_held_out(w)]


def sample_secrets(pool: list[str], games: int | None, seed: int) -> list[str]:
    """`games` distinct secrets drawn from `pool` with `seed` (all of them, in order, if None)."""
    if games is None or games >= len(pool):
        return list(pool)
    return random.Random(seed).sample(pool, games)

"""The held-out secrets: a fixed slice of every list that training never sees.

Membership depends only on the word (a hash), so the split is the same on every
machine, for every seed, and stays put when a user adds words to a list. SFT and RL
exclude these words; eval draws from them by default.

A second, independent hash divides the held-out words into a validation part (about
a third), which training runs play to pick their best checkpoint, and a test part
(the rest), which nothing ever chooses by, so its figures stay unbiased.

The trainable words are split once more, for SFT data (`gen-sft`): a small share of
them are the secrets of its validation and test files only, so SFT never trains on
them. Those "untaught" words are answers a model never learned to name yet may be
trained on later: RL there learns from the clues, not from a memorised list of answers
(results/endgame-untaught/), and nothing held out is spent.
"""

from __future__ import annotations

import hashlib
import random
from typing import Callable

HELD_OUT_PER_MILLE = 100  # 10% of each list
VALIDATION_PER_MILLE = 333  # a third of the held-out words
SFT_SPLITS = ("train", "valid", "test")
SFT_SHARES_PER_MILLE = {"valid": 50, "test": 50}  # of the trainable secrets: gen-sft's valid and test files


def _per_mille(salt: str, word: str) -> int:
    digest = hashlib.sha256(f"{salt}:{word}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % 1000


def is_held_out(word: str) -> bool:
    return _per_mille("wordle-rl-heldout", word) < HELD_OUT_PER_MILLE


def is_validation(word: str) -> bool:
    """A held-out word that training runs may choose checkpoints by."""
    return is_held_out(word) and _per_mille("wordle-rl-validation", word) < VALIDATION_PER_MILLE


def held_out(words: tuple[str, ...] | list[str]) -> list[str]:
    return [w for w in words if is_held_out(w)]


def held_out_validation(words: tuple[str, ...] | list[str]) -> list[str]:
    return [w for w in words if is_validation(w)]


def held_out_test(words: tuple[str, ...] | list[str]) -> list[str]:
    return [w for w in words if is_held_out(w) and not is_validation(w)]


def trainable(words: tuple[str, ...] | list[str]) -> list[str]:
    return [w for w in words if not is_held_out(w)]


def sft_split_of(word: str) -> str:
    """The SFT data split a trainable secret belongs to: a fixed function of the word."""
    slot = _per_mille("wordle-rl-sft-split", word)
    for split, share in SFT_SHARES_PER_MILLE.items():
        if slot < share:
            return split
        slot -= share
    return "train"


def untaught(words: tuple[str, ...] | list[str]) -> list[str]:
    """Trainable words that SFT data never has as a training secret (gen-sft's valid and test ones)."""
    return [w for w in trainable(words) if sft_split_of(w) != "train"]


# `eval --split` choices: "heldout" stays all held-out words, so earlier figures reproduce;
# "train" (the words training may use) sits beside them to tell memory from skill, and
# "untaught" (the trainable words SFT never trains on) tells what RL taught from what SFT did.
SPLITS: dict[str, Callable[[tuple[str, ...] | list[str]], list[str]]] = {
    "heldout": held_out, "validation": held_out_validation, "test": held_out_test, "train": trainable,
    "untaught": untaught, "all": list,
}


def sample_secrets(pool: list[str], games: int | None, seed: int) -> list[str]:
    """`games` distinct secrets drawn from `pool` with `seed` (all of them, in order, if None)."""
    if games is None or games >= len(pool):
        return list(pool)
    return random.Random(seed).sample(pool, games)

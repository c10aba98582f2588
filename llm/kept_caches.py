"""Prompt caches kept to continue later prompts that start the same way, within a memory budget.

A game's next prompt repeats its last one but for the new lines (the turn just played, a refused
answer), and an RL group's next position repeats its game's earlier turns: a stream that keeps the
cache of every prompt it prefilled prefills only what a new prompt adds to the longest one it
shares. Every kept cache costs memory (12-20 MB for a 135M model's eval prompt in float32), so
past the budget the least recently used are let go; a cache let go only costs its prompt a longer
prefill.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

KEPT_BYTES = 2 * 2**30  # a 128-game eval of the default model keeps a cache per open game within it


class KeptCaches:
    """KV caches of token sequences, found by the longest start they share with a new prompt."""

    def __init__(self, budget: int = KEPT_BYTES) -> None:
        self.budget = budget
        self._entries: OrderedDict[int, tuple[np.ndarray, list, int]] = OrderedDict()  # least recently used first
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def keep(self, tokens: list[int], cache: list) -> None:
        """Keep `cache`, which holds exactly `tokens`; the least recently used go while past the budget."""
        size = sum(layer.nbytes for layer in cache)
        self._entries[id(cache)] = (np.asarray(tokens, np.int64), cache, size)
        self._bytes += size
        while self._bytes > self.budget and len(self._entries) > 1:
            _, (_, _, dropped) = self._entries.popitem(last=False)
            self._bytes -= dropped

    def longest(self, prompt: list[int], limit: int) -> tuple[int, list] | None:
        """(shared length, cache) of the kept sequence sharing the longest start with `prompt`, at
        most `limit` tokens; None when none shares a token. The one found counts as used."""
        ask = np.asarray(prompt[:limit], np.int64)
        best, length = None, 0
        for key, (tokens, _, _) in self._entries.items():
            shared = shared_length(tokens, ask)
            if shared > length:
                best, length = key, shared
        if best is None:
            return None
        self._entries.move_to_end(best)
        return length, self._entries[best][1]


def shared_length(a: np.ndarray, b: np.ndarray) -> int:
    """Leading tokens `a` and `b` share."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n

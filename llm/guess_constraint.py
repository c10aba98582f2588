"""Guess-tag decoding limited to playable words: an opt-in for eval (`--constrain-guess`).

Once an answer has opened `<guess>`, every next token must continue ` word</guess>`
(tokenized as the model was trained on it) for an allowed word not guessed or refused
yet in that game. The model still writes its own thought and chooses among the words
its tokens lead to, so the run measures its play apart from its vocabulary; the
format-valid rate of such a run says nothing about the model, and reports say so.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Callable

import mlx.core as mx
import numpy as np

from llm.tokenizing import tokens_after

OPEN_TAG, CLOSE_TAG = "<guess>", "</guess>"


class GuessVocabulary:
    """Every allowed word's token sequence for ` word</guess>`, sorted, so that the words
    sharing a prefix are one contiguous range and a node of the trie is a range."""

    def __init__(self, tokenizer, words: tuple[str, ...]) -> None:
        encoded = tokens_after(tokenizer, OPEN_TAG, [f" {w}{CLOSE_TAG}" for w in words])  # as written in the tag
        order = sorted(range(len(words)), key=lambda i: encoded[i])
        self.sequences = [tuple(encoded[i]) for i in order]
        self.position = {words[i]: rank for rank, i in enumerate(order)}
        self.eos = list(tokenizer.eos_token_ids)
        self._children: dict[tuple[int, int, int], dict[int, tuple[int, int]]] = {}

    def children(self, lo: int, hi: int, depth: int) -> dict[int, tuple[int, int]]:
        """Next token -> range of the sequences in [lo, hi) that continue with it."""
        key = (lo, hi, depth)
        if key not in self._children:
            found: dict[int, tuple[int, int]] = {}
            i = lo
            while i < hi:
                seq = self.sequences[i]
                if len(seq) <= depth:
                    i += 1
                    continue
                token = seq[depth]
                end = bisect_left(self.sequences, seq[:depth] + (token + 1,), i, hi)
                found[token] = (i, end)
                i = end
            self._children[key] = found
        return self._children[key]

    def processor(self, tokenizer, banned: set[str]) -> Callable[[mx.array, mx.array], mx.array]:
        """A logits processor for one answer; `banned` words (already guessed or refused) are
        never completed."""
        return _GuessConstraint(self, tokenizer, sorted(self.position[w] for w in banned if w in self.position))


class _GuessConstraint:
    """Follows one answer as it is generated: free until `<guess>` is written, then a walk
    down the word trie that masks every token leaving it."""

    def __init__(self, vocabulary: GuessVocabulary, tokenizer, banned: list[int]) -> None:
        self.vocabulary = vocabulary
        self.tokenizer = tokenizer
        self.banned = banned
        self.text = ""
        self.calls = 0
        self.node: tuple[int, int, int] | None = None  # (lo, hi, depth) once inside the tag

    def __call__(self, context: mx.array, logits: mx.array) -> mx.array:
        self.calls += 1
        if self.calls > 1:  # the first call sees the prompt's last token; later ones the last answer token
            self._advance(int(context[-1].item()))
        if self.node is None:
            return logits
        allowed = self._allowed_tokens()
        if not allowed:  # nothing fits (the tag was opened in an unexpected way): leave the model free
            self.node = None
            return logits
        mask = np.full(logits.shape[-1], -np.inf, dtype=np.float32)
        mask[allowed] = 0.0
        return logits + mx.array(mask)

    def _advance(self, token: int) -> None:
        if self.node is None:
            self.text += self.tokenizer.decode([token])
            if self.text.endswith(OPEN_TAG):
                self.node = (0, len(self.vocabulary.sequences), 0)
            return
        lo, hi, depth = self.node
        child = self.vocabulary.children(lo, hi, depth).get(token)
        self.node = None if child is None else (child[0], child[1], depth + 1)

    def _allowed_tokens(self) -> list[int]:
        lo, hi, depth = self.node
        children = self.vocabulary.children(lo, hi, depth)
        allowed = [t for t, (a, b) in children.items() if b - a > sum(1 for i in self.banned if a <= i < b)]
        if len(self.vocabulary.sequences[lo]) == depth and lo not in self.banned:  # a prefix sorts first
            allowed += self.vocabulary.eos  # a whole ` word</guess>` is written: only the end may follow
        return allowed

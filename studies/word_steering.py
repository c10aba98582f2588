"""The spelling readout over every allowed word, and the decoding that names a word by it.

The first spelling readout (studies/naming_probe.py) scored the 2,051 words that are one token:
on held-out test positions it named single-token secrets 1 -> 8 of 78 times, but several-token
ones 3 -> 1 of 74, and in whole games it won 9 -> 28 single-token secrets and 24 -> 7 others
(results/naming-probe/): it lifted the words it scored over those it could not. Here every
allowed word is scored. A word of several tokens starts from its first token's logit less the
log of how many words share that token (the start's next-token logits say nothing of how it
splits a first token among them, so they share it evenly), then gains the readout's shift
(its first token's embedding for the rank-r correction, its own spelling for the letters).

Sampling then follows the words, not the tokens: at the naming token (the input ` Only`) each
first token's logit becomes the log-sum of its words' scores, and each later token of the word
is chosen among the tokens that continue some word, by the log-sum of the scores of the words
below it, until the word is whole; then the model goes on by itself. Words already guessed or
refused at the position score nothing (the game refuses them again; the reward scores a
repeat the floor). The scores come from the hidden state at the naming token, which only the
model sees, and the choice is per answer, which only a logits processor follows: `ScorePublisher`
wraps the model and hands each generation step's rows to the processors, which mlx-lm's batch
generator calls in row order right after the model (each one checks that its row is its own).
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn
import numpy as np


@dataclass(frozen=True)
class WordTokens:
    """Every word's tokens (with its leading space), and what the readout needs of them."""
    words: tuple[str, ...]
    sequences: tuple[tuple[int, ...], ...]
    first: np.ndarray  # each word's first token
    offsets: np.ndarray  # -log(words sharing that first token): 0 for a single-token word
    padded: np.ndarray  # (words, longest) the sequences, -1 past a word's end: steering filters with it

    @classmethod
    def of(cls, tokenizer, words: list[str]) -> WordTokens:
        sequences = tuple(tuple(tokenizer.encode(" " + w, add_special_tokens=False)) for w in words)
        first = np.array([s[0] for s in sequences], dtype=np.int64)
        _, inverse, counts = np.unique(first, return_inverse=True, return_counts=True)
        padded = np.full((len(words), max(len(s) for s in sequences) + 1), -1, dtype=np.int64)
        for row, sequence in enumerate(sequences):
            padded[row, :len(sequence)] = sequence
        return cls(tuple(words), sequences, first, -np.log(counts[inverse]).astype(np.float32), padded)


def continuation_offsets(model: nn.Module, tokenizer, vocabulary: WordTokens, context: str = "Only",
                         batch: int = 512) -> np.ndarray:
    """Each word's share of its first token by the model's own continuation: log P(the rest of
    its tokens | `context`, its first token), normalised over the words that share the token (so
    the first token's logit is still the model's). An even share gives the 10,921 several-token
    allowed words, mostly ones no answer list holds, as much as the common ones; the model knows
    which are common."""
    prefix = tokenizer.encode(context, add_special_tokens=False)
    log_p = np.zeros(len(vocabulary.words), dtype=np.float64)
    several = [i for i, s in enumerate(vocabulary.sequences) if len(s) > 1]
    for start in range(0, len(several), batch):
        chosen = several[start:start + batch]
        sequences = [prefix + list(vocabulary.sequences[i]) for i in chosen]
        width = max(len(s) for s in sequences)
        logits = model(mx.array([s + [0] * (width - len(s)) for s in sequences])).astype(mx.float32)
        log_probs = np.array(logits - mx.logsumexp(logits, axis=-1, keepdims=True))
        for row, (i, tokens) in enumerate(zip(chosen, sequences)):
            places = np.arange(len(prefix), len(tokens) - 1)  # each later token, predicted from the one before
            log_p[i] = log_probs[row, places, tokens[len(prefix) + 1:]].sum()
    _, group = np.unique(vocabulary.first, return_inverse=True)
    peak = np.full(group.max() + 1, -np.inf)
    np.maximum.at(peak, group, log_p)
    sums = np.zeros(group.max() + 1)
    np.add.at(sums, group, np.exp(log_p - peak[group]))
    return (log_p - peak[group] - np.log(sums[group])).astype(np.float32)


class ScorePublisher(nn.Module):
    """The model, unchanged, that also scores every word at the rows whose input is `gate_token`
    (a generation step, one token per row) and keeps those scores for the step's processors."""

    def __init__(self, model: nn.Module, scorer, gate_token: int):
        super().__init__()
        self.inner, self.scorer, self.gate_token = model, scorer, gate_token
        self.rows: list[np.ndarray | None] = []
        self.cursor = 0

    @property
    def layers(self) -> list[nn.Module]:
        return self.inner.layers

    def __call__(self, inputs: mx.array, cache=None, input_embeddings: mx.array | None = None) -> mx.array:
        hidden = self.inner.model(inputs, cache, input_embeddings)
        logits = self.inner.model.embed_tokens.as_linear(hidden)
        self.rows, self.cursor = [None] * inputs.shape[0], 0
        if inputs.shape[1] == 1:
            gated = np.array(inputs[:, 0] == self.gate_token)
            if gated.any():
                scores = np.array(self.scorer(hidden[:, -1].astype(mx.float32)))
                self.rows = [scores[row] if gate else None for row, gate in enumerate(gated)]
        return logits

    def next_row(self) -> np.ndarray | None:
        """The next row's word scores (None where its input was not the gate)."""
        if self.cursor >= len(self.rows):
            raise RuntimeError("more logits processors than rows: the steering lost its rows")
        row = self.rows[self.cursor]
        self.cursor += 1
        return row


class WordSteering:
    """One answer's logits processor: free until the naming token, then the word by its scores."""

    def __init__(self, publisher: ScorePublisher, vocabulary: WordTokens, banned: set[str]):
        self.publisher, self.vocabulary = publisher, vocabulary
        self.banned = np.array([w in banned for w in vocabulary.words])
        self.scores: np.ndarray | None = None
        self.live: np.ndarray | None = None  # the words the tokens so far still spell
        self.depth = 0

    def __call__(self, context: mx.array, logits: mx.array) -> mx.array:
        last = int(context[-1].item())
        scores = self.publisher.next_row()
        if (scores is not None) != (last == self.publisher.gate_token):
            raise RuntimeError("a processor was handed another row's scores")
        if scores is not None:
            self.scores, self.depth = np.where(self.banned, -np.inf, scores), 0
            self.live = np.flatnonzero(~self.banned)
            return self._first_tokens(logits)
        if self.live is None:
            return logits
        padded = self.vocabulary.padded
        self.live = self.live[padded[self.live, self.depth] == last]
        self.depth += 1
        self.live = self.live[padded[self.live, self.depth] >= 0]
        if not len(self.live):  # the word is whole (or the model left the words): free again
            self.live = None
            return logits
        steered = np.full(logits.shape[-1], -np.inf, dtype=np.float32)
        tokens, scores = self._by_token(padded[self.live, self.depth])
        steered[tokens] = scores
        return mx.array(steered)[None].astype(logits.dtype)

    def _first_tokens(self, logits: mx.array) -> mx.array:
        """Each word-opening token's logit becomes its words' log-sum; other tokens stay the model's."""
        tokens, scores = self._by_token(self.vocabulary.first[self.live])
        steered = np.array(logits[0].astype(mx.float32))
        steered[self.vocabulary.first] = -np.inf
        steered[tokens] = scores
        return mx.array(steered)[None].astype(logits.dtype)

    def _by_token(self, next_tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The distinct next tokens of the live words, and the log-sum of their words' scores."""
        tokens, inverse = np.unique(next_tokens, return_inverse=True)
        scores = self.scores[self.live]
        peak = scores.max()
        sums = np.zeros(len(tokens))
        np.add.at(sums, inverse, np.exp(scores - peak))
        with np.errstate(divide="ignore"):
            return tokens, (np.log(sums) + peak).astype(np.float32)

"""Sampling that names a whole allowed word by a naming head's scores (llm/naming_head.py).

At the naming token (the input ` Only`) each word-opening token's logit becomes the log-sum of
the scores of the words it opens; each later token of the word is chosen among the tokens that
continue some word, by the log-sum of the scores of the words below it, until the word is
whole; then the model goes on by itself. So a word of several tokens is named with the
probability its score gives it, not with its first token's. Words already guessed or refused
at the position score nothing: the game refuses them again and the reward scores a repeat
the floor. The rest of every answer is the model's own.

The scores come from the hidden state at the naming token, which only the model sees, and the
choice is per answer, which only a logits processor follows: `ScorePublisher` wraps the model
and hands each generation step's rows to the processors, which mlx-lm's batch generator calls
in row order right after the model (each checks that its row is its own).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from common.errors import UserError
from llm.format import NAMING_WORD, Rejection
from llm.naming_head import NamingHead, naming_tokens, readout_logits, spelling_features
from llm.output_layer import output_layer, output_split, output_weight
from llm.tokenizing import tokens_after
from solver.state import GameState


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
        """The words' tokens as the model writes them after the naming word. A tokenizer with no
        token that opens a word with a letter (every word a bare space token, then its letters)
        leaves the head nothing to score words by: a one-line `UserError`."""
        sequences = tuple(tokens_after(tokenizer, NAMING_WORD, [" " + w for w in words]))
        first = np.array([s[0] for s in sequences], dtype=np.int64)
        if not any(any(c.isalpha() for c in tokenizer.decode([int(t)])) for t in np.unique(first)):
            raise UserError("the naming head cannot serve this model: its tokenizer opens no word with a token that "
                            f"holds a letter (each word after a space starts with {tokenizer.convert_ids_to_tokens(int(first[0]))!r} "
                            "alone), so there are no word tokens to score words by")
        _, inverse, counts = np.unique(first, return_inverse=True, return_counts=True)
        padded = np.full((len(words), max(len(s) for s in sequences) + 1), -1, dtype=np.int64)
        for row, sequence in enumerate(sequences):
            padded[row, :len(sequence)] = sequence
        return cls(tuple(words), sequences, first, -np.log(counts[inverse]).astype(np.float32), padded)


class ScorePublisher(nn.Module):
    """The model, unchanged, that also scores every word at the rows whose input is the last of
    the `naming` tokens (a generation step, one token per row) and keeps those scores for the
    step's processors (which check that the tokens before it are the rest of `naming`)."""

    def __init__(self, model: nn.Module, scorer, naming: tuple[int, ...]):
        super().__init__()
        self.inner, self.scorer, self.naming = model, scorer, naming
        self.gate_token = naming[-1]
        self.rows: list[np.ndarray | None] = []
        self.states: list[np.ndarray | None] = []  # each gated row's hidden state, which RL trains the head on
        self.last_state: np.ndarray | None = None  # the state of the row `next_row` handed out last
        self.cursor = 0

    @property
    def layers(self) -> list[nn.Module]:
        return self.inner.layers

    def __call__(self, inputs: mx.array, cache=None, input_embeddings: mx.array | None = None) -> mx.array:
        # Some mlx-lm models (phi3) take no input_embeddings: pass them only where given.
        extra = () if input_embeddings is None else (input_embeddings,)
        hidden = self.inner.model(inputs, cache, *extra)
        logits = output_layer(self.inner)(hidden)
        self.rows, self.cursor = [None] * inputs.shape[0], 0
        self.states = list(self.rows)
        if inputs.shape[1] == 1:
            gated = np.array(inputs[:, 0] == self.gate_token)
            if gated.any():
                last = hidden[:, -1].astype(mx.float32)
                scores, states = np.array(self.scorer(last)), np.array(last)
                self.rows = [scores[row] if gate else None for row, gate in enumerate(gated)]
                self.states = [states[row] if gate else None for row, gate in enumerate(gated)]
        return logits

    def next_row(self) -> np.ndarray | None:
        """The next row's word scores (None where its input was not the gate)."""
        if self.cursor >= len(self.rows):
            raise RuntimeError("more logits processors than rows: the steering lost its rows")
        row = self.rows[self.cursor]
        self.last_state = self.states[self.cursor]
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
        self.state: np.ndarray | None = None  # the hidden state at the naming token, once it fired
        self.named: int | None = None  # the index of the word it named, once whole

    def __call__(self, context: mx.array, logits: mx.array) -> mx.array:
        last = int(context[-1].item())
        scores = self.publisher.next_row()
        if (scores is not None) != (last == self.publisher.gate_token):
            raise RuntimeError("a processor was handed another row's scores")
        if scores is not None and self._named(context):
            self.scores, self.depth = np.where(self.banned, -np.inf, scores), 0
            self.state, self.named = self.publisher.last_state, None
            self.live = np.flatnonzero(~self.banned)
            return self._first_tokens(logits)
        if self.live is None:
            return logits
        padded = self.vocabulary.padded
        self.live = self.live[padded[self.live, self.depth] == last]
        self.depth += 1
        whole = self.live[padded[self.live, self.depth] < 0]  # five letters: at most one word ends here
        if len(whole):
            self.named = int(whole[0])
        self.live = self.live[padded[self.live, self.depth] >= 0]
        if not len(self.live):  # the word is whole (or the model left the words): free again
            self.live = None
            return logits
        steered = np.full(logits.shape[-1], -np.inf, dtype=np.float32)
        tokens, scores = self._by_token(padded[self.live, self.depth])
        steered[tokens] = scores
        return mx.array(steered)[None].astype(logits.dtype)

    def _named(self, context: mx.array) -> bool:
        """Whether the answer so far ends with the whole naming sequence, not only its last token."""
        naming = self.publisher.naming
        return len(naming) == 1 or (context.size >= len(naming) and context[-len(naming):].tolist() == list(naming))

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


Processor = Callable[[mx.array, mx.array], mx.array]


def word_basis(model: nn.Module, vocabulary: WordTokens) -> tuple[mx.array, mx.array, mx.array]:
    """What a head scores each word through: its first token's output embedding, its spelling
    features and its share of that token (the `readout_logits` arguments besides the head's own).
    A model whose logits are not its final state through that layer (llm/output_layer.py) has no
    such embeddings: a one-line `UserError`."""
    if output_split(model) is None:
        raise UserError("the naming head cannot serve this model: its logits are not its final hidden state through "
                        "one output layer (lm_head or the tied embeddings), which the head scores words by")
    weight = output_weight(model)
    return (weight[mx.array(vocabulary.first)].astype(mx.float32), mx.array(spelling_features(vocabulary.words)),
            mx.array(vocabulary.offsets))


def secret_mask(words: tuple[str, ...], secrets: tuple[str, ...]) -> np.ndarray:
    """(words,) 1 for the words that can be the secret of the game (its secret list), 0 for the rest."""
    possible = set(secrets)
    return np.array([w in possible for w in words], dtype=np.float32)


def head_scorer(model: nn.Module, head: NamingHead, vocabulary: WordTokens,
                secrets: tuple[str, ...] = ()) -> Callable[[mx.array], mx.array]:
    """The head's scores of the vocabulary's words from final hidden states (rows, hidden); with the
    game's `secrets`, its secret bias goes to those words (without, to none)."""
    embeddings, spelling, offsets = word_basis(model, vocabulary)
    down, up, letters, gains = (mx.array(getattr(head, name)) for name in ("down", "up", "letters", "gains"))
    mask = mx.array(secret_mask(vocabulary.words, secrets)) if secrets and head.secret_bias else None
    bias = mx.array(head.secret_bias)
    return lambda states: readout_logits(states, embeddings, down, up, letters, spelling, offsets, gains, bias, mask)


def steered_model(model: nn.Module, tokenizer, head: NamingHead, words: tuple[str, ...],
                  secrets: tuple[str, ...] = ()) -> tuple[ScorePublisher, Callable[[GameState, tuple[Rejection, ...]],
                                                                                    Processor]]:
    """The model that publishes the head's scores of `words` at the naming token, and the maker of
    each answer's processor from its game state and the refusals shown to it; `secrets` is the
    game's secret list, which the head's secret bias favours."""
    hidden = model.args.hidden_size
    if head.hidden != hidden:
        raise UserError(f"the naming head was fitted on a model with hidden size {head.hidden}, not {hidden}")
    vocabulary = WordTokens.of(tokenizer, list(words))
    publisher = ScorePublisher(model, head_scorer(model, head, vocabulary, secrets), naming_tokens(tokenizer))

    def steer(state: GameState, refused: tuple[Rejection, ...]) -> Processor:
        return WordSteering(publisher, vocabulary, {*state.guesses, *(r.guess for r in refused)})

    return publisher, steer

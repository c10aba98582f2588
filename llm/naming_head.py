"""A naming head: every allowed word's score at the token before the model names the one left.

The SFT model reaches positions where one answer fits in most games and then names it in few
(results/endgame-rl/): its state at ` Only` reads the clues (results/naming-probe/), but its next-
token logits name the last guess or a word the clues rule out. The head scores each allowed word
w from that final hidden state h:

    score(w) = e(w) . (g1 h + g2 up @ down @ h) + offset(w) + g3 spelling(w) . (letters @ h)
               + b [w can be the secret]

e(w) is the model's own output embedding of w's first token, so with the head at zero the scores
are the model's logits, and `offset` shares that token among the words that start with it
(-log of their number: the model's logits say nothing of how a first token splits). The rank-r
correction moves words through the model's embeddings, the letter scores through each word's
own spelling (which place holds which letter, which letters it holds): a clue is a statement
about those, which a token embedding cannot spell. The gains g = (g1, g2, g3) weigh the three
terms (the model's own scores, the correction, the letters); the fit leaves them at 1 and head RL
may train them alone (rl/head_policy.py): three numbers cannot learn a position, only how much to
trust each way of reading the state. b weighs a rule of the game the readout cannot see: secrets
are drawn from the game's secret list (the 2,315 answers of the usual game, which the solver and
the reward's `possible` also use), and half the fitted head's probability at held-out positions
went to allowed words that never are one (results/head-gains/). The fit leaves b at 0 (its
positions are games on every allowed word); head RL may train it with the gains. rl/naming_head.py
fits the head; sampling by it is llm/word_steering.py.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import mlx.core as mx
import numpy as np

from common.errors import UserError
from common.fileio import atomic_write, read_arrays
from llm.format import NAMING_WORD
from llm.tokenizing import tokens_after

HEAD_FILE = "naming_head.npz"  # beside the adapter it was fitted on: eval uses it when present
LETTERS = 26
SPELLING_FEATURES = 6 * LETTERS  # a letter at each of 5 places, then which letters the word holds
ARRAYS = ("down", "up", "letters")  # a head file's arrays, beside its beta and gains
GAINS = ("prior", "correction", "letters")  # what each gain weighs (the module docstring's g1, g2, g3)


def spelling_features(words: list[str] | tuple[str, ...]) -> np.ndarray:
    """(words, 156): each place's letter one-hot (5 x 26), then which letters the word holds (26)."""
    letters = np.array([[ord(c) - ord("a") for c in w] for w in words], dtype=np.int64)
    features = np.zeros((len(words), SPELLING_FEATURES), dtype=np.float32)
    rows = np.arange(len(words))
    for place in range(5):
        features[rows, place * LETTERS + letters[:, place]] = 1.0
        features[rows, 5 * LETTERS + letters[:, place]] = 1.0
    return features


def readout_logits(states: mx.array, embeddings: mx.array, down: mx.array, up: mx.array,
                   letters: mx.array | None = None, spelling: mx.array | None = None,
                   offsets: mx.array | None = None, gains: mx.array | None = None,
                   secret_bias: mx.array | None = None, secret_mask: mx.array | None = None) -> mx.array:
    """Word scores (the module docstring's formula) for the states (rows, hidden): `embeddings`
    holds each word's first token's embedding, `spelling` each word's `spelling_features`, `gains`
    the three terms' weights (None: all 1), `secret_mask` 1 for the words that can be the secret
    (words,) or (rows, words), which `secret_bias` (b) is added to."""
    correction = (states @ down.T) @ up.T
    mixed = states + correction if gains is None else states * gains[0] + correction * gains[1]
    logits = mixed @ embeddings.T
    if offsets is not None:
        logits = logits + offsets
    if letters is not None:
        spelled = (states @ letters.T) @ spelling.T
        logits = logits + (spelled if gains is None else spelled * gains[2])
    if secret_bias is not None and secret_mask is not None:
        logits = logits + secret_bias * secret_mask
    return logits


def naming_tokens(tokenizer) -> tuple[int, ...]:
    """The tokens of ` Only` after the sentence before it, which the model reads just before it
    names the word: where the head acts (one token for SmolLM2's tokenizer; a tokenizer may split
    it, and a SentencePiece-style one writes it otherwise alone than in a thought)."""
    return tokens_after(tokenizer, ".", [" " + NAMING_WORD])[0]


@dataclass(frozen=True)
class NamingHead:
    """The fitted parameters: `down` (rank, hidden), `up` (hidden, rank), `letters` (156, hidden),
    the β of the target it was fitted toward (a record, not used when scoring), the three `GAINS`
    (all 1 as fitted) and `secret_bias` (0 as fitted): head RL may train those four."""

    down: np.ndarray
    up: np.ndarray
    letters: np.ndarray
    beta: float
    gains: np.ndarray = field(default_factory=lambda: np.ones(len(GAINS), np.float32))
    secret_bias: float = 0.0

    @property
    def hidden(self) -> int:
        return self.down.shape[1]

    def save(self, path: str | os.PathLike) -> None:
        def write(tmp: str) -> None:
            with open(tmp, "wb") as f:
                np.savez(f, down=self.down, up=self.up, letters=self.letters, beta=np.float64(self.beta),
                         gains=self.gains, secret_bias=np.float64(self.secret_bias))

        atomic_write(path, write)

    @classmethod
    def load(cls, path: str | os.PathLike) -> NamingHead:
        """The head at `path`, checked whole: its three arrays of floats in shapes that fit together,
        one positive β, three positive gains and a secret bias (a file written before heads had them
        plays with 1s and 0),
        every value finite as the head scores (float32). Anything else (garbage, a file cut short,
        integers, a NaN) would play silently as a broken head: a one-line `UserError`."""
        fix = "fit it again with naming-head"
        saved = read_arrays(path, "a naming head", fix)
        missing = [key for key in (*ARRAYS, "beta") if key not in saved]
        if missing:
            raise UserError(f"{path} is not a naming head (no {missing[0]}); {fix}")
        if not all(np.issubdtype(saved[key].dtype, np.floating) and saved[key].ndim == (0 if key == "beta" else 2)
                   for key in (*ARRAYS, "beta")):
            raise UserError(f"{path} is not a naming head: down, up and letters must be tables of floats and beta "
                            f"one float; {fix}")
        gains, bias = saved.get("gains", np.ones(len(GAINS))), saved.get("secret_bias", np.zeros(()))
        if gains.shape != (len(GAINS),) or not np.issubdtype(gains.dtype, np.floating):
            raise UserError(f"{path} is not a naming head: its gains must be {len(GAINS)} floats; {fix}")
        if bias.shape != () or not np.issubdtype(bias.dtype, np.floating):
            raise UserError(f"{path} is not a naming head: its secret_bias must be one float; {fix}")
        with np.errstate(over="ignore"):  # a value past float32's range becomes inf, refused below
            head = cls(*(saved[key].astype(np.float32) for key in ARRAYS), float(saved["beta"]),
                       gains.astype(np.float32), float(np.float32(bias)))
        rank, hidden = head.down.shape
        if head.up.shape != (hidden, rank) or head.letters.shape != (SPELLING_FEATURES, hidden) or not rank:
            raise UserError(f"{path} is not a naming head: its arrays' shapes do not fit together; {fix}")
        if not (all(np.isfinite(getattr(head, key)).all() for key in (*ARRAYS, "gains")) and np.isfinite(head.beta)
                and head.beta > 0 and (head.gains > 0).all() and np.isfinite(head.secret_bias)):
            raise UserError(f"{path} holds NaN, infinite or out-of-range values: the file is damaged or its fit "
                            f"diverged; {fix}")
        return head


def head_beside(adapter: str | os.PathLike | None) -> Path | None:
    """The naming head saved beside `adapter` (its folder's `HEAD_FILE`), if there is one."""
    if adapter is None:
        return None
    path = Path(adapter) / HEAD_FILE
    return path if path.is_file() else None


def player_head(model: str, adapter: str | os.PathLike | None) -> Path | None:
    """The naming head a player of `model` with `adapter` names words by, if any: the one beside the
    adapter, or with no adapter the one in a local model folder. An `export`ed model is the adapter
    fused into the weights, so the head fitted beside that adapter, copied into the export's folder,
    plays it as it played the adapter (within this toolkit: mlx-lm never reads the file)."""
    if adapter is not None:
        return head_beside(adapter)
    return None if model == "default" else head_beside(Path(model).expanduser())

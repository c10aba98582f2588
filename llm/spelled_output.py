"""An output layer that can name words by their spelling: W + S P, one plain matrix.

A model's next-token logits are its final state h through the output embeddings W. A token's
embedding does not spell it (results/naming-probe/: a linear probe reads a token's middle
letters at the most-common-letter rate), so no change of h can raise "every token with an `r` in
the third place" across words a fit never saw, which is how a clue reads. The naming head
(llm/naming_head.py) generalises by exactly that term: each word's spelling read against the
state. Here it is given to the model's own output layer: the logits become

    W h + S (P h)

with S (vocabulary x features) each token's fixed spelling and P (features x hidden) trained. A
token with a leading space opens a word, so its letters' places in the word are known; a token
without one continues a word at a place the state knows, so its letters' places within the token
are features of their own; both say which letters they hold. W + S P is one (vocabulary x hidden)
matrix: written as an untied `lm_head`, the model is an ordinary mlx-lm model that any runtime
plays (`write_output_layer`).
"""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from llm.word_steering import WordTokens

PLACES = 5
LETTERS = 26
FEATURES = 2 * PLACES * LETTERS + LETTERS  # places in the word (opening tokens), places in the token, letters held


def token_spelling(tokenizer, vocab_size: int, spelled: str = "all",
                   words: frozenset[str] = frozenset()) -> np.ndarray:
    """(vocabulary, FEATURES) each token's spelling, zero for every token not spelled. `spelled`
    says which are: 'all', a space and up to five lower-case letters or up to five letters alone;
    'openings', only those with the space (a word's first token); 'words', only the tokens that
    write one of `words` whole where the model names a word (llm/word_steering.py `WordTokens`,
    read in context, so a SentencePiece `▁crane` counts as a byte-level ` crane` does), so the term
    can lift a listed word and never the opening of a made-up one."""
    features = np.zeros((vocab_size, FEATURES), np.float32)
    if spelled == "words":
        for token, word in one_token_words(tokenizer, words).items():
            if token < vocab_size:
                _spell(features[token], word, 0)
        return features
    for token in range(min(vocab_size, len(tokenizer.get_vocab()))):
        text = tokenizer.decode([token])
        opens = text.startswith(" ")
        letters = text[1:] if opens else text
        if not letters or len(letters) > PLACES or not all("a" <= c <= "z" for c in letters) or \
                (spelled != "all" and not opens):
            continue
        _spell(features[token], letters, 0 if opens else PLACES * LETTERS)
    return features


def one_token_words(tokenizer, words: frozenset[str] | set[str]) -> dict[int, str]:
    """The `words` the model writes with one token where it names a word, by that token: the only
    ones a spelling term on whole words can lift."""
    if not words:
        return {}
    listed = WordTokens.of(tokenizer, sorted(words))
    return {s[0]: w for s, w in zip(listed.sequences, listed.words) if len(s) == 1}


def _spell(row: np.ndarray, letters: str, base: int) -> None:
    """Mark each letter at its place (from `base`) and among the letters held."""
    for place, c in enumerate(letters):
        row[base + place * LETTERS + ord(c) - ord("a")] = 1.0
        row[2 * PLACES * LETTERS + ord(c) - ord("a")] = 1.0


class SpelledOutput(nn.Module):
    """The output layer W plus S (P h): only P trains, from zero (the model's own logits)."""

    def __init__(self, weight: mx.array, spelling: mx.array):
        super().__init__()
        self.weight, self.spelling = weight, spelling
        self.projection = mx.zeros((spelling.shape[1], weight.shape[1]))
        self.freeze(keys=["weight", "spelling"])

    def __call__(self, h: mx.array) -> mx.array:
        return h @ self.weight.T + (h @ self.projection.T) @ self.spelling.T

    def merged(self) -> mx.array:
        """W + S P: the one matrix the model's `lm_head` becomes."""
        return self.weight + self.spelling @ self.projection


def write_output_layer(folder: Path, weight: mx.array) -> None:
    """Make the mlx-lm model folder's output layer `weight` (vocabulary, hidden): an untied
    `lm_head`, its input embeddings left as they were."""
    config_path = folder / "config.json"
    config = json.loads(config_path.read_text())
    config["tie_word_embeddings"] = False
    files = sorted(folder.glob("model*.safetensors"))
    weights = dict(mx.load(str(files[-1])))
    weights["lm_head.weight"] = weight.astype(next(iter(weights.values())).dtype)
    mx.save_safetensors(str(files[-1]), weights, metadata={"format": "mlx"})
    index = folder / "model.safetensors.index.json"
    if index.exists():
        record = json.loads(index.read_text())
        record["weight_map"]["lm_head.weight"] = files[-1].name
        index.write_text(json.dumps(record, indent=2))
    config_path.write_text(json.dumps(config, indent=2))

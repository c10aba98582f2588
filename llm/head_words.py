"""A naming head folded into the model as word tokens, so the head player runs wherever mlx-lm runs.

A head's score of an allowed word w (llm/naming_head.py) is linear in the final state h:

    score(w) = g1 e(w) . h + g2 e(w) . (up down h) + g3 spelling(w) . (letters h) + offset(w) + b [secret]
             = r(w) . h + c(w)

so one output row r(w) per word scores it exactly, but for the constant c(w) (its share of its first
token, the secret-list bias). An output layer has no bias, so c(w) rides on a direction u with
u . h = 1 at the naming states (a least-squares fit there; the naming states lie in a narrow cone,
results/head-words/ gives the spread). Each allowed word becomes one token of its own: an entry in
the tokenizer's vocabulary that its merges never build (so no prompt is read otherwise) and that
decodes to the word with its leading space. The model then names a word in one step with the head's
probability, a word of several tokens included, which no change of the old output rows could do.

The head was fitted at the naming token only, and elsewhere its rows score words far above the
model's own tokens (a folded model with open rows wrote words after `<think>`). So every word row
also carries a gate g: a direction fitted so that g . h is 0 at the naming states and -GATE_DEPTH at
every other token of the teacher's answers (the rest of the thought, the tag, the copy in the guess
tag, the end). The words are open where the head acts and shut elsewhere, as steering opens them.

A word token's input embedding says what the model reads once it wrote one. A word that was one
token reads as that token (the same embedding: everything after it is as before). A word of several
tokens has no such embedding; it reads as its score row's direction (at the embeddings' mean length),
which the model's copy into the guess tag carries to the same row. Of the three designs played on
200 validation endgame positions (results/head-words/) this one, with the words shut in the tag, wrote
the fewest unplayable answers; none carries a longer word through the rest of the answer as well as
the model carries its own tokens, which is where the fold still loses to the head player.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from common.errors import UserError
from llm.naming_head import NamingHead, spelling_features
from llm.output_layer import output_weight
from llm.word_steering import WordTokens, secret_mask

GATE_DEPTH = 100.0  # how far below the naming states the word rows sit elsewhere (logits)
GATE_WEIGHT = 20.0  # a naming state's weight in the gate's fit against the many other rows
RIDGE = 1e-3  # the gate's and u's ridge, relative to the rows' count: the smallest that kept their fits stable


@dataclass(frozen=True)
class WordRows:
    """What the folded model adds: one output row and one input embedding per word, in `words` order."""

    words: tuple[str, ...]
    output: np.ndarray  # (words, hidden)
    inputs: np.ndarray  # (words, hidden)


def score_rows(model: nn.Module, head: NamingHead, vocabulary: WordTokens,
               secrets: tuple[str, ...] = ()) -> tuple[np.ndarray, np.ndarray]:
    """(r, c): the head's word scores as r @ h + c, exactly `head_scorer`'s (llm/word_steering.py)."""
    embeddings = np.array(output_weight(model)[mx.array(vocabulary.first)].astype(mx.float32))
    gains = head.gains
    rows = (gains[0] * embeddings + gains[1] * (embeddings @ head.up) @ head.down
            + gains[2] * spelling_features(vocabulary.words) @ head.letters)
    constants = vocabulary.offsets.astype(np.float64)
    if secrets and head.secret_bias:
        constants = constants + head.secret_bias * secret_mask(vocabulary.words, secrets)
    return rows.astype(np.float32), constants.astype(np.float32)


def ridge(states: np.ndarray, targets: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """The direction v minimising sum weight (v . h - target)^2 + RIDGE n |v|^2."""
    weights = np.ones(len(states)) if weights is None else weights
    weighted = states.astype(np.float64) * weights[:, None]
    system = weighted.T @ states + RIDGE * len(states) * np.eye(states.shape[1])
    return np.linalg.solve(system, weighted.T @ targets).astype(np.float32)


def word_rows(model: nn.Module, head: NamingHead, vocabulary: WordTokens, naming: np.ndarray, other: np.ndarray,
              secrets: tuple[str, ...] = ()) -> WordRows:
    """The folded rows from the final states at the naming token (`naming`) and at every other token of
    the teacher's answers (`other`)."""
    rows, constants = score_rows(model, head, vocabulary, secrets)
    unit = ridge(naming, np.ones(len(naming)))
    scores = rows + constants[:, None] * unit[None]
    states = np.concatenate([naming, other])
    shut = np.r_[np.zeros(len(naming)), np.full(len(other), -GATE_DEPTH)]
    gate = ridge(states, shut, np.r_[np.full(len(naming), GATE_WEIGHT), np.ones(len(other))])
    return WordRows(vocabulary.words, (scores + gate[None]).astype(np.float32), word_inputs(model, vocabulary, scores))


def word_inputs(model: nn.Module, vocabulary: WordTokens, scores: np.ndarray) -> np.ndarray:
    """Each word token's input embedding: a one-token word's own; for a longer word its score row's
    direction at the embeddings' mean length (the module docstring says why)."""
    embeddings = np.array(model.model.embed_tokens.weight.astype(mx.float32))
    inputs = embeddings[[s[0] for s in vocabulary.sequences]]
    longer = np.array([len(s) > 1 for s in vocabulary.sequences])
    scale = np.linalg.norm(embeddings, axis=1).mean()
    inputs[longer] = scores[longer] / np.linalg.norm(scores[longer], axis=1, keepdims=True) * scale
    return inputs.astype(np.float32)


def fold_figures(model: nn.Module, head: NamingHead, vocabulary: WordTokens, folded: WordRows, naming: np.ndarray,
                 other: np.ndarray, secrets: tuple[str, ...] = ()) -> dict:
    """How the folded rows play against the head, at states the fit did not see: at the naming states,
    the KL from the head's word distribution to the rows' and how often both rank the same word first,
    and the share of the whole next-token probability the words take there; at the other answer tokens,
    how often a word row outscores the model's own top token (where the fold would write a word the head
    never would)."""
    rows, constants = score_rows(model, head, vocabulary, secrets)
    own = output_weight(model).astype(mx.float32)
    head_scores, scores = naming @ rows.T + constants, naming @ folded.output.T
    head_p, folded_logp = _softmax(head_scores), _log_softmax(scores)
    kl = float(np.mean(np.sum(head_p * (np.log(np.maximum(head_p, 1e-30)) - folded_logp), axis=1)))
    own_mass = np.array(mx.logsumexp(mx.array(naming) @ own.T, axis=1))
    words_mass = np.log(np.exp(scores - scores.max(1, keepdims=True)).sum(1)) + scores.max(1)
    other_top = np.array(mx.max(mx.array(other) @ own.T, axis=1))
    leads = (other @ folded.output.T).max(axis=1) > other_top
    return {"naming_states": len(naming), "other_states": len(other), "kl_head_to_folded": round(kl, 5),
            "same_first_word": round(float(np.mean(head_scores.argmax(1) == scores.argmax(1))), 4),
            "words_share_at_naming": round(float(np.mean(1.0 / (1.0 + np.exp(own_mass - words_mass)))), 4),
            "other_tokens_where_a_word_leads": round(float(np.mean(leads)), 5)}


def _log_softmax(x: np.ndarray) -> np.ndarray:
    shifted = x - x.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def _softmax(x: np.ndarray) -> np.ndarray:
    return np.exp(_log_softmax(x))


EMBEDDINGS = "model.embed_tokens.weight"
OUTPUT = "lm_head.weight"


def write_word_tokens(folder: Path, rows: WordRows, model: nn.Module) -> None:
    """Add `rows.words` to the mlx-lm model folder as tokens: entries ` word` (a plain space, which a
    byte-level tokenizer's pre-tokenizer never leaves in a piece, so no text is encoded with them) in
    tokenizer.json, their input embeddings, and an untied output layer with their rows after the model's."""
    spec = _byte_level_tokenizer(folder)
    vocab = spec["model"]["vocab"]
    size = int(model.model.embed_tokens.weight.shape[0])
    ids = [*vocab.values(), *(token["id"] for token in spec.get("added_tokens", []))]
    if max(ids) + 1 != size:
        raise UserError(f"the model has {size} input embeddings for a tokenizer of {max(ids) + 1} ids: word tokens "
                        "would not line up with their rows, so the head cannot be folded into it")
    taken = [w for w in rows.words if " " + w in vocab]
    if taken:
        raise UserError(f"the tokenizer already has a token {' ' + taken[0]!r}: the head cannot be folded into it")
    files = sorted(folder.glob("model*.safetensors"))
    weights = {name: (path, array) for path in files for name, array in mx.load(str(path)).items()}
    if EMBEDDINGS not in weights or EMBEDDINGS.replace("weight", "scales") in weights:
        raise UserError(f"{folder} holds no float {EMBEDDINGS}: a head folds into an unquantized llama-style "
                        "model only")
    path, embeddings = weights[EMBEDDINGS]
    output = weights.get(OUTPUT, (path, embeddings))[1]
    changed = {EMBEDDINGS: mx.concatenate([embeddings, mx.array(rows.inputs).astype(embeddings.dtype)]),
               OUTPUT: mx.concatenate([output, mx.array(rows.output).astype(output.dtype)])}
    own = {name: array for name, (where, array) in weights.items() if where == path}
    mx.save_safetensors(str(path), {**own, **changed}, metadata={"format": "mlx"})
    index = folder / "model.safetensors.index.json"
    if index.exists():
        record = json.loads(index.read_text())
        record["weight_map"][OUTPUT] = path.name
        index.write_text(json.dumps(record, indent=2))
    for k, word in enumerate(rows.words):
        vocab[" " + word] = size + k
    (folder / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False))
    config = json.loads((folder / "config.json").read_text())
    config.update(vocab_size=size + len(rows.words), tie_word_embeddings=False)
    (folder / "config.json").write_text(json.dumps(config, indent=2))


def _byte_level_tokenizer(folder: Path) -> dict:
    """The folder's tokenizer.json, refused unless it is a byte-level BPE (GPT-2, SmolLM2, Qwen style)."""
    path = folder / "tokenizer.json"
    spec = json.loads(path.read_text()) if path.is_file() else {}
    if spec.get("model", {}).get("type") != "BPE" or "ByteLevel" not in json.dumps(spec.get("pre_tokenizer")):
        raise UserError(f"{folder} has no byte-level BPE tokenizer.json (a SentencePiece tokenizer, as Gemma's or "
                        "Phi-3's, spells a space otherwise): the head cannot be folded into it as word tokens")
    return spec

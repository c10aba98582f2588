"""Do the word tokens carry their letters? A linear probe of the model's embedding of each word.

Naming the one word the clues leave means matching letters at places (`Pattern: _AN__`), and
57% of the answers are one SmolLM2 token (` pansy`): what the model knows of that token's
letters is what its embedding carries. This probe fits, on the training words' embeddings,
one linear classifier per place (26 letters) and reads the letters of held-out words' tokens:
the share of places right, and of words with all five right. With studies/naming_probe.py it
separates "the letters are not in the words' representation" from "they are, and the naming
step does not use them for a word it was never taught". Run from the repository root:

    python -m studies.spelling_probe --json results/naming-probe/spelling.json
"""

from __future__ import annotations

from llm.blas import ensure_fast_blas

if __name__ == "__main__":
    ensure_fast_blas()  # before mlx loads: a reference BLAS makes this 50x slower

import json  # noqa: E402

import click
import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np

from common.errors import run_script
from common.fileio import atomic_write_json
from eval.splits import is_held_out
from llm.loading import load_model
from solver.setup import load_setup
from studies.naming_tilt import word_tokens

LETTERS = 5


def letter_classes(words: list[str]) -> np.ndarray:
    """(words, 5) letter indexes 0..25."""
    return np.array([[ord(c) - ord("a") for c in w] for w in words], dtype=np.int64)


def word_states(model, token_ids: np.ndarray, layer: int) -> np.ndarray:
    """Each word token's state after `layer` transformer blocks, the token alone (0: its embedding)."""
    hidden = model.model.embed_tokens(mx.array(token_ids)[:, None])
    for block in model.model.layers[:layer]:
        hidden = block(hidden, mask=None, cache=None)
    return np.array(hidden[:, 0].astype(mx.float32))


def fit_letter_probe(features: np.ndarray, letters: np.ndarray, epochs: int, lr: float,
                     weight_decay: float, seed: int) -> tuple[mx.array, mx.array]:
    """One softmax classifier per place over standardised features: (weights, bias)."""
    mx.random.seed(seed)
    x, y = mx.array(features), mx.array(letters)
    params = {"w": mx.zeros((LETTERS, features.shape[1], 26)), "b": mx.zeros((LETTERS, 26))}

    def loss_fn(p):
        logits = mx.einsum("nd,pdk->npk", x, p["w"]) + p["b"]
        return nn.losses.cross_entropy(logits, y, reduction="mean")

    optimizer = optim.AdamW(learning_rate=lr, weight_decay=weight_decay)
    step = mx.value_and_grad(loss_fn)
    for _ in range(epochs):
        _, grads = step(params)
        optimizer.update(params, grads)
        mx.eval(params, optimizer.state)
    return params["w"], params["b"]


def letter_accuracy(features: np.ndarray, letters: np.ndarray, weights: mx.array, bias: mx.array) -> dict:
    """Share of places read right, per place and overall, and of words read right whole."""
    predicted = np.array((mx.einsum("nd,pdk->npk", mx.array(features), weights) + bias).argmax(axis=-1))
    right = predicted == letters
    return {"words": len(letters), "places_right": round(float(right.mean()), 4),
            "by_place": [round(float(v), 4) for v in right.mean(axis=0)],
            "words_right": round(float(right.all(axis=1).mean()), 4)}


@click.command()
@click.option("--model", default="default")
@click.option("--adapter", default=None, type=click.Path(exists=True, file_okay=False))
@click.option("--layers", default="0,2,4,8,16,30", help="Comma-separated block counts whose states are probed "
              "(0: the embedding).")
@click.option("--epochs", default=100, type=click.IntRange(1))
@click.option("--lr", default=1e-2, type=click.FloatRange(0, 1, min_open=True))
@click.option("--weight-decay", default=3.0, type=click.FloatRange(0))
@click.option("--seed", default=0, type=int)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), required=True)
def main(model, adapter, layers, epochs, lr, weight_decay, seed, json_path) -> None:
    try:
        depths = [int(v) for v in layers.split(",")]
    except ValueError:
        raise click.BadParameter(f"{layers!r} is not a comma-separated list of block counts", param_hint="--layers")
    loaded, tokenizer = load_model(model, adapter)
    loaded.eval()
    if not all(0 <= d <= len(loaded.model.layers) for d in depths):
        raise click.BadParameter(f"block counts run from 0 to {len(loaded.model.layers)}", param_hint="--layers")
    lists = load_setup("answers").lists
    token_ids, words = word_tokens(tokenizer, list(lists.allowed))
    letters = letter_classes(words)
    held = np.array([is_held_out(w) for w in words])
    majority = np.array([np.bincount(letters[~held][:, i], minlength=26).argmax() for i in range(LETTERS)])
    result = {"model": model, "adapter": adapter, "single_token_words": len(words), "held_out_words": int(held.sum()),
              "epochs": epochs, "lr": lr, "weight_decay": weight_decay, "seed": seed,
              "held_out_majority_letter": round(float((letters[held] == majority).mean()), 4), "layers": []}
    for depth in depths:
        states = word_states(loaded, token_ids, depth)
        features = (states - states.mean(axis=0)) / (states.std(axis=0) + 1e-6)
        weights, bias = fit_letter_probe(features[~held], letters[~held], epochs, lr, weight_decay, seed)
        result["layers"].append({"blocks": depth,
                                 "train": letter_accuracy(features[~held], letters[~held], weights, bias),
                                 "held_out": letter_accuracy(features[held], letters[held], weights, bias)})
        print(json.dumps(result["layers"][-1]), flush=True)
    atomic_write_json(json_path, result)


if __name__ == "__main__":
    run_script(main)

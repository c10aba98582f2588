"""Does training the model's top layers through its naming head name held-out secrets better?

The naming head is a readout fitted on a frozen model's final state at ` Only`; its held-out figure
stops growing with teacher positions, and a letter probe of that state stops at 0.60 of the
secret's letters (results/head-scale/). Head RL moved only the head and learnt its training states,
not held-out ones (results/head-rl/). The issue's other lever is the model itself: a LoRA trained
through the head's log-probability of the word that wins. This study asks it at the smallest size
that can answer, on the head's own positions (one candidate left, the teacher's thought up to
` Only`, where the word that wins is the secret): a rank-8 LoRA on the last `--layers` layers of the
SFT start (fused), the fitted head held fixed, trained toward the secret's head probability on the
head's training positions (expert iteration's target at a one-candidate position), and the mean
held-out validation probability of the secret read every `--eval-every` steps, against the head
alone's at step 0. Layers below the LoRA do not change, so their output for every context is run
once and kept; each step runs only the top layers, forward and back.

    python -m studies.lora_through_head --adapter runs/demo/sft/adapter --positions 640 --layers 4 \\
        --steps 240 --json results/lora-through-head/lora-through-head.json

`--adapter` must hold the fitted head (`naming-head` writes it beside the adapter) and
`--positions` and `--seed` must be those it was fitted with, so that its validation positions are
held out for it as they are here. The LoRA acts only at naming; the model's own text is untouched.
"""

from __future__ import annotations

from llm.blas import ensure_fast_blas

if __name__ == "__main__":
    ensure_fast_blas()  # before mlx loads

import time  # noqa: E402
from pathlib import Path

import click
import numpy as np

from common.errors import run_script
from common.fileio import atomic_write_json

LORA = {"rank": 8, "scale": 20.0, "dropout": 0.0}
MEASURED = 100  # positions of each split the curve reads (the head's validation split has 100)
KEYS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
        "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]


def lower_outputs(model, tokenizer, positions, below: int, batch: int = 8) -> list[np.ndarray]:
    """Each naming context's hidden states after the first `below` layers, (tokens, hidden) each.
    The opening every context shares is run once and its output put before each context's own."""
    import mlx.core as mx
    from mlx_lm.models.base import create_attention_mask
    from mlx_lm.models.cache import make_prompt_cache

    from llm.generation import copy_cache, shared_prefix_length
    from rl.naming_head import naming_context

    layers = model.model.layers[:below]
    contexts = [naming_context(tokenizer, p) for p in positions]
    shared = shared_prefix_length(contexts)
    prefix = make_prompt_cache(model)[:below]
    h = model.model.embed_tokens(mx.array(contexts[0][:shared])[None])
    for layer, cache in zip(layers, prefix):
        h = layer(h, create_attention_mask(h, cache), cache=cache)
    opening = np.array(h[0])
    outputs: list[np.ndarray] = [np.zeros(0)] * len(contexts)
    for start in range(0, len(contexts), batch):
        chosen = list(range(start, min(start + batch, len(contexts))))
        rests = [contexts[i][shared:] for i in chosen]
        width = max(map(len, rests))
        caches = [copy_cache(layer, len(chosen)) for layer in prefix]
        h = model.model.embed_tokens(mx.array([r + [0] * (width - len(r)) for r in rests]))
        for layer, cache in zip(layers, caches):
            h = layer(h, create_attention_mask(h, cache), cache=cache)
        h = np.array(h)
        for row, i in enumerate(chosen):
            outputs[i] = np.concatenate([opening, h[row, :len(rests[row])]])
    return outputs


def top_states(model, lowers: list[np.ndarray], rows: list[int], below: int):
    """The final (normed) state at each chosen context's last token, from its lower layers' output
    through the layers from `below` on (their LoRA included): differentiable."""
    import mlx.core as mx

    width = max(len(lowers[i]) for i in rows)
    hidden = lowers[rows[0]].shape[1]
    h = mx.array(np.stack([np.concatenate([lowers[i], np.zeros((width - len(lowers[i]), hidden), np.float32)])
                           for i in rows]))
    for layer in model.model.layers[below:]:
        h = layer(h, "causal")
    last = mx.array([len(lowers[i]) - 1 for i in rows])
    return model.model.norm(h[mx.arange(len(rows)), last])


@click.command()
@click.option("--model", "model_spec", default="default", show_default=True)
@click.option("--adapter", required=True, type=click.Path(exists=True, file_okay=False),
              help="The SFT adapter with its fitted naming head beside it.")
@click.option("--positions", type=click.IntRange(8), default=640, show_default=True,
              help="Training positions: those the head was fitted on.")
@click.option("--seed", type=int, default=1, show_default=True, help="The head's fit seed (its positions).")
@click.option("--layers", type=click.IntRange(1, 30), default=4, show_default=True, help="Top layers the LoRA adapts.")
@click.option("--steps", type=click.IntRange(1), default=240, show_default=True)
@click.option("--batch", type=click.IntRange(1), default=8, show_default=True)
@click.option("--lr", type=float, default=1e-4, show_default=True)
@click.option("--eval-every", type=click.IntRange(1), default=20, show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), required=True)
def main(model_spec: str, adapter: str, positions: int, seed: int, layers: int, steps: int, batch: int, lr: float,
         eval_every: int, json_path: str) -> None:
    import mlx.core as mx
    import mlx.nn as nn
    import mlx.optimizers as optim
    from mlx.utils import tree_flatten
    from mlx_lm.tuner.utils import linear_to_lora_layers

    from llm.loading import load_model
    from llm.naming_head import NamingHead, head_beside
    from llm.word_steering import head_scorer
    from rl.naming_head import HeadSettings, fit_inputs, head_positions, secret_probabilities

    began = time.perf_counter()
    model, tokenizer = load_model(model_spec, adapter, fuse=True)
    head_file = head_beside(adapter)
    if head_file is None:
        raise click.UsageError(f"{adapter} has no naming head beside it: run naming-head on it first")
    splits = head_positions(HeadSettings(positions=positions, seed=seed))
    vocabulary, secrets, _ = fit_inputs(tokenizer, splits)
    score = head_scorer(model, NamingHead.load(head_file), vocabulary)
    below = len(model.model.layers) - layers
    lowers = {name: lower_outputs(model, tokenizer, split, below) for name, split in splits.items()}
    lowered = time.perf_counter()
    click.echo(f"lower {below} layers of {sum(map(len, splits.values()))} contexts: {lowered - began:.0f} s")

    model.freeze()
    linear_to_lora_layers(model, layers, {**LORA, "keys": KEYS})
    trainable = sum(v.size for _, v in tree_flatten(model.trainable_parameters()))

    def mean_p(name: str) -> float:
        """The secret's mean head probability over the split's first `MEASURED` positions."""
        rows, found = list(range(min(MEASURED, len(lowers[name])))), []
        for start in range(0, len(rows), 25):
            chosen = rows[start:start + 25]
            found.append(secret_probabilities(score(top_states(model, lowers[name], chosen, below)),
                                              mx.array(secrets[name][chosen])))
        return float(f"{np.concatenate(found).mean():.6g}")

    def loss_fn(net, rows: list[int]) -> mx.array:
        logits = score(top_states(net, lowers["train"], rows, below))
        return nn.losses.cross_entropy(logits, mx.array(secrets["train"][rows])).mean()

    optimizer = optim.Adam(learning_rate=lr)
    loss_and_grad = nn.value_and_grad(model, loss_fn)
    rng = np.random.default_rng(seed)
    order: list[int] = []
    curve = [{"step": 0, "train_mean_p": mean_p("train"), "validation_mean_p": mean_p("validation")}]
    click.echo(str(curve[-1]))
    for step in range(1, steps + 1):
        if len(order) < batch:
            order = list(rng.permutation(len(lowers["train"])))
        rows, order = order[:batch], order[batch:]
        loss, grads = loss_and_grad(model, rows)
        optimizer.update(model, grads)
        mx.eval(model.trainable_parameters(), optimizer.state, loss)
        if step % eval_every == 0 or step == steps:
            curve.append({"step": step, "loss": round(float(loss), 4), "train_mean_p": mean_p("train"),
                          "validation_mean_p": mean_p("validation"),
                          "seconds": round(time.perf_counter() - lowered, 1)})
            click.echo(str(curve[-1]))
    best = max(curve, key=lambda point: point["validation_mean_p"])
    atomic_write_json(Path(json_path), {
        "study": "lora_through_head", "model": model_spec, "adapter": adapter, "head": str(head_file),
        "positions": positions,
        "validation_positions": len(lowers["validation"]), "seed": seed, "lora_layers": layers, "lora": LORA,
        "trainable_parameters": trainable, "steps": steps, "batch": batch, "lr": lr,
        "lower_seconds": round(lowered - began, 1), "curve": curve,
        "head_alone_validation_mean_p": curve[0]["validation_mean_p"], "best": best})


if __name__ == "__main__":
    run_script(main)

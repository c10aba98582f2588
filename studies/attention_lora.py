"""Can a LoRA on the last layer's attention (q, k, v, o) learn, at the plain model's own one-candidate
positions, what the naming head knows, or at least to stop naming its last guess again, in a way
that holds at held-out positions? Trained from cached inputs, so each epoch runs one layer only:

- `collect`: the residual stream before the last two layers at every token (float16) of each
  position's context up to ` Only`, for the model's own games on training words and on validation
  words, and of anchor answers (whole teacher answers held to the start);
- `fit`: the LoRA toward the head player's first-token choice (played and refused words banned, as
  `distill`'s teacher does) or, with `--targets start`, toward the start's own distribution with the
  played and refused words' first tokens taken out; plus `--unlikelihood` times -log(1 - p) of those
  first tokens (the secret's aside), anchors held to the start; every epoch read at the training and
  validation positions (the most likely first token: the secret's, the last guess's, a training
  answer's; and their mean probabilities) and saved;
- `fuse`: an epoch's LoRA fused into the start as an mlx-lm model folder (for `eval --model`).

Run from the repository root (results/attention-lora/README.md has the runs):

    python -m studies.attention_lora collect --games G.json --validation V.json --out runs/attn/cache.pkl
    python -m studies.attention_lora fit --cache runs/attn/cache.pkl --head runs/start-rl/best --tag ul \\
        --teacher 0 --unlikelihood 1 --epochs 4
    python -m studies.attention_lora fuse runs/attn/ul-e1.safetensors runs/attn/m-ul1
"""

from __future__ import annotations

import json
import pickle
import time
from pathlib import Path

import click

from common.errors import run_script
from llm.blas import ensure_fast_blas
from studies.last_guess_probe import START, TARGET_TOKENS, _first, _load_start

CACHED_LAYERS = 2  # the residual is cached before the last two layers: `--layers` 1 or 2 train from it
BATCH = 16  # positions a step, padded to the longest (right padding is harmless under a causal mask)
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")
SAVED = Path("runs/attn")  # where `fit` saves each epoch's LoRA


@click.group()
def main() -> None:
    ensure_fast_blas()


@main.command()
@click.option("--games", required=True, help="eval --json of the model's own games on training words.")
@click.option("--validation", required=True, help="eval --json of its own games on validation words.")
@click.option("--anchors", type=int, default=100, help="Anchor positions (whole teacher answers).")
@click.option("--out", required=True, help="The cache file written (a pickle).")
def collect(games: str, validation: str, anchors: int, out: str) -> None:
    """Cache the residual before the last two layers at every token of each context."""
    import mlx.core as mx
    import numpy as np

    from llm.format import prompt_tokens
    from llm.tokenizing import tokens_after
    from rl.distill import DistillSettings, anchor_positions, own_positions
    from rl.naming_head import naming_context
    from sft.cot import truthful_answer

    Path(out).parent.mkdir(parents=True, exist_ok=True)  # before 20 minutes of work, not after
    model, tokenizer = _load_start()
    inner = model.model

    def residuals(contexts: list[list[int]]) -> list[np.ndarray]:
        cached, began = [], time.time()
        for i, context in enumerate(contexts):
            h = inner.embed_tokens(mx.array([context]))
            for layer in inner.layers[:-CACHED_LAYERS]:
                h = layer(h, "causal", cache=None)
            cached.append(np.array(h[0].astype(mx.float16)))
            if i % 100 == 0:
                click.echo(f"{i}/{len(contexts)} contexts, {time.time() - began:.0f} s", err=True)
        return cached

    data = {}
    for name, path, split in (("own", games, "own"), ("val", validation, "own_validation")):
        positions = own_positions((path,), split)
        data[name] = {"positions": positions, "h": residuals([naming_context(tokenizer, p) for p in positions])}
    anchored = anchor_positions(DistillSettings(anchor_positions=anchors, seed=1))
    answers = [tokens_after(tokenizer, "\n", [truthful_answer(p.state, p.secret)])[0] for p in anchored]
    contexts = [prompt_tokens(tokenizer, p.state, p.rejected) + list(a[:-1]) for p, a in zip(anchored, answers)]
    data["anchor"] = {"taught": [len(a) for a in answers], "h": residuals(contexts)}
    with open(out, "wb") as file:
        pickle.dump(data, file)
    click.echo(json.dumps({name: len(part["h"]) for name, part in data.items()}))


@main.command()
@click.option("--cache", required=True, help="The file `collect` wrote.")
@click.option("--head", "head_adapter", required=True, help="The adapter folder whose naming head is the teacher.")
@click.option("--layers", type=click.IntRange(1, CACHED_LAYERS), default=1, help="Last layers given a LoRA.")
@click.option("--rank", type=int, default=8)
@click.option("--teacher", "teacher_weight", type=float, default=1.0, help="Weight of the targets.")
@click.option("--targets", type=click.Choice(["head", "start"]), default="head",
              help="head: the head player's first tokens; start: the start's own distribution with the played "
                   "and refused words' first tokens taken out (the copy removed, the rest kept as it was).")
@click.option("--unlikelihood", type=float, default=1.0, help="Weight of -log(1 - p) of played words.")
@click.option("--anchor-weight", type=float, default=1.0)
@click.option("--lr", type=float, default=1e-3)
@click.option("--epochs", type=int, default=6)
@click.option("--tag", required=True, help=f"Each epoch's LoRA is saved as {SAVED}/TAG-eN.safetensors.")
def fit(cache: str, head_adapter: str, layers: int, rank: int, teacher_weight: float, targets: str, unlikelihood: float,
        anchor_weight: float, lr: float, epochs: int, tag: str) -> None:
    """Train the last layers' attention LoRA from the cache; every epoch read and saved."""
    import mlx.core as mx
    import mlx.nn as nn
    import mlx.optimizers as optim
    import numpy as np
    from mlx.utils import tree_flatten
    from mlx_lm.tuner.lora import LoRALinear

    from eval.splits import trainable
    from llm.naming_head import NamingHead
    from llm.output_layer import output_weight
    from rl.distill import Teacher
    from solver.setup import load_setup

    SAVED.mkdir(parents=True, exist_ok=True)
    mx.random.seed(0)
    model, tokenizer = _load_start()
    inner = model.model
    weight = output_weight(model).astype(mx.float32)
    teacher = Teacher(model, tokenizer, NamingHead.load(f"{head_adapter}/naming_head.npz"))
    with open(cache, "rb") as file:
        data = pickle.load(file)
    frozen, tail = inner.layers[-CACHED_LAYERS:-layers] if layers < CACHED_LAYERS else [], inner.layers[-layers:]
    model.freeze()
    for layer in tail:
        for name in PROJECTIONS:
            setattr(layer.self_attn, name, LoRALinear.from_base(getattr(layer.self_attn, name), r=rank, scale=20.0))

    def batches(states: list[np.ndarray], rows_of) -> list[tuple[np.ndarray, mx.array, mx.array]]:
        """Padded batches of similar length: (the positions in it, the input to `tail`, (b, row) taught)."""
        order, out = np.argsort([len(h) for h in states]), []
        for i in range(0, len(order), BATCH):
            chosen = order[i:i + BATCH]
            x = np.zeros((len(chosen), max(len(states[j]) for j in chosen), states[0].shape[1]), np.float16)
            rows = []
            for b, j in enumerate(chosen):
                x[b, :len(states[j])] = states[j]
                rows += [(b, r) for r in rows_of(j)]
            h = mx.array(x).astype(mx.float32)
            for layer in frozen:
                h = layer(h, "causal", cache=None)
            mx.eval(h)
            out.append((chosen, h, mx.array(np.array(rows))))
        return out

    def finals(h: mx.array, rows: mx.array) -> mx.array:
        for layer in tail:
            h = layer(h, "causal", cache=None)
        return inner.norm(h[rows[:, 0], rows[:, 1]])

    answers = load_setup("answers")
    memorised = {_first(tokenizer, w) for w in trainable(answers.lists.answers)}
    first = np.array([sequence[0] for sequence in teacher.vocabulary.sequences])
    vocabulary = weight.shape[0]
    sets = {}
    for name in ("own", "val"):
        positions, states = data[name]["positions"], data[name]["h"]
        built = batches(states, lambda j: [len(states[j]) - 1])
        order = np.concatenate([b[0] for b in built])
        states = mx.concatenate([finals(h, rows) for _, h, rows in built])
        scores = np.array(teacher.score(states)) if targets == "head" else np.array(states @ weight.T)
        tokens = np.zeros((len(order), TARGET_TOKENS), np.int64)
        weights = np.zeros((len(order), TARGET_TOKENS), np.float32)
        secret, last, memory = (np.zeros(len(order), np.int64), np.zeros(len(order), np.int64),
                                np.zeros((len(order), vocabulary), np.float32))
        banned, present = np.zeros((len(order), 8), np.int64), np.zeros((len(order), 8), np.float32)
        for k, j in enumerate(order):
            position = positions[j]
            played = [*position.state.guesses, *(r.guess for r in position.rejected)]
            secret[k], last[k] = _first(tokenizer, position.secret), _first(tokenizer, position.state.guesses[-1])
            firsts = sorted({_first(tokenizer, w) for w in played if w} - {secret[k]})[:8]
            row = scores[k].astype(np.float64)
            if targets == "head":
                for word in played:
                    if word in teacher.index:  # a refused answer may be no word at all
                        row[teacher.index[word]] = -np.inf
                mass = np.bincount(first, weights=np.exp(row - row.max()), minlength=vocabulary)
            else:
                row[firsts] = -np.inf
                mass = np.exp(row - row.max())
            top = np.argsort(-mass)[:TARGET_TOKENS]
            tokens[k], weights[k] = top, mass[top] / mass[top].sum()
            banned[k, :len(firsts)], present[k, :len(firsts)] = firsts, 1.0
            memory[k, sorted(memorised - {secret[k]})] = 1.0
        cuts = np.cumsum([len(b[0]) for b in built])[:-1]
        split = lambda a: [mx.array(x) for x in np.split(a, cuts)]  # noqa: E731
        sets[name] = list(zip(built, split(tokens), split(weights), split(secret), split(last), split(banned),
                              split(present), split(memory)))
        click.echo(f"{name}: the target's first token is the secret's at {float((tokens[:, 0] == secret).mean()):.3f}",
                   err=True)

    anchor_states, taught = data["anchor"]["h"], data["anchor"]["taught"]
    anchor_batches = batches(anchor_states, lambda j: range(len(anchor_states[j]) - taught[j], len(anchor_states[j])))
    anchor_targets = []
    for _, h, rows in anchor_batches:
        logits = finals(h, rows) @ weight.T
        top = mx.argsort(-logits, axis=-1)[:, :TARGET_TOKENS]
        target = mx.softmax(mx.take_along_axis(logits, top, axis=-1), axis=-1)
        mx.eval(top, target)
        anchor_targets.append((top, target, np.array(logits.argmax(axis=-1))))

    def cross_entropy(logits, tokens, weights):
        return -(weights * mx.take_along_axis(nn.log_softmax(logits, axis=-1), tokens, axis=-1)).sum(axis=-1).mean()

    def loss_fn(model, batch, anchor):
        (_, h, rows), tokens, weights, _, _, banned, present, _ = batch
        logits = finals(h, rows) @ weight.T
        loss = teacher_weight * cross_entropy(logits, tokens, weights)
        if unlikelihood:
            banned_p = mx.take_along_axis(mx.softmax(logits, axis=-1), banned, axis=-1)
            loss = loss - unlikelihood * (present * mx.log(mx.maximum(1 - banned_p, 1e-6))).sum(axis=-1).mean()
        (_, anchor_h, anchor_rows), (top, target, _) = anchor
        return loss + anchor_weight * cross_entropy(finals(anchor_h, anchor_rows) @ weight.T, top, target)

    def report(epoch: int) -> None:
        point = {"epoch": epoch}
        for name, parts in sets.items():
            counts = {"secret": 0, "last_guess": 0, "memorised": 0}
            mass = {"secret": 0.0, "last_guess": 0.0, "memorised": 0.0}
            for (_, h, rows), _, _, secret, last, _, _, memory in parts:
                p = mx.softmax(finals(h, rows) @ weight.T, axis=-1)
                named = p.argmax(axis=-1)
                counts["secret"] += int((named == secret).sum())
                counts["last_guess"] += int((named == last).sum())
                counts["memorised"] += int(mx.take_along_axis(memory, named[:, None], axis=-1).sum())
                mass["secret"] += float(mx.take_along_axis(p, secret[:, None], axis=-1).sum())
                mass["last_guess"] += float(mx.take_along_axis(p, last[:, None], axis=-1).sum())
                mass["memorised"] += float((p * memory).sum())
            positions = sum(len(part[3]) for part in parts)
            point[name] = {"positions": positions, **{f"top_{k}": v for k, v in counts.items()},
                           **{f"p_{k}": round(v / positions, 3) for k, v in mass.items()}}
        kept = sum(int((np.array((finals(h, rows) @ weight.T).argmax(axis=-1)) == start).sum())
                   for (_, h, rows), (_, _, start) in zip(anchor_batches, anchor_targets))
        point["anchor_top1_kept"] = round(kept / sum(len(t[2]) for t in anchor_targets), 4)
        click.echo(json.dumps(point))

    loss_and_grad = nn.value_and_grad(model, loss_fn)
    optimizer = optim.Adam(learning_rate=lr)
    rng = np.random.default_rng(0)
    report(0)
    for epoch in range(1, epochs + 1):
        began = time.time()
        for i in rng.permutation(len(sets["own"])):
            j = rng.integers(len(anchor_batches))
            _, grads = loss_and_grad(model, sets["own"][i], (anchor_batches[j], anchor_targets[j]))
            optimizer.update(model, grads)
            mx.eval(model.parameters(), optimizer.state)
        click.echo(f"epoch {epoch}: {time.time() - began:.0f} s", err=True)
        report(epoch)
        mx.save_safetensors(str(SAVED / f"{tag}-e{epoch}.safetensors"), dict(tree_flatten(model.trainable_parameters())))


@main.command()
@click.argument("weights")
@click.argument("out")
@click.option("--rank", type=int, default=8)
def fuse(weights: str, out: str, rank: int) -> None:
    """The start with a saved last-layer attention LoRA fused in, as an mlx-lm model folder."""
    from mlx_lm.tuner.lora import LoRALinear
    from mlx_lm.utils import load_config, save

    from llm.loading import resolve_model

    model, tokenizer = _load_start()
    attention = model.model.layers[-1].self_attn
    for name in PROJECTIONS:
        setattr(attention, name, LoRALinear.from_base(getattr(attention, name), r=rank, scale=20.0))
    model.load_weights(weights, strict=False)
    for name in PROJECTIONS:
        setattr(attention, name, getattr(attention, name).fuse())
    source = resolve_model("default")
    save(out, source, model, tokenizer, load_config(source), donate_model=False)
    click.echo(f"{out}: the start ({START}) with {weights} fused")


if __name__ == "__main__":
    run_script(main)

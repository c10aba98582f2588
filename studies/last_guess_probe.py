"""Where the plain model's "Only <its last guess> remains." comes from, at the one-candidate
positions of its own games (an `eval --json` file of them), teacher-forced at ` Only`:

- `top`: the share of positions whose most likely first token is the secret's, the last guess's,
  or an earlier guess's, for the start and for distilled model folders (whose `lm_head` differs);
- `scale`: the same with the last layer's attention output at ` Only` multiplied by k (the whole
  forward pass run again), which says whether that attention holds the copy back;
- `heads`: one gain per attention head of the last layer (its `o_proj` input slots scaled, a plain
  weight change) fitted toward the head player's first-token choice at its own training games'
  positions, anchors held to the start, read at its own validation games' positions.

Run from the repository root:

    python -m studies.last_guess_probe top --games V.json runs/d3/model runs/d7/model
    python -m studies.last_guess_probe scale --games V.json --positions 120
    python -m studies.last_guess_probe heads --games G.json --validation V.json --head runs/start-rl/best
"""

from __future__ import annotations

import json

import click

from common.errors import run_script
from llm.blas import ensure_fast_blas

START = "runs/start"  # the bundled SFT start with its fitted naming head (results/distill-own/)
TARGET_TOKENS = 32  # first tokens kept of each target distribution
ANCHOR_BATCH = 512  # anchor rows a step: all 7,132 at once cost seconds a step on 2 cores


def _load_start():
    from llm.loading import load_model

    return load_model("default", START, fuse=True)


def _first(tokenizer, word: str) -> int:
    return tokenizer.encode(" " + word, add_special_tokens=False)[0]


def _last_layer_inputs(model, context: list[int]):
    """The residual before the last layer at the context's last token and the whole sequence's
    state there (for the last layer's attention), from a plain forward pass."""
    import mlx.core as mx
    from mlx_lm.models.base import create_attention_mask

    inner = model.model
    h = inner.embed_tokens(mx.array([context]))
    mask = create_attention_mask(h, None)
    for layer in inner.layers[:-1]:
        h = layer(h, mask, None)
    return h, mask


@click.group()
def main() -> None:
    ensure_fast_blas()


@main.command()
@click.option("--games", required=True, help="eval --json of the model's own games (validation words).")
@click.argument("models", nargs=-1)
def top(games: str, models: tuple[str, ...]) -> None:
    """The start's and each model folder's most likely first token at ' Only', from the start's final states."""
    import mlx.core as mx
    import numpy as np

    from llm.loading import load_model
    from llm.output_layer import output_layer
    from rl.distill import own_positions
    from rl.naming_head import naming_context

    model, tokenizer = _load_start()
    positions = own_positions((games,), "own_validation")
    finals = []
    for position in positions:
        h, mask = _last_layer_inputs(model, naming_context(tokenizer, position))
        finals.append(model.model.norm(model.model.layers[-1](h, mask, None))[0, -1])
    finals = mx.stack(finals)
    secret = np.array([_first(tokenizer, p.secret) for p in positions])
    last = np.array([_first(tokenizer, p.state.guesses[-1]) for p in positions])
    refused = np.array([bool(p.rejected) for p in positions])
    for name in ("start", *models):
        head = output_layer(model if name == "start" else load_model(name)[0])
        named = np.array(head(finals).argmax(axis=-1))
        earlier = np.array([named[i] in {_first(tokenizer, g) for g in p.state.guesses[:-1]}
                            for i, p in enumerate(positions)])
        click.echo(json.dumps({"model": name, "positions": len(positions), "secret": int((named == secret).sum()),
                               "last_guess": int((named == last).sum()), "earlier_guess": int(earlier.sum()),
                               "after_a_refusal": int(refused.sum()),
                               "after_a_refusal_secret": int((named == secret)[refused].sum()),
                               "after_a_refusal_last_guess": int((named == last)[refused].sum())}))


@main.command()
@click.option("--games", required=True, help="eval --json of the model's own games (validation words).")
@click.option("--positions", type=int, default=120)
@click.option("--k", "scales", type=float, multiple=True, default=(1.0, 2.0, 3.0, 5.0))
def scale(games: str, positions: int, scales: tuple[float, ...]) -> None:
    """The start's most likely first token with its last layer's attention output at ' Only' times k."""
    from llm.output_layer import output_layer
    from rl.distill import own_positions
    from rl.naming_head import naming_context

    model, tokenizer = _load_start()
    inner, chosen = model.model, own_positions((games,), "own_validation")[:positions]
    top_layer, head = inner.layers[-1], output_layer(model)
    counts = {k: {"secret": 0, "last_guess": 0} for k in scales}
    for position in chosen:
        h, mask = _last_layer_inputs(model, naming_context(tokenizer, position))
        attention = top_layer.self_attn(top_layer.input_layernorm(h), mask, None)[0, -1]
        for k in scales:
            x = h[0, -1] + k * attention
            named = int(head(inner.norm(x + top_layer.mlp(top_layer.post_attention_layernorm(x)))).argmax())
            counts[k]["secret"] += named == _first(tokenizer, position.secret)
            counts[k]["last_guess"] += named == _first(tokenizer, position.state.guesses[-1])
    for k in scales:
        click.echo(json.dumps({"k": k, "positions": len(chosen), **counts[k]}))


@main.command()
@click.option("--games", required=True, help="eval --json of its own games on training words (fitted).")
@click.option("--validation", required=True, help="eval --json of its own games on validation words (read).")
@click.option("--head", "head_adapter", required=True, help="The adapter folder whose naming head is the teacher.")
@click.option("--anchors", type=int, default=100, help="Anchor positions (whole teacher answers).")
@click.option("--steps", type=int, default=60)
@click.option("--lr", type=float, default=0.03)
@click.option("--unlikelihood", "penalties", type=float, multiple=True, default=(0.0, 1.0),
              help="Weights of -log(1 - p) of the played and refused words' first tokens (the secret's aside); "
                   "one fit from the start for each.")
def heads(games: str, validation: str, head_adapter: str, anchors: int, steps: int, lr: float,
          penalties: tuple[float, ...]) -> None:
    """Fit one gain per head of the last layer's attention (o_proj's input slots)."""
    import mlx.core as mx
    import mlx.nn as nn
    import mlx.optimizers as optim
    import numpy as np

    from llm.format import prompt_tokens
    from llm.naming_head import NamingHead
    from llm.output_layer import output_weight
    from llm.tokenizing import tokens_after
    from rl.distill import DistillSettings, Teacher, anchor_positions, own_positions
    from rl.naming_head import naming_context
    from sft.cot import truthful_answer

    model, tokenizer = _load_start()
    inner, last = model.model, model.model.layers[-1]
    weight = output_weight(model).astype(mx.float32)
    teacher = Teacher(model, tokenizer, NamingHead.load(f"{head_adapter}/naming_head.npz"))
    width = last.self_attn.o_proj.weight.shape[1] // last.self_attn.n_heads

    class SlotRecorder(nn.Module):
        """The last layer's o_proj, keeping its input (the heads' outputs side by side) as it passes."""

        def __init__(self, projection):
            super().__init__()
            self.projection, self.seen = projection, None

        def __call__(self, x):
            self.seen = x
            return self.projection(x)

    recorder = SlotRecorder(last.self_attn.o_proj)

    def last_inputs(contexts: list[list[int]], taught: list[int]):
        """The residual before the last layer's attention and its heads' outputs at each context's last tokens."""
        residuals, slots = [], []
        last.self_attn.o_proj = recorder
        for context, count in zip(contexts, taught):
            h, mask = _last_layer_inputs(model, context)
            last.self_attn(last.input_layernorm(h), mask, None)
            residuals.append(h[0, -count:])
            slots.append(recorder.seen[0, -count:])
            mx.eval(residuals[-1], slots[-1])
        last.self_attn.o_proj = recorder.projection
        return mx.concatenate(residuals), mx.concatenate(slots)

    def finals(residual, slots, log_gain):
        x = residual + last.self_attn.o_proj(slots * mx.repeat(mx.exp(log_gain), width))
        return inner.norm(x + last.mlp(last.post_attention_layernorm(x)))

    def first_targets(positions, states):
        scores = np.array(teacher.score(states))
        first = np.array([sequence[0] for sequence in teacher.vocabulary.sequences])
        tokens = np.zeros((len(positions), TARGET_TOKENS), np.int64)
        weights = np.zeros((len(positions), TARGET_TOKENS), np.float32)
        for i, position in enumerate(positions):
            row = scores[i].astype(np.float64)
            for word in [*position.state.guesses, *(r.guess for r in position.rejected)]:
                if word in teacher.index:  # a refused answer may be no word at all
                    row[teacher.index[word]] = -np.inf
            mass = np.bincount(first, weights=np.exp(row - row.max()))
            order = np.argsort(-mass)[:TARGET_TOKENS]
            tokens[i], weights[i] = order, mass[order] / mass[order].sum()
        return mx.array(tokens), mx.array(weights)

    def banned_tokens(positions):
        """(positions, 8) the first tokens of the words played or refused there, the secret's left out."""
        tokens, present = np.zeros((len(positions), 8), np.int64), np.zeros((len(positions), 8), np.float32)
        for i, position in enumerate(positions):
            words = [*position.state.guesses, *(r.guess for r in position.rejected)]
            firsts = sorted({_first(tokenizer, w) for w in words if w} - {_first(tokenizer, position.secret)})[:8]
            tokens[i, :len(firsts)], present[i, :len(firsts)] = firsts, 1.0
        return mx.array(tokens), mx.array(present)

    zero = mx.zeros((last.self_attn.n_heads,))
    splits, banned = {}, {}
    for name, path in (("own", games), ("own_validation", validation)):
        positions = own_positions((path,), name)
        residual, slots = last_inputs([naming_context(tokenizer, p) for p in positions], [1] * len(positions))
        banned[name] = banned_tokens(positions)
        splits[name] = (residual, slots, *first_targets(positions, finals(residual, slots, zero)),
                        np.array([_first(tokenizer, p.secret) for p in positions]),
                        np.array([_first(tokenizer, p.state.guesses[-1]) for p in positions]))
    anchored = anchor_positions(DistillSettings(anchor_positions=anchors, seed=1))
    answers = [tokens_after(tokenizer, "\n", [truthful_answer(p.state, p.secret)])[0] for p in anchored]
    residual, slots = last_inputs([prompt_tokens(tokenizer, p.state, p.rejected) + list(a[:-1])
                                   for p, a in zip(anchored, answers)], [len(a) for a in answers])
    chunks = [(residual[i:i + 1024], slots[i:i + 1024]) for i in range(0, residual.shape[0], 1024)]
    start_logits = [finals(r, s, zero) @ weight.T for r, s in chunks]
    anchor_tokens = mx.concatenate([mx.argsort(-lg, axis=-1)[:, :TARGET_TOKENS] for lg in start_logits])
    anchor_weights = mx.concatenate([mx.softmax(mx.take_along_axis(lg, t, axis=-1), axis=-1) for lg, t in
                                     zip(start_logits, mx.split(anchor_tokens, list(range(1024, len(anchor_tokens),
                                                                                         1024))))])
    start_top = np.concatenate([np.array(lg.argmax(axis=-1)) for lg in start_logits])
    del start_logits

    def cross_entropy(logits, tokens, weights):
        return -(weights * mx.take_along_axis(nn.log_softmax(logits, axis=-1), tokens, axis=-1)).sum(axis=-1).mean()

    def loss_fn(params, pick, penalty):
        own_residual, own_slots, tokens, weights, _, _ = splits["own"]
        logits = finals(own_residual, own_slots, params["log_gain"]) @ weight.T
        loss = cross_entropy(logits, tokens, weights)
        if penalty:
            banned_p = mx.take_along_axis(mx.softmax(logits, axis=-1), banned["own"][0], axis=-1)
            loss = loss - penalty * (banned["own"][1] * mx.log(mx.maximum(1 - banned_p, 1e-6))).sum(axis=-1).mean()
        anchor = finals(residual[pick], slots[pick], params["log_gain"]) @ weight.T
        return loss + cross_entropy(anchor, anchor_tokens[pick], anchor_weights[pick])

    def report(step: int, penalty: float) -> None:
        point = {"unlikelihood": penalty, "step": step,
                 "gains": np.round(np.exp(np.array(params["log_gain"])), 2).tolist()}
        for name, (r, s, _, _, secret, last_guess) in splits.items():
            named = np.array((finals(r, s, params["log_gain"]) @ weight.T).argmax(axis=-1))
            point[name] = {"secret": int((named == secret).sum()), "last_guess": int((named == last_guess).sum()),
                           "positions": len(named)}
        named = np.concatenate([np.array((finals(r, s, params["log_gain"]) @ weight.T).argmax(axis=-1))
                                for r, s in chunks])
        point["anchor_top1_kept"] = round(float((named == start_top).mean()), 4)
        click.echo(json.dumps(point))

    loss_and_grad = mx.value_and_grad(loss_fn)
    for penalty in penalties:
        params = {"log_gain": zero}
        optimizer = optim.Adam(learning_rate=lr)
        rng = np.random.default_rng(0)
        report(0, penalty)
        for step in range(1, steps + 1):
            pick = mx.array(rng.choice(residual.shape[0], min(ANCHOR_BATCH, residual.shape[0]), replace=False))
            _, grads = loss_and_grad(params, pick, penalty)
            optimizer.update(params, grads)
            mx.eval(params, optimizer.state)
            if step % 20 == 0:
                report(step, penalty)


if __name__ == "__main__":
    run_script(main)

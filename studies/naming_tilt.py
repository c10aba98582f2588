"""Teach the naming step to trust the clues: exact KL-regularised policy improvement at one token.

At a one-candidate position the teacher's thought ends ` Only X remains.`, and for 57% of the
answers X is one SmolLM2 token: the whole endgame decision is one next-token distribution.
GRPO samples 16 answers there and, on held-out words, finds the secret in about 1 of 40
(results/endgame-wins-only/): its updates are about the few words it happened to win on. This
study scores every single-token word of the allowed list at once instead. Its reward is the
reward kernel's `fit` (the share of the feedback tiles so far the word would have given as
the secret: 1 only for words the clues leave), and the policy is moved toward the closed-form
optimum of KL-regularised reward maximisation at that token,

    q(w) ∝ p(w) * exp(fit(w) / beta)        over the single-token words w,

with p the model's own distribution there (held fixed for the step), by the cross-entropy
from q (its gradient on the logits is p - q). Every word the model would name moves by how
much better or worse than its neighbours it fits the clues, at every position, whether or
not a sample found the secret; nothing rewards a particular word, so memory cannot pay.

Positions: the teacher's one-candidate positions (its true thought, which the model scores
above another position's secret by 9.5 nats: results/endgame-lowlr/), single-token secrets
only, on training words never named in SFT data (allowed-only words and the untaught answers,
`--secrets allowed`) or on the answer list's training words (`--secrets answers`). Held-out
words never train. `--diagnose` reports, at held-out one-candidate positions, the secret's
rank among the single-token words and its log-probability among them, as the model gives it
and after the tilt (how far the model is from trusting the clues), each adapter after the
first paired with it. No training here moved the held-out figure up, and sampled answers show
what the teacher-forced figures cannot: without `--anchor` the rest of the answer broke
(results/naming-tilt/). Run from the repository root:

    python -m studies.naming_tilt --adapter runs/gpu-sft-2400 --out runs/naming-tilt --steps 80
    python -m studies.naming_tilt --diagnose --adapter runs/gpu-sft-2400 --adapter runs/naming-tilt/step-0080 \
        --split validation --json OUT.json
"""

from __future__ import annotations

from llm.blas import ensure_fast_blas

if __name__ == "__main__":
    ensure_fast_blas()  # before mlx loads: a reference BLAS makes this 50x slower

import json  # noqa: E402
import time
from pathlib import Path

import click
import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np

from common.errors import run_script
from common.fileio import atomic_write_json
from eval.endgame import EndgamePosition, teacher_positions
from eval.splits import SPLITS, trainable, untaught
from llm.adapter_files import save_adapter
from llm.format import prompt_tokens
from llm.loading import load_model
from rl.naming_head import naming_context, one_candidate_positions
from rl.reward import fit_shares
from sft.cot import truthful_answer
from sft.lora import continue_adapter, trainable_weights
from solver.setup import Setup, load_setup
from studies.closing_logprob import paired_interval

DEFAULT_BETA = 0.05  # a word that fits one more tile in 20 (0.05) is e times likelier


def word_tokens(tokenizer, words: list[str]) -> tuple[np.ndarray, list[str]]:
    """The words that are one token with their leading space, and those token ids."""
    ids, kept = [], []
    for word in words:
        encoded = tokenizer.encode(" " + word, add_special_tokens=False)
        if len(encoded) == 1:
            ids.append(encoded[0])
            kept.append(word)
    return np.array(ids, dtype=np.int64), kept


def word_logits(model: nn.Module, contexts: list[list[int]], token_ids: mx.array) -> mx.array:
    """The logits of the single-token words at the end of each context (right-padded batch)."""
    width = max(len(c) for c in contexts)
    ids = mx.array([c + [0] * (width - len(c)) for c in contexts])
    hidden = model.model(ids)
    last = mx.array([len(c) - 1 for c in contexts])
    hidden = hidden[mx.arange(len(contexts)), last]
    logits = model.model.embed_tokens.as_linear(hidden) if model.args.tie_word_embeddings else model.lm_head(hidden)
    return logits[:, token_ids].astype(mx.float32)


def tilted_objective(logits: mx.array, fits: mx.array, beta: float, center: bool = False) -> mx.array:
    """Cross-entropy from q = softmax(stop_gradient(logits) + fit / beta) over the words.

    With `center`, each word's push on the logits (p - q at each position) has its mean over
    the batch's positions taken off, so no word gains or loses on average over the batch: only
    where it fits better or worse than elsewhere. Uncentred, every training position lifts its
    own secret and lowers every word that fits it less, so the words that are secrets in
    training gain everywhere and the held-out ones lose (results/naming-tilt/ runs 1-3). The
    value returned is the cross-entropy either way; only the gradient changes."""
    log_p = nn.log_softmax(logits, axis=-1)
    target = mx.softmax(mx.stop_gradient(logits) + fits / beta, axis=-1)
    cross_entropy = -(target * log_p).sum(axis=-1).mean()
    if not center:
        return cross_entropy
    push = mx.stop_gradient(mx.exp(log_p) - target)
    surrogate = ((push - push.mean(axis=0, keepdims=True)) * logits).sum(axis=-1).mean()
    return surrogate + mx.stop_gradient(cross_entropy - surrogate)


def tilted_loss(model: nn.Module, contexts: list[list[int]], token_ids: mx.array, fits: mx.array,
                beta: float, center: bool = False) -> mx.array:
    """`tilted_objective` of the model's word logits at the contexts."""
    return tilted_objective(word_logits(model, contexts, token_ids), fits, beta, center)


def answer_sequence(tokenizer, position: EndgamePosition) -> tuple[list[int], int, int]:
    """The prompt and the teacher's whole true answer in one encoding (as SFT reads it), where the
    answer starts, and the index of the token that names the word (the same tokens as
    `naming_context` and the word: checked on the answer list's training words)."""
    prompt = prompt_tokens(tokenizer, position.state, position.rejected)
    answer = tokenizer.encode(truthful_answer(position.state, position.secret), add_special_tokens=False)
    return prompt + answer, len(prompt), len(naming_context(tokenizer, position))


def anchored_loss(model: nn.Module, sequences: list[tuple[list[int], int, int]], token_ids: mx.array,
                  fits: mx.array, beta: float, center: bool, anchor: float) -> tuple[mx.array, mx.array, mx.array]:
    """The tilt at the naming token plus `anchor` times the mean negative log-likelihood of every
    other token of the teacher's answer: (total, tilt, anchor NLL).

    A loss on the one naming token alone leaves every other token of the answer free to drift, and
    it does: run 1's step 60 wrote broken thoughts and unplayable guesses in 82.5% of its sampled
    answers at held-out positions (results/naming-tilt/), while its teacher-forced naming looked
    better. The anchor holds the rest of the answer to the SFT targets the start was trained on."""
    width = max(len(tokens) for tokens, _, _ in sequences)
    ids = mx.array([tokens + [0] * (width - len(tokens)) for tokens, _, _ in sequences])
    logits = model(ids).astype(mx.float32)
    named = mx.array([index for _, _, index in sequences])
    words = logits[mx.arange(len(sequences)), named - 1][:, token_ids]
    targets = np.arange(1, width)
    mask = mx.array(np.array([(targets >= start) & (targets < len(tokens)) & (targets != index)
                              for tokens, start, index in sequences]), dtype=mx.float32)
    nll = nn.losses.cross_entropy(logits[:, :-1], ids[:, 1:], reduction="none")
    anchor_nll = (nll * mask).sum() / mask.sum()
    tilt = tilted_objective(words, fits, beta, center)
    return tilt + anchor * anchor_nll, tilt, anchor_nll


def diagnose(model, tokenizer, setup: Setup, positions: list[EndgamePosition], token_ids: np.ndarray,
             words: list[str], beta: float) -> list[dict]:
    """Per position: the secret's rank among the single-token words, its probability among them,
    and its probability after the tilt by fit."""
    index = {w: i for i, w in enumerate(words)}
    rows = np.array([setup.lists.index(w) for w in words], dtype=np.int64)
    records = []
    for position in positions:
        if position.secret not in index:
            continue
        fits = fit_shares(position.state, rows)
        logits = np.array(word_logits(model, [naming_context(tokenizer, position)], mx.array(token_ids))[0])
        log_p = logits - np.logaddexp.reduce(logits)
        tilted = logits + fits / beta
        log_q = tilted - np.logaddexp.reduce(tilted)
        s = index[position.secret]
        records.append({"key": position.key, "secret": position.secret,
                        "rank": int((logits > logits[s]).sum()) + 1,
                        "log_p": round(float(log_p[s]), 4), "log_p_tilted": round(float(log_q[s]), 4),
                        "fully_fitting_words": int((fits >= 1.0).sum()),
                        "top": words[int(np.argmax(logits))]})
    return records


def diagnose_adapters(model: str, adapters: tuple[str, ...], split: str, positions: int, seed: int, beta: float,
                      json_path: str | None) -> None:
    """`diagnose` for each adapter at the same held-out one-candidate positions, each after the
    first paired with it: the mean change in the secret's log-probability among the words, and in
    its probability. The second is what a sampled closing rate follows (a mean of probabilities);
    the first also counts how far the secret falls where the model was already wrong, and a
    distribution that sharpens can lower it while raising the second (results/naming-tilt/ run 4)."""
    setup = load_setup("answers")
    chosen = [p for p in teacher_positions(setup, setup.solver(), SPLITS[split](setup.lists.answers),
                                           positions, seed) if len(p.state.candidates) == 1]
    answers = set(setup.lists.answers)
    summaries, per_adapter = [], {}
    for adapter in adapters:
        loaded, tokenizer = load_model(model, adapter)
        loaded.eval()
        token_ids, words = word_tokens(tokenizer, list(setup.lists.allowed))
        records = diagnose(loaded, tokenizer, setup, chosen, token_ids, words, beta)
        ranks = np.array([r["rank"] for r in records])
        summary = {"adapter": adapter, "positions": len(records), "median_rank": float(np.median(ranks)),
                   "top1": int((ranks == 1).sum()), "top10": int((ranks <= 10).sum()),
                   "top_not_an_answer": sum(r["top"] not in answers for r in records),
                   "mean_log_p": round(float(np.mean([r["log_p"] for r in records])), 4),
                   "mean_log_p_tilted": round(float(np.mean([r["log_p_tilted"] for r in records])), 4),
                   "mean_p": round(float(np.mean(np.exp([r["log_p"] for r in records]))), 5)}
        if per_adapter:
            first = np.array([r["log_p"] for r in per_adapter[adapters[0]]])
            this = np.array([r["log_p"] for r in records])
            low, high = paired_interval(first, this)
            p_low, p_high = paired_interval(np.exp(first), np.exp(this))
            summary |= {"vs_first": round(float((this - first).mean()), 4), "low": round(low, 4),
                        "high": round(high, 4), "higher": int((this > first).sum()),
                        "p_vs_first": round(float((np.exp(this) - np.exp(first)).mean()), 5),
                        "p_low": round(p_low, 5), "p_high": round(p_high, 5)}
        print(json.dumps(summary), flush=True)
        summaries.append(summary)
        per_adapter[adapter] = records
    if json_path:
        atomic_write_json(json_path, {"split": split, "positions": positions, "seed": seed, "beta": beta,
                                      "one_candidate": len(chosen), "adapters": summaries,
                                      "per_position": per_adapter})


@click.command()
@click.option("--model", default="default")
@click.option("--adapter", "adapters", required=True, multiple=True, type=click.Path(exists=True, file_okay=False),
              help="The adapter to start from (it is continued, not stacked); with --diagnose, two or more "
                   "are paired by position (the first is A).")
@click.option("--out", type=click.Path(file_okay=False), help="Run folder: checkpoints and metrics.jsonl.")
@click.option("--steps", default=80, type=click.IntRange(1))
@click.option("--batch-size", default=8, type=click.IntRange(1))
@click.option("--lr", default=1e-4, type=click.FloatRange(0, 1, min_open=True))
@click.option("--beta", default=DEFAULT_BETA, type=click.FloatRange(0, 10, min_open=True))
@click.option("--save-every", default=20, type=click.IntRange(1))
@click.option("--seed", default=0, type=int)
@click.option("--secrets", "secret_kind", default="allowed", type=click.Choice(["allowed", "answers"]),
              help="Train on allowed-list words SFT never named, or on the answer list's training words "
                   "(scoring only that list's single-token words).")
@click.option("--center", is_flag=True,
              help="Take each word's mean push over the batch off its gradient (no word gains on average).")
@click.option("--anchor", default=0.0, type=click.FloatRange(0),
              help="Weight of the teacher's answer NLL at every other token of the answer (0: the naming token alone, "
                   "as runs 1-4).")
@click.option("--diagnose", "diagnose_only", is_flag=True, help="Only report the secret's rank at held-out positions.")
@click.option("--split", type=click.Choice(SPLITS), default="test", help="With --diagnose: the secrets' split.")
@click.option("--positions", default=400, type=click.IntRange(1), help="With --diagnose: as eval --endgame's.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
def main(model, adapters, out, steps, batch_size, lr, beta, save_every, seed, secret_kind, center, anchor,
         diagnose_only, split, positions, json_path) -> None:
    if diagnose_only:
        diagnose_adapters(model, adapters, split, positions, seed, beta, json_path)
        return
    if len(adapters) != 1 or not out:
        raise click.UsageError("training takes one --adapter and an --out folder")
    adapter = adapters[0]
    loaded, tokenizer = load_model(model, adapter)
    setup = load_setup(secret_kind)
    if secret_kind == "allowed":
        answers = set(setup.lists.answers)
        pool = [w for w in trainable(setup.lists.allowed) if w not in answers] + untaught(setup.lists.answers)
    else:
        pool = trainable(setup.lists.answers)
    token_ids, words = word_tokens(tokenizer, list(setup.lists.secrets(secret_kind)))
    secrets = sorted(set(pool) & set(words))
    rows = np.array([setup.lists.index(w) for w in words], dtype=np.int64)
    started = time.time()
    train_positions = one_candidate_positions(setup, secrets, steps * batch_size, seed)
    print(f"{len(train_positions)} one-candidate positions on {len(secrets)} single-token training words "
          f"({time.time() - started:.0f} s); {len(words)} single-token words scored")
    config = continue_adapter(loaded, adapter)
    loaded.train()
    mx.random.seed(seed)
    optimizer = optim.Adam(learning_rate=lr)
    loss_and_grad = nn.value_and_grad(loaded, anchored_loss if anchor else tilted_loss)
    ids = mx.array(token_ids)
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "metrics.jsonl", "w") as log:
        for step in range(1, steps + 1):
            batch = train_positions[(step - 1) * batch_size: step * batch_size]
            if not batch:
                break
            t0 = time.time()
            fits = mx.array(np.stack([fit_shares(p.state, rows) for p in batch]), dtype=mx.float32)
            if anchor:
                sequences = [answer_sequence(tokenizer, p) for p in batch]
                (_, loss, anchor_nll), grads = loss_and_grad(loaded, sequences, ids, fits, beta, center, anchor)
            else:
                contexts = [naming_context(tokenizer, p) for p in batch]
                loss, grads = loss_and_grad(loaded, contexts, ids, fits, beta, center)
            optimizer.update(loaded, grads)
            mx.eval(loaded.parameters(), optimizer.state, loss)
            record = {"step": step, "loss": round(float(loss), 5), "seconds": round(time.time() - t0, 2)}
            if anchor:
                record["anchor_nll"] = round(float(anchor_nll), 5)
            log.write(json.dumps(record) + "\n")
            log.flush()
            print(json.dumps(record), flush=True)
            if step % save_every == 0 or step == steps:
                save_adapter(folder / f"step-{step:04d}", trainable_weights(loaded), config)


if __name__ == "__main__":
    run_script(main)

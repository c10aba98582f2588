"""Is the reading of the clues in the start's representation? A readout fitted at the naming step.

Every route tried from the GPU SFT adapter (GRPO, expert iteration, endgame SFT, the naming
tilt) moved the held-out closing rate down or not at all (results/). Two explanations are
left: the start's representation at the naming token does not carry which new word the clues
leave (then no few-step update of it could name one), or it does and the updates tried spent
their steps on the words they were trained on. This study tells them apart without sampling:
it freezes the model, takes its final hidden state h at the token after ` Only` (the teacher's
true thought before it), and fits one linear map M on top, so that the word logits become
E (h + M h) with E the model's own (tied) word embeddings, toward the tilted target of
studies/naming_tilt.py (q ∝ p·exp(fit/beta) over the single-token words) on training words
only. Because every word is scored through its own embedding, M can carry to words it never
saw as a secret exactly as far as the representation lets it. The held-out figure is the
secret's probability among the single-token words at one-candidate positions of held-out
answer words (a sampled closing rate is a mean of such probabilities), before and after,
paired, with the same at the training positions beside it (memory against skill).

With `--spelling` the readout also scores letters from the state (which letter at which place,
which letters in the word) and adds to each word the scores of its own spelling: it asks whether
the state reads the clues even where the word embeddings cannot spell the words they fit. With
`--words all` it scores every allowed word, and `--attach all-words` names them whole when sampled
(studies/word_steering.py).

    python -m studies.naming_probe --adapter runs/gpu-sft-2400 --states runs/naming-probe/states.npz \
        --readout runs/naming-probe/readout.npz --json results/naming-probe/probe.json
    python -m studies.naming_probe --adapter runs/gpu-sft-2400 --readout runs/naming-probe/readout.npz \
        --sample-endgame 400 --json results/naming-probe/readout-endgame-test-400.json
    python -m studies.naming_probe --adapter runs/gpu-sft-2400 --states runs/naming-probe/states-all.npz \
        --train-positions 640 --held-out-positions 200 --epochs 200 --spelling --words all --beta 0.01 \
        --readout runs/naming-probe/all-words-b001.npz --json results/naming-probe/probe-all-words-b001-e200.json
"""

from __future__ import annotations

from llm.blas import ensure_fast_blas

if __name__ == "__main__":
    ensure_fast_blas()  # before mlx loads: a reference BLAS makes this 50x slower

import json  # noqa: E402
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import click
import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np

from common.errors import run_script
from common.fileio import atomic_write_json
from eval.endgame import EndgamePosition
from eval.splits import SPLITS, held_out_test, held_out_validation, trainable
from llm.loading import load_model
from solver.setup import Setup, load_setup
from studies.closing_logprob import paired_interval
from rl.naming_head import naming_states, one_candidate_positions
from rl.reward import fit_shares
from studies.naming_tilt import DEFAULT_BETA, word_tokens
from llm.naming_head import naming_tokens, readout_logits, spelling_features
from llm.word_steering import ScorePublisher, WordSteering, WordTokens
from studies.word_steering import continuation_offsets


class ReadoutModel(nn.Module):
    """The model's body followed by the fitted readout, h -> h + up @ down @ h: the word logits
    `readout_logits` scores. Ungated it acts at every position of a sampled answer; with
    `gate_token` only at positions whose input is that token (` Only`, after which the word is
    named), leaving the rest of the answer the start's."""

    def __init__(self, body: nn.Module, down: mx.array, up: mx.array, gate_token: int | None = None):
        super().__init__()
        self.body, self.down, self.up, self.gate_token = body, down, up, gate_token

    @property
    def layers(self) -> list[nn.Module]:
        return self.body.layers

    @property
    def embed_tokens(self) -> nn.Module:
        return self.body.embed_tokens

    def __call__(self, inputs: mx.array, cache=None, input_embeddings: mx.array | None = None) -> mx.array:
        hidden = self.body(inputs, cache, input_embeddings)
        correction = (hidden @ self.down.T.astype(hidden.dtype)) @ self.up.T.astype(hidden.dtype)
        if self.gate_token is not None:
            correction = correction * (inputs == self.gate_token)[..., None].astype(hidden.dtype)
        return hidden + correction


class WordReadout(nn.Module):
    """The readout as it was fitted: it moves only the single-token words' logits (the fit's
    softmax ran over those words alone, so it says nothing of the other tokens, and fragments
    such as `osed` rose when it moved them: the gated run of results/naming-probe/), at the
    positions whose input is `gate_token`. Every other logit is the start's."""

    def __init__(self, model: nn.Module, down: mx.array, up: mx.array, gate_token: int, word_ids: mx.array,
                 letters: mx.array | None = None, spelling: mx.array | None = None):
        super().__init__()
        self.inner, self.down, self.up, self.gate_token, self.word_ids = model, down, up, gate_token, word_ids
        self.letters, self.spelling = letters, spelling

    @property
    def layers(self) -> list[nn.Module]:
        return self.inner.layers

    def __call__(self, inputs: mx.array, cache=None, input_embeddings: mx.array | None = None) -> mx.array:
        hidden = self.inner.model(inputs, cache, input_embeddings)
        embed = self.inner.model.embed_tokens
        logits = embed.as_linear(hidden)
        correction = (hidden @ self.down.T.astype(hidden.dtype)) @ self.up.T.astype(hidden.dtype)
        word_shift = correction @ embed.weight[self.word_ids].T
        if self.letters is not None:
            word_shift = word_shift + (hidden @ self.letters.T.astype(hidden.dtype)) @ self.spelling.T
        word_shift = word_shift * (inputs == self.gate_token)[..., None].astype(word_shift.dtype)
        return logits.at[..., self.word_ids].add(word_shift)


def attach_readout(model: nn.Module, path: str, gate_token: int | None = None) -> None:
    """Put the readout saved at `path` on the model's body, gated to `gate_token` when given."""
    saved = np.load(path)
    if "letters" in saved:
        raise click.UsageError(f"{path} scores words by their spelling, which acts on the words' logits: "
                               "use --attach naming-words")
    model.model = ReadoutModel(model.model, mx.array(saved["down"]), mx.array(saved["up"]), gate_token)


def word_readout(model: nn.Module, tokenizer, path: str) -> WordReadout:
    """The model with the readout at `path` on its single-token words' logits at the naming token."""
    saved = np.load(path)
    token_ids, words = word_tokens(tokenizer, list(load_setup("answers").lists.allowed))
    letters, spelling = None, None
    if "letters" in saved:
        letters, spelling = mx.array(saved["letters"]), mx.array(spelling_features(words))
    return WordReadout(model, mx.array(saved["down"]), mx.array(saved["up"]), naming_tokens(tokenizer)[-1],
                       mx.array(token_ids), letters, spelling)


READOUT_MODES = ("every-token", "naming-token", "naming-words", "all-words")
ALL_WORDS = "all_words"  # the key a readout over every allowed word is saved with


def word_steering(model: nn.Module, tokenizer, path: str) -> tuple[ScorePublisher, WordTokens]:
    """The model that scores every allowed word at the naming token by the readout at `path`
    (fitted with --words all), and those words: each answer's `WordSteering` names one by them."""
    saved = np.load(path)
    vocabulary = WordTokens.of(tokenizer, list(load_setup("answers").lists.allowed))
    if "offsets" in saved:  # the model's own shares of each first token (--word-prior model)
        vocabulary = replace(vocabulary, offsets=saved["offsets"])
    embeddings = model.model.embed_tokens.weight[mx.array(vocabulary.first)].astype(mx.float32)
    down, up, offsets = mx.array(saved["down"]), mx.array(saved["up"]), mx.array(vocabulary.offsets)
    letters = mx.array(saved["letters"]) if "letters" in saved else None
    spelling = mx.array(spelling_features(list(vocabulary.words))) if letters is not None else None
    publisher = ScorePublisher(
        model, lambda h: readout_logits(h, embeddings, down, up, letters, spelling, offsets), naming_tokens(tokenizer))
    return publisher, vocabulary


def readout_model(model: nn.Module, tokenizer, path: str, mode: str) -> tuple[nn.Module, Callable | None]:
    """The model with the readout on: at every token's state, at the naming token's state, on
    the single-token words' logits at the naming token only, or (all-words) naming every allowed
    word by it; with the last, the maker of each answer's logits processor from the words it
    must not name."""
    if mode == "all-words":
        publisher, vocabulary = word_steering(model, tokenizer, path)
        return publisher, lambda banned: WordSteering(publisher, vocabulary, banned)
    if mode == "naming-words":
        return word_readout(model, tokenizer, path), None
    attach_readout(model, path, naming_tokens(tokenizer)[-1] if mode == "naming-token" else None)
    return model, None


def sample_endgame(model: str, adapter: str, readout: str, mode: str, positions: int, seed: int,
                   json_path: str, split: str = "test") -> None:
    """`eval --endgame --split SPLIT` (the same teacher positions for the same count and seed,
    sampled as eval samples) with the readout attached, written as eval writes it, so that
    `eval --compare` pairs it with the start's run."""
    from eval.endgame import KIND, answer_positions, summarise_endgame, teacher_positions
    from llm.generation import SamplingSettings

    setup = load_setup("answers")
    chosen = teacher_positions(setup, setup.solver().for_histories(), SPLITS[split](setup.lists.answers),
                               positions, seed)
    loaded, tokenizer = load_model(model, adapter)
    loaded, steering = readout_model(loaded, tokenizer, readout, mode)
    steer = (lambda p: steering({*p.state.guesses, *(r.guess for r in p.rejected)})) if steering else None
    sampling = SamplingSettings()
    started = time.perf_counter()
    records = answer_positions(loaded, tokenizer, chosen, sampling, seed, show_progress=True, steer=steer)
    name = f"{model}+{adapter}+readout {readout} ({mode})"
    atomic_write_json(json_path, {"kind": KIND, "policy": name, "secrets": "answers",
                                  "split": split, "source": "teacher", "seed": seed, "max_candidates": 6,
                                  "temperature": sampling.temperature, "top_p": sampling.top_p,
                                  "max_tokens": sampling.max_tokens, "dtype": "auto", **summarise_endgame(records),
                                  "seconds": round(time.perf_counter() - started, 3), "per_position": records})


def sample_games(model: str, adapter: str, readout: str, mode: str, games: int, seed: int, json_path: str) -> None:
    """`eval --split test --games N` (the same secrets for the same count and seed, played as eval
    plays them) with the readout attached, written as eval writes it."""
    from eval.run import choose_secrets, play_and_summarise
    from llm.generation import SamplingSettings
    from llm.player import ModelPlayer

    setup = load_setup("answers")
    loaded, tokenizer = load_model(model, adapter)
    loaded, steering = readout_model(loaded, tokenizer, readout, mode)
    steer = (lambda state, refused: steering({*state.guesses, *(r.guess for r in refused)})) if steering else None
    sampling = SamplingSettings()
    name = f"{model}+{adapter}+readout {readout} ({mode})"
    player = ModelPlayer(loaded, tokenizer, name, sampling, seed, steer=steer)
    secrets = choose_secrets(setup.lists.answers, "test", games, seed)
    result = play_and_summarise(player, setup, secrets, measure_moves=True, show_progress=True, setup_seconds=0.0)
    atomic_write_json(json_path, {"policy": name, "secrets": "answers", "split": "test", "seed": seed, "hard": False,
                                  "guess_constrained": False, "temperature": sampling.temperature,
                                  "top_p": sampling.top_p, "max_tokens": sampling.max_tokens, **result})


def word_probabilities(logits: np.ndarray) -> np.ndarray:
    """Each position's softmax over the words."""
    return np.exp(logits - np.logaddexp.reduce(logits, axis=1, keepdims=True))


def secret_probabilities(logits: np.ndarray, secrets: np.ndarray) -> np.ndarray:
    """Each position's secret's probability among the words."""
    return word_probabilities(logits)[np.arange(len(secrets)), secrets]


def summary(before: np.ndarray, after: np.ndarray, before_logits: np.ndarray, after_logits: np.ndarray,
            secrets: np.ndarray) -> dict:
    """Mean secret probability before and after (paired interval), and how often it is the top word."""
    low, high = paired_interval(before, after)
    rows = np.arange(len(secrets))
    return {"positions": len(secrets), "mean_p_before": round(float(before.mean()), 5),
            "mean_p_after": round(float(after.mean()), 5), "change": round(float((after - before).mean()), 5),
            "low": round(low, 5), "high": round(high, 5),
            "top1_before": int((before_logits.argmax(1) == secrets).sum()),
            "top1_after": int((after_logits.argmax(1) == secrets).sum()),
            "median_rank_before": float(np.median((before_logits > before_logits[rows, secrets][:, None]).sum(1) + 1)),
            "median_rank_after": float(np.median((after_logits > after_logits[rows, secrets][:, None]).sum(1) + 1))}


PARTS = ("states", "fits", "secrets", "keys")


def guessed_mask(positions: list[EndgamePosition], words: list[str]) -> np.ndarray:
    """(positions, words): True where the word was already guessed at that position."""
    index = {w: i for i, w in enumerate(words)}
    mask = np.zeros((len(positions), len(words)), dtype=bool)
    for row, position in enumerate(positions):
        mask[row, [index[t.guess] for t in position.state.turns if t.guess in index]] = True
    return mask


def floor_guessed(fits: np.ndarray, positions: list[EndgamePosition], words: list[str]) -> np.ndarray:
    """`fits` with the words already guessed at each position set to 0. The game refuses a repeat
    and the reward scores it the floor (rl/reward.py), but the tile share gives an earlier guess
    most of its turn's tiles (4 of 5 after four greens): fitted without this, a readout named the
    last guess again in whole games (results/naming-probe/)."""
    return np.where(guessed_mask(positions, words), 0.0, fits)


def guessed_probability(logits: np.ndarray, mask: np.ndarray) -> float:
    """The mean probability, among the words, of naming one already guessed."""
    return float((word_probabilities(logits) * mask).sum(axis=1).mean())


def collect(model, tokenizer, setup: Setup, positions: list[EndgamePosition], words: list[str],
            rows: np.ndarray) -> tuple[np.ndarray, ...]:
    """States, fits of every word, the secret's word index (every secret is one of `words`) and
    the positions' keys: the `PARTS` of a split."""
    index = {w: i for i, w in enumerate(words)}
    fits = np.stack([fit_shares(p.state, rows) for p in positions])
    return (naming_states(model, tokenizer, positions), fits, np.array([index[p.secret] for p in positions]),
            np.array([p.key for p in positions]))


def save_states(path: str, data: dict) -> None:
    """Each split's `PARTS`, in one file."""
    arrays = {f"{name}_{part}": array for name, parts in data.items() for part, array in zip(PARTS, parts)}
    partial = Path(path).with_suffix(".partial.npz")
    np.savez(partial, **arrays)
    partial.replace(path)


def load_states(path: str, splits: dict[str, list[EndgamePosition]]) -> dict:
    """`save_states`' splits, refused unless the saved positions and the wanted ones agree as far
    as both go. Positions are drawn in a seeded order that does not depend on their count, so a
    file written for 960 training positions holds the first 960 of 1,920 (or all of 480)."""
    saved = np.load(path)
    data = {}
    for name, positions in splits.items():
        keys, wanted = list(saved[f"{name}_keys"]), [p.key for p in positions]
        shared = min(len(keys), len(wanted))
        if keys[:shared] != wanted[:shared]:
            raise click.UsageError(f"{path} holds other {name} positions: use the options it was written with")
        data[name] = tuple(saved[f"{name}_{part}"] for part in PARTS)
    return data


def complete_states(data: dict, splits: dict[str, list[EndgamePosition]], gather) -> bool:
    """Adds to `data` each split's positions past those it holds, gathered by `gather(positions)`
    (their `PARTS`); says whether any were added."""
    added = False
    for name, positions in splits.items():
        have = len(data[name][3]) if name in data else 0
        if have < len(positions):
            t0 = time.time()
            new = gather(positions[have:])
            data[name] = new if name not in data else tuple(np.concatenate(pair) for pair in zip(data[name], new))
            print(f"{name}: {len(positions) - have} states in {time.time() - t0:.0f} s", flush=True)
            added = True
    return added


@click.command()
@click.option("--model", default="default")
@click.option("--adapter", required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--train-positions", default=1600, type=click.IntRange(1))
@click.option("--held-out-positions", default=400, type=click.IntRange(1),
              help="One-candidate positions of held-out test words (validation: half as many).")
@click.option("--rank", default=64, type=click.IntRange(1))
@click.option("--epochs", default=400, type=click.IntRange(1))
@click.option("--lr", default=1e-3, type=click.FloatRange(0, 1, min_open=True))
@click.option("--weight-decay", default=1e-2, type=click.FloatRange(0))
@click.option("--beta", default=DEFAULT_BETA, type=click.FloatRange(0, 10, min_open=True))
@click.option("--seed", default=0, type=int)
@click.option("--states", "states_path", type=click.Path(dir_okay=False), default=None,
              help="An .npz of the hidden states: the positions it holds are read, those it lacks (more "
                   "--train-positions) gathered and added, so readouts can be refitted without the model's passes.")
@click.option("--readout", "readout_path", type=click.Path(dir_okay=False), default=None,
              help="Where to save the best readout (.npz); with --sample-endgame, the readout to attach.")
@click.option("--sample-endgame", "sample_positions", type=click.IntRange(1), default=None,
              help="Instead of fitting: sample one answer at this many test endgame positions (as eval --endgame) "
                   "with --readout attached, and write them to --json.")
@click.option("--sample-split", type=click.Choice(list(SPLITS)), default="test",
              help="With --sample-endgame: the split whose secrets the positions come from (train: memory).")
@click.option("--sample-games", "sample_game_count", type=click.IntRange(1), default=None,
              help="Instead of fitting: play this many test games (as eval --split test --games N) with --readout "
                   "attached, and write them to --json.")
@click.option("--attach", "mode", type=click.Choice(READOUT_MODES), default="every-token",
              help="With --sample-*: where the readout acts: on every token's state, on the naming token's state "
                   "(where the input is ` Only`), there on the single-token words' logits alone, or (all-words, a "
                   "--words all readout) naming every allowed word whole, never a played one.")
@click.option("--spelling/--no-spelling", default=False,
              help="Fit also letter scores of the state, summed over each word's spelling (spelling_features).")
@click.option("--floor-guessed/--no-floor-guessed", "floor", default=True,
              help="Score the words already guessed 0 in the target, as the reward scores a repeat (the runs of "
                   "session 39 were fitted without this).")
@click.option("--words", "word_set", type=click.Choice(["single-token", "all"]), default="single-token",
              help="The words the readout scores: those that are one token, or every allowed word (several-token "
                   "ones through their first token: studies/word_steering.py; sampled with --attach all-words). "
                   "The positions are then drawn from every training word too: another --states file.")
@click.option("--word-prior", type=click.Choice(["even", "model"]), default="model",
              help="With --words all: how a first token's logit is shared among its words: evenly, or by the "
                   "model's own continuation of it (word_steering.continuation_offsets).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), required=True)
def main(model, adapter, train_positions, held_out_positions, rank, epochs, lr, weight_decay, beta, seed,
         states_path, readout_path, sample_positions, sample_split, sample_game_count, mode, spelling,
         floor, word_set, word_prior, json_path) -> None:
    if sample_positions or sample_game_count:
        if not readout_path or not Path(readout_path).exists():
            raise click.UsageError("--sample-endgame and --sample-games need an existing --readout file")
        saved = np.load(readout_path)
        if (mode == "all-words") != (ALL_WORDS in saved):
            fitted = "all" if ALL_WORDS in saved else "single-token"
            raise click.UsageError(f"{readout_path} was fitted with --words {fitted}: --attach all-words goes with "
                                   "--words all, and only with it")
        if mode not in ("naming-words", "all-words") and "letters" in saved:
            raise click.UsageError(f"{readout_path} scores words by their spelling, which acts on the words' "
                                   "logits: use --attach naming-words")
        if sample_positions:
            sample_endgame(model, adapter, readout_path, mode, sample_positions, seed, json_path, sample_split)
        else:
            sample_games(model, adapter, readout_path, mode, sample_game_count, seed, json_path)
        return
    loaded, tokenizer = load_model(model, adapter)
    loaded.eval()
    answers_setup, allowed_setup = load_setup("answers"), load_setup("allowed")
    lists = answers_setup.lists
    offsets = None
    if word_set == "all":
        vocabulary = WordTokens.of(tokenizer, list(lists.allowed))
        if word_prior == "model":
            vocabulary = replace(vocabulary, offsets=continuation_offsets(loaded, tokenizer, vocabulary))
        token_ids, words, offsets = vocabulary.first, list(vocabulary.words), mx.array(vocabulary.offsets)
    else:
        token_ids, words = word_tokens(tokenizer, list(lists.allowed))
    rows = np.array([lists.index(w) for w in words], dtype=np.int64)
    single = set(words)
    started = time.time()
    training_words = sorted(set(trainable(lists.allowed)) & single - set(held_out_validation(lists.answers))
                            - set(held_out_test(lists.answers)))
    splits = {
        "train": one_candidate_positions(allowed_setup, training_words, train_positions, seed),
        "validation": one_candidate_positions(answers_setup, sorted(set(held_out_validation(lists.answers)) & single),
                                              held_out_positions // 2, seed + 1),
        "test": one_candidate_positions(answers_setup, sorted(set(held_out_test(lists.answers)) & single),
                                        held_out_positions, seed + 2),
    }
    print(f"positions in {time.time() - started:.0f} s: " + ", ".join(f"{k} {len(v)}" for k, v in splits.items()),
          flush=True)
    stored = load_states(states_path, splits) if states_path and Path(states_path).exists() else {}
    added = complete_states(stored, splits, lambda positions: collect(loaded, tokenizer, answers_setup, positions,
                                                                       words, rows))
    if states_path and added:
        save_states(states_path, stored)
    data = {name: tuple(part[:len(positions)] for part in stored[name]) for name, positions in splits.items()}
    if floor:
        data = {name: (states, floor_guessed(fits, splits[name], words), secrets, keys)
                for name, (states, fits, secrets, keys) in data.items()}
    embeddings = loaded.model.embed_tokens.weight[mx.array(token_ids)].astype(mx.float32)
    hidden = embeddings.shape[1]
    mx.random.seed(seed)
    params = {"down": mx.random.normal((rank, hidden)) * (1 / hidden ** 0.5), "up": mx.zeros((hidden, rank))}
    spelled = mx.array(spelling_features(words)) if spelling else None
    if spelling:
        params["letters"] = mx.zeros((spelled.shape[1], hidden))
    states, fits = data["train"][:2]
    h, f = mx.array(states), mx.array(fits, dtype=mx.float32)
    target = mx.softmax(h @ embeddings.T + (0 if offsets is None else offsets) + f / beta, axis=-1)

    def loss_fn(p):
        log_p = nn.log_softmax(readout_logits(h, embeddings, p["down"], p["up"], p.get("letters"), spelled, offsets),
                               axis=-1)
        return -(target * log_p).sum(axis=-1).mean()

    def logits_of(name: str, p) -> np.ndarray:
        return np.array(readout_logits(mx.array(data[name][0]), embeddings, p["down"], p["up"], p.get("letters"),
                                       spelled, offsets))

    zero = {name: mx.zeros_like(value) if name != "down" else value for name, value in params.items()}
    before = {name: logits_of(name, zero) for name in data}
    optimizer = optim.AdamW(learning_rate=lr, weight_decay=weight_decay)
    loss_and_grad = mx.value_and_grad(loss_fn)
    curve, best = [], (-1.0, 0, params)
    for epoch in range(1, epochs + 1):
        loss, grads = loss_and_grad(params)
        optimizer.update(params, grads)
        mx.eval(params, optimizer.state)
        if epoch % 20 == 0 or epoch == epochs:
            val_p = secret_probabilities(logits_of("validation", params), data["validation"][2]).mean()
            train_p = secret_probabilities(logits_of("train", params), data["train"][2]).mean()
            curve.append({"epoch": epoch, "loss": round(float(loss), 5), "train_mean_p": round(float(train_p), 5),
                          "validation_mean_p": round(float(val_p), 5)})
            print(json.dumps(curve[-1]), flush=True)
            if val_p > best[0]:
                best = (float(val_p), epoch, {k: mx.array(v) for k, v in params.items()})
    result = {"adapter": adapter, "seed": seed, "beta": beta, "rank": rank, "lr": lr, "weight_decay": weight_decay,
              "spelling": spelling, "floor_guessed": floor, "word_set": word_set,
              "word_prior": word_prior if word_set == "all" else None, "words": len(words),
              "best_epoch": best[1], "curve": curve, "splits": {}}
    for name in data:
        after_logits = logits_of(name, best[2])
        secrets = data[name][2]
        p_before = secret_probabilities(before[name], secrets)
        p_after = secret_probabilities(after_logits, secrets)
        tilted = before[name] + data[name][1] / beta
        guessed = guessed_mask(splits[name], words)
        result["splits"][name] = summary(p_before, p_after, before[name], after_logits, secrets) | {
            "mean_p_tilted": round(float(secret_probabilities(tilted, secrets).mean()), 5),
            "p_guessed_before": round(guessed_probability(before[name], guessed), 5),
            "p_guessed_after": round(guessed_probability(after_logits, guessed), 5),
            "per_position": [{"key": p.key, "secret": p.secret, "p_before": round(float(a), 6),
                              "p_after": round(float(b), 6)}
                             for p, a, b in zip(splits[name], p_before, p_after)]}
        print(name, json.dumps({k: v for k, v in result["splits"][name].items() if k != "per_position"}), flush=True)
    atomic_write_json(json_path, result)
    if readout_path:
        partial = Path(readout_path).with_suffix(".partial.npz")
        np.savez(partial, **{name: np.array(value) for name, value in best[2].items()},
                 **({ALL_WORDS: np.array(True), "offsets": np.array(offsets)} if word_set == "all" else {}))
        partial.replace(readout_path)


if __name__ == "__main__":
    run_script(main)

"""Distil the naming head into the model: its last layer learns to name what the head names.

The head (llm/naming_head.py) is a readout of the model's final state at ` Only` that scores every
allowed word by its first token's embedding and its spelling; it names held-out secrets the
model's own next token does not (the SFT start writes one of the ~2,000 answers it was taught).
But it plays only inside this toolkit. Here the model's own next-token distribution at the naming
token is trained toward the head's, summed over each word's first token: a soft target over
thousands of words, not the one secret. Hard targets (the secret) at a few hundred positions
taught recall (the answers list) or made-up words (the allowed list) (results/endgame-sft/,
results/endgame-allowed/); the head's distribution is a function of the state that already
generalises from 640 positions, and a function of one token's state is what a low-rank change of
the last layer's MLP can learn, the way the head itself was fitted.

So the trained part is a LoRA on the last layer's MLP (gate, up, down projections), and the rest
of the model stays the start's: at each naming token the state after the last layer's attention
(which the LoRA does not touch) is computed once by the frozen model, with the head's target from
the final state. Training then runs one token's MLP per position, so many epochs over the
positions cost seconds and the epoch is chosen on held-out validation positions, as the head's fit
chooses its own. The positions are the solver's games on the allowed list's training words (never
a held-out one), each game's first position with one candidate left, the teacher's true thought up
to ` Only`: fresh ones, not the head's own fit positions (where it learnt the answer). The LoRA
spans every projection of every layer, zero but there, so what is left is an ordinary adapter over
the start (rl/policy.py merged_adapter) that mlx-lm, `export` and `eval --no-naming-head` play.

The figures, read every `eval_every` epochs on held-out validation positions (the answer list's
validation words) and on training answers' positions (memory or skill): `top1`, the share where
the model's most likely next token opens the secret, and `mean_p`, that token's probability; the
head's own at the same positions beside them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
from mlx_lm.models.base import create_attention_mask
from mlx_lm.tuner.lora import LoRALinear

from common.errors import UserError
from common.fileio import append_line, atomic_write, atomic_write_json, read_arrays, read_json
from common.knobs import knob, knob_like
from common.options import SEED
from common.progress import progress_bar
from eval.endgame import EndgamePosition
from eval.splits import held_out_validation, trainable
from llm.generation import copy_cache, prefix_cache, shared_prefix_length
from llm.naming_head import NamingHead, head_beside
from llm.output_layer import output_layer
from llm.vector_exp import vector_exp
from llm.word_steering import WordTokens, head_scorer
from rl.naming_head import naming_context, one_candidate_positions
from rl.policy import load_policy
from sft.lora import AdapterSettings
from solver.setup import load_setup

SETTINGS_FILE = "distill.json"  # the run's settings, compared when it is run again
STATES_FILE = "states.npz"  # the frozen pass's states, saved as they grow: a killed run resumes
METRICS_FILE = "metrics.jsonl"  # the figures at each reading
PASS_BATCH = 8  # contexts a frozen pass (one pass over 200 ran for minutes where 25 of 8 take one)
TRAINED = ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")  # the last layer's LoRA that trains
SPLITS = ("train", "validation", "answers")  # fit positions, held-out readings, training answers' readings


@dataclass(frozen=True)
class DistillSettings:
    positions: int = knob(640, "Training positions (fresh teacher positions of the allowed list's training words; "
                               "each costs one frozen model pass).", range=(1, 1_000_000), flag="--positions")
    validation_positions: int = knob(150, "Held-out validation positions (the answer list's validation words) "
                                          "that choose the epoch.", range=(1, 100_000),
                                     flag="--validation-positions")
    answer_positions: int = knob(100, "Training answers' positions read beside them (memory or skill).",
                                 range=(1, 100_000), flag="--answer-positions")
    epochs: int = knob(300, "Full-batch epochs over the training positions.", range=(1, 1_000_000), flag="--epochs")
    rank: int = knob(16, "LoRA rank.", range=(1, 1024), flag="--rank")
    scale: float = knob(20.0, "Multiplier of the LoRA update.", range=(0.0, 1000.0), open_low=True)
    lr: float = knob(2e-4, "Adam learning rate.", range=(0.0, 1.0), open_low=True, flag="--lr")
    eval_every: int = knob(10, "Epochs between readings (the best on validation is kept).", range=(1, 1_000_000),
                           flag="--eval-every")
    seed: int = knob_like(SEED)


class Teacher:
    """The frozen start and its head: at each position, the state after the last layer's attention
    at the naming token, and the head's distribution over first tokens there."""

    def __init__(self, model: nn.Module, tokenizer, head: NamingHead) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.vocabulary = WordTokens.of(tokenizer, load_setup("answers").lists.allowed)
        self.index = {w: i for i, w in enumerate(self.vocabulary.words)}
        self.score = head_scorer(model, head, self.vocabulary)
        self.vocab_size = output_layer(model)(mx.zeros((1, model.args.hidden_size))).shape[-1]

    def states(self, positions: list[EndgamePosition]) -> tuple[np.ndarray, np.ndarray]:
        """(positions, hidden) twice: the state after the last layer's attention, and the final state."""
        tokens = [naming_context(self.tokenizer, p) for p in positions]
        mids, finals = [], []
        with lora_off(self.model), vector_exp(self.model):
            for start in range(0, len(tokens), PASS_BATCH):
                mid, final = self._frozen_pass(tokens[start:start + PASS_BATCH])
                mids.append(mid)
                finals.append(final)
        return np.concatenate(mids), np.concatenate(finals)

    def _frozen_pass(self, tokens: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        inner = self.model.model
        shared = shared_prefix_length(tokens) if len(tokens) > 1 else len(tokens[0]) - 1
        prefix = prefix_cache(self.model, tokens[0][:shared])
        rests = [t[shared:] for t in tokens]
        width = max(map(len, rests))
        caches = [copy_cache(layer, len(rests)) for layer in prefix]
        h = inner.embed_tokens(mx.array([r + [0] * (width - len(r)) for r in rests]))
        mask = create_attention_mask(h, caches[0])
        for layer, cache in zip(inner.layers[:-1], caches):
            h = layer(h, mask, cache=cache)
        last_layer = inner.layers[-1]
        mid = h + last_layer.self_attn(last_layer.input_layernorm(h), mask, cache=caches[-1])
        rows, last = mx.arange(len(rests)), mx.array([len(r) - 1 for r in rests])
        mid = mid[rows, last]
        final = inner.norm(mid + last_layer.mlp(last_layer.post_attention_layernorm(mid)))
        mx.eval(mid, final)
        return np.array(mid.astype(mx.float32)), np.array(final.astype(mx.float32))

    def targets(self, finals: np.ndarray, positions: list[EndgamePosition]) -> np.ndarray:
        """The head's word distribution (words played or refused there banned, as in play) summed
        onto each word's first token: (positions, vocab)."""
        logits = np.array(self.score(mx.array(finals)))
        for row, position in enumerate(positions):
            banned = [*position.state.guesses, *(r.guess for r in position.rejected)]
            logits[row, [self.index[w] for w in banned if w in self.index]] = -np.inf
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        targets = np.zeros((len(positions), self.vocab_size), np.float32)
        for row in range(len(positions)):
            np.add.at(targets[row], self.vocabulary.first, p[row])
        return targets

    def secret_first(self, positions: list[EndgamePosition]) -> np.ndarray:
        return self.vocabulary.first[[self.index[p.secret] for p in positions]]


@contextmanager
def lora_off(model: nn.Module) -> Iterator[None]:
    """The model without its LoRA updates inside the block (their scales 0): the frozen teacher."""
    layers = [m for m in model.modules() if isinstance(m, LoRALinear)]
    scales = [m.scale for m in layers]
    for m in layers:
        m.scale = 0.0
    try:
        yield
    finally:
        for m, s in zip(layers, scales):
            m.scale = s


def naming_logits(model: nn.Module, mids: mx.array) -> mx.array:
    """Next-token logits from the states after the last layer's attention, through its MLP (and
    LoRA) and the output layer: what the model itself names there."""
    last = model.model.layers[-1]
    out = mids + last.mlp(last.post_attention_layernorm(mids))
    return output_layer(model)(model.model.norm(out)).astype(mx.float32)


def distill_loss(model: nn.Module, mids: mx.array, targets: mx.array) -> mx.array:
    """Cross-entropy from the head's first-token distribution to the model's next token."""
    return -(targets * nn.log_softmax(naming_logits(model, mids), axis=-1)).sum(axis=-1).mean()


def first_token_figures(probabilities: np.ndarray, secret_first: np.ndarray) -> dict[str, float]:
    """`top1`: the share of positions whose most likely first token opens the secret; `mean_p`: that
    token's mean probability (for a secret of one token, the word's)."""
    rows = np.arange(len(secret_first))
    return {"top1": round(float(np.mean(probabilities.argmax(axis=1) == secret_first)), 5),
            "mean_p": round(float(np.mean(probabilities[rows, secret_first])), 5)}


def distill_positions(settings: DistillSettings) -> dict[str, list[EndgamePosition]]:
    """Training positions on the allowed list's training words (seeded apart from the head's fit),
    held-out validation positions, and training answers' positions."""
    answers = load_setup("answers")
    seed = settings.seed * 1_000_003 + 17
    return {"train": one_candidate_positions(load_setup("allowed"), sorted(trainable(answers.lists.allowed)),
                                             settings.positions, seed),
            "validation": one_candidate_positions(answers, sorted(held_out_validation(answers.lists.answers)),
                                                  settings.validation_positions, seed + 1),
            "answers": one_candidate_positions(answers, sorted(trainable(answers.lists.answers)),
                                               settings.answer_positions, seed + 2)}


def trainable_model(model_spec: str, adapter: str, settings: DistillSettings, dtype: str):
    """The start fused, a LoRA on every projection, and only the last layer's MLP LoRA trainable."""
    mx.random.seed(settings.seed)
    policy = load_policy(model_spec, adapter, AdapterSettings(rank=settings.rank, scale=settings.scale), dtype)
    last = policy.model.model.layers[-1]
    if not all(hasattr(last, name) for name in ("mlp", "self_attn", "input_layernorm", "post_attention_layernorm")):
        raise UserError(f"distill reads a llama-style last layer (self_attn, mlp and their norms); --model "
                        f"{model_spec}'s is a {type(last).__name__}")
    policy.model.freeze()
    for name in TRAINED:
        module = last
        for part in name.split("."):
            module = getattr(module, part)
        module.unfreeze(keys=["lora_a", "lora_b"], strict=False)
    return policy


def run_distill(model_spec: str, adapter: str, out: str, settings: DistillSettings, dtype: str = "auto",
                show_progress: bool = True) -> dict:
    """`distill`: the frozen pass over every position (resumed from OUT/states.npz), then the fit."""
    folder = Path(out)
    head_file = head_beside(adapter)
    if head_file is None:
        raise UserError(f"--adapter {adapter} has no naming head beside it: fit one with naming-head first")
    head = NamingHead.load(head_file)
    _check_settings(folder, model_spec, adapter, settings)
    began = time.perf_counter()
    splits = distill_positions(settings)
    policy = trainable_model(model_spec, adapter, settings, dtype)
    teacher = Teacher(policy.model, policy.tokenizer, head)
    mids, finals = _gather(folder / STATES_FILE, teacher, splits, show_progress)
    gathered = time.perf_counter()
    targets = {name: teacher.targets(finals[name], splits[name]) for name in SPLITS}
    secrets = {name: teacher.secret_first(splits[name]) for name in SPLITS}
    curve, best = _fit(policy, mids, targets, secrets, settings, folder, show_progress)
    policy.model.load_weights(list(best.pop("weights").items()), strict=False)
    policy.export(folder / "best")
    summary = {"model": model_spec, "adapter": adapter, "head": str(head_file), "settings": asdict(settings),
               "positions": {name: len(p) for name, p in splits.items()},
               "head_figures": {name: first_token_figures(targets[name], secrets[name]) for name in SPLITS},
               "curve": curve, "best": best, "states_seconds": round(gathered - began, 1),
               "fit_seconds": round(time.perf_counter() - gathered, 1)}
    atomic_write_json(folder / "summary.json", summary)
    return summary


def _fit(policy, mids: dict[str, np.ndarray], targets: dict[str, np.ndarray], secrets: dict[str, np.ndarray],
         settings: DistillSettings, folder: Path, show_progress: bool) -> tuple[list[dict], dict]:
    """Full-batch Adam on the training positions; the epoch best on validation (top-1, then mean p)."""
    model = policy.model
    h = {name: mx.array(array) for name, array in mids.items()}
    train_targets = mx.array(targets["train"])
    loss_and_grad = nn.value_and_grad(model, lambda m: distill_loss(m, h["train"], train_targets))
    optimizer = optim.Adam(learning_rate=settings.lr)

    def reading(epoch: int, loss: float | None) -> dict:
        point = {"epoch": epoch, "loss": None if loss is None else round(loss, 5)}
        for name in SPLITS:
            point[name] = first_token_figures(np.array(mx.softmax(naming_logits(model, h[name]), axis=-1)),
                                              secrets[name])
        append_line(folder / METRICS_FILE, json.dumps(point))
        return point

    curve = [reading(0, None)]
    best = {**curve[0], "weights": dict(_trainable(model))}
    with progress_bar("epochs", disable=not show_progress) as progress:
        task = progress.add_task("distill fit", total=settings.epochs)
        for epoch in range(1, settings.epochs + 1):
            loss, grads = loss_and_grad(model)
            optimizer.update(model, grads)
            mx.eval(model.trainable_parameters(), optimizer.state, loss)
            if not np.isfinite(float(loss)):
                raise UserError(f"epoch {epoch}: the loss is not finite (lower --lr); nothing was written")
            if epoch % settings.eval_every == 0 or epoch == settings.epochs:
                point = reading(epoch, float(loss))
                curve.append(point)
                if (point["validation"]["top1"], point["validation"]["mean_p"]) > \
                        (best["validation"]["top1"], best["validation"]["mean_p"]):
                    best = {**point, "weights": dict(_trainable(model))}
            progress.advance(task)
    return curve, best


def _trainable(model: nn.Module) -> Iterator[tuple[str, mx.array]]:
    from mlx.utils import tree_flatten

    return iter(tree_flatten(model.trainable_parameters()))


def _gather(path: Path, teacher: Teacher, splits: dict[str, list[EndgamePosition]],
            show_progress: bool) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Every split's (mid, final) states: those in `path` first, then the rest, saved after each pass."""
    hidden = teacher.model.args.hidden_size
    saved = read_arrays(path, "a distill states file", "delete it to start again") if path.exists() else {}
    mids = {name: saved.get(f"{name}_mid", np.zeros((0, hidden), np.float32)) for name in SPLITS}
    finals = {name: saved.get(f"{name}_final", np.zeros((0, hidden), np.float32)) for name in SPLITS}
    for name in SPLITS:
        keys = [str(k) for k in saved.get(f"{name}_keys", [])]
        if keys != [p.key for p in splits[name][:len(keys)]] or mids[name].shape[1:] != (hidden,):
            raise UserError(f"{path} holds other positions or another model's states: delete it to start again")
    missing = sum(len(splits[name]) - len(mids[name]) for name in SPLITS)
    with progress_bar("positions", disable=not show_progress or not missing) as progress:
        task = progress.add_task("frozen pass", total=missing)
        for name in SPLITS:
            while len(mids[name]) < len(splits[name]):
                done = len(mids[name])
                mid, final = teacher.states(splits[name][done:done + 4 * PASS_BATCH])
                mids[name], finals[name] = np.concatenate([mids[name], mid]), np.concatenate([finals[name], final])
                _save_states(path, mids, finals, splits)
                progress.advance(task, len(mid))
    return mids, finals


def _save_states(path: Path, mids: dict, finals: dict, splits: dict[str, list[EndgamePosition]]) -> None:
    arrays = {}
    for name in SPLITS:
        arrays[f"{name}_mid"], arrays[f"{name}_final"] = mids[name], finals[name]
        arrays[f"{name}_keys"] = np.array([p.key for p in splits[name][:len(mids[name])]])

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)

    atomic_write(path, write)


def _check_settings(folder: Path, model_spec: str, adapter: str, settings: DistillSettings) -> None:
    """A new run records its settings; one run again must hold the same positions (only the fit's
    settings may change: the states are what a rerun reuses)."""
    record = {"model": model_spec, "adapter": str(adapter), **asdict(settings)}
    path = folder / SETTINGS_FILE
    fixed = ("model", "adapter", "positions", "validation_positions", "answer_positions", "seed")
    if path.exists():
        saved = read_json(path, "distill settings")
        changed = [k for k in fixed if saved.get(k) != record[k]]
        if changed:
            raise UserError(f"{folder} is a distill run with {changed[0]} {saved.get(changed[0])!r}, not "
                            f"{record[changed[0]]!r}: run it as it was started, or choose another --out")
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, record)


def summary_line(summary: dict) -> str:
    """One line: the plain model's top-1 at held-out validation and training answers' positions,
    before and at the chosen epoch, beside the head's."""
    start, best, head = summary["curve"][0], summary["best"], summary["head_figures"]
    return (f"distill (epoch {best['epoch']} of {summary['settings']['epochs']}, {summary['positions']['train']:,} "
            f"positions): the model's own next token opens the secret at held-out validation positions "
            f"{start['validation']['top1']:.3f} -> {best['validation']['top1']:.3f} (the head "
            f"{head['validation']['top1']:.3f}), training answers {start['answers']['top1']:.3f} -> "
            f"{best['answers']['top1']:.3f}, its training positions {start['train']['top1']:.3f} -> "
            f"{best['train']['top1']:.3f}")

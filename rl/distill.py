"""Distil the naming head into the model: the LoRA learns to name what the head names.

The head (llm/naming_head.py) is a readout of the model's final state at ` Only` that scores every
allowed word by its first token's embedding and its spelling; it names held-out secrets the
model's own next token never names (the SFT start writes one of the ~2,000 answers it was taught).
But it plays only inside this toolkit. Here the model's own next-token distribution at the naming
token is trained toward the head's, marginalised over each word's first token: a soft target over
thousands of words, not the one secret, at fresh teacher positions of every training word of the
allowed list (about 11,700, never a held-out one), each seen once. Hard targets (the secret) at a
few hundred positions taught either recall (the answers list) or made-up words (the allowed list)
(results/endgame-sft/, results/endgame-allowed/); the head's distribution is a function of the
state that already generalises, and a function of the state is what a LoRA over the top layers
can learn, where a list of positions is what it memorises.

The teacher is frozen: the start model (the LoRA switched off) and its head. A step draws `batch`
new positions (the solver's games on training words, each game's first position with one
candidate left, the teacher's true thought up to ` Only`), runs the frozen model once over each
(keeping the hidden states entering the top `layers` layers, and the final state the head reads),
then the top layers with the LoRA forward and back. The LoRA spans every layer so that the
adapter it leaves is an ordinary one over the start (rl/policy.py merged_adapter), but only the
top layers' part trains, so the frozen pass's lower states stay exact.

Held-out validation positions (the answer list's validation words) are read every `eval_every`
steps: the share where the plain model's most likely next token is the secret's first token and
the secret first token's mean probability, beside the same on training words (memory or skill)
and the head's own figures; RUN/best is the step best on validation.
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

from common.errors import UserError, note
from common.fileio import append_line, atomic_write_json, read_json
from common.knobs import knob, knob_like
from common.options import SEED
from common.progress import progress_bar
from eval.endgame import EndgamePosition
from eval.splits import held_out_validation, trainable
from llm.adapter_files import save_adapter
from llm.generation import copy_cache, prefix_cache, shared_prefix_length
from llm.naming_head import NamingHead, head_beside
from llm.vector_exp import vector_exp
from llm.output_layer import output_layer
from llm.word_steering import WordTokens, head_scorer
from rl.naming_head import naming_context, one_candidate_positions
from rl.policy import load_policy, merged_adapter
from sft.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from sft.lora import AdapterSettings
from solver.setup import load_setup

SETTINGS_FILE = "distill.json"  # the run's settings, compared on resume
METRICS_FILE = "metrics.jsonl"  # one line a step, and the validation figures where read
CHUNK = 64  # positions drawn at a time, each chunk from its own seed (a resumed run draws the same)


@dataclass(frozen=True)
class DistillSettings:
    steps: int = knob(300, "Steps, each on `batch` new positions.", range=(1, 1_000_000), flag="--steps")
    batch: int = knob(8, "New teacher positions a step.", range=(1, 1024), flag="--batch")
    layers: int = knob(4, "Top layers whose LoRA trains (the frozen pass keeps the states entering them).",
                       range=(1, 1024), flag="--layers")
    rank: int = knob(8, "LoRA rank.", range=(1, 1024), flag="--rank")
    scale: float = knob(20.0, "Multiplier of the LoRA update.", range=(0.0, 1000.0), open_low=True)
    lr: float = knob(1e-4, "Adam learning rate.", range=(0.0, 1.0), open_low=True, flag="--lr")
    hard: float = knob(0.0, "Share of the target given to the secret's first token (0: the head alone).",
                       range=(0.0, 1.0), flag="--hard")
    eval_every: int = knob(25, "Steps between validation readings and checkpoints.", range=(1, 1_000_000),
                           flag="--eval-every")
    validation_positions: int = knob(200, "Held-out validation positions read (the answer list's validation "
                                          "words).", range=(1, 100_000), flag="--validation-positions")
    train_positions: int = knob(200, "Training-answer positions read beside them (memory or skill).",
                                range=(1, 100_000), flag="--train-positions")
    seed: int = knob_like(SEED)


@dataclass(frozen=True)
class Contexts:
    """Teacher positions as the frozen pass leaves them: each context's hidden states entering the
    top layers (tokens, hidden), its secret's first token, and the head's first-token target."""

    lower: list[np.ndarray]
    secret_first: np.ndarray
    targets: np.ndarray  # (positions, vocab) the head's probability of each first token


class Teacher:
    """The frozen start and its head: lower states and first-token targets of positions."""

    def __init__(self, model: nn.Module, tokenizer, head: NamingHead, below: int) -> None:
        self.model, self.tokenizer, self.below = model, tokenizer, below
        self.vocabulary = WordTokens.of(tokenizer, load_setup("answers").lists.allowed)
        self.index = {w: i for i, w in enumerate(self.vocabulary.words)}
        self.score = head_scorer(model, head, self.vocabulary)
        self.first = mx.array(self.vocabulary.first)
        self.vocab_size = output_layer(model)(mx.zeros((1, model.args.hidden_size))).shape[-1]

    def contexts(self, positions: list[EndgamePosition], hard: float = 0.0) -> Contexts:
        tokens = [naming_context(self.tokenizer, p) for p in positions]
        with lora_off(self.model), vector_exp(self.model):
            lower, finals = self._frozen_pass(tokens)
        targets = self._targets(finals, positions)
        secret_first = self.vocabulary.first[[self.index[p.secret] for p in positions]]
        if hard:
            targets = (1 - hard) * targets
            targets[np.arange(len(positions)), secret_first] += hard
        return Contexts(lower, secret_first, targets)

    def _frozen_pass(self, tokens: list[list[int]]) -> tuple[list[np.ndarray], mx.array]:
        """Every context's states entering layer `below`, and its final normed state at its last token.
        The opening all contexts share runs once (its cache and lower states reused by each)."""
        inner = self.model.model
        shared = shared_prefix_length(tokens) if len(tokens) > 1 else len(tokens[0]) - 1
        prefix = prefix_cache(self.model, tokens[0][:shared])
        opening = _lower_states(inner, tokens[0][:shared], self.below)
        rests = [t[shared:] for t in tokens]
        width = max(map(len, rests))
        caches = [copy_cache(layer, len(rests)) for layer in prefix]
        h = inner.embed_tokens(mx.array([r + [0] * (width - len(r)) for r in rests]))
        mask = create_attention_mask(h, caches[0])
        lower = None
        for i, (layer, cache) in enumerate(zip(inner.layers, caches)):
            if i == self.below:
                lower = h
            h = layer(h, mask, cache=cache)
        last = mx.array([len(r) - 1 for r in rests])
        finals = inner.norm(h[mx.arange(len(rests)), last]).astype(mx.float32)
        mx.eval(lower, finals)
        lower_np = np.array(lower.astype(mx.float32))
        return [np.concatenate([opening, lower_np[row, :len(r)]]) for row, r in enumerate(rests)], finals

    def _targets(self, finals: mx.array, positions: list[EndgamePosition]) -> np.ndarray:
        """The head's word distribution (words played or refused there banned, as in play) summed
        onto each word's first token: (positions, vocab)."""
        logits = np.array(self.score(finals))
        for row, position in enumerate(positions):
            banned = [*position.state.guesses, *(r.guess for r in position.rejected)]
            logits[row, [self.index[w] for w in banned if w in self.index]] = -np.inf
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        targets = np.zeros((len(positions), self.vocab_size), np.float32)
        for row in range(len(positions)):
            np.add.at(targets[row], self.vocabulary.first, p[row])
        return targets


def _lower_states(inner: nn.Module, tokens: list[int], below: int) -> np.ndarray:
    """The states of `tokens` (one sequence from the start) entering layer `below`."""
    h = inner.embed_tokens(mx.array(tokens)[None])
    for layer in inner.layers[:below]:
        h = layer(h, "causal")
    return np.array(h[0].astype(mx.float32))


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


def top_logits(model: nn.Module, lower: list[np.ndarray], below: int) -> mx.array:
    """Next-token logits at each context's last token, from its lower states through the top layers
    (their LoRA included): what the model itself would name. Differentiable in the LoRA."""
    inner = model.model
    width = max(len(x) for x in lower)
    hidden = lower[0].shape[1]
    h = mx.array(np.stack([np.concatenate([x, np.zeros((width - len(x), hidden), np.float32)]) for x in lower]))
    for layer in inner.layers[below:]:
        h = layer(h, "causal")
    last = mx.array([len(x) - 1 for x in lower])
    return output_layer(model)(inner.norm(h[mx.arange(len(lower)), last])).astype(mx.float32)


def distill_loss(model: nn.Module, lower: list[np.ndarray], targets: mx.array, below: int) -> mx.array:
    """Cross-entropy from the head's first-token distribution to the model's next token."""
    return -(targets * nn.log_softmax(top_logits(model, lower, below), axis=-1)).sum(axis=-1).mean()


def first_token_figures(probabilities: np.ndarray, secret_first: np.ndarray) -> dict[str, float]:
    """`top1`: the share of positions whose most likely first token opens the secret; `mean_p`: that
    token's mean probability (for a secret of one token, the word's)."""
    rows = np.arange(len(secret_first))
    return {"top1": float(np.mean(probabilities.argmax(axis=1) == secret_first)),
            "mean_p": float(np.mean(probabilities[rows, secret_first]))}


def model_figures(model: nn.Module, contexts: Contexts, below: int, batch: int = 16) -> dict[str, float]:
    """`first_token_figures` of the model's own next token at the contexts (no head)."""
    found = []
    for start in range(0, len(contexts.lower), batch):
        logits = top_logits(model, contexts.lower[start:start + batch], below)
        found.append(np.array(mx.softmax(logits, axis=-1)))
    return first_token_figures(np.concatenate(found), contexts.secret_first)


def training_positions(seed: int, chunk: int) -> list[EndgamePosition]:
    """Chunk `chunk` of the run's stream of teacher positions on the allowed list's training words."""
    words = sorted(trainable(load_setup("answers").lists.allowed))
    return one_candidate_positions(load_setup("allowed"), words, CHUNK, seed * 1_000_003 + chunk)


def reading_positions(settings: DistillSettings) -> dict[str, list[EndgamePosition]]:
    """The positions read at every validation: held-out validation answers, and training answers."""
    answers = load_setup("answers")
    return {"validation": one_candidate_positions(answers, sorted(held_out_validation(answers.lists.answers)),
                                                  settings.validation_positions, settings.seed + 101),
            "train": one_candidate_positions(answers, sorted(trainable(answers.lists.answers)),
                                             settings.train_positions, settings.seed + 202)}


def run_distill(model_spec: str, adapter: str, out: str, settings: DistillSettings, dtype: str = "auto",
                show_progress: bool = True) -> dict:
    """`distill`: train the LoRA toward the head at fresh positions; resumes from RUN's last checkpoint."""
    folder = Path(out)
    head_file = head_beside(adapter)
    if head_file is None:
        raise UserError(f"--adapter {adapter} has no naming head beside it: fit one with naming-head first")
    head = NamingHead.load(head_file)
    _check_settings(folder, model_spec, adapter, settings)
    mx.random.seed(settings.seed)
    policy = load_policy(model_spec, adapter, AdapterSettings(rank=settings.rank, scale=settings.scale), dtype)
    model = policy.model
    layers = len(model.model.layers)
    if settings.layers > layers:
        raise UserError(f"--layers {settings.layers}: the model has {layers} layers")
    below = layers - settings.layers
    model.freeze()
    for layer in model.model.layers[below:]:
        layer.unfreeze(keys=["lora_a", "lora_b"], strict=False)
    teacher = Teacher(model, policy.tokenizer, head, below)
    optimizer = optim.Adam(learning_rate=settings.lr)
    step, extra = 0, {"curve": [], "best": None}
    if latest_checkpoint(folder) is not None:
        checkpoint = load_checkpoint(folder, model, optimizer)
        step, extra = checkpoint.step, checkpoint.extra
        note(f"resuming {out} from step {step}")
    began = time.perf_counter()
    readings = reading_positions(settings)
    read = {name: teacher.contexts(positions) for name, positions in readings.items()}
    if not extra["curve"]:
        extra["head"] = {name: first_token_figures(c.targets, c.secret_first) for name, c in read.items()}
        _read(model, read, below, 0, extra, policy, folder, time.perf_counter() - began)
    loss_and_grad = nn.value_and_grad(model, lambda m, lower, targets: distill_loss(m, lower, targets, below))
    with progress_bar("steps", disable=not show_progress) as progress:
        task = progress.add_task("distill", total=settings.steps, completed=step)
        while step < settings.steps:
            step += 1
            positions = _positions_of_step(settings, step)
            contexts = teacher.contexts(positions, settings.hard)
            loss, grads = loss_and_grad(model, contexts.lower, mx.array(contexts.targets))
            optimizer.update(model, grads)
            mx.eval(model.trainable_parameters(), optimizer.state, loss)
            if not np.isfinite(float(loss)):
                raise UserError(f"step {step}: the loss is not finite (lower --lr); the run stops at its last "
                                "checkpoint")
            append_line(folder / METRICS_FILE, json.dumps({"step": step, "loss": round(float(loss), 5)}))
            if step % settings.eval_every == 0 or step == settings.steps:
                _read(model, read, below, step, extra, policy, folder, time.perf_counter() - began)
                save_checkpoint(folder, model, optimizer, step, policy.adapter_config, extra)
            progress.advance(task)
    policy.export(folder / "adapter")
    summary = {"model": model_spec, "adapter": adapter, "head": str(head_file), "settings": asdict(settings),
               "steps": step, "positions_seen": step * settings.batch, **extra}
    atomic_write_json(folder / "summary.json", summary)
    return summary


def _positions_of_step(settings: DistillSettings, step: int) -> list[EndgamePosition]:
    first = (step - 1) * settings.batch
    chunks = range(first // CHUNK, (first + settings.batch - 1) // CHUNK + 1)
    drawn = [p for chunk in chunks for p in training_positions(settings.seed, chunk)]
    offset = first - chunks[0] * CHUNK
    return drawn[offset:offset + settings.batch]


def _read(model, read: dict[str, Contexts], below: int, step: int, extra: dict, policy, folder: Path,
          seconds: float) -> None:
    """Read the figures at `step`, add them to the curve, and write RUN/best when validation is best."""
    point = {"step": step, **{name: model_figures(model, contexts, below) for name, contexts in read.items()},
             "seconds": round(seconds, 1)}
    extra["curve"].append(point)
    append_line(folder / METRICS_FILE, json.dumps(point))
    key = (point["validation"]["top1"], point["validation"]["mean_p"])
    best = extra.get("best")
    if best is None or key > (best["validation"]["top1"], best["validation"]["mean_p"]):
        extra["best"] = point
        policy.export(folder / "best")
    print(f"step {step}: validation top1 {point['validation']['top1']:.3f} mean_p "
          f"{point['validation']['mean_p']:.3f} | training answers top1 {point['train']['top1']:.3f} "
          f"mean_p {point['train']['mean_p']:.3f}", flush=True)


def _check_settings(folder: Path, model_spec: str, adapter: str, settings: DistillSettings) -> None:
    """A new run records its settings; a resumed one must match them (all but steps)."""
    record = {"model": model_spec, "adapter": str(adapter), **asdict(settings)}
    path = folder / SETTINGS_FILE
    if path.exists():
        saved = read_json(path, "distill settings")
        changed = [k for k in record if k != "steps" and saved.get(k) != record[k]]
        if changed:
            raise UserError(f"{folder} is a distill run with {changed[0]} {saved.get(changed[0])!r}, not "
                            f"{record[changed[0]]!r}: run it as it was started, or choose another --out")
    else:
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, record)

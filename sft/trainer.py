"""The SFT training step, in one reusable class: `sft` and RL's filtered expert iteration share it.

    trainer = SFTTrainer(model, tokenizer, OptimizerSettings(learning_rate=1e-4, total_steps=1000))
    stats = trainer.train_on_messages(conversations, steps=50, batch_size=4, seed=7)
    val = trainer.loss(trainer.tokenize(valid_conversations), batch_size=4)
    stats = trainer.train_step(collate(trainer.tokenize(conversations)))  # or one batch at a time

`model` is any mlx-lm model with its trainable parameters chosen (`sft.lora.attach_adapter`);
conversations are chat message lists ending with the assistant's answer, and only the
answer's tokens carry loss (mlx-lm's ChatDataset with mask_prompt). One step = masked
cross-entropy, gradient clipping by global norm, Adam with linear warm-up then cosine
decay (mlx-lm's `build_schedule`). The schedule reads the optimizer's own step counter,
so restoring the optimizer state (`sft.checkpoint`) puts the learning rate back where
it was.

The output layer runs on the answer positions only. With a 49k-token vocabulary it
costs a fifth of the model's forward pass, and the full (batch x length x vocab)
logits of mlx-lm's `default_loss` dominate memory, yet only the ~20% of positions
that are answer tokens carry loss: gathering them first makes a SmolLM2 step about a
third faster. The split (llm/output_layer.py: `model.model`, the transformer, then
`lm_head` or the tied embeddings) is checked against `model(...)` once, and a model
that does not follow it is run whole.

Batches come from `BatchOrder`: examples sorted by length and cut into batches (as
mlx-lm's `iterate_batches` does, so padding stays small), the batch order shuffled per
epoch from (seed, epoch). Unlike mlx-lm's generator, which draws from numpy's global
RNG as it goes, batch k can be looked up directly, so a resumed run sees exactly the
data the interrupted one would have.

Under `mlx.launch` (llm/distributed.py) each process trains on its share of a batch:
its step weights its gradient by its share of the batch's answer tokens and sums the
ranks' (mlx's `average_gradients`), so the step is the one a single process would take
on the whole batch; the loss and token counts it reports are the whole batch's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from typing import Callable

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
from mlx_lm.tuner.utils import build_schedule

from common.knobs import knob
from llm import distributed
from llm.output_layer import output_split
from sft.data import Conversation, Tokenized, tokenize

PAD_MULTIPLE = 32  # as mlx-lm: few distinct shapes, so few recompilations
MAX_STEPS = 10_000_000  # as rl's steps: mlx's schedules fail on step counts past 64 bits (std::bad_cast)
MIN_LR_RATIO = 0.1  # the cosine's floor, as a fraction of the peak learning rate


@dataclass(frozen=True)
class OptimizerSettings:
    """Adam's schedule and clipping. `sft` takes its knobs over (sft/config.py), so that a flag accepts
    what the schedule can use."""

    learning_rate: float = knob(1e-4, "Peak learning rate (linear warm-up, then cosine decay to "
                                      f"{MIN_LR_RATIO:.0%}).", range=(0, 1), open_low=True)
    total_steps: int = knob(1000, "Steps until the cosine reaches its floor.", range=(1, MAX_STEPS))
    warmup_steps: int = knob(0, "Steps of the linear ramp from 0 to learning_rate.", range=(0, MAX_STEPS))
    min_lr_ratio: float = knob(MIN_LR_RATIO, "The floor, as a fraction of learning_rate.", range=(0.0, 1.0))
    grad_clip: float = knob(1.0, "Global gradient norm gradients are clipped to.", range=(0.0, None), open_low=True)


@dataclass(frozen=True)
class Batch:
    inputs: mx.array  # (B, W) token ids, zero-padded; W = 1 + a multiple of 32
    answer_at: mx.array  # flat positions in inputs[:, 1:] of the answer tokens, padded to a multiple of 32
    weights: mx.array  # 1.0 for an answer token, 0.0 for padding positions
    tokens: int  # real (unpadded) tokens in the batch
    answer_tokens: int  # tokens that carry loss


@dataclass(frozen=True)
class StepStats:
    step: int  # optimizer steps done after this one
    loss: float
    learning_rate: float  # the rate this step used
    grad_norm: float  # before clipping
    tokens: int  # of the whole batch (every rank's share)
    seconds: float

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def make_optimizer(settings: OptimizerSettings) -> optim.Adam:
    decay_steps = max(1, settings.total_steps - settings.warmup_steps)
    schedule = build_schedule({
        "name": "cosine_decay",
        "arguments": [settings.learning_rate, decay_steps, settings.learning_rate * settings.min_lr_ratio],
        "warmup": settings.warmup_steps,
    })
    return optim.Adam(learning_rate=schedule)


def _padded(n: int) -> int:
    return PAD_MULTIPLE * ((n + PAD_MULTIPLE - 1) // PAD_MULTIPLE)


def answer_bucket(n: int) -> int:
    """`n` answer positions rounded up to a quarter of their leading power of two (at least
    PAD_MULTIPLE): 1,000-2,000 positions fall in 4 sizes, not 32. The compiled step traces
    once per input shape, and a GPU step is launch-bound (0.105 s fixed per step on an H100),
    so a new shape every batch costs more than the padded rows of the output layer, which
    are at most a quarter of them (`weights` zero them out of the loss)."""
    if n <= 4 * PAD_MULTIPLE:
        return _padded(n)
    step = (1 << (n.bit_length() - 1)) // 4
    return step * ((n + step - 1) // step)


def collate(examples: list[Tokenized]) -> Batch:
    """Pad tokenized examples into one batch and list where their answer tokens are."""
    lengths = [len(tokens) for tokens, _ in examples]
    width = 1 + _padded(max(lengths))
    inputs = np.zeros((len(examples), width), np.int32)
    answer_at = []
    for row, (tokens, offset) in enumerate(examples):
        inputs[row, :len(tokens)] = tokens
        # target j of a row is token j + 1, so answer token p is target p - 1
        answer_at.extend(row * (width - 1) + p - 1 for p in range(max(offset, 1), len(tokens)))
    count = len(answer_at)
    answer_at.extend([0] * (answer_bucket(count) - count))
    weights = np.zeros(len(answer_at), np.float32)
    weights[:count] = 1.0
    return Batch(mx.array(inputs), mx.array(answer_at, mx.int32), mx.array(weights), sum(lengths), count)


def answer_loss_for(model: nn.Module) -> Callable[[nn.Module, mx.array, mx.array, mx.array], tuple]:
    """loss(model, inputs, answer_at, weights) -> (mean CE over answer tokens, their count)."""
    split = output_split(model)

    def answer_loss(model: nn.Module, inputs: mx.array, answer_at: mx.array, weights: mx.array):
        targets = inputs[:, 1:].reshape(-1)[answer_at]
        if split is None:
            logits = model(inputs[:, :-1])
            logits = logits.reshape(-1, logits.shape[-1])[answer_at]
        else:
            body, head = split
            hidden = body(inputs[:, :-1])
            logits = head(hidden.reshape(-1, hidden.shape[-1])[answer_at])
        count = weights.sum()
        # In float32 whatever the weights' dtype: a bf16 log-softmax over 49k logits loses the
        # small differences the loss is made of.
        loss = (nn.losses.cross_entropy(logits.astype(mx.float32), targets) * weights).sum() / count
        return loss, count

    return answer_loss


class BatchOrder:
    """Which examples form batch k: length-sorted groups, shuffled per epoch by (seed, epoch)."""

    def __init__(self, lengths: list[int], batch_size: int, seed: int) -> None:
        if len(lengths) < batch_size:
            raise ValueError(f"{len(lengths)} examples cannot fill a batch of {batch_size}")
        by_length = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
        self.groups = [by_length[i:i + batch_size] for i in range(0, len(by_length) - batch_size + 1, batch_size)]
        self.seed = seed
        self._epoch: tuple[int, np.ndarray] | None = None

    def indices(self, step: int) -> list[int]:
        epoch, position = divmod(step, len(self.groups))
        if self._epoch is None or self._epoch[0] != epoch:
            self._epoch = (epoch, np.random.default_rng([self.seed, epoch]).permutation(len(self.groups)))
        return self.groups[self._epoch[1][position]]


class SFTTrainer:
    """Masked-CE training of a model's trainable parameters, one compiled step at a time."""

    def __init__(self, model: nn.Module, tokenizer, settings: OptimizerSettings = OptimizerSettings(),
                 optimizer: optim.Optimizer | None = None) -> None:
        """`optimizer` replaces the one `settings` describe (RL brings its own); clipping still follows `settings`."""
        self.model = model
        self.tokenizer = tokenizer
        self.settings = settings
        self.optimizer = optimizer if optimizer is not None else make_optimizer(settings)
        self.answer_loss = answer_loss_for(model)
        self._step = self._compile_step()

    @property
    def steps_done(self) -> int:
        return int(self.optimizer.step.item())

    def tokenize(self, conversations: list[Conversation]) -> list[Tokenized]:
        return tokenize(self.tokenizer, conversations)

    def _compile_step(self):
        model, optimizer, clip = self.model, self.optimizer, self.settings.grad_clip
        loss_and_grad = nn.value_and_grad(model, self.answer_loss)
        state = [model.state, optimizer.state, mx.random.state]
        data_parallel = distributed.world().size > 1

        @partial(mx.compile, inputs=state, outputs=state)
        def step(inputs: mx.array, answer_at: mx.array, weights: mx.array, share: mx.array):
            (loss, _), grads = loss_and_grad(model, inputs, answer_at, weights)
            if data_parallel:  # `share`: this rank's answer tokens over the whole batch's
                grads = distributed.combine_gradients(grads, share)
                loss = distributed.all_sum(loss * share)
            grads, norm = optim.clip_grad_norm(grads, clip)
            optimizer.update(model, grads)
            return loss, norm

        return step

    def train_step(self, batch: Batch) -> StepStats:
        """One optimizer update on `batch` (this rank's share of it); blocks until it is computed."""
        self.model.train()
        start = time.perf_counter()
        answer_tokens, tokens = distributed.total([batch.answer_tokens, batch.tokens])
        share = mx.array(batch.answer_tokens / max(answer_tokens, 1))
        loss, norm = self._step(batch.inputs, batch.answer_at, batch.weights, share)
        mx.eval(loss, norm, self.model.state, self.optimizer.state)
        seconds = time.perf_counter() - start
        return StepStats(self.steps_done, loss.item(), self.optimizer.learning_rate.item(), norm.item(),
                         int(tokens), seconds)

    def train_on_messages(self, conversations: list[Conversation], steps: int, batch_size: int,
                          seed: int = 0) -> list[StepStats]:
        """`steps` updates on batches of `conversations` (cycled, reshuffled each pass by `seed`).

        Under mlx.launch the conversations are this rank's own and `batch_size` the
        whole batch: each rank's batches hold its share of it.
        """
        examples = self.tokenize(conversations)
        mine = distributed.portion(batch_size, "the batch size")
        order = BatchOrder([len(t) for t, _ in examples], min(mine, len(examples)), seed)
        return [self.train_step(collate([examples[i] for i in order.indices(k)])) for k in range(steps)]

    def loss(self, examples: list[Tokenized], batch_size: int) -> float:
        """Mean per-answer-token loss over `examples` (all of them; under mlx.launch each rank
        takes its share), without training."""
        self.model.eval()
        examples = distributed.mine(examples)
        total, count = mx.array(0.0), mx.array(0.0)
        for start in range(0, len(examples), batch_size):
            batch = collate(examples[start:start + batch_size])
            loss, tokens = self.answer_loss(self.model, batch.inputs, batch.answer_at, batch.weights)
            total, count = total + loss * tokens, count + tokens
            mx.eval(total, count)
        self.model.train()
        return (distributed.all_sum(total) / distributed.all_sum(count)).item()

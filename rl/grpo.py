"""GRPO: group-relative advantages, a clipped importance ratio and a KL leash.

Each group holds the answers sampled at one position. An answer's advantage is its
reward minus the group mean, divided by a scale (`advantage_scale`): the std of all
centred rewards of the step's batch (the default), the group's own std, or nothing.
The group's own std turns any difference into a unit one (rewards [1.5, 1.501, 1.5,
1.5] become [-0.58, +1.73, -0.58, -0.58]: a thousandth of a point weighs like a win);
the batch std keeps a group's spread in proportion to the others'. Groups whose
rewards span less than `tie_threshold` carry no signal worth a step and are dropped
(and replaced by fresh games) before they get here. The loss is PPO's clipped
surrogate per answer token plus `kl_coef` times the k3 KL estimate to the reference
policy (clamped per token, as verl's low_var_kl), averaged over all answer tokens of
the batch (token-level).

With `updates_per_batch` = 1 (the default) the batch is used for one optimizer step,
taken at the weights that sampled it: the importance ratio is exactly 1 and the clip
never acts, so the update is REINFORCE with a group baseline (and the KL leash). The
old log-probs are then the current ones, and no extra pass computes them. Set
`updates_per_batch` > 1 to reuse a batch; from the second update on the ratio moves
and the clip bites.

The reference policy is the same model with its LoRA adapter switched off (scale 0),
so no second copy of the weights exists; with a start adapter fused into the base
weights (rl/policy.py), that is the SFT model RL started from; with `kl_coef` 0 it is
never run. Log-probs are computed in micro-batches of answers of similar length (a group's
answers sorted by length and cut where the padding saved pays for one more pass,
`length_chunks`) that attend to their group's prompt keys and values (computed once per
group, see `GrpoLearner`); one forward and backward graph holds at most `micro_batch_tokens`
answer positions, so neither prompt work nor peak memory grows with the group size. Groups
whose rewards tie carry no signal and never reach this step.

Under `mlx.launch` (llm/distributed.py) each process brings its own groups: the batch
std, the token count the loss is divided by and the gradient are of every rank's
groups together, so the update is the one a single process would make on all of them.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from typing import Callable

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
from mlx.utils import tree_map
from mlx_lm.models.cache import create_attention_mask
from mlx_lm.tuner.lora import LoRAEmbedding, LoRALinear, LoRASwitchLinear

from common.errors import UserError
from common.knobs import knob
from llm import distributed
from llm.generation import STOP_TEXT, Completion
from llm.tolerance import logit_tolerance, weight_dtype
from llm.vector_exp import vector_exp
from rl.optimizer import rl_optimizer
from rl.reward import MAX_WEIGHT
from rl.rollout import Group, Rollout

_LORA_TYPES = (LoRALinear, LoRASwitchLinear, LoRAEmbedding)
ADVANTAGE_SCALES = ("batch", "group", "none")
KL_LOG_RATIO_CLAMP, KL_TOKEN_CLAMP = 20.0, 10.0
# What one more pass over a micro-batch costs, in answer positions: `length_chunks` cuts a group's
# answers by length where more padding than this is saved (16 and 64 timed within 3% of each other,
# 160 slower: results/rl-throughput/).
PASS_POSITIONS = 64


@dataclass(frozen=True)
class GrpoSettings:
    # a LoRA adapter: about 10x what full fine-tuning would use
    learning_rate: float = knob(5e-5, "GRPO learning rate.", range=(0.0, 1.0), open_low=True, flag="--lr")
    warmup_steps: int = knob(2, "Updates over which the rate ramps up to learning_rate.", range=(0, 100_000))
    clip_epsilon: float = knob(0.2, "How far the probability ratio may move before its gradient is clipped.",
                               range=(0.0, 1.0), open_low=True)
    kl_coef: float = knob(0.04, "Weight of the KL to the adapter-free model.", range=(0.0, 100.0), flag="--kl-coef")
    advantage_scale: str = knob("batch", "Divide centred rewards by the batch's std, the group's, or none.",
                                choices=ADVANTAGE_SCALES)
    tie_threshold: float = knob(0.05, "Groups whose rewards span less than this are dropped.",
                                range=(0.0, MAX_WEIGHT))
    # At an endgame position a group without a win still has a spread (playable over unplayable),
    # and it pays whichever playable word the model likes best: a memorised answer over the clues.
    wins_only: bool = knob(False, "Keep only groups in which a sampled answer wins; the rest are dropped like ties.")
    # a pipeline group (4 x 160) is one graph
    micro_batch_tokens: int = knob(640, "Answer positions (padding included) per GRPO forward/backward pass.",
                                   range=(1, 10**7), flag="--micro-batch-tokens")
    max_grad_norm: float = knob(1.0, "Gradients are clipped to this global norm.", range=(0.0, math.inf),
                                open_low=True)
    updates_per_batch: int = knob(1, "Optimizer steps on one batch of groups (>1 makes the ratio clip bite).",
                                  range=(1, 64))
    groups_per_step: int = knob(8, "Informative groups wanted per GRPO step.", range=(1, 100_000), flag="--groups")
    max_rollouts: int = knob(4, "Rounds of fresh games tried to find them.", range=(1, 1000))
    expert_in_group: bool = knob(False, "ei.expert's answer joins every group as one more member (rl/guidance.py).")


def advantages(rewards: list[np.ndarray], scale: str, eps: float = 1e-6,
               sampled: list[int] | None = None) -> list[np.ndarray]:
    """Each group's rewards minus its baseline, over the batch's, the group's or no std (`scale`).

    The baseline is the mean reward of the group's first `sampled[i]` members, the answers
    the policy sampled (all of them when `sampled` is None): an expert's answer added to
    the group (rl/guidance.py) is judged against the policy's answers but does not move
    their baseline, which estimates what the policy itself scores there.
    """
    counts = sampled if sampled is not None else [len(r) for r in rewards]
    arrays = [np.asarray(r, dtype=np.float64) for r in rewards]
    centred = [a - a[:n].mean() for a, n in zip(arrays, counts)]
    if scale == "group":
        return [c / (c.std() + eps) for c in centred]
    if scale == "batch":  # every process's groups under mlx.launch
        std = distributed.pooled_std(np.concatenate(centred) if centred else np.zeros(0))
        return [c / (std + eps) for c in centred]
    return centred


def informative_groups(groups: list[Group], tie_threshold: float, wins_only: bool = False) -> list[Group]:
    """Groups whose rewards span at least `tie_threshold`; the rest carry (almost) no signal.

    With `wins_only`, also only groups in which a sampled answer (not an expert's) names the secret.
    """
    return [g for g in groups if not g.rewards.tied(tie_threshold) and (not wins_only or sampled_win(g))]


def sampled_win(group: Group) -> bool:
    """Some answer the policy sampled in `group` names the secret."""
    sampled = len(group.completions) - group.expert_members
    return bool((group.rewards.component("win")[:sampled] > 0).any())


def collect_groups(play_round, wanted: int, max_rounds: int, tie_threshold: float,
                   on_round: Callable[[int, int], None] = lambda done, kept: None,
                   guide: Callable[[Group], Group] | None = None,
                   wins_only: bool = False) -> tuple[Rollout, list[Group]]:
    """Play fresh rounds of games until `wanted` informative groups exist (at most `max_rounds`).

    `play_round()` plays one round of games and returns its Rollout; `on_round(rounds
    done, informative groups so far)` is told before each round (a round takes minutes on
    a CPU: the progress display says which one is running). `guide`, when given, adds a
    member to each group (the expert's answer, rl/guidance.py) before the tie test;
    `wins_only` keeps only groups in which a sampled answer wins.
    Returns every game and group played (as the model played them), and the informative
    groups (guided).
    """
    rollout = Rollout()
    kept: list[Group] = []
    for done in range(max_rounds):
        on_round(done, len(kept))
        played = play_round()
        rollout.extend(played)
        groups = [guide(g) for g in played.groups] if guide is not None else played.groups
        kept.extend(informative_groups(groups, tie_threshold, wins_only))
        if len(kept) >= wanted:
            break
    return rollout, kept


def answer_tokens(completion: Completion, eos_token_id: int) -> list[int]:
    """The tokens the model produced, with the end-of-sequence token when it stopped on one.

    The generator leaves eos out of `tokens`; an answer that ended by eos (say, an
    empty one) must still be trainable, or stalling would cost the model nothing.
    """
    tokens = list(completion.tokens)
    if completion.finish_reason == "stop" and not completion.text.endswith(STOP_TEXT):
        tokens.append(eos_token_id)
    return tokens


@dataclass(frozen=True)
class MicroBatch:
    answers: mx.array  # (B, A): answer tokens, zero-padded
    mask: mx.array  # (B, A): 1 on real answer tokens
    advantages: mx.array  # (B,)


@dataclass(frozen=True)
class GroupBatch:
    """One group ready for the model: its prompt and its answers in micro-batches."""

    prompt: mx.array  # (P,)
    chunks: list[MicroBatch]

    @property
    def positions(self) -> int:
        """Answer positions the passes compute, padding included."""
        return sum(c.mask.size for c in self.chunks)


def length_chunks(lengths: list[int], max_positions: int, pass_positions: int = PASS_POSITIONS) -> list[list[int]]:
    """Indices of answers, longest first, in runs of similar length: of all the ways to cut the
    sorted answers into runs whose rows x longest answer stay within `max_positions` (a run holds
    at least one answer, however long), the one that computes the fewest positions, padding
    included, counting `pass_positions` for each run's pass. Padding every answer to the group's
    longest computed 48% padding in a pipeline step's update (results/passes/)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    cost, start_of = [0] + [math.inf] * len(order), [0] * (len(order) + 1)
    for end in range(1, len(order) + 1):
        for start in range(end - 1, -1, -1):
            rows, width = end - start, max(1, lengths[order[start]])
            if rows > 1 and rows * width > max_positions:
                break  # longer runs only grow
            total = cost[start] + pass_positions + rows * width
            if total < cost[end]:
                cost[end], start_of[end] = total, start
    runs, end = [], len(order)
    while end:
        runs.append(order[start_of[end]:end])
        end = start_of[end]
    return runs[::-1]


def chunk_graphs(chunks: list[MicroBatch], max_positions: int) -> list[list[int]]:
    """Consecutive chunks in runs whose positions sum within `max_positions`: each run is one
    forward and backward graph (a chunk larger than that goes alone)."""
    graphs: list[list[int]] = []
    for c, chunk in enumerate(chunks):
        if graphs and sum(chunks[i].mask.size for i in graphs[-1]) + chunk.mask.size <= max_positions:
            graphs[-1].append(c)
        else:
            graphs.append([c])
    return graphs


def group_batches(groups: list[Group], advantages: list[np.ndarray], eos_token_id: int,
                  max_positions: int, pass_positions: int = PASS_POSITIONS) -> list[GroupBatch]:
    """Each group's answers in micro-batches of at most `max_positions` answer positions, cut by
    length (`length_chunks`)."""
    batches = []
    for group, adv in zip(groups, advantages):
        answers = [answer_tokens(c, eos_token_id) for c in group.completions]
        chunks = []
        for rows in length_chunks([len(a) for a in answers], max_positions, pass_positions):
            width = max(1, len(answers[rows[0]]))
            tokens = np.zeros((len(rows), width), dtype=np.int32)
            mask = np.zeros((len(rows), width), dtype=np.float32)
            for row, i in enumerate(rows):
                tokens[row, :len(answers[i])] = answers[i]
                mask[row, :len(answers[i])] = 1.0
            chunks.append(MicroBatch(mx.array(tokens), mx.array(mask), mx.array(adv[rows].astype(np.float32))))
        batches.append(GroupBatch(mx.array(np.asarray(group.prompt, dtype=np.int32)), chunks))
    return batches


class SharedPrompt:
    """A differentiable KV cache: a prompt's keys and values, broadcast to a batch of answers.

    Unlike mlx-lm's caches it writes nothing in place, so gradients flow through the
    prompt's keys and values into the weights that made them.
    """

    def __init__(self, keys: mx.array | None = None, values: mx.array | None = None) -> None:
        self.keys, self.values = keys, values
        self.offset = 0 if keys is None else keys.shape[2]

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        if self.keys is not None:
            batch = keys.shape[0]
            keys = mx.concatenate([mx.broadcast_to(self.keys, (batch, *self.keys.shape[1:])), keys], axis=2)
            values = mx.concatenate([mx.broadcast_to(self.values, (batch, *self.values.shape[1:])), values], axis=2)
        self.keys, self.values = keys, values
        self.offset = keys.shape[2]
        return keys, values

    def make_mask(self, n: int, return_array: bool = False, window_size: int | None = None):
        return create_attention_mask(n, offset=self.offset, return_array=return_array, window_size=window_size)


KV = list[tuple[mx.array, mx.array]]


def prompt_kv(model: nn.Module, prompt: mx.array) -> KV:
    """Every layer's keys and values for all but the last prompt token (batch 1).

    The logits of this pass are never evaluated, so the output head skips the prompt.
    """
    cache = [SharedPrompt() for _ in model.layers]
    model(prompt[None, :-1], cache=cache)
    return [(c.keys, c.values) for c in cache]


def answer_logprobs(model: nn.Module, kv: KV, prompt: mx.array, answers: mx.array, temperature: float) -> mx.array:
    """(B, A) log-probs at `temperature` of each answer token, the answers attending to the prompt's `kv`."""
    first = mx.broadcast_to(prompt[-1:], (answers.shape[0], 1))
    inputs = mx.concatenate([first, answers[:, :-1]], axis=1)
    logits = model(inputs, cache=[SharedPrompt(k, v) for k, v in kv])
    return -nn.losses.cross_entropy(logits.astype(mx.float32) / temperature, answers)


def check_shared_prompt(model: nn.Module) -> None:
    """Refuse models whose layers do not reproduce a plain forward pass through `SharedPrompt`."""
    prompt, answers = mx.array([1, 5, 9, 3]), mx.array([[7, 2], [4, 4]])
    try:
        shared = answer_logprobs(model, prompt_kv(model, prompt), prompt, answers, 1.0)
    except (TypeError, ValueError, AttributeError) as err:
        raise UserError(f"rl supports attention models whose layers take a key/value cache: {err}") from err
    whole = model(mx.concatenate([mx.broadcast_to(prompt[None], (2, 4)), answers[:, :-1]], axis=1))[:, 3:]
    plain = -nn.losses.cross_entropy(whole.astype(mx.float32), answers)
    dtype, device = weight_dtype(model), mx.default_device()
    if not shared_prompt_matches(shared, plain, dtype, device):
        rtol, atol = logit_tolerance(dtype, device)
        weights = f"{str(dtype).removeprefix('mlx.core.')} weights on the {device.type.name}"
        raise UserError(f"rl does not support this model: a shared prompt cache changes its outputs (log-probs "
                        f"differ by up to {mx.abs(shared - plain).max().item():.3g}; {weights} allow "
                        f"rtol {rtol:g}, atol {atol:g})")


def shared_prompt_matches(shared: mx.array, plain: mx.array, dtype: mx.Dtype, device: mx.Device) -> bool:
    """Whether log-probs through a shared prompt cache equal the plain pass's, to the precision
    that `dtype` weights keep on `device` (the two paths run different kernels: llm/tolerance.py)."""
    rtol, atol = logit_tolerance(dtype, device)
    return mx.allclose(shared, plain, rtol=rtol, atol=atol).item()


@contextlib.contextmanager
def adapter_disabled(model: nn.Module):
    """The reference policy: every LoRA layer's scale set to 0 for the duration."""
    layers = [m for _, m in model.named_modules() if isinstance(m, _LORA_TYPES)]
    if not layers:
        raise ValueError("the model has no LoRA layers: there is no adapter to switch off")
    scales = [m.scale for m in layers]
    try:
        for m in layers:
            m.scale = 0.0
        yield
    finally:
        for m, scale in zip(layers, scales):
            m.scale = scale


def answers_loss(model: nn.Module, kv: KV, prompt: mx.array, batch: MicroBatch, old: mx.array | None,
                 ref: mx.array | None, settings: GrpoSettings, temperature: float, n_tokens: int):
    """(this micro-batch's share of the loss, (log-probs, KL sum, clipped-token count))."""
    logp = answer_logprobs(model, kv, prompt, batch.answers, temperature)
    old = mx.stop_gradient(logp) if old is None else old
    ratio = mx.exp(logp - old)
    adv = batch.advantages[:, None]
    clipped = mx.clip(ratio, 1.0 - settings.clip_epsilon, 1.0 + settings.clip_epsilon)
    per_token = -mx.minimum(ratio * adv, clipped * adv)
    kl = mx.zeros_like(logp)
    if ref is not None:
        # k3 grows as exp(ref - logp): one token the reference finds e^15 times likelier than the
        # policy does outweighs every other term of the step (a CPU run logged a mean KL of 6,748
        # per token, gradient norm 1.6e5). Clamped as verl's low_var_kl does: log-ratio to +-20,
        # the per-token estimate to 10.
        delta = mx.clip(ref - logp, -KL_LOG_RATIO_CLAMP, KL_LOG_RATIO_CLAMP)
        kl = mx.minimum(mx.exp(delta) - delta - 1.0, KL_TOKEN_CLAMP)
        per_token = per_token + settings.kl_coef * kl
    mask = batch.mask
    loss = (per_token * mask).sum() / n_tokens
    clip_count = ((mx.abs(ratio - 1.0) > settings.clip_epsilon) * mask).sum()
    return loss, (mx.stop_gradient(logp), (kl * mask).sum(), clip_count)


def chunk_loss(params, kv: KV, model: nn.Module, prompt: mx.array, batches: list[MicroBatch],
               olds: list[mx.array | None], refs: list[mx.array | None], settings: GrpoSettings, temperature: float,
               n_tokens: int):
    """(these micro-batches' share of the loss, [(log-probs, KL sum, clipped-token count)] of each).

    Differentiable in `params` (the trainable weights) and in the prompt's `kv`.
    """
    model.update(params)
    total, figures = 0.0, []
    for batch, old, ref in zip(batches, olds, refs):
        loss, parts = answers_loss(model, kv, prompt, batch, old, ref, settings, temperature, n_tokens)
        total = total + loss
        figures.append(parts)
    return total, figures


def group_loss(params, model: nn.Module, prompt: mx.array, batches: list[MicroBatch], refs: list[mx.array | None],
               settings: GrpoSettings, temperature: float, n_tokens: int):
    """`chunk_loss` of a group whose answers fit one graph, its prompt in the same graph: one
    forward and one backward pass through the prompt (and no ratio: old = current)."""
    model.update(params)
    return chunk_loss(params, prompt_kv(model, prompt), model, prompt, batches, [None] * len(batches), refs,
                      settings, temperature, n_tokens)


def prompt_pullback(params, model: nn.Module, prompt: mx.array, kv_grad: KV) -> mx.array:
    """<prompt_kv(params), kv_grad>: its gradient carries the answers' gradient back through the prompt."""
    model.update(params)
    kv = prompt_kv(model, prompt)
    return sum((k * gk).sum() + (v * gv).sum() for (k, v), (gk, gv) in zip(kv, kv_grad))


def trained_tokens(batches: list[GroupBatch]) -> int:
    """Real answer tokens in `batches` (the loss's denominator, summed over ranks)."""
    return int(sum(c.mask.sum().item() for gb in batches for c in gb.chunks))


def _add(a, b):
    return b if a is None else tree_map(mx.add, a, b)


class GrpoLearner:
    """Owns the GRPO optimizer and turns batches of informative groups into updates.

    A group whose micro-batches fit `micro_batch_tokens` together (the usual case) is one
    graph: the prompt's keys and values, its answers' loss, one backward pass. A larger
    group runs its prompt forward once (no graph kept); each run of micro-batches within
    the budget (`chunk_graphs`) then gives gradients for the weights and for the prompt's
    keys/values; one backward pass through the prompt adds the latter's share. Either way
    the result is the exact gradient of whole-sequence log-probs, with prompt work
    independent of the group size and peak memory set by the budget.
    """

    def __init__(self, model: nn.Module, settings: GrpoSettings, temperature: float, eos_token_id: int) -> None:
        check_shared_prompt(model)
        self.model = model
        self.settings = settings
        self.temperature = temperature
        self.eos_token_id = eos_token_id
        self.optimizer = rl_optimizer(settings.learning_rate, settings.warmup_steps)
        self._chunk_grad = mx.value_and_grad(chunk_loss, argnums=(0, 1))
        self._group_grad = mx.value_and_grad(group_loss)
        self._prompt_grad = mx.grad(prompt_pullback)

    def reference_logprobs(self, batches: list[GroupBatch]) -> list[list[mx.array]]:
        """The reference policy's log-probs of each chunk's answers. A pass with no backward: on a CPU
        its attention and SwiGLU take llm/vector_exp.py's exp (1.31x on a G = 8 group's pass, 2.70
        -> 2.06 s, results/rl-throughput/); the gradient's passes keep mlx's, whose backward ran
        faster (a step's gradient 5.0 s against 6.9 with it)."""
        with adapter_disabled(self.model), vector_exp(self.model):
            refs = []
            for gb in batches:
                kv = prompt_kv(self.model, gb.prompt)
                refs.append([answer_logprobs(self.model, kv, gb.prompt, c.answers, self.temperature)
                             for c in gb.chunks])
                mx.eval(refs[-1])
        return refs

    def update(self, groups: list[Group]) -> dict[str, float]:
        """`updates_per_batch` optimizer steps on `groups`; returns the step's loss figures.

        A non-finite loss or gradient skips that update (the weights stay as they were)
        and is counted in `nonfinite_skipped`.
        """
        settings = self.settings
        batches = self.batches(groups)
        local_tokens = trained_tokens(batches)
        n_tokens = max(1, int(distributed.total(local_tokens)))  # every rank's: the loss is the whole step's mean
        began = time.perf_counter()
        refs = self.reference_logprobs(batches) if settings.kl_coef > 0 else None
        reference_seconds = time.perf_counter() - began
        olds: dict[tuple[int, int], mx.array] = {}
        figures = {"loss": 0.0, "kl": 0.0, "clip_fraction": 0.0, "grad_norm": 0.0, "nonfinite_skipped": 0}
        for _ in range(settings.updates_per_batch):
            grads, sums = self.gradients(batches, refs, olds, n_tokens)
            if distributed.world().size > 1:  # each rank's loss is its share of the whole: sum them
                grads = distributed.combine_gradients(
                    grads if grads is not None else tree_map(mx.zeros_like, self.model.trainable_parameters()))
                sums = dict(zip(sums, distributed.total(list(sums.values()))))
            grads, norm = optim.clip_grad_norm(grads, settings.max_grad_norm)
            norm = norm.item()
            if math.isfinite(sums["loss"]) and math.isfinite(norm):
                self.optimizer.update(self.model, grads)
                mx.eval(self.model.parameters(), self.optimizer.state)
            else:
                figures["nonfinite_skipped"] += 1
            figures.update(loss=sums["loss"], kl=sums["kl"] / n_tokens, clip_fraction=sums["clip"] / n_tokens,
                           grad_norm=norm, lr=self.optimizer.learning_rate.item())
        positions = sum(gb.positions for gb in batches)
        figures.update(trained_tokens=n_tokens, padding_share=1.0 - local_tokens / positions if positions else 0.0,
                       update_positions=positions + sum(gb.prompt.size for gb in batches),
                       reference_seconds=reference_seconds)
        return figures

    def batches(self, groups: list[Group], pass_positions: int = PASS_POSITIONS) -> list[GroupBatch]:
        scaled = advantages([g.rewards.total for g in groups], self.settings.advantage_scale,
                            sampled=[len(g.completions) - g.expert_members for g in groups])
        return group_batches(groups, scaled, self.eos_token_id, self.settings.micro_batch_tokens, pass_positions)

    def gradients(self, batches: list[GroupBatch], refs: list[list[mx.array]] | None,
                  olds: dict[tuple[int, int], mx.array], n_tokens: int) -> tuple[dict, dict[str, float]]:
        """The loss's gradient over `batches` and its sums (loss, KL, clipped tokens).

        With `olds` empty this is the batch's first pass, at the weights that sampled it:
        its log-probs are the sampling policy's (old = current, no separate pass), and
        they are put in `olds` for the passes that reuse the batch.
        """
        model, settings = self.model, self.settings
        grads, sums = None, {"loss": 0.0, "kl": 0.0, "clip": 0.0}
        first = not olds
        params = model.trainable_parameters()
        for g, gb in enumerate(batches):
            group_refs = refs[g] if refs is not None else [None] * len(gb.chunks)
            graphs = chunk_graphs(gb.chunks, settings.micro_batch_tokens)
            if first and len(graphs) == 1:
                (part, parts), param_grad = self._group_grad(
                    params, model, gb.prompt, gb.chunks, group_refs, settings, self.temperature, n_tokens)
                grads = _add(grads, param_grad)
                mx.eval(part, parts, grads)
                sums["loss"] += part.item()
            else:
                kv = prompt_kv(model, gb.prompt)
                mx.eval(kv)
                kv_grad, parts = None, []
                for graph in graphs:
                    (part, graph_parts), (param_grad, graph_kv_grad) = self._chunk_grad(
                        params, kv, model, gb.prompt, [gb.chunks[c] for c in graph],
                        [None if first else olds[(g, c)] for c in graph], [group_refs[c] for c in graph],
                        settings, self.temperature, n_tokens)
                    grads, kv_grad = _add(grads, param_grad), _add(kv_grad, graph_kv_grad)
                    mx.eval(part, graph_parts, grads, kv_grad)
                    sums["loss"] += part.item()
                    parts += graph_parts
                grads = _add(grads, self._prompt_grad(params, model, gb.prompt, kv_grad))
                mx.eval(grads)
            for c, (logp, kl, clip) in enumerate(parts):
                if first:
                    olds[(g, c)] = logp  # the sampling policy: later updates measure their ratio against it
                sums["kl"] += kl.item()
                sums["clip"] += clip.item()
        return grads, sums

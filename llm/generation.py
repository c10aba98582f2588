"""Batched sampling with mlx-lm's BatchGenerator, stopping at `</guess>`.

Eval asks for one answer per game; RL asks for a group of answers per position.
The system message every prompt opens with is prefilled once per call; for a group,
the prompt is prefilled once and its KV cache shared by every member, so prefill
work does not grow with the group size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import mlx.core as mx
from mlx_lm.generate import BatchGenerator, StopSequences
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.sample_utils import make_sampler

STOP_TEXT = "</guess>"
MAX_TEMPERATURE = 10.0


@dataclass(frozen=True)
class SamplingSettings:
    """How answers are sampled; temperature 0 is greedy, and past MAX_TEMPERATURE it is noise."""

    temperature: float = 0.7
    top_p: float = 1.0
    max_tokens: int = 160  # the longest solver answer is ~130 tokens; a cut answer counts as malformed


@dataclass(frozen=True)
class Completion:
    text: str
    tokens: tuple[int, ...]
    finish_reason: str  # "stop" (eos or </guess>) or "length"


def stop_sequences(tokenizer) -> StopSequences:
    """End of sequence, or the closing guess tag however the tokenizer splits it in context."""
    sequences = [[t] for t in tokenizer.eos_token_ids]
    for text in (STOP_TEXT, " " + STOP_TEXT, "a" + STOP_TEXT):
        ids = tokenizer.encode(text, add_special_tokens=False)
        if text[0] == "a":
            ids = ids[len(tokenizer.encode("a", add_special_tokens=False)):]
        if ids and ids not in sequences:
            sequences.append(ids)
    return StopSequences(sequences)


def _prefill(model, tokens: list[int], start: list | None = None) -> list:
    """KV cache of `tokens`, continuing the cache `start` if given, which stays as it was.

    mlx-lm's KVCache writes new keys into its buffer in place while the buffer has room,
    and mx.array slice assignment is seen through every reference to that array: a cache
    continued from the shared prefix's buffer would write into the prefix's spare room,
    which every other group continued from that prefix reads too (each group prefilled in
    one call overwrote the earlier groups' prompt tails). So the start's keys and values
    are sliced to new arrays, and the first write here allocates a buffer of its own.
    """
    cache = make_prompt_cache(model)
    if start is not None:
        for layer, begun in zip(cache, start):
            keys, values, offset = begun.state
            layer.state = (keys[..., :offset, :], values[..., :offset, :], offset)
    if tokens:
        model(mx.array(tokens)[None], cache=cache)
        mx.eval([c.state for c in cache])
    return cache


def shared_prefix_length(prompts: list[list[int]]) -> int:
    """Tokens every prompt starts with, leaving each at least one token of its own."""
    shortest = min(len(p) for p in prompts)
    length = 0
    while length < shortest - 1 and all(p[length] == prompts[0][length] for p in prompts):
        length += 1
    return length


def sample(model, tokenizer, prompts: list[list[int]], group_size: int = 1,
           settings: SamplingSettings = SamplingSettings(), batch_size: int = 32,
           processors: list[Callable] | None = None) -> list[list[Completion]]:
    """`group_size` completions for each prompt, in prompt order; `processors` (one logits
    processor per prompt, group size 1) steer each prompt's tokens.

    Seed with `mx.random.seed` beforehand for reproducible samples.
    """
    if not prompts:
        return []
    sampler = make_sampler(temp=settings.temperature, top_p=settings.top_p)
    stops = stop_sequences(tokenizer)
    generator = BatchGenerator(model, stop_tokens=None, sampler=sampler,
                               completion_batch_size=batch_size, prefill_batch_size=min(8, batch_size))
    # Every prompt opens with the same system message: its KV cache is computed once.
    # A group's prompt is computed once too, and its members start from that cache.
    start = shared_prefix_length(prompts)
    prefix = _prefill(model, prompts[0][:start])
    flat_prompts: list[list[int]] = []
    caches: list = []
    for prompt in prompts:
        if group_size > 1:
            flat_prompts.extend([prompt[-1:]] * group_size)
            caches.extend([_prefill(model, prompt[start:-1], prefix)] * group_size)
        else:
            flat_prompts.append(prompt[start:])
            caches.append(prefix)
    uids = generator.insert(flat_prompts, [settings.max_tokens] * len(flat_prompts), caches=caches,
                            stop_sequences=[stops] * len(flat_prompts),
                            logits_processors=[[p] for p in processors] if processors else None)
    tokens: dict[int, list[int]] = {uid: [] for uid in uids}
    reasons: dict[int, str] = {}
    while responses := generator.next_generated():
        for r in responses:
            if r.finish_reason != "stop" or r.token not in tokenizer.eos_token_ids:
                tokens[r.uid].append(r.token)
            if r.finish_reason is not None:
                reasons[r.uid] = r.finish_reason
    generator.close()
    completions = [Completion(_trim(tokenizer.decode(tokens[u])), tuple(tokens[u]), reasons.get(u, "length"))
                   for u in uids]
    return [completions[i * group_size:(i + 1) * group_size] for i in range(len(prompts))]


def _trim(text: str) -> str:
    """Drop anything after the first closing guess tag (a stop may land mid-token)."""
    end = text.find(STOP_TEXT)
    return text if end < 0 else text[: end + len(STOP_TEXT)]

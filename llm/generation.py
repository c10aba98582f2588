"""Batched sampling with mlx-lm's BatchGenerator, stopping at `</guess>`.

Eval asks for one answer per game; RL asks for a group of answers per position.
`GroupStream` is the one engine: continuous batching of groups that callers submit
while others generate (eval submits each round's turns to one stream, RL rollouts put a
game's next position into the running batch); `sample` is a single batch of prompts through it. The system
message every prompt opens with is prefilled once; for a group, the prompt is prefilled
once and its KV cache shared by every member, so prefill work does not grow with the
group size. On a CPU of several cores each core prefills one prompt at a time (an eval's
prefill 1.6x faster, the eval 1.14x, the same games: results/passes/), and on a CPU the passes
compute the attention's and SwiGLU's exp many lanes at once (llm/vector_exp.py: 1.15-1.19x more).

Every answer draws its tokens from random keys of its own (`AnswerSampler`), never from
one draw over the whole batch: which answers share a batch, in what order and how many,
changes no answer (only float rounding of the rows' logits could, and has not been seen to).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

import mlx.core as mx
import numpy as np
from mlx_lm.generate import BatchGenerator, StopSequences
from mlx_lm.models.cache import KVCache, RotatingKVCache, make_prompt_cache
from mlx_lm.sample_utils import apply_top_p

from llm.cpu_streams import core_streams
from llm.tokenizing import tokens_after
from llm.vector_exp import categorical, vector_exp

STOP_TEXT = "</guess>"
MAX_TEMPERATURE = 10.0
REMEMBERED = 16  # groups' prompt caches a GroupStream keeps to continue later prompts (~12 MB each, default model)


@dataclass(frozen=True)
class SamplingSettings:
    """How answers are sampled; temperature 0 is greedy, and past MAX_TEMPERATURE it is noise."""

    temperature: float = 0.7
    top_p: float = 1.0
    max_tokens: int = 160  # the longest solver answer is ~130 tokens; a cut answer counts as malformed


def answer_seed(*parts: int) -> int:
    """A 64-bit seed mixed from non-negative `parts` (an eval's seed, a game, its answer number):
    any two distinct part lists give unrelated seeds."""
    # The count first: SeedSequence reads [5, 0] and [5, 0, 0] as one entropy.
    return int(np.random.SeedSequence([len(parts), *parts]).generate_state(1, np.uint64)[0])


class AnswerSampler:
    """One answer's sampler: its t-th token is drawn with the t-th key split from the answer's
    seed, so the answer is the same whatever shares its batch (one draw over a batch gives each
    row other numbers when the rows change: an eval's games depended on its batch size).

    mlx-lm's batch generator calls it on the answer's own row; it draws one token a call
    (and one more, discarded, past the answer's end: the generator samples a step ahead)."""

    def __init__(self, settings: SamplingSettings, seed: int) -> None:
        self.settings = settings
        greedy = settings.temperature == 0
        self._keys = None if greedy else mx.random.split(mx.random.key(seed), settings.max_tokens + 1)
        self._drawn = 0

    def __call__(self, logprobs: mx.array) -> mx.array:
        if self._keys is None:
            return mx.argmax(logprobs, axis=-1)
        if 0 < self.settings.top_p < 1:
            logprobs = apply_top_p(logprobs, self.settings.top_p)
        key = self._keys[min(self._drawn, self._keys.shape[0] - 1)]
        self._drawn += 1
        return categorical(logprobs * (1.0 / self.settings.temperature), key)


@dataclass
class PassCounters:
    """What a stream's model passes did, to tell prefill from decode (bench/passes.py): prompt
    tokens run through the model and the seconds that took (the stream's own prefills of shared
    starts included), decode steps (one token for every running answer) and their seconds."""

    prefill_tokens: int = 0
    prefill_seconds: float = 0.0
    decode_steps: int = 0
    decode_seconds: float = 0.0
    answer_tokens: int = 0

    def add(self, other: PassCounters) -> None:
        for name, value in vars(other).items():
            setattr(self, name, getattr(self, name) + value)


@dataclass(frozen=True)
class _Request:
    """A submitted prompt waiting for its prefill: its group's id, the samplers of its answers and
    the logits processor that steers a group of one."""

    group: int
    prompt: list[int]
    samplers: list[AnswerSampler]
    processor: Callable | None


@dataclass(frozen=True)
class Completion:
    text: str
    tokens: tuple[int, ...]
    finish_reason: str  # "stop" (eos or </guess>) or "length"


def stop_sequences(tokenizer) -> StopSequences:
    """End of sequence, or the closing guess tag however the tokenizer splits it in context."""
    sequences = [[t] for t in tokenizer.eos_token_ids]
    alone = [tokenizer.encode(text, add_special_tokens=False) for text in (STOP_TEXT, " " + STOP_TEXT)]
    for ids in [*alone, *(list(ids) for ids in tokens_after(tokenizer, "a", [STOP_TEXT]))]:
        if ids and ids not in sequences:
            sequences.append(ids)
    return StopSequences(sequences)


def _prefill(model, tokens: list[int], start: list | None = None, start_length: int | None = None) -> list:
    """KV cache of `tokens`, computed now (`_continued`)."""
    cache = _continued(model, tokens, start, start_length)
    mx.eval([c.state for c in cache])
    return cache


def _continued(model, tokens: list[int], start: list | None = None, start_length: int | None = None) -> list:
    """KV cache of `tokens` (lazy: computed when evaluated, so that several streams can work at
    once), continuing the first `start_length` positions (all by default) of the cache `start`,
    which stays as it was (`first_positions`: `start` must hold them)."""
    cache = make_prompt_cache(model) if start is None else \
        [first_positions(layer, layer.offset if start_length is None else start_length) for layer in start]
    if tokens:
        model(mx.array(tokens)[None], cache=cache)
    return cache


def first_positions(layer, length: int, rows: int = 1):
    """A cache of `layer`'s kind holding its first `length` positions (repeated for `rows`
    sequences), or None when `layer` no longer holds them all: a sliding window's cache
    (Gemma 3's `RotatingKVCache`) once it has let its oldest keys go or wrapped around, or a cache
    of another kind.

    mlx-lm's caches write new keys into their buffer in place while it has room, and mx.array
    slice assignment is seen through every reference to that array: a cache continued from a
    shared buffer would overwrite the prefix's spare room, which the other groups continued from
    the same prefix use too. So the keys and values are sliced to new arrays, and the first write
    to the copy allocates a buffer of its own."""
    def head(array: mx.array) -> mx.array:
        return mx.repeat(array[..., :length, :], rows, axis=0) if rows > 1 else array[..., :length, :]

    if not holds_first(layer, length):
        return None
    if type(layer) is KVCache:
        copy = KVCache()
        copy.state = (head(layer.keys), head(layer.values), length) if length else (None, None, 0)
        return copy
    copy = RotatingKVCache(layer.max_size, layer.keep)
    if length:
        copy.state = (head(layer.keys), head(layer.values), length, layer.keep, layer.max_size, length)
    return copy


def holds_first(layer, length: int) -> bool:
    """Whether `layer` (one layer's cache) still holds its first `length` positions, in order."""
    if type(layer) is KVCache:
        return length <= layer.offset
    return type(layer) is RotatingKVCache and length <= layer.offset == layer._idx  # nothing let go or wrapped


def prefix_cache(model, tokens: list[int]) -> list:
    """KV cache of `tokens` (none when empty), to share as the start of a batch of contexts."""
    return _prefill(model, tokens) if tokens else []


def copy_cache(layer, rows: int):
    """A cache holding `layer`'s keys and values repeated for `rows` sequences; writing to it
    leaves `layer` as it was (`first_positions`)."""
    copy = first_positions(layer, layer.offset, rows)
    if copy is None:
        raise ValueError(f"a {type(layer).__name__} that no longer holds all its positions cannot be shared")
    return copy


def shared_prefix_length(prompts: list[list[int]]) -> int:
    """Tokens every prompt starts with, leaving each at least one token of its own."""
    return min(_common_length(prompts[0], p, len(p) - 1) for p in prompts)


class GroupStream:
    """Continuous batching of groups of answers: one BatchGenerator for every request.

    A caller submits prompts (each wanting `group_size` answers) whenever it likes,
    also while others are being generated, and collects each group as soon as its last
    member has finished; what was submitted is prefilled when `finished` is next called, all
    of it together. A finished answer's slot goes to the next queued sequence at
    once, so a multi-turn caller (RL rollouts) can put a game's next position into the
    running batch instead of waiting for the slowest answer of a round. The tokens of
    `prefix` (the system message every prompt opens with) are prefilled once; a group's
    prompt is prefilled once and its KV cache shared by all members. A new prompt
    continues the longest cached prefix it shares with `prefix` or with one of the last
    `REMEMBERED` groups' prompts: a game's next position repeats its earlier turns (after
    a refused answer, all but one line), and only the rest is prefilled. (Single answers' caches
    are not kept for a game's next turn: merged with others of other lengths they pad every wave,
    and eval ran no faster, results/passes/.)

    Each submission's answers draw from keys of their own (`AnswerSampler`): from the
    `seed` the caller gives it, else from one drawn of mlx's global generator at the first
    such submission and the submission's number (seed with `mx.random.seed` beforehand: the
    same submissions in the same order give the same answers).
    """

    def __init__(self, model, tokenizer, settings: SamplingSettings = SamplingSettings(), batch_size: int = 32,
                 prefix: list[int] | None = None, join_size: int | None = None, spread: bool = True,
                 vector: bool = True) -> None:
        """`join_size`: sequences that may join the running batch at once (default 8, mlx-lm's).
        Groups, whose members start from one prefilled prompt, should join whole (`batch_size`):
        in waves of 8, 16 members of a group took 1.29 GB at peak instead of 0.94 (the batch's
        caches are merged and copied at every wave), while distinct prompts prefilled 32 at a
        time took more (1.32 against 1.22 GB).

        `spread`: on a CPU of several cores, prompts are prefilled one a core (`_start_pending`);
        without it as on a GPU (what benchmarks compare with). `vector`: on a CPU the passes run
        the attention and SwiGLU with llm/vector_exp.py's exp (eval 1.15-1.19x, the same 32 games,
        results/passes/); without it with mlx's."""
        self.model, self.tokenizer, self.settings, self.spread = model, tokenizer, settings, spread
        self.vector = vector
        self._stops = stop_sequences(tokenizer)
        self._generator = BatchGenerator(model, stop_tokens=None, completion_batch_size=batch_size,
                                         prefill_batch_size=min(join_size or 8, batch_size))
        self.passes = PassCounters()
        prefix = list(prefix or [])
        with vector_exp(model, vector):
            self._system = [(prefix, self._prefill(prefix))] if prefix else []
        self._recent: deque[tuple[list[int], list]] = deque(maxlen=REMEMBERED)  # groups' prompts, less the last token
        self._members: dict[int, list[int]] = {}  # group id -> its members' uids
        self._group_of: dict[int, int] = {}  # uid -> group id
        self._tokens: dict[int, list[int]] = {}
        self._reasons: dict[int, str] = {}
        self._next_id = 0
        self._pending: list[_Request] = []  # submitted, not yet prefilled
        self._seed: int | None = None  # for submissions given none: drawn of mlx's generator at the first

    def __len__(self) -> int:
        """Groups submitted and not yet returned."""
        return len(self._members) + len(self._pending)

    def submit(self, prompt: list[int], group_size: int = 1, processor: Callable | None = None,
               seed: int | None = None) -> int:
        """Queue `group_size` answers to `prompt` (a logits `processor` steers a group of one); its
        group id. Member m's tokens are drawn from `answer_seed(seed, m)` (`seed`: the stream's own
        and this submission's number when None)."""
        if processor is not None and group_size != 1:
            raise ValueError("a logits processor steers one answer: use group_size 1")
        group = self._next_id
        if seed is None:
            if self._seed is None:
                self._seed = int(mx.random.randint(0, 2**31 - 1).item())
            seed = answer_seed(self._seed, group)
        samplers = [AnswerSampler(self.settings, answer_seed(seed, member)) for member in range(group_size)]
        self._next_id += 1
        self._pending.append(_Request(group, prompt, samplers, processor))
        return group

    def finished(self) -> list[tuple[int, list[Completion]]]:
        """Generate until at least one group has all its answers; those groups (id, answers), by id.

        Empty when no group is open.
        """
        with vector_exp(self.model, self.vector):
            return self._finished()

    def _finished(self) -> list[tuple[int, list[Completion]]]:
        self._start_pending()
        done: list[int] = []
        while self._members and not done:
            with self._generator.stats() as stats:
                responses = self._generator.next_generated()
            self.passes.prefill_tokens += stats.prompt_tokens
            self.passes.prefill_seconds += stats.prompt_time
            self.passes.decode_steps += stats.generation_steps
            self.passes.decode_seconds += stats.decode_time
            if not responses:
                raise RuntimeError("the batch generator stopped with answers still open")
            for r in responses:
                if r.finish_reason != "stop" or r.token not in self.tokenizer.eos_token_ids:
                    self._tokens[r.uid].append(r.token)
                    self.passes.answer_tokens += 1
                if r.finish_reason is not None:
                    self._reasons[r.uid] = r.finish_reason
                    group = self._group_of[r.uid]
                    if all(u in self._reasons for u in self._members[group]):
                        done.append(group)
        return [(group, self._collect(group)) for group in sorted(done)]

    def close(self) -> None:
        self._generator.close()

    def _start_pending(self) -> None:
        """Prefill the prompts submitted since the last call and put their answers into the batch.

        On a CPU of several cores each core prefills one prompt at a time on a stream of its own
        (llm/cpu_streams.py), as head states do: a round of 32 eval prompts (147 tokens each
        after the system message) took 12.7 s to join the batch against 17.2 s in mlx-lm's
        batches of 8, the same answers (results/passes/). In waves of one prompt a core: queues
        balanced over the cores and evaluated at once ran slower (20.6 s). Elsewhere, and for the
        prompts left when they do not fill a wave (a rollout's next position, the end of a round),
        a group's prompt is prefilled here on the default stream and a single answer's is left to
        mlx-lm, which prefills such prompts in batches."""
        requests, self._pending = self._pending, []
        with core_streams(self.spread) as streams:
            whole = len(requests) - len(requests) % len(streams) if len(streams) > 1 else 0
            for first in range(0, whole, len(streams)):
                self._start_wave(requests[first:first + len(streams)], streams)
        for request in requests[whole:]:  # one prompt on one core would leave the others idle
            self._start_wave([request], [mx.default_stream(mx.default_device())])

    def _start_wave(self, wave: list[_Request], streams: list[mx.Stream]) -> None:
        """Prefill each of `wave`'s prompts on a stream of its own and put their answers into the batch."""
        began, tokens, starts = time.perf_counter(), 0, []
        for stream, request in zip(streams, wave):
            prompt = request.prompt
            start, base = self._prefix_cache(prompt)
            if len(request.samplers) == 1 and len(streams) == 1:
                starts.append((prompt[start:], base))
                continue
            with mx.stream(stream):
                starts.append((prompt[-1:], _continued(self.model, prompt[start:-1], base)))
            tokens += len(prompt) - 1 - start
        mx.eval([c.state for _, cache in starts if cache for c in cache])
        self.passes.prefill_tokens += tokens
        self.passes.prefill_seconds += time.perf_counter() - began
        for request, (inputs, cache) in zip(wave, starts):
            self._insert(request, inputs, cache)

    def _insert(self, request: _Request, inputs: list[int], cache: list | None) -> None:
        size = len(request.samplers)
        if size > 1:
            self._recent.append((request.prompt[:-1], cache))
        uids = self._generator.insert([inputs] * size, [self.settings.max_tokens] * size, caches=[cache] * size,
                                      samplers=request.samplers, stop_sequences=[self._stops] * size,
                                      logits_processors=[[request.processor]] if request.processor else None)
        self._members[request.group] = uids
        for uid in uids:
            self._group_of[uid], self._tokens[uid] = request.group, []

    def _collect(self, group: int) -> list[Completion]:
        completions = []
        for uid in self._members.pop(group):
            tokens = self._tokens.pop(uid)
            del self._group_of[uid]
            completions.append(Completion(_trim(self.tokenizer.decode(tokens)), tuple(tokens), self._reasons.pop(uid)))
        return completions

    def _prefix_cache(self, prompt: list[int]) -> tuple[int, list | None]:
        """How many leading tokens of `prompt` a known cache holds (leaving it one token of its
        own), and a cache of exactly those. A cache that no longer holds its first positions (a
        sliding window's, past its window) is no start for another prompt."""
        best, length = None, 0
        for tokens, cache in (*self._system, *self._recent):
            shared = _common_length(tokens, prompt, len(prompt) - 1)
            if shared > length and all(holds_first(layer, shared) for layer in cache):
                best, length = (tokens, cache), shared
        if best is None:
            return 0, None
        tokens, cache = best
        return length, cache if length == cache[0].offset else self._prefill([], cache, length)

    def _prefill(self, tokens: list[int], start: list | None = None, start_length: int | None = None) -> list:
        began = time.perf_counter()
        cache = _prefill(self.model, tokens, start, start_length)
        self.passes.prefill_tokens += len(tokens)
        self.passes.prefill_seconds += time.perf_counter() - began
        return cache


def _common_length(a: list[int], b: list[int], limit: int) -> int:
    """Leading tokens `a` and `b` share, at most `limit`."""
    length, limit = 0, min(len(a), len(b), limit)
    while length < limit and a[length] == b[length]:
        length += 1
    return length


def sample(model, tokenizer, prompts: list[list[int]], group_size: int = 1,
           settings: SamplingSettings = SamplingSettings(), batch_size: int = 32,
           processors: list[Callable] | None = None, passes: PassCounters | None = None,
           seeds: list[int] | None = None) -> list[list[Completion]]:
    """`group_size` completions for each prompt, in prompt order; `processors` (one logits
    processor per prompt, group size 1) steer each prompt's tokens; `passes`, when given, adds
    up the model passes behind them; `seeds` (one per prompt) seed each prompt's answers, which
    then do not depend on the other prompts or the batch size.

    Without `seeds`, seed with `mx.random.seed` beforehand for reproducible samples.
    """
    if not prompts:
        return []
    # Every prompt opens with the same system message: its KV cache is computed once.
    stream = GroupStream(model, tokenizer, settings, batch_size, prompts[0][:shared_prefix_length(prompts)],
                         join_size=batch_size if group_size > 1 else None)
    ids = [stream.submit(prompt, group_size, processors[i] if processors else None, seeds[i] if seeds else None)
           for i, prompt in enumerate(prompts)]
    answers: dict[int, list[Completion]] = {}
    while stream:
        answers.update(stream.finished())
    stream.close()
    if passes is not None:
        passes.add(stream.passes)
    return [answers[i] for i in ids]


def _trim(text: str) -> str:
    """Drop anything after the first closing guess tag (a stop may land mid-token)."""
    end = text.find(STOP_TEXT)
    return text if end < 0 else text[: end + len(STOP_TEXT)]

"""A language model as a Wordle player: one batched generation per round of games."""

from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx

from llm.format import Move, Rejection, parse_answer, prompt_tokens
from llm.generation import GroupStream, PassCounters, SamplingSettings, shared_prefix_length
from llm.guess_constraint import GuessVocabulary
from solver.state import GameState


Steer = Callable[[GameState, tuple[Rejection, ...]], Callable[[mx.array, mx.array], mx.array]]


class ModelPlayer:
    """Plays with the model's own answers; with `guess_words`, the guess tag is decoded
    within those words (minus the game's guesses and refusals: llm/guess_constraint.py);
    with `steer`, each answer gets the logits processor it makes of the game and its refusals.

    One stream serves every round: it keeps each game's last prompt with its KV cache, and a
    game's next prompt (the same system message and earlier guesses, then what changed)
    prefills only what is new. `reuse_prompts=False` prefills every prompt from the system
    message on, as before; the answers are the same to float32 rounding (tests/test_model_eval.py)."""

    def __init__(self, model, tokenizer, name: str, settings: SamplingSettings = SamplingSettings(),
                 seed: int = 0, batch_size: int = 32, guess_words: tuple[str, ...] | None = None,
                 steer: Steer | None = None, reuse_prompts: bool = True) -> None:
        if guess_words and steer:
            raise ValueError("one logits processor per answer: guess_words or steer, not both")
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.settings = settings
        self.batch_size = batch_size
        self.vocabulary = GuessVocabulary(tokenizer, guess_words) if guess_words else None
        self.steer = steer
        self.reuse_prompts = reuse_prompts
        self._stream: GroupStream | None = None
        self._closed_passes = PassCounters()  # of the streams let go
        mx.random.seed(seed)

    def moves(self, states: list[GameState], rejected: list[tuple[Rejection, ...]]) -> list[Move]:
        prompts = [prompt_tokens(self.tokenizer, state, refused) for state, refused in zip(states, rejected)]
        processors = None
        if self.vocabulary is not None:
            processors = [self.vocabulary.processor(self.tokenizer, {*state.guesses, *(r.guess for r in refused)})
                          for state, refused in zip(states, rejected)]
        elif self.steer is not None:
            processors = [self.steer(state, refused) for state, refused in zip(states, rejected)]
        stream = self._stream_for(prompts)
        ids = [stream.submit(prompt, 1, processors[i] if processors else None) for i, prompt in enumerate(prompts)]
        answers: dict[int, list] = {}
        while stream:
            answers.update(stream.finished())
        if not self.reuse_prompts:
            self.close()
        moves = []
        for state, (completion,) in zip(states, (answers[i] for i in ids)):
            parsed = parse_answer(completion.text, state.lists, state.guesses)
            moves.append(Move(parsed.guess, completion.text, parsed.failure))
        return moves

    def _stream_for(self, prompts: list[list[int]]) -> GroupStream:
        """The running stream, or one whose prefix is what this round's prompts share (the system
        message) and which remembers as many answered prompts as there are games."""
        if self._stream is None:
            self._stream = GroupStream(self.model, self.tokenizer, self.settings, self.batch_size,
                                       prompts[0][:shared_prefix_length(prompts)],
                                       remember=len(prompts) if self.reuse_prompts else 0,
                                       keep_answered=self.reuse_prompts)
        return self._stream

    @property
    def passes(self) -> PassCounters:
        """The model passes behind every answer so far (prefill and decode)."""
        total = PassCounters()
        total.add(self._closed_passes)
        if self._stream is not None:
            total.add(self._stream.passes)
        return total

    def close(self) -> None:
        """Let go of the stream and the caches it keeps."""
        if self._stream is not None:
            self._closed_passes.add(self._stream.passes)
            self._stream.close()
            self._stream = None

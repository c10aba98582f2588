"""A language model as a Wordle player: one batched generation per round of games."""

from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx

from llm.format import Move, Rejection, parse_answer, prompt_tokens
from llm.generation import PassCounters, SamplingSettings, sample
from llm.guess_constraint import GuessVocabulary
from solver.state import GameState


Steer = Callable[[GameState, tuple[Rejection, ...]], Callable[[mx.array, mx.array], mx.array]]


class ModelPlayer:
    """Plays with the model's own answers; with `guess_words`, the guess tag is decoded
    within those words (minus the game's guesses and refusals: llm/guess_constraint.py);
    with `steer`, each answer gets the logits processor it makes of the game and its refusals."""

    def __init__(self, model, tokenizer, name: str, settings: SamplingSettings = SamplingSettings(),
                 seed: int = 0, batch_size: int = 32, guess_words: tuple[str, ...] | None = None,
                 steer: Steer | None = None) -> None:
        if guess_words and steer:
            raise ValueError("one logits processor per answer: guess_words or steer, not both")
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.settings = settings
        self.batch_size = batch_size
        self.vocabulary = GuessVocabulary(tokenizer, guess_words) if guess_words else None
        self.steer = steer
        self.passes = PassCounters()  # the model passes behind every answer so far (bench/passes.py)
        mx.random.seed(seed)

    def moves(self, states: list[GameState], rejected: list[tuple[Rejection, ...]]) -> list[Move]:
        prompts = [prompt_tokens(self.tokenizer, state, refused) for state, refused in zip(states, rejected)]
        processors = None
        if self.vocabulary is not None:
            processors = [self.vocabulary.processor(self.tokenizer, {*state.guesses, *(r.guess for r in refused)})
                          for state, refused in zip(states, rejected)]
        elif self.steer is not None:
            processors = [self.steer(state, refused) for state, refused in zip(states, rejected)]
        completions = sample(self.model, self.tokenizer, prompts, 1, self.settings, self.batch_size, processors,
                             self.passes)
        moves = []
        for state, (completion,) in zip(states, completions):
            parsed = parse_answer(completion.text, state.lists, state.guesses)
            moves.append(Move(parsed.guess, completion.text, parsed.failure))
        return moves

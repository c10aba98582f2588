"""A language model as a Wordle player: every game's positions stream through one running batch."""

from __future__ import annotations

from typing import Callable

import mlx.core as mx

from eval.moves import Move
from llm.format import Rejection, parse_answer, prompt_tokens
from llm.generation import Completion, GroupStream, SamplingSettings
from llm.guess_constraint import GuessVocabulary
from solver.state import GameState


class ModelPlayer:
    """Plays with the model's own answers; with `guess_words`, the guess tag is decoded
    within those words (minus the game's guesses and refusals: llm/guess_constraint.py).

    A `StreamPlayer` (eval/moves.py): each position asked joins one running batch of
    `batch_size` answers (llm/generation.py GroupStream), and a finished answer's slot
    goes to the next position waiting, often the same game's next one, so no game waits
    for the slowest answer of a round. The first prompt asked (in eval every game's
    opening position) is prefilled once; later prompts continue the part of it they
    share (the system message). Answers are the lock-step ones for greedy decoding;
    sampled ones (temperature > 0) depend on the order positions reach the batch, which
    the seed fixes, so a run repeats itself but draws other answers than lock step did.
    """

    def __init__(self, model, tokenizer, name: str, settings: SamplingSettings = SamplingSettings(),
                 seed: int = 0, batch_size: int = 32, guess_words: tuple[str, ...] | None = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.settings = settings
        self.batch_size = batch_size
        self.vocabulary = GuessVocabulary(tokenizer, guess_words) if guess_words else None
        self._stream: GroupStream | None = None
        self._asked: dict[int, tuple[int, GameState]] = {}  # stream group id -> (game, position)
        mx.random.seed(seed)

    def request(self, state: GameState, rejected: tuple[Rejection, ...]) -> tuple[list[int], Callable | None]:
        """The prompt for a position and the logits processor steering its answer (None: the model's own)."""
        prompt = prompt_tokens(self.tokenizer, state, rejected)
        if self.vocabulary is None:
            return prompt, None
        return prompt, self.vocabulary.processor(self.tokenizer, {*state.guesses, *(r.guess for r in rejected)})

    def move(self, state: GameState, completion: Completion) -> Move:
        parsed = parse_answer(completion.text, state.lists, state.guesses)
        return Move(parsed.guess, completion.text, parsed.failure)

    def ask(self, game: int, state: GameState, rejected: tuple[Rejection, ...]) -> None:
        prompt, processor = self.request(state, rejected)
        if self._stream is None:
            self._stream = GroupStream(self.model, self.tokenizer, self.settings, self.batch_size, prompt[:-1])
        self._asked[self._stream.submit(prompt, 1, processor)] = (game, state)

    def answered(self) -> list[tuple[int, Move]]:
        """(game, move) of the positions whose answers are complete after the next generation
        steps, in the order they were asked."""
        if self._stream is None:
            return []
        answers = []
        for group, (completion,) in self._stream.finished():
            game, state = self._asked.pop(group)
            answers.append((game, self.move(state, completion)))
        return answers

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
        self._stream, self._asked = None, {}

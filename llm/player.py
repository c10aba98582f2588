"""A language model as a Wordle player: one batched generation a round of games."""

from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx

from llm.format import Move, Rejection, parse_answer, prompt_tokens
from llm.generation import GroupStream, PassCounters, SamplingSettings, answer_seed
from llm.guess_constraint import GuessVocabulary
from solver.state import GameState


Steer = Callable[[GameState, tuple[Rejection, ...]], Callable[[mx.array, mx.array], mx.array]]


class ModelPlayer:
    """Plays with the model's own answers (eval/moves.py `GamePlayer`); with `guess_words`,
    the guess tag is decoded within those words (minus the game's guesses and refusals:
    llm/guess_constraint.py); with `steer`, each answer gets the logits processor it makes of the
    game and its refusals; `spread` and `vector` as GroupStream's.

    Answer n of game g draws its tokens from `answer_seed(seed, g, n)`: a game's answers do not
    depend on the other games, their number, the batch size or when each answer joined the batch.

    It answers in rounds: `finished` returns once every asked answer is done. Games that rejoin
    the batch as soon as their answer is done keep more rows busy, but on the 2-core CPU that ran
    no faster (16 games, identical records) or slower (32 games, 16% more seconds an answer
    character): the batch pads every row to its longest context, and rows at turn 1 then attend
    over turn 6's length (results/passes/)."""

    def __init__(self, model, tokenizer, name: str, settings: SamplingSettings = SamplingSettings(),
                 seed: int = 0, batch_size: int = 32, guess_words: tuple[str, ...] | None = None,
                 steer: Steer | None = None, spread: bool = True, vector: bool = True) -> None:
        if guess_words and steer:
            raise ValueError("one logits processor per answer: guess_words or steer, not both")
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.settings = settings
        self.seed = seed
        self.batch_size = batch_size
        self.vocabulary = GuessVocabulary(tokenizer, guess_words) if guess_words else None
        self.steer = steer
        self.spread, self.vector = spread, vector
        self._stream: GroupStream | None = None
        self._asked: dict[int, tuple[int, GameState]] = {}  # stream group id -> (game, its state)
        self._answers: dict[int, int] = {}  # game -> answers asked of it so far (a player plays one set of games)

    def submit(self, game: int, state: GameState, rejected: tuple[Rejection, ...]) -> None:
        prompt = prompt_tokens(self.tokenizer, state, rejected)
        if self._stream is None:  # every prompt opens as the first does (system message, rules)
            self._stream = GroupStream(self.model, self.tokenizer, self.settings, self.batch_size, prompt[:-1],
                                       spread=self.spread, vector=self.vector)
        processor = None
        if self.vocabulary is not None:
            processor = self.vocabulary.processor(self.tokenizer, {*state.guesses, *(r.guess for r in rejected)})
        elif self.steer is not None:
            processor = self.steer(state, rejected)
        number = self._answers.get(game, 0)
        self._answers[game] = number + 1
        group = self._stream.submit(prompt, 1, processor, answer_seed(self.seed, game, number))
        self._asked[group] = (game, state)

    def finished(self) -> list[tuple[int, Move]]:
        moves = []
        while self._asked:
            for group, (completion,) in self._stream.finished():
                game, state = self._asked.pop(group)
                parsed = parse_answer(completion.text, state.lists, state.guesses)
                moves.append((game, Move(parsed.guess, completion.text, parsed.failure)))
        return moves

    @property
    def passes(self) -> PassCounters:
        """The model passes behind every answer so far (bench/passes.py)."""
        return self._stream.passes if self._stream is not None else PassCounters()

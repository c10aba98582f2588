"""The one prompt and answer format: what the model sees and how its answer is read.

Eval, SFT data and RL rollouts all build prompts and parse answers here, so a model
is trained on exactly what it is tested on. The game state is rendered in plain
English (seed 001 found plain English beat symbols); the answer must be
`<think>...</think><guess>word</guess>` and nothing else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from solver.feedback import pattern_to_digits
from solver.state import GameState
from solver.words import WordLists

SYSTEM_PROMPT = (
    "You play Wordle: find the secret 5-letter word in at most 6 guesses. Each guessed letter gets "
    "feedback: green = in the word at that spot, yellow = in the word at another spot, grey = not in "
    "the word (or not that many times). Every guess must be a real word. "
    "Answer as <think>short reasoning</think><guess> word</guess>"
)

TILE_WORDS = ("grey", "yellow", "green")

# The word a thought names the one candidate left after ("Only X remains."): the model reads it
# just before it names the word, where a naming head acts (llm/naming_head.py).
NAMING_WORD = "Only"


def one_left(word: str) -> str:
    """The sentence that names the one candidate left."""
    return f"{NAMING_WORD} {word} remains."

# Typed parse failures. The first four are format failures; the last two are well-formed
# answers that cannot be played.
NO_TAGS = "no_tags"
MALFORMED = "malformed"
SEVERAL_GUESSES = "several_guesses"
NOT_FIVE_LETTERS = "not_five_letters"
NOT_ALLOWED = "not_allowed"
ALREADY_GUESSED = "already_guessed"
FORMAT_FAILURES = (NO_TAGS, MALFORMED, SEVERAL_GUESSES, NOT_FIVE_LETTERS)

_GUESS_TAG = re.compile(r"<guess>(.*?)</guess>", re.DOTALL)
_STRICT = re.compile(r"\s*<think>((?:(?!<think>|</think>|<guess>|</guess>).)*)</think>\s*<guess>([^<]*)</guess>\s*",
                     re.DOTALL)


def render_turn(number: int, guess: str, pattern: int) -> str:
    tiles = ", ".join(f"{letter.upper()} {TILE_WORDS[t]}" for letter, t in zip(guess, pattern_to_digits(pattern)))
    return f"Guess {number}: {guess} -> {tiles}"


@dataclass(frozen=True)
class Rejection:
    """An answer not accepted at the current position: what it guessed (None when no word
    could be read) and the parse failure that ruled it out."""

    guess: str | None
    failure: str


@dataclass(frozen=True)
class Move:
    """What a player answers at a position. The solver always answers with a word; a language
    model answers with text that may not parse, and `failure` names why (one of the kinds
    above), so the eval harness counts that answer as invalid instead of playing it."""

    guess: str | None
    text: str | None = None
    failure: str | None = None


REJECTION_REASONS = {
    NO_TAGS: "no <guess> tag", MALFORMED: "not in the answer format", SEVERAL_GUESSES: "several guesses",
    NOT_FIVE_LETTERS: "not 5 letters", NOT_ALLOWED: "not in the word list", ALREADY_GUESSED: "already guessed",
}


def render_rejections(rejected: tuple[Rejection, ...]) -> str:
    """One line naming this turn's unaccepted answers and why, so the model is not asked the
    same question again after a bad answer (an unchanged prompt drew the same unplayable
    word until the game was lost: 20-34% of an SFT model's answers repeated a guess)."""
    items = [f"{r.guess if r.guess and r.guess.isalpha() and len(r.guess) <= 12 else 'an answer'} "
             f"({REJECTION_REASONS[r.failure]})" for r in rejected]
    return f"Not accepted: {', '.join(items)}."


def render_state(state: GameState, rejected: tuple[Rejection, ...] = ()) -> str:
    """The user message for a position: past guesses, what is known, the answers already
    refused at this turn, guesses left. The first position is a single line."""
    if state.turns:
        lines = [render_turn(i, t.guess, t.pattern) for i, t in enumerate(state.turns, start=1)]
        lines.append("What you know:")
        lines.extend(f"- {fact}" for fact in state.constraints.describe())
    else:
        lines = ["This is the first guess."]
    if rejected:
        lines.append(render_rejections(rejected))
    left = state.guesses_left
    question = "What is your next guess?" if state.turns else "What is your guess?"
    lines.append(f"You have {left} guess{'es' if left != 1 else ''} left. {question}")
    return ("\n" if state.turns else " ").join(lines)


def messages(state: GameState, rejected: tuple[Rejection, ...] = ()) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": render_state(state, rejected)}]


def prompt_tokens(tokenizer, state: GameState, rejected: tuple[Rejection, ...] = ()) -> list[int]:
    """Chat-templated prompt ids, ready for generation."""
    return list(tokenizer.apply_chat_template(messages(state, rejected), add_generation_prompt=True, tokenize=True))


def format_answer(thought: str, guess: str) -> str:
    """The guess as the thought names it, lower case after a space, so the tag repeats the
    exact tokens just written (a half-trained model transcribing ` DEALT` into `dealt` wrote
    `dalt`). Lower case because that is how words are spelled in what the model read: 57% of
    the answers are one SmolLM2 token as ` crate`, none as ` CRATE` (2.6 tokens, fragments a
    small model recombines into made-up words). Parsing accepts either case and spacing."""
    return f"<think>{thought}</think><guess> {guess}</guess>"


@dataclass(frozen=True)
class Parsed:
    guess: str | None
    failure: str | None = None
    thought: str | None = None  # the text inside <think>, when the answer has the strict form

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def format_ok(self) -> bool:
        return self.failure not in FORMAT_FAILURES


def parse_answer(text: str, lists: WordLists | None = None, previous: list[str] | tuple[str, ...] = ()) -> Parsed:
    """Read one answer strictly: exactly `<think>...</think><guess>word</guess>`.

    With `lists`, the word must be accepted; with `previous`, it must be new. The
    guess is returned lowercased even when the answer fails, so callers can log it.
    """
    tags = _GUESS_TAG.findall(text)
    if not tags:
        return Parsed(None, NO_TAGS)
    if len(tags) > 1:
        return Parsed(None, SEVERAL_GUESSES)
    match = _STRICT.fullmatch(text)
    if match is None:
        return Parsed(tags[0].strip().lower() or None, MALFORMED)
    thought, word = match.group(1).strip(), match.group(2).strip().lower()
    if len(word) != 5 or not (word.isascii() and word.isalpha()):
        return Parsed(word or None, NOT_FIVE_LETTERS, thought)
    if lists is not None and not lists.is_allowed(word):
        return Parsed(word, NOT_ALLOWED, thought)
    if word in previous:
        return Parsed(word, ALREADY_GUESSED, thought)
    return Parsed(word, None, thought)

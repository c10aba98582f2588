"""What `play` shows: each answer of the model's game, or its suggestion at a position.

On a terminal, rich: coloured tiles, the thought dimmed. Anywhere else (a pipe, a log, a test),
plain lines a program can read, each starting `turn N`, the tiles as digits (0 grey, 1 yellow,
2 green, the form `--history` takes) and nothing wrapped.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

from rich.console import Console
from rich.text import Text

from eval.harness import MAX_INVALID_IN_A_ROW, GameRecord
from eval.play import Answer
from llm.format import REJECTION_REASONS
from solver.display import tiles
from solver.feedback import pattern_to_string
from solver.solve_views import show_advice
from solver.state import GameState


class PlayView:
    """Prints answers as they come, rich on a terminal and plain lines elsewhere."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(highlight=False)
        self.rich = self.console.is_terminal

    def thinking(self) -> AbstractContextManager:
        """A spinner on a terminal while the model answers (a 135M model's answer takes seconds on a CPU)."""
        return self.console.status("the model thinks") if self.rich else nullcontext()

    def line(self, text: str | Text) -> None:
        self.console.print(text, soft_wrap=not self.rich, markup=False)

    def answer(self, answer: Answer) -> None:
        """Its thought (or its text, when it has none), then what the game made of it beside the solver's move."""
        head = f"turn {answer.turn}"
        said = ("thought", answer.thought) if answer.thought is not None else ("answer", answer.text or "")
        self.line(Text.assemble((f"{head} {said[0]}: ", "bold"), (_one_line(said[1]), "dim italic")))
        beside = f"; solver: {_guess_text(answer.solver)}" if answer.solver is not None else ""
        self.line(Text.assemble((f"{head} ", "bold"), self._outcome(answer), beside))

    def _outcome(self, answer: Answer) -> Text:
        if answer.failure is not None:
            return Text.assemble(("refused: ", "red"), f"{answer.guess or 'no word'} "
                                                       f"({REJECTION_REASONS[answer.failure]})")
        if answer.pattern is None:  # a suggestion: no secret to show tiles against
            shown = Text(answer.guess.upper(), style="bold") if self.rich else Text(f"guess: {answer.guess}")
            return Text.assemble(shown, f", {_bits_text(answer.bits, answer.expected_left)}")
        shown = tiles(answer.guess, answer.pattern) if self.rich else \
            Text(f"guess: {answer.guess} {pattern_to_string(answer.pattern)}")
        return Text.assemble(shown, f", {answer.candidates_before} -> {answer.candidates_after} left, "
                                    f"{_bits_text(answer.bits, answer.expected_left)}")

    def advice(self, _: Console, state: GameState, advice: dict) -> None:
        """The position and the solver's guess (solve's view), then the model's answers and its guess
        (solve_views `assist` passes its console: this view prints to its own, which is that too)."""
        show_advice(self.console, state, advice["solver"], label="Solver's guess")
        for answer in advice["answers"]:
            self.answer(answer)
        if advice["answers"]:
            guess = advice["next_guess"]
            self.line(f"Model's guess: {guess.upper()}" if guess else
                      f"The model gave no playable guess in {len(advice['answers'])} answers.")


def _one_line(text: str) -> str:
    """`text` as one printable line: a model's answer may hold line breaks and control characters."""
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())


def _bits_text(bits: float, expected_left: float) -> str:
    return f"{bits:.2f} bits, {expected_left:.1f} expected left"


def _guess_text(solver: dict) -> str:
    """The solver's move at a position, or '-' where the game is over."""
    if solver["next_guess"] is None:
        return "-"
    return f"{solver['next_guess']} {solver['entropy_bits']:.2f} bits"


def outcome_line(record: GameRecord) -> str:
    """How the game ended, in one line."""
    secret = record.secret.upper()
    if record.state.won:
        return f"{secret}: won in {len(record.state.turns)} guesses"
    if record.invalid_streak >= MAX_INVALID_IN_A_ROW:
        return f"{secret}: lost to {MAX_INVALID_IN_A_ROW} unplayable answers in a row"
    return f"{secret}: not solved in {len(record.state.turns)} guesses"

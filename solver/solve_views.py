"""What `solve` shows: a played game, advice for a position, an interactive helper."""

from __future__ import annotations

import sys
from typing import Callable

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from common.errors import UserError
from common.fileio import atomic_write_json
from solver.display import tiles
from solver.entropy import guess_score
from solver.feedback import parse_pattern, pattern_to_string
from solver.policy import EntropySolver, SolverSettings
from solver.setup import Setup
from solver.state import GameState, state_from_history
from solver.words import check_word_shape

SHOW_CANDIDATES = 12


def secret_column(setup: Setup, word: str) -> int:
    """`word`'s column in the pattern matrix, once it is a word of the secrets' list (a one-line
    error otherwise): what any command that plays a given secret checks first."""
    check_word_shape(word)
    setup.lists.index(word)
    secret_words = setup.lists.secrets(setup.secret_kind)
    if word not in secret_words:
        raise UserError(f"{word!r} is not in the {setup.secret_kind} list; try --secrets allowed")
    return secret_words.index(word)


def play_secret(setup: Setup, settings: SolverSettings, word: str, json_path: str | None) -> None:
    column = secret_column(setup, word)
    solver = setup.solver(settings)
    state = setup.start
    table = Table(title=f"{solver.name} plays {word.upper()}")
    for name, justify in (("#", "right"), ("guess", "left"), ("before", "right"), ("bits", "right"),
                          ("expected left", "right"), ("left", "right")):
        table.add_column(name, justify=justify)
    turns = []
    while not state.over:
        guess = solver.choose(state)
        row = setup.lists.index(guess)
        entropy, expected = guess_score(setup.matrix, row, state.candidates)
        before = len(state.candidates)
        state = state.play(guess, int(setup.matrix[row, column]))
        turns.append({"guess": guess, "pattern": pattern_to_string(state.turns[-1].pattern),
                      "candidates_before": before, "candidates_after": len(state.candidates),
                      "entropy_bits": round(entropy, 4), "expected_left": round(expected, 3)})
        table.add_row(str(len(turns)), tiles(guess, state.turns[-1].pattern), str(before),
                      f"{entropy:.2f}", f"{expected:.1f}", str(len(state.candidates)))
    console = Console()
    console.print(table)
    outcome = f"solved in {len(turns)} guesses" if state.won else "not solved in 6 guesses"
    console.print(f"[bold]{word.upper()}[/]: {outcome}")
    if json_path:
        atomic_write_json(json_path, {"secret": word, "won": state.won, "guesses": len(turns),
                                      "policy": solver.name, "turns": turns})


def parse_history(text: str) -> list[tuple[str, int]]:
    """'salet:20100,crony:10200' -> [('salet', code), ('crony', code)]."""
    history = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        guess, sep, feedback = item.partition(":")
        if not sep:
            raise UserError(f"history item {item!r} must look like word:20100")
        guess = guess.strip().lower()
        check_word_shape(guess)
        history.append((guess, parse_pattern(feedback)))
    return history


def advise(setup: Setup, settings: SolverSettings, history_text: str, json_path: str | None) -> None:
    state = state_from_history(setup.lists, setup.matrix, parse_history(history_text), setup.secret_kind)
    advice = solver_advice(setup.solver(settings), state)
    show_advice(Console(), state, advice)
    if json_path:
        atomic_write_json(json_path, advice)


QUIT_WORDS = ("q", "quit", "exit")


def assist_interactively(setup: Setup, settings: SolverSettings) -> None:
    """The solver's advice for a game the user is playing (`assist`)."""
    require_stdin()
    solver = setup.solver(settings)
    assist(setup, lambda state: solver_advice(solver, state), show_advice)


def require_stdin() -> None:
    """A one-line error, before any work, when there is no input to read the user's feedback from."""
    if sys.stdin is None or sys.stdin.closed:
        raise UserError("standard input is closed: type the feedback at the prompt, or use --history")


Advise = Callable[[GameState], dict]
ShowAdvice = Callable[[Console, GameState, dict], None]


def assist(setup: Setup, advise: Advise, show: ShowAdvice) -> None:
    """Advise, read the feedback the user got, advise again, until the game is over or the input ends.

    `advise(state)` gives a dict whose "next_guess" is the suggestion that the feedback alone
    (`20100`) reports on; `show` prints it. The solver advises through this loop, and `play`'s
    model too. A blank line asks again; a mistake is echoed (the user's text as typed, never
    read as markup) and the game goes on.
    """
    console = Console()
    state = setup.start
    console.print("Type the feedback you got, e.g. [bold]salet 20100[/] or [bold]salet gybbb[/] "
                  "(just [bold]20100[/] if you played the suggestion); [bold]q[/] quits.")
    advice = advise(state)
    show(console, state, advice)
    while not state.over:
        line = _read_line(console)
        if line is None or line.lower() in QUIT_WORDS:
            return
        if not line:
            continue
        try:
            state = _after_line(setup, state, advice["next_guess"], line)
        except UserError as err:
            console.print(f"[red]error:[/] {escape(str(err))}")
            continue
        advice = advise(state)
        show(console, state, advice)


def _read_line(console: Console) -> str | None:
    """The next line typed, stripped; None when the input has ended."""
    try:
        return console.input("[bold]feedback> [/]").strip()
    except (EOFError, KeyboardInterrupt):
        console.print()  # end the prompt's line
        return None


def _after_line(setup: Setup, state: GameState, suggested: str | None, line: str) -> GameState:
    """The game after the turn `line` reports: 'salet 20100', or '20100' for the suggested guess."""
    parts = line.split()
    if len(parts) not in (1, 2) or (len(parts) == 1 and suggested is None):
        raise UserError("type a guess and its feedback, like: salet 20100")
    guess, feedback = (suggested, parts[0]) if len(parts) == 1 else (parts[0].lower(), parts[1])
    turns = [(t.guess, t.pattern) for t in state.turns] + [(guess, parse_pattern(feedback))]
    return state_from_history(setup.lists, setup.matrix, turns, setup.secret_kind)


def solver_advice(solver: EntropySolver, state: GameState) -> dict:
    """The position (guesses so far, candidates left) and the solver's next guess with its bits."""
    advice: dict = {"history": [{"guess": t.guess, "pattern": pattern_to_string(t.pattern)} for t in state.turns],
                    "remaining": int(len(state.candidates)),
                    "candidates": state.candidate_words(SHOW_CANDIDATES), "won": state.won}
    if state.won or state.guesses_left <= 0:
        advice["next_guess"] = None
        return advice
    guess = solver.choose(state)
    entropy, expected = guess_score(state.matrix, state.lists.index(guess), state.candidates)
    advice.update(next_guess=guess, entropy_bits=round(entropy, 4), expected_left=round(expected, 3),
                  is_candidate=guess in state.candidate_words())
    return advice


def show_advice(console: Console, state: GameState, advice: dict, label: str = "Next guess") -> None:
    """The tiles so far, the words left and the solver's guess (`label` names whose)."""
    for turn in state.turns:
        console.print(tiles(turn.guess, turn.pattern))
    if advice["won"]:
        console.print(f"Solved in {len(state.turns)} guesses.")
        return
    if advice["next_guess"] is None:
        console.print(f"No guesses left; {advice['remaining']} word(s) were still possible.")
        return
    words = ", ".join(advice["candidates"]) + (" ..." if advice["remaining"] > SHOW_CANDIDATES else "")
    console.print(f"{advice['remaining']} word(s) remain: {words}")
    console.print(f"{label}: [bold]{advice['next_guess'].upper()}[/]  "
                  f"({advice['entropy_bits']:.2f} bits, {advice['expected_left']:.1f} expected left)")

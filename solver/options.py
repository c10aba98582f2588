"""Click options of the commands that play with the solver or pick its word lists, declared once.

The solver's own flags (`--hard`, `--lookahead`, `--top-k`) and the word lists it plays
with are read by `solve`, `eval` and `gen-sft`; their defaults live with the solver.
"""

from __future__ import annotations

from typing import Callable

import click

from solver.policy import HARD_TOP_K, TOP_K


def word_list_options(default_secrets: str = "answers") -> Callable:
    def decorate(f: Callable) -> Callable:
        f = click.option("--allowed", type=click.Path(dir_okay=False), default=None,
                         help="Accepted guesses, one word a line (default: the 12,972 original list).")(f)
        f = click.option("--answers", type=click.Path(dir_okay=False), default=None,
                         help="Possible answers, one word a line (default: the 2,315 original list).")(f)
        f = click.option("--secrets", type=click.Choice(["answers", "allowed"]), default=default_secrets,
                         show_default=True, help="Which list the secret is drawn from.")(f)
        return f

    return decorate


def word_list_inputs(answers: str | None, allowed: str | None) -> list[tuple[str, str | None]]:
    """The word lists a command reads, as the files no output of it may replace (common/options.py)."""
    return [("--answers", answers), ("--allowed", allowed)]


def solver_options(f: Callable) -> Callable:
    f = click.option("--top-k", type=click.IntRange(1, 500), default=None,
                     help=f"Guesses the lookahead examines at each position [default: {TOP_K}, {HARD_TOP_K} with --hard].")(f)
    f = click.option("--lookahead", is_flag=True, help="Depth-2 lookahead instead of greedy entropy.")(f)
    f = click.option("--hard", is_flag=True, help="Hard mode: revealed hints must be reused.")(f)
    return f

"""Click options shared by every command that plays Wordle, declared once."""

from __future__ import annotations

from typing import Callable

import click

from solver.policy import SolverSettings


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


def solver_options(f: Callable) -> Callable:
    f = click.option("--top-k", type=click.IntRange(1, 500), default=SolverSettings().top_k, show_default=True,
                     help="Guesses the lookahead examines at each position.")(f)
    f = click.option("--lookahead", is_flag=True, help="Depth-2 lookahead instead of greedy entropy.")(f)
    f = click.option("--hard", is_flag=True, help="Hard mode: revealed hints must be reused.")(f)
    return f


def json_option(f: Callable) -> Callable:
    return click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
                        help="Also write the results as JSON to this file.")(f)

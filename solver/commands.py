"""`solve`: the solver plays a secret, or advises a person playing a real game."""

from __future__ import annotations

import click

from common.errors import UserError
from common.options import json_option, refuse_owned_output
from solver.options import solver_options, word_list_inputs, word_list_options


@click.command()
@click.option("--word", default=None, help="Secret for the solver to play against.")
@click.option("--history", default=None,
              help='Feedback so far, e.g. "salet:20100,crony:10200" (or gybbb letters): prints the next guess.')
@word_list_options()
@solver_options
@json_option
def solve(word, history, secrets, answers, allowed, hard, lookahead, top_k, json_path) -> None:
    """Play against --word, answer for --history, or assist an interactive game."""
    from solver.policy import SolverSettings
    from solver.setup import load_setup
    from solver.solve_views import advise, assist_interactively, play_secret

    refuse_owned_output(json_path, "--json", inputs=word_list_inputs(answers, allowed))
    if word is not None and history is not None:
        raise UserError("use either --word (the solver plays) or --history (advice), not both")
    if word is not None and not word.strip():
        raise UserError("--word is empty: give the secret for the solver to play, e.g. --word crane")
    setup = load_setup(secrets, answers, allowed)
    settings = SolverSettings(hard=hard, lookahead=lookahead, top_k=top_k)
    if word is not None:
        play_secret(setup, settings, word.strip().lower(), json_path)
    elif history is not None:
        advise(setup, settings, history, json_path)
    else:
        assist_interactively(setup, settings)


@click.command("matrix")
@word_list_options()
@click.option("--repeat", type=click.IntRange(1), default=3, show_default=True, help="Timed runs; medians reported.")
@json_option
def matrix_command(secrets, answers, allowed, repeat, json_path) -> None:
    """Benchmark the pattern matrix: cold build (compile excluded) and load from the cache."""
    from solver.matrix_bench import benchmark_matrix, show_benchmark

    refuse_owned_output(json_path, "--json", inputs=word_list_inputs(answers, allowed))
    result = benchmark_matrix(secrets, answers, allowed, repeat)
    show_benchmark(result)
    if json_path:
        from common.fileio import atomic_write_json

        atomic_write_json(json_path, result)

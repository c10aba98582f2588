"""The options every output-rl study reads: the distill run it tunes, its folder, its games."""

from __future__ import annotations

from collections.abc import Callable

import click


def output_rl_inputs(command: Callable) -> Callable:
    """--distilled, --out, --states (a states.npz to start from: the frozen pass is the slow part)
    and the own games on training and on validation secrets, as `output-rl` takes them."""
    for option in reversed((
            click.option("--distilled", required=True, type=click.Path(exists=True, file_okay=False)),
            click.option("--out", required=True, type=click.Path(file_okay=False)),
            click.option("--states", type=click.Path(exists=True, dir_okay=False), help="A states.npz to start from."),
            click.option("--own-games", multiple=True, required=True),
            click.option("--own-validation", multiple=True, required=True))):
        command = option(command)
    return command

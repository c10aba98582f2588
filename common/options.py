"""Click options every command may share, declared once, and the checks their values get at parse time.

Output paths are checked before a command does any work (a run's result must not be
lost at its end because `--json` points at a read-only folder), numbers must be
finite and within what a run can use.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Callable

import click

from common.errors import UserError
from common.fileio import check_writable_file, check_writable_folder


def _checked(check: Callable) -> Callable:
    """A click callback that runs `check(value)` on a given value and reports a UserError as a bad flag."""
    def callback(ctx: click.Context, param: click.Parameter, value):
        if value is not None:
            try:
                check(value)
            except UserError as err:
                raise click.BadParameter(str(err), ctx, param) from None
        return value

    return callback


writable_file = _checked(check_writable_file)
writable_folder = _checked(check_writable_folder)
# An output folder built aside and swapped in whole: its parent must be writable too.
replaced_folder = _checked(partial(check_writable_folder, replaced=True))


class FiniteFloat(click.FloatRange):
    """A FloatRange that also refuses nan and inf (which compare as inside any open range)."""

    name = "finite float"

    def convert(self, value, param, ctx):
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return super().convert(number, param, ctx)


MAX_SEED = 2**63 - 1  # what numpy's and mlx's generators take

seed_option = click.option("--seed", type=click.IntRange(0, MAX_SEED), default=0, show_default=True,
                           help="Seed of every random choice: the same seed gives the same result.")


def flag(name: str) -> str:
    """The flag a parameter name is typed as: group_size -> --group-size."""
    return f"--{name.replace('_', '-')}"


def given_params(ctx: click.Context) -> frozenset[str]:
    """The parameters the user gave, by name (not those left at their defaults): a command
    that continues a run takes the others from the run's own record."""
    from click.core import ParameterSource

    defaulted = (ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)
    return frozenset(name for name in ctx.params if ctx.get_parameter_source(name) not in defaulted)


def json_option(f: Callable) -> Callable:
    return click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
                        callback=writable_file, help="Also write the results as JSON to this file.")(f)

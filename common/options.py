"""Click options every command may share, declared once, and the checks their values get at parse time.

Output paths are checked before a command does any work (a run's result must not be
lost at its end because `--json` points at a read-only folder), numbers must be
finite and within what a run can use.
"""

from __future__ import annotations

import math
import os
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable

import click

from common.errors import UserError, note
from common.fileio import check_writable_file, check_writable_folder
from common.knobs import Declared, declare
from common.run_kinds import made_folder


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


def knob_type(entry: Declared) -> Any:
    """The click type of a knob's option: its choices and range refused as click refuses a bad value."""
    spec, kind = entry.knob, entry.base
    if spec.choices:
        return click.Choice(spec.choices)
    if spec.range is not None:
        bounds = (spec.range.low, spec.range.high)
        return (click.IntRange if kind is int else FiniteFloat)(*bounds, min_open=spec.range.open_low)
    return kind


def knob_option(entry: Declared) -> Callable:
    """The click option of the knob `entry`: its flag, type, default and help. It fills the parameter
    named as the knob's key, so that a command's values build its settings as they are."""
    spec = entry.knob
    if entry.base is bool:  # a switch that is on by default is turned off by its --no- twin
        flags = f"{spec.flag}/--no-{spec.flag[2:]}" if entry.default else spec.flag
        return click.option(flags, entry.key, is_flag=True, default=entry.default, help=spec.help)
    return click.option(spec.flag, entry.key, type=knob_type(entry), default=entry.default, show_default=True,
                        help=spec.help)


def knob_options(entries: Iterable[Declared]) -> Callable:
    """One option per knob that declares a flag, in the order given."""
    def decorate(f: Callable) -> Callable:
        for entry in reversed([entry for entry in entries if entry.knob.flag]):
            f = knob_option(entry)(f)
        return f

    return decorate


MAX_SEED = 2**63 - 1  # what numpy's and mlx's generators take
# Every command's seed, and every settings' (knob_like): the same seed gives the same result.
SEED = declare("seed", int, 0, "Seed of every random choice: the same seed gives the same result.",
               range=(0, MAX_SEED), flag="--seed")
seed_option = knob_option(SEED)


def flag(name: str) -> str:
    """The flag a parameter name is typed as: group_size -> --group-size."""
    return f"--{name.replace('_', '-')}"


def note_unread(flags: Iterable[str], reason: str) -> None:
    """One note for each flag given that `reason` leaves without effect: a flag the user typed is
    never dropped unsaid (`rl` took --lr into its record and trained the head with its own)."""
    for name in flags:
        note(f"{name} has no effect: {reason}")


def given_params(ctx: click.Context) -> frozenset[str]:
    """The parameters the user gave, by name (not those left at their defaults): a command
    that continues a run takes the others from the run's own record."""
    from click.core import ParameterSource

    defaulted = (ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)
    return frozenset(name for name in ctx.params if ctx.get_parameter_source(name) not in defaulted)


def refuse_owned_output(path: str | None, flag: str, folders: Iterable[tuple[str, str | None]] = (),
                        inputs: Iterable[tuple[str, str | None]] = ()) -> None:
    """The one rule for what an output file (--json, --png) may replace: never a file inside a folder
    the command writes or reads whole (a run, a dataset, an adapter, a model: `sft --out R --json
    R/run.json` replaced the record the run resumes from), nor a file it reads (`eval --answers A
    --json A` replaced the word list), nor a file inside a folder another command made
    (common/run_kinds.py: `gen-sft --json OTHER_DATA/train.jsonl`). Each folder and input comes as
    (the flag or argument that named it, its path); symlinks are followed, as the write would follow
    them."""
    if path is None:
        return
    target = Path(os.path.realpath(path))
    for label, folder in folders:
        if folder is not None and target.is_relative_to(os.path.realpath(folder)):
            raise UserError(f"{flag} {path} is inside {label} {folder}, whose files are its run's, data's or "
                            "model's own: name a file outside that folder")
    for label, source in inputs:
        if source is not None and target == Path(os.path.realpath(source)):
            raise UserError(f"{flag} {path} is {label} {source}, which this command reads: name another file")
    made = made_folder(target)
    if made is not None:
        raise UserError(f"{flag} {path} is inside {made[0]}, {made[1]}: its files are that command's own; name a "
                        "file outside it")


# The file that makes a folder given to each flag what the flag names (a model, a dataset, an adapter).
FOLDER_MARKERS = {"--model": "config.json", "--data": "train.jsonl", "--adapter": "adapters.safetensors",
                  "the SFT start": "adapters.safetensors"}


def refuse_out_over_inputs(out: str, reads: Iterable[tuple[str, str | None]], flag: str = "--out") -> None:
    """The one rule for where an output folder may be: never what the command reads, inside it or
    holding it. Its writes would land on its own input, and a run made inside an input folder went
    with it when that folder's owner replaced it (`sft` replacing R/adapter took an RL run made in
    R/adapter/rl along). Each input comes as (the flag that named it, its path); one that does not
    exist (`--model default`, a hub id) is no folder here, and nor is a folder without the file that
    makes it what its flag names (`--model /tmp`): its own check names that mistake, the clearer one."""
    target = Path(os.path.realpath(out))
    for label, source in reads:
        if source is None or not os.path.lexists(source):
            continue
        marker = FOLDER_MARKERS.get(label)
        if marker and os.path.isdir(source) and not os.path.exists(os.path.join(source, marker)):
            continue
        read = Path(os.path.realpath(source))
        if target.is_relative_to(read) or read.is_relative_to(target):
            where = "is" if target == read else "is inside" if target.is_relative_to(read) else "holds"
            raise UserError(f"{flag} {out} {where} {label} {source}, which this command reads: choose another {flag}")


def json_option(f: Callable) -> Callable:
    return click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
                        callback=writable_file, help="Also write the results as JSON to this file.")(f)

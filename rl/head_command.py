"""`naming-head`: fit the endgame's naming head on an adapter and save it beside the adapter."""

from __future__ import annotations

import os
from pathlib import Path

import click

from common.errors import UserError
from common.knobs import declared
from common.options import json_option, knob_options, refuse_owned_output
from llm.options import dtype_option
from rl.naming_head import HeadSettings


@click.command("naming-head")
@click.option("--model", default="default", show_default=True,
              help="mlx-lm model folder, Hugging Face id, or 'default' (SmolLM2-135M-Instruct, embedded).")
@click.option("--adapter", required=True, type=click.Path(file_okay=False),
              help="The adapter whose model names the words (an SFT or RL run's adapter); the head is written "
                   "into this folder as naming_head.npz, with naming_head.json, and eval uses it from there.")
@click.option("--states", "states_path", type=click.Path(dir_okay=False), default=None,
              help="The cache of the model's states at the positions [default: ADAPTER/naming_states.npz]: a "
                   "killed run resumes from it, and a refit (another --beta) skips the model's passes.")
@knob_options(declared(HeadSettings))
@dtype_option
@click.option("--quiet", is_flag=True, help="No progress bar.")
@json_option
def naming_head_command(model, adapter, states_path, dtype, quiet, json_path, **knobs) -> None:
    """Fit a naming head: every allowed word scored at the token before the model names the one
    candidate left, fitted toward the reward's KL-regularised optimum there (rl/naming_head.py).

    In play the head acts where the model writes ' Only' (in any position, also where more than
    one word is left): it names a whole allowed word, token by token by its words' scores, and
    never a word played or refused at that turn; everything else in the answer is the model's.

    The model stays frozen; its states at one-candidate positions of training words are computed
    once (about 0.5 s each on a 2-core CPU) and kept in --states. `eval` with this --adapter then
    names words by the head (--no-naming-head: without it)."""
    from common.fileio import atomic_write_json
    from llm.adapter_files import ADAPTER_WEIGHTS
    from rl.naming_head import run_naming_head, summary_line

    refuse_owned_output(json_path, "--json", [("--adapter", adapter), ("--model", model)],
                        [("--states", states_path)])
    folder = Path(adapter)
    if not (folder / ADAPTER_WEIGHTS).is_file():
        raise UserError(f"{adapter} is not an adapter folder: it has no {ADAPTER_WEIGHTS}")
    if not os.access(folder, os.W_OK):
        raise UserError(f"cannot write the head into {adapter}: copy the adapter folder somewhere writable")
    _refuse_adapter_file(states_path, folder)
    record = run_naming_head(model, adapter, HeadSettings(**knobs), states_path, dtype, not quiet)
    click.echo(summary_line(record))
    if json_path:
        atomic_write_json(json_path, record)


def _refuse_adapter_file(states_path: str | None, folder: Path) -> None:
    """--states names the cache of states, never one of the adapter folder's own files: read as states,
    its weights were "not a naming states file" with the advice to delete it."""
    from llm.adapter_files import ADAPTER_CONFIG, ADAPTER_WEIGHTS
    from llm.naming_head import HEAD_FILE
    from rl.naming_head import RECORD_FILE, STATES_FILE

    if states_path is None:
        return
    owned = {os.path.realpath(folder / name): name
             for name in (ADAPTER_WEIGHTS, ADAPTER_CONFIG, HEAD_FILE, RECORD_FILE)}
    name = owned.get(os.path.realpath(states_path))
    if name is not None:
        raise UserError(f"--states {states_path} is the adapter's own {name}, not a states file: give another "
                        f"--states file, or leave it out for {folder / STATES_FILE}")

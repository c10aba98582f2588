"""`distill`: the naming head's choices taught to the model itself (rl/distill.py)."""

from __future__ import annotations

from pathlib import Path

import click

from common.knobs import declared
from common.options import json_option, knob_options, refuse_owned_output, writable_folder
from llm.options import dtype_option
from rl.distill import DistillSettings


@click.command("distill")
@click.option("--model", default="default", show_default=True,
              help="mlx-lm model folder, Hugging Face id, or 'default' (SmolLM2-135M-Instruct, embedded).")
@click.option("--adapter", required=True, type=click.Path(file_okay=False),
              help="The start adapter, with the naming head to distil beside it (naming-head writes it).")
@click.option("--out", required=True, type=click.Path(file_okay=False), callback=writable_folder,
              help="The run folder: states.npz, metrics.jsonl, summary.json, and model/ (--part output) or "
                   "best/ (--part mlp), chosen on held-out validation.")
@click.option("--own-games", multiple=True, type=click.Path(dir_okay=False),
              help="An eval JSON of the model's own games on training words (eval --split train or untaught; "
                   "repeatable): every position where it answered with one candidate left joins the training "
                   "positions, so it is taught where its own play goes wrong.")
@click.option("--own-validation", multiple=True, type=click.Path(dir_okay=False),
              help="An eval JSON of its own games on held-out validation words (eval --split validation; "
                   "repeatable): their one-candidate positions choose the epoch.")
@knob_options(declared(DistillSettings))
@dtype_option
@click.option("--quiet", is_flag=True, help="No progress bar.")
@json_option
def distill_command(model, adapter, out, own_games, own_validation, dtype, quiet, json_path, **knobs) -> None:
    """Teach the model to name what its naming head names, token by token: at fresh one-candidate
    positions of training words (the allowed list's, never a held-out one), the model's own next
    token at ' Only' and after each of the secret's tokens is trained toward the head's
    distribution over the tokens that begin (then continue) an allowed word. What learns
    (--part): a spelling term in the output layer (default), written as the lm_head of the start
    fused, OUT/model, a plain mlx-lm model folder; or a LoRA on the last layer's MLP, OUT/best, an
    adapter. The head stays behind: both play without it (eval --model OUT/model, eval --adapter
    OUT/best, mlx_lm.generate).

    The frozen model runs once a position (about 0.6 s on 2 cores; kept in OUT/states.npz, so a
    killed run resumes and a refit with other --epochs, --lr or --part skips it); the fit's epoch is
    chosen on held-out validation positions by the secret's probability as a word."""
    from common.fileio import atomic_write_json
    from common.run_lock import run_lock
    from rl.distill import run_distill, summary_line
    from sft.run_folder import claim

    refuse_owned_output(json_path, "--json", [("--out", out), ("--adapter", adapter), ("--model", model)],
                        inputs=[("--own-games", path) for path in own_games]
                        + [("--own-validation", path) for path in own_validation])
    claim(Path(out), "distill")
    with run_lock(out):
        summary = run_distill(model, adapter, out, DistillSettings(**knobs), dtype, not quiet, own_games,
                              own_validation)
    click.echo(summary_line(summary))
    if json_path:
        atomic_write_json(json_path, summary)

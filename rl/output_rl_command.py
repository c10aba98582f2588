"""`output-rl`: RL on three gains of a distilled model's output layer (rl/output_rl.py)."""

from __future__ import annotations

from pathlib import Path

import click

from common.knobs import declared
from common.options import json_option, knob_options, refuse_out_over_inputs, refuse_owned_output, writable_folder
from rl.output_rl import OutputRLSettings


@click.command("output-rl")
@click.option("--distilled", required=True, type=click.Path(file_okay=False),
              help="A finished distill run folder (--part output): its model/, states and settings are read, "
                   "never written.")
@click.option("--out", required=True, type=click.Path(file_okay=False), callback=writable_folder,
              help="The run folder: states.npz (its own games' states added), metrics.jsonl, summary.json and "
                   "model/, the tuned mlx-lm model folder.")
@click.option("--own-games", multiple=True, type=click.Path(dir_okay=False),
              help="An eval JSON of the distilled model's games on training secrets (eval --split untaught or "
                   "train; repeatable): its answers are the positions RL trains at (--turns: which).")
@click.option("--own-validation", multiple=True, type=click.Path(dir_okay=False),
              help="An eval JSON of its games on held-out validation secrets (repeatable): its answers there "
                   "choose the step.")
@knob_options(declared(OutputRLSettings))
@click.option("--quiet", is_flag=True, help="No progress bar.")
@json_option
def output_rl_command(distilled, out, own_games, own_validation, quiet, json_path, **knobs) -> None:
    """Tune the distilled model's output layer by RL on three numbers: the weight of its own word
    scores, of the distilled spelling term, and a bias toward the game's secret list, written
    into its whole-word rows (an mlx-lm output layer has no bias). The gradient is the exact
    expected reward of the word it plays at each of its own games' answers, read after its own
    text, at the play temperature, the reward kernel scoring every word; OUT/model plays as any mlx-lm model does
    (eval --model OUT/model, mlx_lm.generate), no naming head needed."""
    from common.fileio import atomic_write_json
    from common.run_lock import run_lock
    from rl.output_rl import run_output_rl, summary_line
    from sft.run_folder import claim

    refuse_out_over_inputs(out, [("--distilled", distilled)] + [("--own-games", p) for p in own_games]
                           + [("--own-validation", p) for p in own_validation])
    refuse_owned_output(json_path, "--json", [("--out", out), ("--distilled", distilled)],
                        inputs=[("--own-games", p) for p in own_games] + [("--own-validation", p) for p in own_validation])
    claim(Path(out), "output-rl")
    with run_lock(out):
        summary = run_output_rl(distilled, out, OutputRLSettings(**knobs), own_games, own_validation, not quiet)
    click.echo(summary_line(summary))
    if json_path:
        atomic_write_json(json_path, summary)

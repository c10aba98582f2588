"""`pipeline`: the README's main job, gen-sft -> sft -> rl -> eval in one command."""

from __future__ import annotations

from pathlib import Path

import click

from common.errors import UserError
from common.knobs import declared
from common.options import (given_params, json_option, knob_options, refuse_out_over_inputs, refuse_owned_output,
                            writable_folder)
from rl.pipeline import RECIPES, PipelineSettings, recipe_for


def _refuse_games_start(settings: PipelineSettings, out: Path) -> None:
    """RL from a model's own games needs its games file, which no pipeline flag gives: name the
    `rl` command that runs that stage instead, with its flag for the file."""
    if settings.rl_start == "games":
        raise UserError(f"--rl-start games needs a games file, and pipeline has no flag for one: run the pipeline "
                        "with --rl-start any or endgame, or run its RL stage yourself with rl's --start-games: "
                        f"rl --adapter {out / 'sft' / 'adapter'} --out {out / 'rl'} --start games "
                        "--start-games GAMES.json (an eval --split train --json file)")


def _start_folder(settings: PipelineSettings) -> str | None:
    """The adapter folder the run starts from, if any: the bundled one, or the folder --sft-start names."""
    from llm.bundled_start import FOLDER

    start = settings.resolved_start
    return None if start == "scratch" else str(FOLDER) if start == "bundled" else start


@click.command("pipeline")
@click.option("--out", required=True, type=click.Path(file_okay=False), callback=writable_folder,
              help="Run folder; run the same command again to continue an interrupted pipeline.")
@click.option("--model", default=PipelineSettings.model, show_default=True,
              help="Base model (mlx-lm folder, HF id, 'default').")
@knob_options(declared(PipelineSettings))
@click.option("--recipe", type=click.Choice(RECIPES), default="auto", show_default=True,
              help="Sizes of every stage: cpu (the RL stage from the bundled SFT start, for the default model) or gpu (the "
                   "GPU SFT recipe from scratch and endgame "
                   "RL, rl/pipeline.py GPU_RECIPE); auto picks by device. Flags you give override it.")
@click.option("--resume", is_flag=True, help="Continue the pipeline in --out (running the same command again does "
                                             "too); flags left out are the run's own.")
@json_option
def pipeline_command(out, recipe, resume, json_path, **flags) -> None:
    """Teach the model Wordle end to end and compare base, SFT and RL on held-out secrets.

    On a CPU with the default model, SFT from scratch would take hours: the run starts from the
    bundled SFT start (llm/sft_start/), fits a naming head on it and trains that head with RL
    (GRPO and expert iteration), then plays base, SFT, SFT with its fitted head alone (so that the
    fit's share of the lift and RL's are each seen; --no-eval-start-head leaves it out) and RL on
    the same 64 held-out test secrets.
    --sft-start scratch runs the from-scratch demo instead (gen-sft, LoRA SFT, LoRA RL).

    Run the same command again to continue the pipeline in --out: finished stages are
    skipped, an interrupted SFT or RL stage resumes from its last checkpoint. Its flags are
    compared with the run's record: the same values are fine, another is an error naming the flag.
    """
    from rich.console import Console

    from common.fileio import atomic_write_json
    from rl.pipeline import comparison_table, run_pipeline

    given = given_params(click.get_current_context())
    settings = PipelineSettings(**{**flags, **recipe_for(recipe), **{k: v for k, v in flags.items() if k in given}})
    reads = [("--model", flags["model"]), ("the SFT start", _start_folder(settings))]
    refuse_owned_output(json_path, "--json", [("--out", out), *reads])
    refuse_out_over_inputs(out, reads)
    _refuse_games_start(settings, Path(out))
    summary = run_pipeline(Path(out), settings, given=given, resume=resume)
    console = Console()
    console.print(comparison_table(summary))
    console.print(summary["rl_vs_sft"]["summary"], markup=False, highlight=False)
    console.print(f"files: {out}/summary.json (every figure), {out}/eval-<model>.json (every game); the RL model: "
                  f"--adapter {summary['rl_adapter']}", markup=False, highlight=False)
    if json_path:
        atomic_write_json(json_path, summary)

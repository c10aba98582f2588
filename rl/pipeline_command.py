"""`pipeline`: the README's main job, gen-sft -> sft -> rl -> eval in one command."""

from __future__ import annotations

from pathlib import Path

import click

from common.options import given_params, json_option, seed_option, writable_folder
from llm.options import dtype_option
from rl.pipeline import RECIPES, PipelineSettings, recipe_for
from rl.rollout import STARTS
from solver.policy import EXPERTS

DEFAULT = PipelineSettings()


@click.command("pipeline")
@click.option("--out", required=True, type=click.Path(file_okay=False), callback=writable_folder,
              help="Run folder; run the same command again to continue an interrupted pipeline.")
@click.option("--model", default=DEFAULT.model, show_default=True, help="Base model (mlx-lm folder, HF id, 'default').")
@seed_option
@click.option("--sft-games", type=int, default=DEFAULT.sft_games, show_default=True, help="Solver games for SFT data.")
@click.option("--expert", type=click.Choice(EXPERTS), default=DEFAULT.expert, show_default=True,
              help="The teacher of SFT data and expert iteration: the solver's moves, or its best possible answer.")
@click.option("--sft-iters", type=int, default=DEFAULT.sft_iters, show_default=True, help="LoRA SFT steps.")
@click.option("--rl-steps", type=int, default=DEFAULT.rl_steps, show_default=True, help="RL steps (GRPO and expert iteration).")
@click.option("--rl-schedule", default=DEFAULT.rl_schedule, show_default=True,
              help='RL phases in turn, e.g. "grpo:1" for GRPO alone (results/rl-candidates-variants/).')
@click.option("--ei-replay", type=int, default=DEFAULT.ei_replay, show_default=True,
              help="The expert's moves at fresh start states added to each expert-iteration step (0: none).")
@click.option("--ei-drill", type=int, default=DEFAULT.ei_drill, show_default=True,
              help="Positions after the opener (those most secrets lead to) taught at every expert-iteration step.")
@click.option("--ei-drill-depth", type=int, default=DEFAULT.ei_drill_depth, show_default=True,
              help="Drill that many positions after each of the expert's first N moves, not just its opener.")
@click.option("--group-size", type=int, default=DEFAULT.group_size, show_default=True, help="GRPO group size G.")
@click.option("--rl-start", type=click.Choice(STARTS), default=DEFAULT.rl_start, show_default=True,
              help="RL start states: any (0-3 earlier turns) or endgame (1-6 candidates left).")
@click.option("--rl-turns", type=int, default=DEFAULT.rl_turns, show_default=True,
              help="Groups asked per RL game: 0 plays to the end, 1 is single-turn.")
@click.option("--eval-games", type=int, default=DEFAULT.eval_games, show_default=True, help="Held-out games per model.")
@dtype_option
@click.option("--recipe", type=click.Choice(RECIPES), default="auto", show_default=True,
              help="Sizes of every stage: cpu (a 35-minute demo on 2 cores) or gpu (the GPU SFT recipe and endgame "
                   "RL, rl/pipeline.py GPU_RECIPE); auto picks by device. Flags you give override it.")
@click.option("--resume", is_flag=True, help="Continue the pipeline in --out (running the same command again does "
                                             "too); flags left out are the run's own.")
@json_option
def pipeline_command(out, recipe, resume, json_path, **flags) -> None:
    """Teach the model Wordle end to end and compare base, SFT and RL on held-out secrets.

    Run the same command again to continue the pipeline in --out: finished stages are
    skipped, an interrupted SFT or RL stage resumes from its last checkpoint. Its flags are
    compared with the run's record: the same values are fine, another is an error naming the flag.
    """
    from rich.console import Console

    from common.fileio import atomic_write_json
    from rl.pipeline import comparison_table, run_pipeline

    given = given_params(click.get_current_context())
    settings = PipelineSettings(**{**flags, **recipe_for(recipe), **{k: v for k, v in flags.items() if k in given}})
    summary = run_pipeline(Path(out), settings, given=given, resume=resume)
    console = Console()
    console.print(comparison_table(summary))
    console.print(summary["rl_vs_sft"]["summary"], markup=False, highlight=False)
    if json_path:
        atomic_write_json(json_path, summary)

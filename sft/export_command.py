"""`export`: an adapter fused into a standalone mlx-lm model folder (sft/export.py)."""

from __future__ import annotations

from pathlib import Path

import click

from common.options import json_option, refuse_owned_output, replaced_folder, seed_option
from llm.options import dtype_option


@click.command("export")
@click.option("--model", default="default", show_default=True,
              help="Base model the adapter was trained on: mlx-lm folder, Hugging Face id, or 'default' "
                   "(SmolLM2-135M-Instruct, embedded).")
@click.option("--adapter", required=True, type=click.Path(),
              help="Adapter folder: an sft run's adapter/, llm/sft_start, an rl run's best/ or adapter/, "
                   "or an rl checkpoint.")
@click.option("--out", required=True, type=click.Path(file_okay=False), callback=replaced_folder,
              help="The model folder to write: new, empty, or an earlier export (replaced whole).")
@dtype_option
@click.option("--fold-head", "fold", is_flag=True,
              help="Fold the naming head beside the adapter into the model as one token per allowed word, so the "
                   "exported model plays as the adapter with its head, in mlx-lm or any runtime.")
@seed_option
@click.option("--quiet", is_flag=True, help="No progress bar.")
@json_option
def export_command(model: str, adapter: str, out: str, dtype: str, fold: bool, seed: int, quiet: bool,
                   json_path: str | None) -> None:
    """Fuse an adapter into its base model: one mlx-lm model folder that mlx_lm.generate and
    `eval --model OUT` play as the adapter plays, checked answer for answer before it appears,
    with the prompt format beside it (OUT/PROMPT.md, OUT/export.json). A naming head travels only folded
    into the model as word tokens (--fold-head)."""
    from common.fileio import atomic_write_json
    from sft.export import PROMPT_DOC, export_model

    refuse_owned_output(json_path, "--json", [("--out", out), ("--adapter", adapter), ("--model", model)])
    summary = export_model(model, Path(adapter), Path(out), dtype, show_progress=not quiet, fold=fold, seed=seed)
    if json_path:
        atomic_write_json(json_path, summary)
    check = summary["check"]
    click.echo(f"{'replaced the earlier export: ' if summary['replaced_an_export'] else ''}{out}: {model} with "
               f"{adapter} fused in ({summary['dtype']})")
    click.echo(f"checked: the same greedy answers as the adapter at the {check['prompts']} positions of an example "
               f"game ({check['tokens_compared']} tokens), largest logit difference "
               f"{check['max_logit_difference']:.2g}")
    if "head_words" in summary:
        words, held = summary["head_words"], summary["head_words"]["held_out"]
        click.echo(f"naming head folded in as {words['words']} word tokens; at held-out positions: the same first "
                   f"word as the head at {held['same_first_word']:.1%} of {held['naming_states']} naming states (KL "
                   f"{held['kl_head_to_folded']:.2g}), a word leads at {held['other_tokens_where_a_word_leads']:.2%} "
                   f"of {held['other_states']} other answer tokens")
    click.echo(f"prompt format: {Path(out) / PROMPT_DOC}")
    click.echo(f"play the opening: {summary['play']}")

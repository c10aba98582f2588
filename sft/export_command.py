"""`export`: an adapter fused into a standalone mlx-lm model folder (sft/export.py)."""

from __future__ import annotations

from pathlib import Path

import click

from common.options import json_option, refuse_owned_output, replaced_folder
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
@click.option("--quiet", is_flag=True, help="No progress bar.")
@json_option
def export_command(model: str, adapter: str, out: str, dtype: str, quiet: bool, json_path: str | None) -> None:
    """Fuse an adapter into its base model: one mlx-lm model folder that mlx_lm.generate and
    `eval --model OUT` play as the adapter plays, checked answer for answer before it appears,
    with the prompt format beside it (OUT/PROMPT.md, OUT/export.json). A naming head does not travel."""
    from common.fileio import atomic_write_json
    from sft.export import PROMPT_DOC, export_model

    refuse_owned_output(json_path, "--json", [("--out", out), ("--adapter", adapter), ("--model", model)])
    summary = export_model(model, Path(adapter), Path(out), dtype, show_progress=not quiet)
    if json_path:
        atomic_write_json(json_path, summary)
    check = summary["check"]
    click.echo(f"{'replaced the earlier export: ' if summary['replaced_an_export'] else ''}{out}: {model} with "
               f"{adapter} fused in ({summary['dtype']})")
    click.echo(f"checked: the same greedy answers as the adapter at the {check['prompts']} positions of an example "
               f"game ({check['tokens_compared']} tokens), largest logit difference "
               f"{check['max_logit_difference']:.2g}")
    click.echo(f"prompt format: {Path(out) / PROMPT_DOC}")
    click.echo(f"play the opening: {summary['play']}")

"""`sft`: LoRA (or full) supervised fine-tuning on gen-sft's chat data, resumable, with a live eval."""

from __future__ import annotations

import click

from common.options import (given_params, json_option, knob_options, refuse_out_over_inputs, refuse_owned_output,
                            writable_folder)
from sft.config import KNOBS, SFTConfig


@click.command("sft")
@click.option("--model", default="default", show_default=True,
              help="Base model: mlx-lm folder, Hugging Face id, or 'default' (SmolLM2-135M-Instruct, embedded).")
@click.option("--data", type=click.Path(), default=None,
              help="Folder with train.jsonl (+ valid/test.jsonl), as gen-sft writes it; a run continued in --out "
                   "has its own.")
@click.option("--out", required=True, type=click.Path(file_okay=False), callback=writable_folder,
              help="Run folder: checkpoints/, metrics.jsonl, adapter/ (and fused/).")
@click.option("--adapter", type=click.Path(), default=None,
              help="Start from this adapter (its rank and type replace --rank/--full).")
@knob_options(KNOBS.values())
@click.option("--resume", is_flag=True, help="Continue the run in --out from its last checkpoint (running the same "
                                             "command again does too); flags left out are the run's own.")
@click.option("--fuse", is_flag=True, help="Also write --out/fused: base + adapter in one model, checked "
                                           "to answer like the adapter.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@json_option
def sft(model, data, out, adapter, resume, fuse, quiet, json_path, **knobs) -> None:
    """Fine-tune a model on chat examples; write OUT/adapter (mlx-lm format) and metrics.

    Run the same command again to continue the run in --out from its last checkpoint (a run
    that never reached one starts again). Flags that decide the weights are compared with the
    run's record: the same values are fine, another is an error naming the flag.
    """
    from rich.console import Console

    from common.fileio import atomic_write_json
    from sft.run import run_sft

    reads = [("--data", data), ("--adapter", adapter), ("--model", model)]
    refuse_owned_output(json_path, "--json", [("--out", out), *reads])
    refuse_out_over_inputs(out, reads)
    config = SFTConfig(model=model, data=data, out=out, adapter=adapter, **knobs)
    summary = run_sft(config, resume=resume, fuse=fuse, show_progress=not quiet,
                      given=given_params(click.get_current_context()))
    if summary is None:  # a process other than rank 0 under mlx.launch: rank 0 reports
        return
    if json_path:
        atomic_write_json(json_path, summary)
    Console().print(*summary_tables(summary))


# (label, summary key, format) of the final figures; None values show as "-".
FIGURES = (
    ("steps", "steps", "{:d}"),
    ("first train loss", "first_train_loss", "{:.4f}"),
    ("final train loss (mean of last 10)", "final_train_loss", "{:.4f}"),
    ("val loss at start", "initial_val_loss", "{:.4f}"),
    ("val loss at end", "final_val_loss", "{:.4f}"),
    ("tokens/s (median step)", "tokens_per_s_median", "{:,.0f}"),
    ("step seconds (median)", "step_seconds_median", "{:.3f}"),
    ("peak memory GB", "peak_memory_gb", "{:.2f}"),
    ("training seconds (all steps)", "train_seconds", "{:.1f}"),
    ("wall seconds (this command)", "seconds", "{:.1f}"),
    ("adapter", "adapter", "{}"),
)


def _show(value, pattern: str) -> str:
    return "-" if value is None else pattern.format(value)


def summary_tables(summary: dict) -> list:
    """The history at each validation (loss, val loss, games) and the run's final figures."""
    from rich.table import Table

    history = Table(title="training")
    for column in ("step", "train loss", "val loss", "format-valid", "win rate"):
        history.add_column(column, justify="right")
    for row in summary["history"]:
        history.add_row(str(row["step"]), _show(row["loss"], "{:.4f}"), _show(row["val_loss"], "{:.4f}"),
                        _show(row["eval_format_valid_rate"], "{:.1%}"), _show(row["eval_win_rate"], "{:.1%}"))
    figures = Table(title=f"sft run {summary['run']}")
    figures.add_column("figure")
    figures.add_column("value", justify="right")
    for label, key, pattern in FIGURES:
        figures.add_row(label, _show(summary[key], pattern))
    if summary["fused"]:
        fused = summary["fused"]
        figures.add_row("fused", f"{fused['path']} (same greedy answers on {fused['prompts']} prompts)")
    return [history, figures]

"""CLI commands of the llm package. Imports stay inside the bodies so `--help` is fast."""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the fields to this JSON file.",
)
def doctor(json_path: Path | None) -> None:
    """Show the platform, MLX, its BLAS, fp32 matmul speed and the default model cache."""
    from rich.console import Console

    from llm.doctor import collect, render
    from solver.errors import UserError
    from solver.fileio import atomic_write_json

    info = collect()
    Console().print(render(info))
    if json_path is not None:
        try:
            atomic_write_json(json_path, info)
        except OSError as err:
            raise UserError(f"cannot write {json_path}: {err.strerror or err}") from err

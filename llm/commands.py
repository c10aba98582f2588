"""CLI commands of the llm package. Imports stay inside the bodies so `--help` is fast."""

from __future__ import annotations

import click

from common.options import json_option


@click.command()
@json_option
def doctor(json_path: str | None) -> None:
    """Show the platform, MLX, its BLAS, fp32 matmul speed and the default model cache."""
    from rich.console import Console

    from common.fileio import atomic_write_json
    from llm.doctor import collect, render

    info = collect()
    Console().print(render(info))
    if json_path is not None:
        atomic_write_json(json_path, info)

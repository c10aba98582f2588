"""Read other gains at an output-rl run's positions: did the gains tuned after the teacher's thought
(session 69, results/output-rl/) lower the expected win at the states after the model's own text,
where they then lost games in play?

Run from the repository root on a finished output-rl folder (its states are reused; the splits'
arrays are built again, a few minutes):

    python -m studies.output_rl_gains --run runs/orl-said --gains 0.68 1.20 9.51 --json out.json
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from common.errors import run_script
from llm.blas import ensure_fast_blas


@click.command()
@click.option("--run", "run_dir", required=True, type=click.Path(exists=True, file_okay=False),
              help="A finished output-rl folder.")
@click.option("--gains", "read_gains", type=(float, float, float), multiple=True, required=True,
              help="beta alpha bias to read (repeatable).")
@click.option("--json", "json_out", required=True, type=click.Path(dir_okay=False))
def main(run_dir: str, read_gains: tuple[tuple[float, float, float], ...], json_out: str) -> None:
    ensure_fast_blas()
    import mlx.core as mx

    from common.fileio import atomic_write_json, read_json
    from rl.output_rl import SUMMARY_FILE, OutputRLSettings, Source, initial_gains, prepare, readings

    summary = read_json(Path(run_dir) / SUMMARY_FILE, "an output-rl summary")
    settings = OutputRLSettings(**summary["settings"])
    prepared = prepare(Source.of(summary["distilled"]), Path(run_dir), tuple(summary["own_games"]),
                       tuple(summary["own_validation"]), settings, show_progress=True)
    rows = [{"gains": {k: float(v) for k, v in initial_gains().items()},
             **readings(initial_gains(), prepared.splits, prepared.secret_mask, settings.temperature)}]
    for beta, alpha, bias in read_gains:
        gains = {"beta": mx.array(beta), "alpha": mx.array(alpha), "bias": mx.array(bias)}
        rows.append({"gains": {"beta": beta, "alpha": alpha, "bias": bias},
                     **readings(gains, prepared.splits, prepared.secret_mask, settings.temperature)})
    atomic_write_json(Path(json_out), {"run": run_dir, "positions": summary["positions"], "readings": rows})
    for row in rows:
        click.echo(json.dumps(row))


if __name__ == "__main__":
    run_script(main)

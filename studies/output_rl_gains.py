"""Read other gains at an output-rl run's positions: did the gains tuned after the teacher's thought
(session 69, results/output-rl/) lower the expected win at the states after the model's own text,
where they then lost games in play? With each reading, the exact slope of the mean expected reward
in each gain and its standard error over the positions, beside the sampled gradient of
studies/sampled_gains.py.

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
    import numpy as np

    from common.fileio import atomic_write_json, read_json
    from rl.output_rl import GAINS, SUMMARY_FILE, OutputRLSettings, Source, expected, initial_gains, prepare, readings

    def slopes(gains: dict) -> dict:
        """Each own split's exact gradient of the mean expected reward (the KL left out) and its
        standard error over the positions: each position's slope by a forward-mode product a gain."""
        out = {}
        for name in ("own", "own_validation"):
            split = prepared.splits[name]
            per_position = []

            def reward(*values):
                return expected(dict(zip(GAINS, values)), split, prepared.secret_mask, settings.temperature)[0]

            for gain in GAINS:
                tangents = [mx.array(1.0 if k == gain else 0.0) for k in GAINS]
                _, (slope,) = mx.jvp(reward, [gains[k] for k in GAINS], tangents)
                per_position.append(np.array(slope))
            per_position = np.stack(per_position, axis=1)
            out[name] = {"gradient": dict(zip(GAINS, np.round(per_position.mean(axis=0), 6).tolist())),
                         "gradient_se": dict(zip(GAINS, np.round(per_position.std(axis=0, ddof=1)
                                                                 / np.sqrt(len(per_position)), 6).tolist()))}
        return out

    summary = read_json(Path(run_dir) / SUMMARY_FILE, "an output-rl summary")
    settings = OutputRLSettings(**summary["settings"])
    prepared = prepare(Source.of(summary["distilled"]), Path(run_dir), tuple(summary["own_games"]),
                       tuple(summary["own_validation"]), settings, show_progress=True)
    rows = [{"gains": {k: float(v) for k, v in initial_gains().items()},
             **readings(initial_gains(), prepared.splits, prepared.secret_mask, settings.temperature),
             "slopes": slopes(initial_gains())}]
    for beta, alpha, bias in read_gains:
        gains = {"beta": mx.array(beta), "alpha": mx.array(alpha), "bias": mx.array(bias)}
        rows.append({"gains": {"beta": beta, "alpha": alpha, "bias": bias},
                     **readings(gains, prepared.splits, prepared.secret_mask, settings.temperature),
                     "slopes": slopes(gains)})
    atomic_write_json(Path(json_out), {"run": run_dir, "positions": summary["positions"], "readings": rows})
    for row in rows:
        click.echo(json.dumps(row))


if __name__ == "__main__":
    run_script(main)

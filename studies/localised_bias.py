"""output-rl with its secret-list bias read along a direction that is ~1 where the model plays its
word and ~0 at the anchor rows (every token of teacher answers, candidate lists included).

Session 70 found that the bias along the mean naming state also fills the thought's candidate
lists with answer-list words (results/output-rl/). Here u solves the ridge problem
min |N u - 1|^2 + |A u|^2 + lam |u|^2 over the naming states N and anchor states A, so the bias
acts where the word is played and hardly where the thought lists words.

    python -m studies.localised_bias --distilled runs/d9 --out runs/orl-local --states runs/orl-every/states.npz \
        --own-games G.json --own-validation V.json --json out.json
"""

from __future__ import annotations

import shutil
from pathlib import Path

import click

from common.errors import run_script
from llm.blas import ensure_fast_blas
from studies.output_rl_inputs import output_rl_inputs

RIDGE = 1.0  # relative to the mean squared norm of a state: keeps u small where the two sets agree
ANCHOR_ROWS = 4096


@click.command()
@output_rl_inputs
@click.option("--json", "json_out", required=True, type=click.Path(dir_okay=False))
def main(distilled: str, out: str, states: str | None, own_games: tuple[str, ...], own_validation: tuple[str, ...],
         json_out: str) -> None:
    ensure_fast_blas()
    import mlx.core as mx
    import numpy as np

    import rl.output_rl as output_rl
    from common.fileio import atomic_write_json, read_arrays
    from rl.distill import ANCHORS_FILE, final_states

    anchors = read_arrays(Path(distilled) / ANCHORS_FILE, "a distill anchors file", "run distill again")["mids"]
    chosen = np.sort(np.random.default_rng(0).permutation(len(anchors))[:ANCHOR_ROWS])
    readings = {}

    def localised_direction(model, rows):
        first = np.r_[True, rows.owners[1:] != rows.owners[:-1]]
        naming = final_states(model, rows.mids[first]).astype(np.float64)
        others = final_states(model, anchors[chosen]).astype(np.float64)
        scale = float((naming ** 2).sum(axis=1).mean())
        gram = naming.T @ naming + others.T @ others + RIDGE * scale * np.eye(naming.shape[1])
        u = np.linalg.solve(gram, naming.sum(axis=0))
        readings.update(naming_mean=round(float((naming @ u).mean()), 4),
                        anchor_mean=round(float((others @ u).mean()), 4),
                        anchor_abs_mean=round(float(np.abs(others @ u).mean()), 4))
        return mx.array(u.astype(np.float32))

    output_rl.naming_direction = localised_direction
    if states and not (Path(out) / output_rl.STATES_FILE).exists():
        Path(out).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(states, Path(out) / output_rl.STATES_FILE)
    summary = output_rl.run_output_rl(distilled, out, output_rl.OutputRLSettings(), own_games, own_validation)
    summary["direction"] = readings
    atomic_write_json(Path(json_out), summary)
    click.echo(output_rl.summary_line(summary))
    click.echo(f"u . h: naming states {readings['naming_mean']}, anchor rows {readings['anchor_mean']} "
               f"(mean |u . h| {readings['anchor_abs_mean']})")


if __name__ == "__main__":
    run_script(main)

"""Two more terms for `distill`'s spelled output layer, to overrule the start's word prior at ` Only`:
a learnt gain on each token's own output row (W scaled row by row: "this token is named too often
here"), or a low-rank map of the state before W (W (h + U D h): a subspace of the state, such as a
copy of the last guess, turned down for every word at once). Both are still one plain matrix.

Run from the repository root on a distill folder holding states (a refit skips the model's pass):

    python -m studies.output_terms --term gains --out runs/d5 --adapter runs/start --epochs 6 \
        --own-games G.json --own-validation V.json
"""

from __future__ import annotations

import click

from common.errors import run_script
from llm.blas import ensure_fast_blas

GAIN_SCALE = 10.0  # the log gain's step multiplier: Adam's 1e-3 steps move it 0.01 a step
MAP_RANK = 32


def terms(kind: str):
    """The SpelledOutput subclass that adds the chosen term, zero at the start (the model's own logits)."""
    import mlx.core as mx

    from llm.spelled_output import SpelledOutput

    class Gains(SpelledOutput):
        def __init__(self, weight, spelling):
            super().__init__(weight, spelling)
            self.log_gain = mx.zeros((weight.shape[0],))

        def __call__(self, h):
            return (h @ self.weight.T) * mx.exp(GAIN_SCALE * self.log_gain) + (h @ self.projection.T) @ self.spelling.T

        def merged(self):
            return self.weight * mx.exp(GAIN_SCALE * self.log_gain)[:, None] + self.spelling @ self.projection

    class StateMap(SpelledOutput):
        def __init__(self, weight, spelling):
            super().__init__(weight, spelling)
            hidden = weight.shape[1]
            self.down = mx.random.normal((MAP_RANK, hidden), key=mx.random.key(0)) / hidden ** 0.5
            self.up = mx.zeros((hidden, MAP_RANK))

        def __call__(self, h):
            return (h + (h @ self.down.T) @ self.up.T) @ self.weight.T + (h @ self.projection.T) @ self.spelling.T

        def merged(self):
            return self.weight + self.weight @ self.up @ self.down + self.spelling @ self.projection

    return {"gains": Gains, "map": StateMap}[kind]


@click.command()
@click.option("--term", type=click.Choice(["gains", "map"]), required=True)
@click.option("--out", required=True, help="A distill folder (its states reused when present).")
@click.option("--adapter", required=True, help="The start adapter with its naming head.")
@click.option("--epochs", type=int, default=6)
@click.option("--seed", type=int, default=1)
@click.option("--own-games", multiple=True)
@click.option("--own-validation", multiple=True)
def main(term, out, adapter, epochs, seed, own_games, own_validation) -> None:
    ensure_fast_blas()
    import rl.distill as distill

    distill.SpelledOutput = terms(term)
    settings = distill.DistillSettings(epochs=epochs, seed=seed)
    summary = distill.run_distill("default", adapter, out, settings, own_games=tuple(own_games),
                                  own_validation=tuple(own_validation), show_progress=False)
    click.echo(distill.summary_line(summary))


if __name__ == "__main__":
    run_script(main)

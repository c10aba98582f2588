"""Which of head RL's four numbers moved the held-out naming figure, and by how much?

Head RL with `--head-params gains` trains the naming head's three gains and its secret bias
(llm/naming_head.py). This study reads a trained head and its start, and scores each mix of the
two at the start's held-out validation positions (the states `naming-head` cached, no model pass):
the secret's mean probability and how often it is the head's first word, at the play temperature,
with the game's secret list as eval gives it. Run from the repository root:

    python -m studies.head_gains --start runs/h2560 --trained runs/rl-gains/best \\
        --states runs/states-2560.npz --positions 2560 --json results/head-gains/parts.json
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click

from common.errors import run_script
from common.fileio import atomic_write_json
from llm.blas import ensure_fast_blas

TEMPERATURE = 0.7  # eval's and head RL's sampling temperature


@click.command()
@click.option("--start", required=True, type=click.Path(exists=True, file_okay=False),
              help="The adapter folder with the fitted head (and naming_head.json).")
@click.option("--trained", required=True, type=click.Path(exists=True, file_okay=False),
              help="The adapter folder with the head RL trained (RUN/best).")
@click.option("--states", "states_path", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--positions", type=int, default=2560, show_default=True, help="Training positions of the fit.")
@click.option("--json", "json_out", type=click.Path(dir_okay=False), help="Also write the figures here.")
def main(start: str, trained: str, states_path: str, positions: int, json_out: str | None) -> None:
    import mlx.core as mx
    import numpy as np

    from llm.loading import load_model
    from llm.naming_head import HEAD_FILE, NamingHead
    from llm.word_steering import WordTokens, head_scorer, secret_mask
    from rl.head_policy import BANNED_SCORE, masked_rows
    from rl.naming_head import HeadSettings, head_positions, load_states
    from solver.setup import load_setup

    setup = load_setup("answers")
    allowed = setup.lists.allowed
    splits = head_positions(HeadSettings(positions=positions))
    positions_held = splits["validation"]
    states = mx.array(load_states(Path(states_path), {"validation": positions_held})["validation"])
    model, tokenizer = load_model("default", start, "auto", fuse=True)
    vocabulary = WordTokens.of(tokenizer, list(allowed))
    index = {w: i for i, w in enumerate(allowed)}
    secrets = mx.array([index[p.secret] for p in positions_held])
    banned = masked_rows([np.array(sorted({index[w] for w in (*p.state.guesses, *(r.guess for r in p.rejected))
                                           if w in index}), dtype=np.int64) for p in positions_held], len(allowed))
    fitted, learnt = NamingHead.load(Path(start) / HEAD_FILE), NamingHead.load(Path(trained) / HEAD_FILE)
    mixes = {"fitted head": fitted, "trained head": learnt,
             "trained gains only": replace(fitted, gains=learnt.gains),
             "trained secret bias only": replace(fitted, secret_bias=learnt.secret_bias)}
    on_list = mx.array(secret_mask(allowed, setup.start.secret_words))
    figures = {}
    for name, head in mixes.items():
        scores = head_scorer(model, head, vocabulary, setup.start.secret_words)(states) / TEMPERATURE
        scores = mx.where(banned, BANNED_SCORE, scores)
        log_p = scores - mx.logsumexp(scores, axis=-1, keepdims=True)
        p_secret = mx.exp(log_p[mx.arange(len(positions_held)), secrets])
        first = mx.argmax(log_p, axis=-1) == secrets
        on_secrets = (mx.exp(log_p) * on_list).sum(axis=-1)
        figures[name] = {"gains": [round(float(g), 4) for g in head.gains], "secret_bias": round(head.secret_bias, 4),
                         "p_secret": round(float(p_secret.mean()), 4),
                         "secret_first": round(float(first.astype(mx.float32).mean()), 4),
                         "p_on_secret_list": round(float(on_secrets.mean()), 4)}
        click.echo(f"{name:26s} {figures[name]}")
    if json_out:
        atomic_write_json(json_out, {"start": start, "trained": trained, "states": states_path,
                                     "validation_positions": len(positions_held), "temperature": TEMPERATURE,
                                     "figures": figures})


if __name__ == "__main__":
    ensure_fast_blas()
    run_script(main)

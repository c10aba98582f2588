"""Does the naming head generalise better with more training positions or other fit settings?

Refits the head (rl/naming_head.py `fit_head`) on the states a `naming-head` states file already
holds, once per setting, and prints each fit's held-out validation curve: no model pass, so a
sweep costs the fits alone (about 45 s per 20 epochs at 2,560 positions on a 2-core CPU). Each
setting is a JSON object of `HeadSettings` fields over `--positions`; run from the repository root:

    python -m studies.head_sweep --adapter runs/gpu-sft-2400 --states runs/head-scale/states.npz \\
        --positions 2560 '{"epochs": 60, "rank": 16}' '{"epochs": 60, "positions": 1280}' [--json OUT.json]
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, replace
from pathlib import Path

import click

from common.errors import UserError, run_script
from common.fileio import atomic_write_json
from llm.blas import ensure_fast_blas


@click.command()
@click.argument("settings", nargs=-1, required=True)
@click.option("--adapter", required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--states", "states_path", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--positions", type=int, default=2560, show_default=True,
              help="Training positions the states file holds (the most any setting uses).")
@click.option("--json", "json_out", type=click.Path(dir_okay=False), help="Also write every fit's figures here.")
def main(settings: tuple[str, ...], adapter: str, states_path: str, positions: int, json_out: str | None) -> None:
    from llm.loading import load_model
    from rl.naming_head import HeadSettings, fit_head, fit_inputs, head_positions, load_states

    try:
        variants = [replace(HeadSettings(positions=positions), **json.loads(text)) for text in settings]
    except (ValueError, TypeError) as err:
        raise UserError(f"a setting is not a JSON object of HeadSettings fields: {err}") from err
    if any(v.positions > positions for v in variants):
        raise UserError(f"a setting asks for more than --positions {positions}")
    splits = head_positions(HeadSettings(positions=positions))
    states = load_states(Path(states_path), splits)
    if len(states["train"]) < positions or len(states["validation"]) < len(splits["validation"]):
        raise UserError(f"{states_path} holds fewer positions than asked: run naming-head with them first")
    model, tokenizer = load_model("default", adapter, "auto")
    vocabulary, secrets, fits = fit_inputs(tokenizer, splits)
    rows = []
    for variant in variants:
        n = variant.positions
        started = time.perf_counter()
        _, figures = fit_head(model, vocabulary, {"train": states["train"][:n], "validation": states["validation"]},
                              fits[:n], {"train": secrets["train"][:n], "validation": secrets["validation"]}, variant)
        rows.append({"settings": asdict(variant), **figures, "fit_seconds": round(time.perf_counter() - started, 1)})
        curve = ", ".join(f"{p['epoch']}: {p['validation_mean_p']:.3f}" for p in figures["curve"])
        print(f"{json.dumps(asdict(variant))}: best epoch {figures['best_epoch']}, validation "
              f"{figures['mean_p_after']['validation']:.3f}, training {figures['mean_p_after']['train']:.3f} "
              f"(curve {curve})", flush=True)
    if json_out:
        atomic_write_json(json_out, {"adapter": adapter, "states": states_path, "fits": rows})


if __name__ == "__main__":
    ensure_fast_blas()
    run_script(main)

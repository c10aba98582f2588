"""Benchmark: where eval games' and head states' model passes spend their time.

Eval: plays `--games` held-out test games (`--seed`, temperature 0.7) with an adapter (the
bundled SFT start by default; with its head when one is beside it): seconds, games/s, prompt
tokens run through the model and their seconds, decode steps and their seconds, answer tokens,
rows per decode step, and the rest (Python, sampling bookkeeping, the solver's scoring of moves).

Head states: the naming states of `--positions` training positions, each whole context batched
by length (`whole`, before) and with the opening every context shares run once (`shared`,
`rl/naming_head.py`): seconds and tokens per position, and the largest difference between them.

Matmul rate: `doctor`'s figure next to what the passes reach, 2 x weights x tokens / seconds
(a prefill does not run the output layer; a decode step does).

    python -m bench.passes --games 32 --positions 64 --json passes.json
"""

from __future__ import annotations

from llm.blas import ensure_fast_blas

if __name__ == "__main__":
    ensure_fast_blas()  # before mlx loads

import json  # noqa: E402
import os
import time

import click
import mlx.core as mx
import numpy as np

from bench.decode import cpu_name
from common.errors import run_script
from common.fileio import atomic_write_json
from llm.generation import PassCounters, SamplingSettings


def weight_counts(model) -> tuple[int, int]:
    """(weights a prefill token passes through, weights a decoded token passes through): the
    output layer (the tied embedding, for SmolLM2) only counts in decode."""
    from mlx.utils import tree_flatten

    total = sum(v.size for _, v in tree_flatten(model.parameters()))
    embedding = model.model.embed_tokens.weight.size
    return total - embedding, total


def play(model, tokenizer, secrets: list[str], seed: int, batch_size: int, steer) -> tuple[dict, PassCounters]:
    from eval.harness import evaluate
    from llm.player import ModelPlayer
    from solver.setup import load_setup

    setup = load_setup("answers")
    player = ModelPlayer(model, tokenizer, "bench", SamplingSettings(0.7), seed, batch_size, steer=steer)
    summary, _ = evaluate(player, setup, secrets, show_progress=False)
    return summary, player.passes


def pass_figures(summary: dict, passes: PassCounters, weights: tuple[int, int]) -> dict:
    seconds = summary["seconds"]
    prefill_rate = 2 * weights[0] * passes.prefill_tokens / passes.prefill_seconds / 1e9 if passes.prefill_seconds else None
    decode_rate = 2 * weights[1] * passes.answer_tokens / passes.decode_seconds / 1e9 if passes.decode_seconds else None
    return {
        "seconds": round(seconds, 1), "games_per_s": round(summary["games"] / seconds, 4), "wins": summary["wins"],
        "answers": summary["answers"], "prompt_tokens": passes.prefill_tokens,
        "prompt_tokens_per_answer": round(passes.prefill_tokens / summary["answers"], 1),
        "prefill_seconds": round(passes.prefill_seconds, 1), "decode_steps": passes.decode_steps,
        "decode_seconds": round(passes.decode_seconds, 1), "answer_tokens": passes.answer_tokens,
        "rows_per_decode_step": round(passes.answer_tokens / max(1, passes.decode_steps), 2),
        "rest_seconds": round(seconds - passes.prefill_seconds - passes.decode_seconds, 1),
        "prefill_gflops": round(prefill_rate, 1) if prefill_rate else None,
        "decode_gflops": round(decode_rate, 1) if decode_rate else None,
    }


def whole_context_states(model, tokenizer, positions, batch: int) -> np.ndarray:
    """The states as computed before the shared opening: every context whole, batched by length."""
    from rl.naming_head import naming_context

    contexts = [naming_context(tokenizer, p) for p in positions]
    order = sorted(range(len(contexts)), key=lambda i: len(contexts[i]))
    states = np.zeros((len(contexts), model.args.hidden_size), dtype=np.float32)
    for start in range(0, len(order), batch):
        chosen = order[start:start + batch]
        width = max(len(contexts[i]) for i in chosen)
        hidden = model.model(mx.array([contexts[i] + [0] * (width - len(contexts[i])) for i in chosen]))
        last = mx.array([len(contexts[i]) - 1 for i in chosen])
        states[chosen] = np.array(hidden[mx.arange(len(chosen)), last].astype(mx.float32))
    return states


def head_states(model, tokenizer, count: int, seed: int) -> dict:
    from llm.generation import shared_prefix_length
    from rl.naming_head import STATES_BATCH, HeadSettings, head_positions, naming_context, naming_states

    positions = head_positions(HeadSettings(positions=count, validation_positions=1, seed=seed))["train"]
    contexts = [naming_context(tokenizer, p) for p in positions]
    shared = shared_prefix_length(contexts)
    timed = {}
    for name, states_of in (("whole", lambda: whole_context_states(model, tokenizer, positions, STATES_BATCH)),
                            ("shared", lambda: naming_states(model, tokenizer, positions))):
        began = time.perf_counter()
        timed[name] = (states_of(), time.perf_counter() - began)
    tokens = {"whole": sum(map(len, contexts)), "shared": sum(map(len, contexts)) - shared * (len(contexts) - 1)}
    return {
        "positions": len(positions), "shared_opening_tokens": shared,
        **{f"{name}_s_per_position": round(seconds / len(positions), 3) for name, (_, seconds) in timed.items()},
        **{f"{name}_tokens_per_position": round(tokens[name] / len(positions), 1) for name in timed},
        "speedup": round(timed["whole"][1] / timed["shared"][1], 2),
        "max_abs_difference": float(np.abs(timed["whole"][0] - timed["shared"][0]).max()),
    }


@click.command()
@click.option("--model", default="default", show_default=True)
@click.option("--adapter", default=None, help="An adapter folder [default: the bundled SFT start, for the default model].")
@click.option("--games", type=click.IntRange(0), default=32, show_default=True,
              help="Held-out test games played each way (0: none).")
@click.option("--positions", type=click.IntRange(0), default=64, show_default=True,
              help="Head positions whose states are computed each way (0: none).")
@click.option("--batch-size", type=click.IntRange(1), default=32, show_default=True)
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
def main(model: str, adapter: str | None, games: int, positions: int, batch_size: int, seed: int,
         json_path: str | None) -> None:
    from eval.run import choose_secrets
    from llm.bundled_start import verified_start
    from llm.doctor import matmul_gflops
    from llm.loading import load_model
    from llm.naming_head import NamingHead, head_beside
    from llm.word_steering import steered_model
    from solver.setup import load_setup

    if adapter is None and model == "default":
        adapter = str(verified_start())
    loaded, tokenizer = load_model(model, adapter)
    weights = weight_counts(loaded)
    record = {"bench": "passes", "machine": cpu_name(), "cores": os.cpu_count(), "model": model, "adapter": adapter,
              "matmul_gflops": round(matmul_gflops(), 1)}
    if positions:
        record["head_states"] = head_states(loaded, tokenizer, positions, seed)
        click.echo(json.dumps(record["head_states"]))
    if games:
        setup = load_setup("answers")
        secrets = choose_secrets(setup.lists.answers, "test", games, seed)
        player_model, steer = loaded, None
        if adapter and head_beside(adapter):
            player_model, steer = steered_model(loaded, tokenizer, NamingHead.load(head_beside(adapter)),
                                                setup.lists.allowed)
        summary, passes = play(player_model, tokenizer, secrets, seed, batch_size, steer)
        record["eval"] = {"games": games, "seed": seed, "temperature": 0.7, "head": bool(steer),
                          **pass_figures(summary, passes, weights)}
        click.echo(json.dumps(record["eval"]))
    if json_path:
        atomic_write_json(json_path, record)


if __name__ == "__main__":
    run_script(main)

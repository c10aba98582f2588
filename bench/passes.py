"""Benchmark: where eval games' and head states' model passes spend their time.

Eval: plays `--games` held-out test games (`--seed`, temperature 0.7) with an adapter (the
bundled SFT start by default; with its head when one is beside it): seconds, games/s, prompt
tokens run through the model and their seconds, decode steps and their seconds, answer tokens,
rows per decode step, and the rest (Python, sampling bookkeeping, the solver's scoring of moves).

Head states: the naming states of `--positions` training positions (`rl/naming_head.py`, the
opening every context shares run once): seconds and tokens per position.

Each is measured with the adapter kept as mlx-lm's LoRA layers (`adapter_layers`) and folded into
the weights (`fused`, what eval and the head load), fused and one context a core on a stream of its
own (`fused_core_streams`, llm/cpu_streams.py: head states' contexts, eval's prompts before their
answers are decoded), and that with the attention's and SwiGLU's exp many lanes at once
(`fused_core_streams_vector_exp`, llm/vector_exp.py: what the product runs). The speed-ups of
each way over each one before it, the largest difference between ways' states and, for each pair
of ways, how many games' records are identical (every game's record is in the JSON).

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
import numpy as np

from bench.decode import cpu_name
from common.errors import run_script
from common.fileio import atomic_write_json
from llm.generation import PassCounters, SamplingSettings


# How a pass runs: the adapter folded into the weights (`load_model(..., fuse=)`), head states
# and eval's prompts spread over one stream a core (`naming_states(..., spread=)`, `ModelPlayer(spread=)`),
# and exp many lanes at once (`vector_exp(model, enabled)`).
WAYS = {"adapter_layers": (False, False, False), "fused": (True, False, False),
        "fused_core_streams": (True, True, False), "fused_core_streams_vector_exp": (True, True, True)}


def weight_counts(model) -> tuple[int, int]:
    """(weights a prefill token passes through, weights a decoded token passes through): the
    output layer (the tied embedding, for SmolLM2) only counts in decode."""
    from mlx.utils import tree_flatten

    total = sum(v.size for _, v in tree_flatten(model.parameters()))
    embedding = model.model.embed_tokens.weight.size
    return total - embedding, total


def play(model, tokenizer, secrets: list[str], seed: int, batch_size: int, steer,
         spread: bool, vector: bool) -> tuple[dict, list, PassCounters]:
    from eval.harness import evaluate
    from llm.player import ModelPlayer
    from solver.setup import load_setup

    setup = load_setup("answers")
    player = ModelPlayer(model, tokenizer, "bench", SamplingSettings(0.7), seed, batch_size, steer=steer,
                          spread=spread, vector=vector)
    summary, records = evaluate(player, setup, secrets, show_progress=False)
    return summary, [r.to_json() for r in records], player.passes


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


def head_states(model, tokenizer, count: int, seed: int, spread: bool, vector: bool) -> tuple[dict, np.ndarray]:
    """Figures of the naming states of `count` training positions (the product's path), and the states."""
    from llm.generation import shared_prefix_length
    from rl.naming_head import HeadSettings, head_positions, naming_context, naming_states

    positions = head_positions(HeadSettings(positions=count, validation_positions=1, seed=seed))["train"]
    contexts = [naming_context(tokenizer, p) for p in positions]
    shared = shared_prefix_length(contexts)
    began = time.perf_counter()
    states = naming_states(model, tokenizer, positions, spread=spread, vector=vector)
    seconds = time.perf_counter() - began
    tokens = sum(map(len, contexts)) - shared * (len(contexts) - 1)
    return {"positions": len(positions), "shared_opening_tokens": shared,
            "s_per_position": round(seconds / len(positions), 3),
            "tokens_per_position": round(tokens / len(positions), 1)}, states


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
    record = {"bench": "passes", "machine": cpu_name(), "cores": os.cpu_count(), "model": model, "adapter": adapter,
              "matmul_gflops": round(matmul_gflops(), 1), "ways": {}}
    setup = load_setup("answers")
    secrets = choose_secrets(setup.lists.answers, "test", games, seed) if games else []
    states, games_played = {}, {}
    head_file = head_beside(adapter)
    network = tokenizer = loaded_fuse = None
    for way, (fuse, spread, vector) in WAYS.items():
        if fuse != loaded_fuse:  # the ways that share a model load it once
            (network, tokenizer), loaded_fuse = load_model(model, adapter, fuse=fuse), fuse
        figures = record["ways"][way] = {}
        if positions:
            figures["head_states"], states[way] = head_states(network, tokenizer, positions, seed, spread, vector)
            click.echo(json.dumps({way: figures["head_states"]}))
        if games:
            player_model, steer = network, None
            if head_file:
                player_model, steer = steered_model(network, tokenizer, NamingHead.load(head_file), setup.lists.allowed,
                                                    setup.start.secret_words)
            summary, games_played[way], passes = play(player_model, tokenizer, secrets, seed, batch_size, steer,
                                                        spread, vector)
            figures["eval"] = {"games": games, "seed": seed, "temperature": 0.7, "head": bool(steer),
                               **pass_figures(summary, passes, weight_counts(network))}
            click.echo(json.dumps({way: figures["eval"]}))
            figures["eval"]["per_game"] = games_played[way]
    first, *later = WAYS

    def speedups(part: str, figure: str, ways: list[str]) -> dict[str, float]:
        """`{"later_over_earlier": x}` for every pair of ways: how many times faster the later one ran."""
        measured = {way: record["ways"][way][part][figure] for way in ways}
        return {f"{after}_over_{before}": round(measured[before] / measured[after], 2)
                for i, before in enumerate(ways) for after in ways[i + 1:]}

    if positions:
        record["head_states_speedup"] = speedups("head_states", "s_per_position", list(WAYS))
        record["states_max_abs_difference"] = {way: float(np.abs(states[first] - states[way]).max()) for way in later}
    if games:
        record["eval_speedup"] = speedups("eval", "seconds", list(WAYS))
        record["games_identical"] = {f"{after}_and_{before}": sum(a == b for a, b in zip(games_played[before],
                                                                                           games_played[after]))
                                     for i, before in enumerate(WAYS) for after in list(WAYS)[i + 1:]}
    click.echo(json.dumps({k: v for k, v in record.items() if k != "ways"}))
    if json_path:
        atomic_write_json(json_path, record)


if __name__ == "__main__":
    run_script(main)

"""Benchmark: a GRPO update's passes with each group's answers padded to its longest, and cut by length.

Plays `--rounds` rollout rounds on the pipeline's RL settings (rl/rollout.py, as `rl` plays
them, every group kept), then times the update's two passes on those same groups (rl/grpo.py
GrpoLearner: the reference log-probs with the adapter off, and the loss's gradient), each way
in turn, `--repeats` times: `padded`, every group's answers in as few micro-batches as
`micro_batch_tokens` allows (each answer padded to its micro-batch's longest, as the update ran
before `length_chunks` cut by length), and `cut_N`, cut wherever more than N padded positions are
saved (`--pass-positions`, default rl/grpo.py's `PASS_POSITIONS`). No optimizer step is taken,
so every way sees the same weights and groups; each way's gradient is compared with the padded
way's (float32 rounding only). Per round: each way's answer positions, padding share, micro-batches,
seconds of every repeat, and the gradient's largest difference from the padded way's, next to the
padded gradient's largest entry (with no adapter every answer scores alike and the new adapter
is the reference, so the gradient is rounding alone and so are the differences).

    python -m bench.update_padding --rounds 2 --json padding.json
"""

from __future__ import annotations

from llm.blas import ensure_fast_blas

if __name__ == "__main__":
    ensure_fast_blas()  # before mlx loads

import json  # noqa: E402
import statistics
import time

import click
import mlx.core as mx
from mlx.utils import tree_flatten

from bench.decode import cpu_name
from bench.rl_step import PipelineRun, pipeline_config, pipeline_options
from common.errors import run_script
from common.fileio import atomic_write_json
from rl.grpo import PASS_POSITIONS, GrpoLearner, collect_groups, trained_tokens
from rl.rollout import play

PADDED = 10**9  # a pass costs more than any padding: one micro-batch wherever the budget allows


def update_passes(learner: GrpoLearner, groups: list, pass_positions: int) -> tuple[float, float, dict, dict]:
    """(reference seconds, gradient seconds, the gradient, the batches' figures) of one update's passes."""
    settings = learner.settings
    batches = learner.batches(groups, pass_positions)
    n_tokens = trained_tokens(batches)
    began = time.perf_counter()
    refs = learner.reference_logprobs(batches) if settings.kl_coef > 0 else None
    middle = time.perf_counter()
    grads, _ = learner.gradients(batches, refs, {}, n_tokens)
    mx.eval(grads)
    ended = time.perf_counter()
    positions = sum(gb.positions for gb in batches)
    figures = {"answer_positions": positions, "trained_tokens": n_tokens,
               "padding_share": round(1 - n_tokens / positions, 4), "micro_batches": sum(len(gb.chunks) for gb in batches)}
    return middle - began, ended - middle, dict(tree_flatten(grads)), figures


@click.command()
@pipeline_options
@click.option("--rounds", type=click.IntRange(1), default=2, show_default=True, help="Rollout rounds played.")
@click.option("--repeats", type=click.IntRange(1), default=2, show_default=True, help="Timings of each way a round.")
@click.option("--pass-positions", type=click.IntRange(1), multiple=True, default=(PASS_POSITIONS,), show_default=True,
              help="Cut where more padded positions than this are saved (repeat the flag for several ways).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
def main(model, adapter, group_size, games, max_tokens, rounds, repeats, pass_positions, seed, json_path) -> None:
    config = pipeline_config(group_size, games, max_tokens, seed)
    run = PipelineRun.start(model, adapter, config, seed)
    policy, learner = run.policy, run.learner
    ways = {"padded": PADDED, **{f"cut_{n}": n for n in pass_positions}}
    records = []
    for _ in range(rounds):
        starts = run.starts(games, config)
        _, groups = collect_groups(lambda: play(policy.model, policy.tokenizer, run.scorer, starts, config.rollout,
                                                run.rng), config.grpo.groups_per_step, 1, 0.0)
        record = {"answer_lengths": [[len(c.tokens) for c in g.completions] for g in groups], "ways": {}}
        gradients = {}
        for _ in range(repeats):
            for way, cost in ways.items():
                reference, gradient, gradients[way], figures = update_passes(learner, groups, cost)
                entry = record["ways"].setdefault(way, {**figures, "reference_seconds": [], "gradient_seconds": []})
                entry["reference_seconds"].append(round(reference, 3))
                entry["gradient_seconds"].append(round(gradient, 3))
        record["gradient_largest"] = max(float(mx.abs(v).max()) for v in gradients["padded"].values())
        for way, grads in gradients.items():
            record["ways"][way]["gradient_max_difference"] = max(
                float(mx.abs(grads[k] - gradients["padded"][k]).max()) for k in grads)
        records.append(record)
        click.echo(json.dumps(record["ways"]), err=True)
    summary = {"model": model, "adapter": adapter, "machine": cpu_name(), "group_size": group_size, "games": games,
               "max_tokens": max_tokens, "micro_batch_tokens": config.grpo.micro_batch_tokens, "rounds": rounds,
               "repeats": repeats, "ways": {}}
    for way in ways:
        reference = sum(statistics.median(r["ways"][way]["reference_seconds"]) for r in records)
        gradient = sum(statistics.median(r["ways"][way]["gradient_seconds"]) for r in records)
        summary["ways"][way] = {
            "answer_positions": sum(r["ways"][way]["answer_positions"] for r in records),
            "padding_share": round(1 - sum(r["ways"][way]["trained_tokens"] for r in records)
                                   / sum(r["ways"][way]["answer_positions"] for r in records), 4),
            "reference_seconds": round(reference, 2), "gradient_seconds": round(gradient, 2),
            "update_seconds": round(reference + gradient, 2)}
    padded = summary["ways"]["padded"]["update_seconds"]
    for figures in summary["ways"].values():
        figures["speedup_over_padded"] = round(padded / figures["update_seconds"], 3)
    click.echo(json.dumps(summary))
    if json_path:
        atomic_write_json(json_path, {**summary, "per_round": records})


if __name__ == "__main__":
    run_script(main)

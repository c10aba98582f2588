"""How much a rollout temperature explores at endgame positions: groups of answers sampled
at each temperature on the same training-secret positions, scored by RL's reward kernel.

GRPO learns only from groups whose rewards differ, and a closing answer can only be
reinforced once one is sampled; so the figures are, per temperature: the share of answers
that name the secret, of groups with at least one such answer, of informative groups (a
reward spread of at least grpo.tie_threshold), distinct guesses per group, and the share
of unplayable answers. Run from the repository root:

    python -m studies.exploration --model default --adapter ADAPTER --json OUT.json
"""

from __future__ import annotations

from llm.blas import ensure_fast_blas

if __name__ == "__main__":
    ensure_fast_blas()  # before mlx loads: a reference BLAS makes this 50x slower

import time  # noqa: E402

import click
import mlx.core as mx
import numpy as np

from common.errors import run_script
from common.fileio import atomic_write_json
from eval.endgame import teacher_positions
from eval.splits import trainable
from llm.format import prompt_tokens
from llm.generation import SamplingSettings, sample
from llm.loading import load_model
from rl.grpo import GrpoSettings
from rl.reward import RewardScorer
from solver.setup import load_setup


def explore(model, tokenizer, scorer: RewardScorer, positions, temperature: float, group_size: int, seed: int,
            batch_size: int, max_tokens: int, tie_threshold: float) -> dict:
    """The figures of one temperature, and each group's record."""
    mx.random.seed(seed)
    started = time.perf_counter()
    prompts = [prompt_tokens(tokenizer, p.state, p.rejected) for p in positions]
    groups = sample(model, tokenizer, prompts, group_size, SamplingSettings(temperature, 1.0, max_tokens), batch_size)
    records = []
    for position, completions in zip(positions, groups):
        rewards = scorer.score([c.text for c in completions], position.state, position.secret)
        guesses = rewards.parsed.guesses
        records.append({"key": position.key, "candidates": int(len(position.state.candidates)),
                        "closing": int(sum(g == position.secret and f is None
                                           for g, f in zip(guesses, rewards.parsed.failures))),
                        "unplayable": int((~rewards.parsed.playable).sum()),
                        "distinct_guesses": len({g for g in guesses if g}),
                        "reward_spread": round(float(np.ptp(rewards.total)), 4),
                        "rewards": [round(float(r), 3) for r in rewards.total]})
    answers = len(records) * group_size
    one = [r for r in records if r["candidates"] == 1]
    return {"temperature": temperature, "positions": len(records), "group_size": group_size,
            "closing_answer_rate": sum(r["closing"] for r in records) / answers,
            "groups_with_a_closing_answer": sum(r["closing"] > 0 for r in records) / len(records),
            "one_candidate_groups_with_a_closing_answer":
                sum(r["closing"] > 0 for r in one) / len(one) if one else None,
            "informative_group_rate": sum(r["reward_spread"] >= tie_threshold for r in records) / len(records),
            "mean_distinct_guesses": float(np.mean([r["distinct_guesses"] for r in records])),
            "unplayable_rate": sum(r["unplayable"] for r in records) / answers,
            "seconds": round(time.perf_counter() - started, 1), "groups": records}


@click.command()
@click.option("--model", default="default")
@click.option("--adapter", type=click.Path(file_okay=False), default=None)
@click.option("--positions", type=click.IntRange(1), default=24)
@click.option("--group-size", type=click.IntRange(2), default=16)
@click.option("--temperatures", default="0.7,1.0", help="Comma-separated.")
@click.option("--seed", type=click.IntRange(0), default=0)
@click.option("--batch-size", type=click.IntRange(1), default=64)
@click.option("--max-tokens", type=click.IntRange(8), default=160)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
def main(model, adapter, positions, group_size, temperatures, seed, batch_size, max_tokens, json_path) -> None:
    try:
        temps = [float(t) for t in temperatures.split(",")]
    except ValueError:
        raise click.BadParameter(f"not comma-separated numbers: {temperatures!r}", param_hint="--temperatures")
    setup = load_setup("answers")
    chosen = teacher_positions(setup, setup.solver(), trainable(setup.lists.answers), positions, seed,
                               refused_share=0.0)
    loaded, tokenizer = load_model(model, adapter)
    scorer = RewardScorer(setup)
    tie = GrpoSettings().tie_threshold
    results = [explore(loaded, tokenizer, scorer, chosen, t, group_size, seed, batch_size, max_tokens, tie)
               for t in temps]
    for r in results:
        print(f"T={r['temperature']}: closing answers {r['closing_answer_rate']:.3f}, groups with one "
              f"{r['groups_with_a_closing_answer']:.3f}, informative {r['informative_group_rate']:.3f}, "
              f"distinct guesses {r['mean_distinct_guesses']:.2f}, unplayable {r['unplayable_rate']:.3f}, "
              f"{r['seconds']} s")
    if json_path:
        atomic_write_json(json_path, {"model": model, "adapter": adapter, "seed": seed, "results": results})


if __name__ == "__main__":
    run_script(main)

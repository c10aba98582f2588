"""Benchmark: multi-turn GRPO steps on the README pipeline's RL settings, what each is made of.

Each step plays `--games` fresh whole games with a group of `--group-size` answers at
every position (up to `--max-tokens` each), then makes one update, exactly as `rl`
does (rl/lora_loop.py run_grpo_step). Reported, as medians over the steps after the first
(warm-up): rollout answer tokens/s, update trained tokens/s, step seconds, the
rollout's share of the step, the update's padding share, and peak memory of each
phase (the peak is reset between them). The profile of a step: the rollout's prompt tokens and
seconds of prefill, its decode steps and their seconds, and the rest (Python, the reward kernel,
the solver); the update's reference pass (KL) and gradient seconds; each pass's matmul rate
(2 x weights a prefill token or decoded token, 2 x weights a reference position and 4 x weights a
gradient position: LoRA's backward reaches the activations, never the frozen weights' gradients)
next to `doctor`'s. Every group is trained (`tie_threshold` 0),
so the update's work does not hang on how many groups the start model happens to tie.
With `--steps 1` the figures are the warm-up step's: enough for peak memory, which
a warm-up does not change, at a fraction of the time (a G=16 step takes ~15 minutes
on a 2-core CPU).

    python -m bench.rl_step --adapter SFT/adapter --steps 4 --json step.json
    python -m bench.rl_step -G 16 --steps 1 --json g16.json      # peak memory at G=16
"""

from __future__ import annotations

from llm.blas import ensure_fast_blas

if __name__ == "__main__":
    ensure_fast_blas()  # before mlx loads

import json  # noqa: E402
import statistics
from dataclasses import dataclass

import click
import mlx.core as mx
import numpy as np

from bench.decode import cpu_name
from bench.passes import weight_counts
from common.errors import run_script
from common.fileio import atomic_write_json
from eval.splits import trainable
from llm.doctor import matmul_gflops
from rl.config import build_config
from rl.grpo import GrpoLearner
from rl.lora_loop import run_grpo_step
from rl.pipeline import PipelineSettings
from rl.policy import load_policy
from rl.reward import RewardScorer
from sft.states import sample_start_states
from solver.setup import load_setup

PIPELINE = PipelineSettings()
FIGURES = ("seconds", "rollout_tokens_per_s", "update_tokens_per_s", "rollout_share", "padding_share",
           "answer_tokens", "trained_tokens", "rollout_peak_memory_gb", "update_peak_memory_gb",
           "rollout_seconds", "rollout_prompt_tokens", "rollout_prefill_seconds", "rollout_decode_steps",
           "rollout_decode_seconds", "rollout_rest_seconds", "update_seconds", "reference_seconds",
           "gradient_seconds", "update_positions", "prefill_gflops", "decode_gflops", "reference_gflops",
           "gradient_gflops")


def step_profile(record: dict, weights: tuple[int, int]) -> dict:
    """The step's rest of the rollout, gradient seconds and matmul rates (module docstring), from its record;
    `weights`: (weights a prompt token passes through, weights a decoded token passes through)."""
    def rate(flops_per_token: int, tokens: int, seconds: float) -> float | None:
        return round(flops_per_token * tokens / seconds / 1e9, 1) if seconds > 0 else None

    gradient = record["update_seconds"] - record.get("reference_seconds", 0.0)
    positions = record.get("update_positions", 0)
    return {"rollout_rest_seconds": record["rollout_seconds"] - record["rollout_prefill_seconds"]
            - record["rollout_decode_seconds"], "gradient_seconds": gradient,
            "prefill_gflops": rate(2 * weights[0], record["rollout_prompt_tokens"], record["rollout_prefill_seconds"]),
            "decode_gflops": rate(2 * weights[1], record["answer_tokens"], record["rollout_decode_seconds"]),
            "reference_gflops": rate(2 * weights[1], positions, record.get("reference_seconds", 0.0)),
            "gradient_gflops": rate(4 * weights[1], positions, gradient)}


def pipeline_config(group_size: int, games: int, max_tokens: int, seed: int, batch_size: int | None = None,
                    micro_batch_tokens: int | None = None):
    """`rl`'s settings as the pipeline's RL stage sets them, one rollout round a step and every
    group trained (`tie_threshold` 0)."""
    overrides = {"seed": seed, "rollout.group_size": group_size, "rollout.games_per_round": games,
                 "rollout.max_tokens": max_tokens, "grpo.learning_rate": PIPELINE.grpo_lr,
                 "grpo.groups_per_step": PIPELINE.grpo_groups, "grpo.max_rollouts": 1, "grpo.tie_threshold": 0.0}
    if batch_size is not None:
        overrides["rollout.batch_size"] = batch_size
    if micro_batch_tokens is not None:
        overrides["grpo.micro_batch_tokens"] = micro_batch_tokens
    return build_config({}, overrides, "bench")


def pipeline_options(command):
    """The options that choose the model and the pipeline's rollout shape (`pipeline_config`)."""
    for option in reversed([
            click.option("--model", default="default", show_default=True),
            click.option("--adapter", type=click.Path(file_okay=False), default=None,
                         help="Start adapter (an SFT run's)."),
            click.option("-G", "--group-size", type=click.IntRange(2), default=PIPELINE.group_size, show_default=True),
            click.option("--games", type=click.IntRange(1), default=PIPELINE.rl_games, show_default=True),
            click.option("--max-tokens", type=click.IntRange(8), default=PIPELINE.max_tokens, show_default=True)]):
        command = option(command)
    return command


@dataclass
class PipelineRun:
    """What a benchmark of `rl`'s steps needs: the secrets, the solver that starts games, the
    reward, the random generator, the policy and its learner."""

    setup: object
    secrets: list[str]
    solver: object
    scorer: RewardScorer
    rng: np.random.Generator
    policy: object
    learner: GrpoLearner

    @classmethod
    def start(cls, model: str, adapter: str | None, config, seed: int) -> PipelineRun:
        setup = load_setup(config.secrets)
        rng = np.random.default_rng(seed)
        mx.random.seed(seed)
        policy = load_policy(model, adapter, config.lora)
        learner = GrpoLearner(policy.model, config.grpo, config.rollout.temperature, policy.tokenizer.eos_token_id)
        return cls(setup, trainable(setup.lists.secrets(config.secrets)), setup.solver(),
                   RewardScorer(setup, config.reward), rng, policy, learner)

    def starts(self, games: int, config) -> list:
        """A round's fresh start states."""
        return sample_start_states(self.setup, self.solver, self.secrets, games, self.rng, config.rollout.max_history,
                                   config.rollout.off_policy)


@click.command()
@pipeline_options
@click.option("--steps", type=click.IntRange(1), default=4, show_default=True,
              help="The first is warm-up, left out of the medians unless it is the only one.")
@click.option("--batch-size", type=click.IntRange(1), default=None, help="Sequences generated at once.")
@click.option("--micro-batch-tokens", type=click.IntRange(1), default=None)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
def main(model, adapter, group_size, games, max_tokens, steps, batch_size, micro_batch_tokens, seed,
         json_path) -> None:
    config = pipeline_config(group_size, games, max_tokens, seed, batch_size, micro_batch_tokens)
    run = PipelineRun.start(model, adapter, config, seed)
    weights = weight_counts(run.policy.model)
    records = []
    for _ in range(steps):
        mx.reset_peak_memory()
        record = run_grpo_step(run.policy.model, run.policy.tokenizer, run.scorer, run.learner, config,
                               lambda: run.starts(games, config), run.rng)
        record["seconds"] = record["rollout_seconds"] + record["update_seconds"]
        record.update(step_profile(record, weights))
        records.append({key: record.get(key) for key in FIGURES})
        click.echo(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in records[-1].items()}),
                   err=True)
    timed = records[1:] or records
    summary = {"model": model, "adapter": adapter, "machine": cpu_name(), "matmul_gflops": round(matmul_gflops(), 1),
               "group_size": group_size, "games": games, "max_tokens": max_tokens,
               "batch_size": config.rollout.batch_size, "micro_batch_tokens": config.grpo.micro_batch_tokens,
               "steps": steps, **{f"median_{key}": _median([r[key] for r in timed]) for key in FIGURES},
               "per_step": records}
    click.echo(json.dumps({k: v for k, v in summary.items() if k != "per_step"}))
    if json_path:
        atomic_write_json(json_path, summary)


def _median(values: list) -> float | None:
    """The median of the measured values (a rate is None where its pass did not run)."""
    measured = [v for v in values if v is not None]
    return statistics.median(measured) if measured else None


if __name__ == "__main__":
    run_script(main)

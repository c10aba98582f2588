"""Benchmark: one single-turn GRPO step here vs in mlx-lm-lora, same model, prompts and lengths.

mlx-lm-lora (PyPI) is the GRPO trainer users of mlx reach for; it is single-turn, so
the comparison is too: each step takes one Wordle position, samples G answers of at
most `--max-tokens`, scores them with the same reward kernel and makes one update
(LoRA rank 8 on every linear layer, KL weight 0.04, Adam 1e-5) from the same start
adapter. Here every step updates, even on a tied group, so both sides do the same
work. Each side runs in its own process (`--side`), so peak memory is its own.

    pip install --no-deps mlx-lm-lora      # not a dependency of this project
    python -m bench.mlx_lm_lora --side ours --model default --adapter SFT/adapter -G 4 --json ours.json
    python -m bench.mlx_lm_lora --side mlx-lm-lora --model default --adapter SFT/adapter -G 4 --json theirs.json
"""

from __future__ import annotations

from llm.blas import ensure_fast_blas

if __name__ == "__main__":
    ensure_fast_blas()  # before mlx loads: both sides get the same BLAS

import json  # noqa: E402
import statistics
import tempfile
import time
from pathlib import Path

import click
import mlx.core as mx
import numpy as np

from common.errors import UserError, run_script
from common.fileio import atomic_write_json
from eval.splits import trainable
from llm.format import SYSTEM_PROMPT, prompt_tokens, render_state
from llm.generation import SamplingSettings, sample
from rl.grpo import GrpoLearner, GrpoSettings
from rl.policy import load_policy
from rl.reward import RewardScorer
from rl.rollout import Group
from sft.lora import AdapterSettings
from sft.states import sample_start_states
from solver.setup import load_setup
from solver.state import state_from_history

LORA = AdapterSettings(rank=8)
KL = 0.04
LEARNING_RATE = 1e-5


def positions(setup, n: int, seed: int):
    secrets = trainable(setup.lists.answers)
    return sample_start_states(setup, setup.solver(), secrets, n, np.random.default_rng(seed), max_history=3)


def run_ours(model: str, adapter: str | None, starts, group_size: int, max_tokens: int,
             micro_batch_tokens: int) -> dict:
    scorer = RewardScorer(load_setup())
    policy = load_policy(model, adapter, LORA)
    learner = GrpoLearner(policy.model, GrpoSettings(learning_rate=LEARNING_RATE, kl_coef=KL,
                                                              micro_batch_tokens=micro_batch_tokens),
                          1.0, policy.tokenizer.eos_token_id)
    steps = []
    for start in starts:
        began = time.perf_counter()
        prompt = prompt_tokens(policy.tokenizer, start.state)
        (completions,) = sample(policy.model, policy.tokenizer, [prompt], group_size,
                                SamplingSettings(1.0, 1.0, max_tokens), batch_size=group_size)
        sampled = time.perf_counter()
        rewards = scorer.score([c.text for c in completions], start.state, start.secret)
        learner.update([Group(start.state, start.secret, prompt, completions, rewards)])
        ended = time.perf_counter()
        steps.append({"seconds": ended - began, "sample_seconds": sampled - began, "update_seconds": ended - sampled,
                      "tokens": sum(len(c.tokens) for c in completions)})
    return {"steps": steps, "peak_memory_gb": mx.get_peak_memory() / 1e9}


def run_mlx_lm_lora(model: str, adapter: str | None, starts, group_size: int, max_tokens: int) -> dict:
    """mlx-lm-lora's own GRPO loop, set up as its CLI sets it up (a second model copy as reference)."""
    try:
        from mlx_lm_lora.trainer.datasets import GRPODataset
        from mlx_lm_lora.trainer.grpo_trainer import GRPOTrainingArgs, train_grpo
    except ImportError as err:
        raise UserError("this benchmark needs mlx-lm-lora: pip install --no-deps mlx-lm-lora") from err
    import mlx.optimizers as optim
    from mlx_lm.tuner.callbacks import TrainingCallback

    from llm.loading import fuse_adapter_layers
    from sft.lora import attach_adapter

    setup = load_setup()
    scorer = RewardScorer(setup)

    def wordle_reward(prompts, completions, answer, types=None):
        rewards = []
        for text, encoded in zip(completions, answer):
            game = json.loads(encoded)
            state = state_from_history(setup.lists, setup.matrix, [tuple(t) for t in game["turns"]])
            rewards.append(float(scorer.score([text], state, game["secret"]).total[0]))
        return rewards

    class Reports(TrainingCallback):
        def __init__(self) -> None:
            self.reports: list[dict] = []

        def on_train_loss_report(self, info: dict) -> None:
            self.reports.append(info)

    from llm.loading import load_model

    policy, tokenizer = load_model(model, adapter)
    fuse_adapter_layers(policy)
    attach_adapter(policy, LORA)
    reference, _ = load_model(model, adapter)
    fuse_adapter_layers(reference)
    reference.freeze()
    items = [{"system": SYSTEM_PROMPT, "prompt": render_state(s.state),
              "answer": json.dumps({"secret": s.secret, "turns": [[t.guess, t.pattern] for t in s.state.turns]})}
             for s in starts]
    reports = Reports()
    with tempfile.TemporaryDirectory() as tmp:
        train_grpo(model=policy, ref_model=reference, tokenizer=tokenizer, optimizer=optim.Adam(LEARNING_RATE),
                   train_dataset=GRPODataset(items, tokenizer), reward_funcs=[wordle_reward],
                   args=GRPOTrainingArgs(batch_size=1, iters=len(starts), group_size=group_size,
                                         max_completion_length=max_tokens, beta=KL, temperature=1.0,
                                         steps_per_report=1, steps_per_eval=10**9, steps_per_save=10**9,
                                         adapter_file=str(Path(tmp) / "adapters.safetensors")),
                   training_callback=reports, end_answer_token="</guess>")
    steps = [{"seconds": 1.0 / r["iterations_per_second"], "tokens": r["train_average_generated_tokens"] * group_size}
             for r in reports.reports]
    return {"steps": steps, "peak_memory_gb": max(r["peak_memory"] for r in reports.reports)}


@click.command()
@click.option("--side", type=click.Choice(["ours", "mlx-lm-lora"]), required=True)
@click.option("--model", default="default", show_default=True)
@click.option("--adapter", type=click.Path(file_okay=False), default=None, help="Start adapter (an SFT run's).")
@click.option("-G", "--group-size", type=click.IntRange(2), default=4, show_default=True)
@click.option("--steps", type=click.IntRange(2), default=4, show_default=True, help="The first is warm-up.")
@click.option("--max-tokens", type=click.IntRange(8), default=64, show_default=True)
@click.option("--micro-batch-tokens", type=click.IntRange(1), default=GrpoSettings.micro_batch_tokens,
              show_default=True, help="Ours only: answer positions per forward/backward pass.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
def main(side, model, adapter, group_size, steps, max_tokens, micro_batch_tokens, seed, json_path) -> None:
    starts = positions(load_setup(), steps, seed)
    mx.random.seed(seed)
    if side == "ours":
        result = run_ours(model, adapter, starts, group_size, max_tokens, micro_batch_tokens)
    else:
        result = run_mlx_lm_lora(model, adapter, starts, group_size, max_tokens)
    timed = result["steps"][1:]
    summary = {"side": side, "model": model, "adapter": adapter, "group_size": group_size, "max_tokens": max_tokens,
               "steps": len(result["steps"]), "median_step_seconds": statistics.median(s["seconds"] for s in timed),
               "median_tokens_per_step": statistics.median(s["tokens"] for s in timed),
               **{f"median_{part}": statistics.median(s[part] for s in timed)
                  for part in ("sample_seconds", "update_seconds") if part in timed[0]},
               "peak_memory_gb": round(result["peak_memory_gb"], 3), "per_step": result["steps"]}
    click.echo(json.dumps({k: v for k, v in summary.items() if k != "per_step"}))
    if json_path:
        atomic_write_json(json_path, summary)


if __name__ == "__main__":
    run_script(main)

"""Benchmark: the ceiling a GRPO update's trained tokens/s cannot pass on this machine.

An update runs the model forward and backward over a group's prompt and answers (LoRA
gradients), and forward once more with the adapter off for the KL reference, so the
model's own forward and backward rates bound its trained (answer) tokens/s whatever the
code around them does. This times both over one group: a prompt of `--prompt-tokens`
(once, as the update prefills it once) and `--answers` answers of `--answer-tokens`, and
reports the ceiling with and without the reference pass. The defaults are the pipeline's
RL groups: 4 answers of about 110 tokens to a 250-token prompt.

    python -m bench.update --json update.json
"""

from __future__ import annotations

from llm.blas import ensure_fast_blas

if __name__ == "__main__":
    ensure_fast_blas()  # before mlx loads

import json  # noqa: E402
import os
import statistics
import time

import click
import mlx.core as mx
import mlx.nn as nn

from bench.decode import cpu_name
from common.errors import run_script
from common.fileio import atomic_write_json
from llm.loading import load_model
from sft.lora import AdapterSettings, attach_adapter


def pass_seconds(model: nn.Module, prompt: mx.array, answers: mx.array, steps: int) -> tuple[float, float]:
    """Median seconds of a group's forward pass, and of its forward and backward pass (LoRA
    gradients): the prompt once through the layers (no output layer: no token of it is
    trained), the answers as one batch with a next-token loss. These answers do not attend to
    the prompt, as an update's do: less work than an update, so the rates derived are bounds."""
    def loss(net: nn.Module) -> mx.array:
        answer_loss = nn.losses.cross_entropy(net(answers)[:, :-1], answers[:, 1:]).mean()
        return answer_loss + net.model(prompt).mean()

    loss_and_grad = nn.value_and_grad(model, loss)
    forward, both = [], []
    for i in range(steps + 1):  # one warm-up
        began = time.perf_counter()
        mx.eval(model.model(prompt), model(answers))
        middle = time.perf_counter()
        mx.eval(loss_and_grad(model))
        if i:
            forward.append(middle - began)
            both.append(time.perf_counter() - middle)
    return statistics.median(forward), statistics.median(both)


@click.command()
@click.option("--model", default="default", show_default=True)
@click.option("--prompt-tokens", type=click.IntRange(1), default=250, show_default=True)
@click.option("--answers", type=click.IntRange(1), default=4, show_default=True, help="Answers in a group (G).")
@click.option("--answer-tokens", type=click.IntRange(1), default=110, show_default=True)
@click.option("--rank", type=click.IntRange(1), default=8, show_default=True, help="LoRA rank.")
@click.option("--steps", type=click.IntRange(1), default=5, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
def main(model, prompt_tokens, answers, answer_tokens, rank, steps, seed, json_path) -> None:
    mx.random.seed(seed)
    net, _ = load_model(model, None)
    attach_adapter(net, AdapterSettings(rank=rank))
    forward, both = pass_seconds(net, mx.random.randint(100, 1000, (1, prompt_tokens)),
                                 mx.random.randint(100, 1000, (answers, answer_tokens)), steps)
    length, trained = prompt_tokens + answers * answer_tokens, answers * answer_tokens
    report = {"model": model, "prompt_tokens": prompt_tokens, "answers": answers, "answer_tokens": answer_tokens,
              "rank": rank, "steps": steps, "cpu": cpu_name(), "cores": os.cpu_count(),
              "forward_s": round(forward, 6), "forward_backward_s": round(both, 6),
              "forward_tokens_per_s": round(length / forward, 1), "forward_backward_tokens_per_s": round(length / both, 1),
              "trained_tokens_per_s_ceiling": round(trained / (forward + both), 1),
              "trained_tokens_per_s_ceiling_without_reference": round(trained / both, 1)}
    click.echo(json.dumps(report))
    if json_path:
        atomic_write_json(json_path, report)


if __name__ == "__main__":
    run_script(main)

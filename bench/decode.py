"""Benchmark: the ceiling a rollout's answer tokens/s cannot pass on this machine.

A rollout's answers are written one token per model call for every sequence in the
batch, so a decode step's time at the batch size the rollout keeps sets its answer
tokens/s, whatever the code around it does. This times, per batch size: the model's
own decode step (one token per row against a KV cache of `--context` tokens, mlx-lm's
cache, greedy pick), the same step in the sampler the rollouts use (mlx-lm's
BatchGenerator through `llm.generation.sample`, stop checks and sampling included), and
the step's weight products alone (every linear layer and the output layer applied to
one token per row). `tokens_per_s_ceiling` is batch / decode step: a rollout with that
many sequences running cannot go faster. `weights_tokens_per_s_ceiling` is what even
free attention, norms and sampling would leave: the rest of the step is mlx's own ops.

    python -m bench.decode --batch 1 --batch 8 --batch 16 --batch 32 --json decode.json
"""

from __future__ import annotations

from llm.blas import ensure_fast_blas

if __name__ == "__main__":
    ensure_fast_blas()  # before mlx loads

import json  # noqa: E402
import os
import platform
import statistics
import time

import click
import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import make_prompt_cache

from common.errors import run_script
from common.fileio import atomic_write_json
from llm.generation import SamplingSettings, sample
from llm.loading import load_model


def cpu_name() -> str:
    """The processor's model name (Linux reports it in /proc/cpuinfo, not in `platform`)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def decode_step_seconds(model, batch: int, context: int, steps: int) -> list[float]:
    """Seconds per decode step of `batch` rows, each after `context` cached tokens."""
    cache = make_prompt_cache(model)
    model(mx.zeros((batch, context), dtype=mx.int32), cache=cache)
    mx.eval([c.state for c in cache])
    token = mx.zeros((batch, 1), dtype=mx.int32)
    times = []
    for i in range(steps + 2):  # two warm-up steps
        began = time.perf_counter()
        token = mx.argmax(model(token, cache=cache)[:, -1:], axis=-1).astype(mx.int32)
        mx.eval(token)
        if i >= 2:
            times.append(time.perf_counter() - began)
    return times


def weight_products(model) -> list[tuple]:
    """The linear maps one decode step applies, each with its weight matrix: every nn.Linear,
    and the embedding read as the output layer when the model ties them (SmolLM2 does)."""
    maps = [(m, m.weight) for _, m in model.named_modules() if isinstance(m, nn.Linear)]
    inner = getattr(model, "model", None)
    if not hasattr(model, "lm_head") and hasattr(inner, "embed_tokens"):
        maps.append((inner.embed_tokens.as_linear, inner.embed_tokens.weight))
    return maps


def weight_products_seconds(model, batch: int, steps: int) -> list[float]:
    """Seconds per decode step spent in its weight products alone, `batch` rows of one token:
    the floor under a decode step that no code around the model can lower."""
    maps = weight_products(model)
    inputs = {w.shape[-1]: mx.random.normal((batch, 1, w.shape[-1])) for _, w in maps}
    mx.eval(list(inputs.values()))
    times = []
    for i in range(steps + 2):
        began = time.perf_counter()
        mx.eval([apply(inputs[w.shape[-1]]) for apply, w in maps])
        if i >= 2:
            times.append(time.perf_counter() - began)
    return times


def sampler_step_seconds(model, tokenizer, batch: int, context: int, steps: int) -> float:
    """Seconds per decode step when `sample` writes `batch` answers of up to `steps` tokens
    to one prompt of `context` tokens (prefill excluded: a 1-token run is subtracted)."""
    prompt = [int(t) for t in mx.random.randint(100, 1000, (context,)).tolist()]
    timed, longest = {}, 1
    for length in (1, steps):
        settings = SamplingSettings(temperature=1.0, max_tokens=length)
        began = time.perf_counter()
        (answers,) = sample(model, tokenizer, [prompt], batch, settings, batch_size=batch)
        timed[length] = time.perf_counter() - began
        longest = max(len(a.tokens) for a in answers)
    return (timed[steps] - timed[1]) / max(1, longest - 1)


@click.command()
@click.option("--model", default="default", show_default=True)
@click.option("--batch", "batches", type=click.IntRange(1), multiple=True, default=(1, 8, 16, 32),
              show_default=True, help="Rows decoded together (repeat the option).")
@click.option("--context", type=click.IntRange(1), default=250, show_default=True,
              help="Cached tokens before each step (a rollout prompt is ~200-300).")
@click.option("--steps", type=click.IntRange(3), default=32, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
def main(model, batches, context, steps, seed, json_path) -> None:
    mx.random.seed(seed)
    net, tokenizer = load_model(model, None)
    rows = []
    for batch in batches:
        step = statistics.median(decode_step_seconds(net, batch, context, steps))
        sampled = sampler_step_seconds(net, tokenizer, batch, context, steps)
        weights = statistics.median(weight_products_seconds(net, batch, steps))
        rows.append({"batch": batch, "decode_step_ms": round(step * 1e3, 2),
                     "sampler_step_ms": round(sampled * 1e3, 2), "weights_ms": round(weights * 1e3, 2),
                     "tokens_per_s_ceiling": round(batch / step, 1),
                     "weights_tokens_per_s_ceiling": round(batch / weights, 1),
                     "sampler_tokens_per_s": round(batch / sampled, 1) if sampled > 0 else None})
        click.echo(json.dumps(rows[-1]))
    if json_path:
        atomic_write_json(json_path, {"model": model, "context": context, "steps": steps, "cpu": cpu_name(),
                                      "cores": os.cpu_count(), "rows": rows})


if __name__ == "__main__":
    run_script(main)

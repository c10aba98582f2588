"""Benchmark: the GPU figures of issue 38 in one process, in 90 s or less on an H100.

Each part runs the product code itself, is timed with `time.perf_counter()` after a
warm-up, reports medians, and has its own peak memory (`mx.reset_peak_memory()`
between parts). They run in the order 3, 4, 5, 1, 2, and the JSON is written after each,
so that a lease that ends mid-bench still brings back RL's figures:

1. SFT tokens/s: `gen-sft` data (`sft.gen_command.generate_dataset`, `--sft-games`
   solver games into a temp folder), then `sft.run.run_sft` for `--sft-steps` steps at
   `--sft-batch`, LoRA rank `--rank`; the median step's tokens/s (real tokens, prompt
   included, as RUN/metrics.jsonl counts them) after the first step.
2. The same SFT with mlx-lm's own trainer (`mlx_lm.tuner.trainer.train`, set up as
   `mlx_lm lora --train --mask-prompt` sets it up: every layer, rank `--rank`, scale 20,
   Adam at SFT's learning rate) on the same train.jsonl, batch, rank, steps and max
   sequence length, the model loaded as ours is (`--dtype`); tokens counted as ours
   (each batch's real tokens), and ours/mlx_lm. Its own answer-token rate is kept too.
   Its batches are not sorted by length as ours are (its CacheDataset sorts by the length of
   the raw record, 1 for a chat record), so they hold more padding: that is its trainer as
   users run it.
3. Decode step ms at `--rows` rows after `--context` cached tokens
   (`bench.decode.decode_step_seconds`).
4. One GRPO step (`rl.lora_loop.run_grpo_step`) with G = `--group-size` and `--groups`
   single-turn endgame groups (`rollout.start endgame`, `rollout.turns 1`), every group
   trained; step, rollout and update seconds, after one warm-up step. Without `--adapter`
   the base model's answers mostly run to `--max-tokens`: the step's worst case.
5. Eval games/s: `--eval-games` held-out test games at batch `--eval-batch`, as
   `eval --model` plays them (`eval.run.ModelSpec`, `play_and_summarise`), after a
   warm-up of a few games.

Why: the issue's H100 targets, checked in the JSON's `targets`: SFT >= 100,000 tokens/s
and at least mlx_lm lora's, eval >= 6 games/s, a GRPO step (G=16, 32 groups) <= 10 s,
SFT peak memory <= 12 GB. Also reported: the device (with `nvidia-smi -L`'s name on a
GPU), mlx and mlx-lm versions, the requested and resolved weights' dtype. A part that
fails records its error and the others still run. What a GPU session runs, from the
repo root:

    python -m bench.gpu --model default --json gpu.json

Every size is a flag; on a CPU the tests run it with a tiny random model at the
smallest sizes (tests/test_bench_gpu.py). The default sizes with that tiny model took
408 s on a busy 2-core CPU.
"""

from __future__ import annotations

from llm.blas import ensure_fast_blas

if __name__ == "__main__":
    ensure_fast_blas()  # before mlx loads

import contextlib  # noqa: E402
import gc
import io
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

import click
import mlx.core as mx

from common.errors import run_script
from common.fileio import atomic_write_json
from common.options import json_option
from llm.adapter_files import read_adapter_config
from llm.generation import SamplingSettings
from llm.loading import load_model, resolve_dtype, resolve_model
from llm.options import dtype_option
from sft.config import SFTConfig

TARGETS = {  # figure: (at least / at most, the H100 target)
    "sft_tokens_per_s": (">=", 100_000), "sft_over_mlx_lm": (">=", 1.0), "eval_games_per_s": (">=", 6.0),
    "grpo_step_seconds": ("<=", 10.0), "sft_peak_memory_gb": ("<=", 12.0)}
LORA_SCALE = 20.0  # mlx-lm's default, and sft.lora.AdapterSettings'
EVAL_WARMUP_GAMES = 4


def after_warmup(values: list):
    """The values after the first (warm-up) one, or all of them when there is one."""
    return values[1:] or values


def one_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"


def rounded(figures: dict) -> dict:
    """Floats to 4 decimals, in nested figures too."""
    return {k: rounded(v) if isinstance(v, dict) else round(v, 4) if isinstance(v, float) else v
            for k, v in figures.items()}


def gpu_name() -> str | None:
    """`nvidia-smi -L`'s first line on a GPU device, when it runs."""
    if mx.default_device().type != mx.gpu or shutil.which("nvidia-smi") is None:
        return None
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return listed.stdout.strip().splitlines()[0] if listed.stdout.strip() else None


def run_part(name: str, parts: dict, work: Callable[[], dict], line: Callable[[dict], str]) -> dict | None:
    """Run one part with its own peak memory; record its figures (or its error) under `name`
    and print its summary line. Its failure does not stop the parts after it."""
    gc.collect()
    mx.clear_cache()
    mx.reset_peak_memory()
    began = time.perf_counter()
    try:
        figures = work()
    except Exception as err:  # noqa: BLE001 -- one part's failure is a figure of the benchmark
        parts[name] = {"error": one_line(err), "part_seconds": round(time.perf_counter() - began, 2)}
        click.echo(f"{name}: failed: {parts[name]['error']}")
        return None
    inner = [v for k, v in figures.items() if k.endswith("peak_memory_gb") and isinstance(v, (int, float))]
    figures = {**rounded(figures), "peak_memory_gb": round(max([mx.get_peak_memory() / 1e9, *inner]), 4),
               "part_seconds": round(time.perf_counter() - began, 2)}
    parts[name] = figures
    click.echo(line(figures))
    return figures


def gen_sft_part(out: Path, model: str, games: int, seed: int) -> dict:
    from sft.gen_command import generate_dataset
    from sft.gen_data import GenSettings

    made = generate_dataset(out, GenSettings(games=games, seed=seed), model, show_progress=False)
    return {"games": games, "examples": made["examples"],
            "train_examples": made["splits"].get("train", {}).get("examples"), "play_seconds": made["play_seconds"]}


def sft_part(model: str, data: Path, out: Path, steps: int, batch: int, rank: int, max_seq_len: int, seed: int,
             dtype: str) -> dict:
    from sft.run import MetricsLog, run_sft

    config = SFTConfig(model=model, data=str(data), out=str(out), iters=steps, rank=rank, batch_size=batch,
                       max_seq_len=max_seq_len, eval_every=steps, eval_games=0, save_every=steps, seed=seed,
                       dtype=dtype)
    summary = run_sft(config, show_progress=False)
    records = [r for r in MetricsLog(out / "metrics.jsonl").records() if "loss" in r]
    timed = after_warmup(records)
    return {"steps": len(records), "batch": batch, "rank": rank, "max_seq_len": max_seq_len,
            "tokens_per_s": statistics.median(r["tokens_per_s"] for r in timed),
            "step_seconds": statistics.median(r["seconds"] for r in timed),
            "tokens_per_step": statistics.median(r["tokens"] for r in timed),
            "train_peak_memory_gb": summary["peak_memory_gb"],
            "first_loss": summary["first_train_loss"], "last_loss": records[-1]["loss"]}


def mlx_lm_part(model: str, data: Path, out: Path, steps: int, batch: int, rank: int, max_seq_len: int, seed: int,
                dtype: str) -> dict:
    """mlx-lm's own LoRA trainer on the same data and sizes as `sft_part`."""
    from types import SimpleNamespace

    import mlx.optimizers as optim
    from mlx_lm.tuner.callbacks import TrainingCallback
    from mlx_lm.tuner.datasets import CacheDataset, load_local_dataset
    from mlx_lm.tuner.trainer import TrainingArgs, iterate_batches, train
    from mlx_lm.tuner.utils import linear_to_lora_layers

    net, tokenizer = load_model(model, None, dtype)
    train_set, _, _ = load_local_dataset(data, tokenizer, SimpleNamespace(mask_prompt=True))
    mx.random.seed(seed)
    net.freeze()
    linear_to_lora_layers(net, len(net.layers), {"rank": rank, "scale": LORA_SCALE, "dropout": 0.0})
    batch_tokens: list[int] = []  # each step's real tokens (prompt included), counted as ours counts them

    def counted_batches(*args, **kwargs):
        for inputs, lengths in iterate_batches(*args, **kwargs):
            batch_tokens.append(int(lengths[:, 1].sum().item()))
            yield inputs, lengths

    class Reports(TrainingCallback):
        def __init__(self) -> None:
            self.reports: list[dict] = []

        def on_train_loss_report(self, info: dict) -> None:
            self.reports.append(info)

    reports = Reports()
    out.mkdir(parents=True, exist_ok=True)
    args = TrainingArgs(batch_size=batch, iters=steps, steps_per_report=1, steps_per_eval=10**9,
                        steps_per_save=10**9, max_seq_length=max_seq_len,
                        adapter_file=str(out / "adapters.safetensors"))
    shown = io.StringIO()  # its progress display: the part prints one line of its own
    with contextlib.redirect_stdout(shown):
        train(model=net, optimizer=optim.Adam(learning_rate=SFTConfig.learning_rate),
              train_dataset=CacheDataset(train_set), args=args, iterate_batches=counted_batches,
              training_callback=reports)
    if len(reports.reports) != steps:
        raise RuntimeError(f"mlx_lm reported {len(reports.reports)} of {steps} steps: {shown.getvalue()[-300:]}")
    seconds = [1.0 / r["iterations_per_second"] for r in reports.reports]
    timed = after_warmup(list(zip(seconds, batch_tokens, reports.reports)))
    return {"steps": steps, "batch": batch, "rank": rank, "max_seq_len": max_seq_len,
            "tokens_per_s": statistics.median(tokens / s for s, tokens, _ in timed),
            "step_seconds": statistics.median(s for s, _, _ in timed),
            "tokens_per_step": statistics.median(tokens for _, tokens, _ in timed),
            "answer_tokens_per_s": statistics.median(r["tokens_per_second"] for _, _, r in timed),
            "first_loss": reports.reports[0]["train_loss"], "last_loss": reports.reports[-1]["train_loss"]}


def decode_part(model: str, adapter: str | None, rows: tuple[int, ...], context: int, steps: int, dtype: str) -> dict:
    from bench.decode import decode_step_seconds

    net, _ = load_model(model, adapter, dtype)
    timed = {}
    for batch in rows:
        step = statistics.median(decode_step_seconds(net, batch, context, steps))
        timed[str(batch)] = {"step_ms": round(step * 1e3, 3), "tokens_per_s": round(batch / step, 1)}
    return {"context": context, "steps": steps, "rows": timed}


def grpo_part(model: str, adapter: str | None, group_size: int, groups: int, steps: int, batch_size: int,
              max_tokens: int, seed: int, dtype: str) -> dict:
    import numpy as np

    from eval.splits import trainable
    from rl.config import build_config
    from rl.grpo import GrpoLearner
    from rl.lora_loop import run_grpo_step
    from rl.policy import load_policy
    from rl.reward import RewardScorer
    from sft.states import sample_endgame_states
    from solver.setup import load_setup

    config = build_config({}, {"seed": seed, "dtype": dtype, "rollout.start": "endgame", "rollout.turns": 1,
                               "rollout.group_size": group_size, "rollout.games_per_round": groups,
                               "rollout.max_tokens": max_tokens, "rollout.batch_size": batch_size,
                               "grpo.groups_per_step": groups, "grpo.max_rollouts": 1, "grpo.tie_threshold": 0.0,
                               "eval_every": 0}, "bench")
    setup = load_setup(config.secrets)
    secrets = trainable(setup.lists.secrets(config.secrets))
    solver, scorer, rng = setup.solver(), RewardScorer(setup, config.reward), np.random.default_rng(seed)
    mx.random.seed(seed)
    policy = load_policy(model, adapter, config.lora, config.dtype)
    learner = GrpoLearner(policy.model, config.grpo, config.rollout.temperature, policy.tokenizer.eos_token_id)

    def endgame_starts():
        return sample_endgame_states(setup, solver, secrets, groups, rng, config.rollout.endgame_candidates,
                                     config.rollout.off_policy)

    records = []
    for _ in range(steps + 1):  # the first is warm-up
        record = run_grpo_step(policy.model, policy.tokenizer, scorer, learner, config, endgame_starts, rng)
        records.append({"step_seconds": record["rollout_seconds"] + record["update_seconds"],
                        **{key: record.get(key) for key in ("rollout_seconds", "update_seconds", "groups",
                                                            "answer_tokens", "trained_tokens",
                                                            "rollout_peak_memory_gb", "update_peak_memory_gb")}})
    timed = after_warmup(records)
    return {"group_size": group_size, "groups": groups, "batch_size": batch_size, "max_tokens": max_tokens,
            "timed_steps": len(timed),
            **{key: statistics.median(r[key] for r in timed)
               for key in ("step_seconds", "rollout_seconds", "update_seconds", "answer_tokens", "trained_tokens")},
            "trained_groups": timed[-1]["groups"],
            "rollout_peak_memory_gb": max(r["rollout_peak_memory_gb"] for r in records),
            "update_peak_memory_gb": max(r["update_peak_memory_gb"] for r in records)}


def eval_part(model: str, adapter: str | None, games: int, batch: int, max_tokens: int, seed: int,
              dtype: str) -> dict:
    from eval.run import ModelSpec, choose_secrets, play_and_summarise
    from solver.setup import load_setup

    setup = load_setup("answers")
    spec = ModelSpec(model, adapter, SamplingSettings(max_tokens=max_tokens), batch, dtype=dtype)
    player = spec.player(seed, setup.lists.allowed, setup.start.secret_words)
    secrets = choose_secrets(setup.lists.secrets("answers"), "test", games, seed)
    play_and_summarise(player, setup, secrets[:EVAL_WARMUP_GAMES], show_progress=False)
    began = time.perf_counter()
    played = play_and_summarise(player, setup, secrets, show_progress=False)
    seconds = time.perf_counter() - began
    return {"games": len(secrets), "batch": batch, "max_tokens": max_tokens, "games_per_s": len(secrets) / seconds,
            "play_seconds": round(seconds, 3), "win_rate": played["win_rate"]}


def targets(parts: dict) -> dict:
    """Each H100 target of the issue with this run's figure and whether it met it (None: no figure)."""
    sft, theirs = parts.get("sft", {}), parts.get("mlx_lm_lora", {})
    figures = {"sft_tokens_per_s": sft.get("tokens_per_s"), "sft_over_mlx_lm": theirs.get("ours_over_mlx_lm"),
               "eval_games_per_s": parts.get("eval", {}).get("games_per_s"),
               "grpo_step_seconds": parts.get("grpo", {}).get("step_seconds"),
               "sft_peak_memory_gb": sft.get("peak_memory_gb")}
    checked = {}
    for key, (sense, target) in TARGETS.items():
        value = figures[key]
        met = None if value is None else (value >= target if sense == ">=" else value <= target)
        checked[key] = {"target": f"{sense} {target:g}", "value": value, "met": met}
    return checked


LINES: dict[str, Callable[[dict], str]] = {  # each part's summary line, from its figures
    "gen_sft": lambda f: (f"gen-sft: {f['games']} games, {f['examples']:,} examples ({f['train_examples']:,} train) "
                          f"in {f['part_seconds']:.1f} s"),
    "sft": lambda f: (f"sft (ours): {f['tokens_per_s']:,.0f} tokens/s, median step {f['step_seconds']:.3f} s at "
                      f"batch {f['batch']}, rank {f['rank']}; peak {f['peak_memory_gb']:.2f} GB, "
                      f"{f['part_seconds']:.1f} s"),
    "mlx_lm_lora": lambda f: (f"sft (mlx_lm lora): {f['tokens_per_s']:,.0f} tokens/s, median step "
                              f"{f['step_seconds']:.3f} s; ours/mlx_lm {f.get('ours_over_mlx_lm', 'n/a')}; "
                              f"peak {f['peak_memory_gb']:.2f} GB, {f['part_seconds']:.1f} s"),
    "decode": lambda f: ("decode: " + ", ".join(f"{n} rows {r['step_ms']:.2f} ms" for n, r in f["rows"].items())
                         + f" per step after {f['context']} tokens; peak {f['peak_memory_gb']:.2f} GB"),
    "grpo": lambda f: (f"grpo: step {f['step_seconds']:.2f} s (rollout {f['rollout_seconds']:.2f}, update "
                       f"{f['update_seconds']:.2f}) at G={f['group_size']} x {f['groups']} groups, "
                       f"{f['answer_tokens']:,.0f} answer tokens; peak {f['peak_memory_gb']:.2f} GB, "
                       f"{f['part_seconds']:.1f} s"),
    "eval": lambda f: (f"eval: {f['games_per_s']:.2f} games/s ({f['games']} test games at batch {f['batch']}); "
                       f"peak {f['peak_memory_gb']:.2f} GB"),
}


@click.command()
@click.option("--model", default="default", show_default=True)
@click.option("--adapter", type=click.Path(file_okay=False), default=None,
              help="Start adapter for the decode, GRPO and eval parts (an SFT run's); SFT trains from the base model.")
@dtype_option
@click.option("--sft-games", type=click.IntRange(1), default=300, show_default=True, help="gen-sft games.")
@click.option("--sft-steps", type=click.IntRange(1), default=30, show_default=True)
@click.option("--sft-batch", type=click.IntRange(1), default=16, show_default=True)
@click.option("--rank", type=click.IntRange(1, 1024), default=16, show_default=True, help="SFT LoRA rank.")
@click.option("--max-seq-len", type=click.IntRange(32), default=SFTConfig.max_seq_len, show_default=True)
@click.option("--rows", type=click.IntRange(1), multiple=True, default=(16, 64, 256), show_default=True,
              help="Decode rows (repeat the option).")
@click.option("--context", type=click.IntRange(1), default=250, show_default=True,
              help="Cached tokens before each decode step.")
@click.option("--decode-steps", type=click.IntRange(1), default=32, show_default=True)
@click.option("-G", "--group-size", type=click.IntRange(2, 256), default=16, show_default=True)
@click.option("--groups", type=click.IntRange(1, 4096), default=32, show_default=True, help="GRPO groups per step.")
@click.option("--rl-steps", type=click.IntRange(1), default=1, show_default=True,
              help="Timed GRPO steps, after one warm-up step.")
@click.option("--rl-batch-size", type=click.IntRange(1, 4096), default=None,
              help="Sequences generated at once [default: group size x groups, at most 4096].")
@click.option("--max-tokens", type=click.IntRange(8, 4096), default=SamplingSettings.max_tokens, show_default=True,
              help="Longest answer in GRPO and eval.")
@click.option("--eval-games", type=click.IntRange(1), default=64, show_default=True)
@click.option("--eval-batch", type=click.IntRange(1), default=64, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@json_option
def main(model, adapter, dtype, sft_games, sft_steps, sft_batch, rank, max_seq_len, rows, context, decode_steps,
         group_size, groups, rl_steps, rl_batch_size, max_tokens, eval_games, eval_batch, seed, json_path) -> None:
    import mlx_lm

    began = time.perf_counter()
    resolve_model(model)  # a missing model is one error line, before any part
    if adapter is not None:
        read_adapter_config(adapter)
    rl_batch_size = rl_batch_size or min(group_size * groups, 4096)
    settings = {"sft_games": sft_games, "sft_steps": sft_steps, "sft_batch": sft_batch, "rank": rank,
                "max_seq_len": max_seq_len, "rows": list(rows), "context": context, "decode_steps": decode_steps,
                "group_size": group_size, "groups": groups, "rl_steps": rl_steps, "rl_batch_size": rl_batch_size,
                "max_tokens": max_tokens, "eval_games": eval_games, "eval_batch": eval_batch, "seed": seed}
    device = mx.default_device()
    report = {"device": str(device), "gpu": gpu_name(), "mlx": mx.__version__, "mlx_lm": mlx_lm.__version__,
              "dtype": dtype, "weights_dtype": str(resolve_dtype(dtype)).removeprefix("mlx.core."),
              "model": model, "adapter": adapter, "settings": settings}
    click.echo(f"device {report['gpu'] or report['device']}, mlx {report['mlx']}, mlx-lm {report['mlx_lm']}, "
               f"weights {report['weights_dtype']} (--dtype {dtype})")
    parts: dict = {}

    def part(name: str, work: Callable[[], dict]) -> dict | None:
        """One part, then the report so far on disk: a bench cut short by a lease's end keeps its parts."""
        figures = run_part(name, parts, work, LINES[name])
        if json_path:
            atomic_write_json(json_path, report | {"parts": parts, "targets": targets(parts),
                                                   "seconds": round(time.perf_counter() - began, 2)})
        return figures

    # RL's parts first: SFT on a GPU was measured before them (results/gpu-proof), RL's never was.
    part("decode", lambda: decode_part(model, adapter, rows, context, decode_steps, dtype))
    part("grpo", lambda: grpo_part(model, adapter, group_size, groups, rl_steps, rl_batch_size, max_tokens, seed, dtype))
    part("eval", lambda: eval_part(model, adapter, eval_games, eval_batch, max_tokens, seed, dtype))
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as tmp:
        data, sizes = Path(tmp) / "data", (sft_steps, sft_batch, rank, max_seq_len, seed, dtype)
        part("gen_sft", lambda: gen_sft_part(data, model, sft_games, seed))
        ours = part("sft", lambda: sft_part(model, data, Path(tmp) / "sft", *sizes))

        def theirs() -> dict:
            figures = mlx_lm_part(model, data, Path(tmp) / "mlx_lm", *sizes)
            if ours is not None:
                figures["ours_over_mlx_lm"] = round(ours["tokens_per_s"] / figures["tokens_per_s"], 3)
            return figures

        part("mlx_lm_lora", theirs)
    report |= {"parts": parts, "targets": targets(parts), "seconds": round(time.perf_counter() - began, 2)}
    failed = [name for name, figures in parts.items() if "error" in figures]
    click.echo(f"total {report['seconds']:.1f} s" + (f"; failed: {', '.join(failed)}" if failed else ""))
    if json_path:
        atomic_write_json(json_path, report)


if __name__ == "__main__":
    run_script(main)

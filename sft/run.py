"""One SFT run, start to finish: what `sft` does between parsing flags and printing the table.

Load the data (checked), the model, attach the adapter; train with `SFTTrainer`,
logging every step to RUN/metrics.jsonl; every `eval_every` steps measure the
validation loss and play a few held-out validation games (eval/validation.py,
sampled at eval's temperature) through the eval harness;
every `save_every` steps write a checkpoint (`sft.checkpoint`). At the end write
RUN/adapter (an mlx-lm adapter folder) and, with `fuse`, RUN/fused, checked against
the adapter. The same command again (or `resume`) picks up at the last checkpoint with
the same batches and learning rate the interrupted run would have used; the settings
that shape the trajectory must match the ones the run started with (sft/run_folder.py).
A step whose loss or gradient is not finite stops the run before it writes anything of
that step: a diverged fit is never saved as RUN/adapter or a checkpoint.

Under `mlx.launch -n N` (llm/distributed.py) every process trains on its share of each
batch of `batch_size`; rank 0 alone writes the run folder and shows progress, and
plays the held-out games while the others wait. A run resumes with the N it began with.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import time
from dataclasses import asdict, fields, replace
from pathlib import Path

import mlx.core as mx

from common.errors import UserError
from common.fileio import append_line, atomic_write_json, atomic_write_text, is_number, read_json, read_jsonl
from llm import distributed
from llm.adapter_files import save_adapter
from sft.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from sft.config import FIXED, FLAGS, MAY_CHANGE, SFTConfig
from sft.data import SFTData, check_lengths, load_data_dir, prompt_of
from sft.lora import AdapterSettings, attach_adapter, continue_adapter, trainable_weights
from sft.run_folder import claim, continues, note_if_begun, note_starts_again, refuse_changes
from sft.trainer import BatchOrder, OptimizerSettings, SFTTrainer, collate

VAL_EXAMPLES = 64  # validation loss on at most this many valid.jsonl examples: it runs every --eval-every steps
FUSE_PROMPTS = 4


class MetricsLog:
    """RUN/metrics.jsonl: one JSON object per step, appended as training goes."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, record: dict) -> None:
        append_line(self.path, json.dumps(record))

    def records(self) -> list[dict]:
        """Every step record, in order. A last line that is not JSON is skipped (a kill mid-write
        leaves one); any other line that is not a step record (an object with a whole-number step:
        a note added by hand, a `null`) is refused, naming it: a resume would rewrite the log
        without it, and every reader would stumble on it."""
        if not self.path.is_file():
            return []
        lines = read_jsonl(self.path, "metrics log")
        records = []
        for number, line in lines:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                if number == lines[-1][0]:
                    continue
                record = None
            if not (isinstance(record, dict) and is_number(record.get("step"), integer=True)):
                raise UserError(f"{self.path} line {number} is not a step record (an object whose step must be a "
                                f"whole number): {' '.join(line.split())[:60]}; remove that line and run again")
            records.append(record)
        return records

    def keep_until(self, step: int) -> None:
        """Forget what an interrupted run logged after its last checkpoint."""
        kept = [r for r in self.records() if r["step"] <= step]
        atomic_write_text(self.path, "".join(json.dumps(r) + "\n" for r in kept))


def run_sft(config: SFTConfig, resume: bool = False, fuse: bool = False, show_progress: bool = True,
            given: frozenset[str] | None = None) -> dict | None:
    """The run's summary; None on the processes other than rank 0 under mlx.launch. Rank 0
    holds the run folder's lock (common/run_lock.py) from the first check to the last write.
    The same settings again continue the run in config.out (`continued`)."""
    from common.run_lock import run_lock

    started = time.perf_counter()
    config.check()
    if not distributed.world().is_main:
        return _run_sft(*continued(config, resume, given), fuse, show_progress, started)
    with run_lock(config.out):
        claim(Path(config.out), "sft")
        return _run_sft(*continued(config, resume, given), fuse, show_progress, started)


def continued(config: SFTConfig, resume: bool, given: frozenset[str] | None = None) -> tuple[SFTConfig, bool]:
    """The run to do under the resume rule (sft/run_folder.py), and whether it resumes from a checkpoint:
    `config` for a new run, else the run in its --out as recorded, with the `given` settings that may
    change (None: all of `config` was given) and the others compared with the record."""
    out = Path(config.out)
    if not continues(out, resume):
        if config.data is None:
            raise UserError("--data is needed to start a run: the folder gen-sft wrote")
        if distributed.world().is_main:
            note_if_begun(out)
        return config, False
    saved = _recorded_config(out)
    given = frozenset(FLAGS) if given is None else given
    changed = [FLAGS[key] for key in FIXED if key in given and getattr(config, key) != getattr(saved, key)]
    if "warmup" in given and config.warmup_steps != saved.warmup_steps:
        changed.append(FLAGS["warmup"])
    refuse_changes(out, "an SFT run", sorted(changed), MAY_CHANGE)
    kept = {key: getattr(config, key) for key in ("data", "eval_every", "eval_games", "save_every", "dtype")
            if key in given and getattr(config, key) is not None}
    resumes = latest_checkpoint(out) is not None
    if not resumes and distributed.world().is_main:
        note_starts_again(out)
    return replace(saved, out=config.out, **kept), resumes


def _recorded_config(out: Path) -> SFTConfig:
    """The settings the run in `out` started with (its run.json)."""
    path = out / "run.json"
    if not path.is_file() and latest_checkpoint(out) is not None:
        raise UserError(f"{out} has a checkpoint but no run.json with its settings; choose another --out")
    if not path.is_file():
        raise UserError(f"--resume: {out} has no checkpoint to resume from; run the same command without "
                        "--resume to start it from step 0")
    record = read_json(path, "SFT run record")
    try:
        saved = SFTConfig(**{f.name: record[f.name] for f in fields(SFTConfig) if f.name in record})
        saved.check()
    except (TypeError, UserError) as err:
        raise UserError(f"{path} is corrupt: it does not hold an SFT run's settings; choose another --out") from err
    return saved


def _run_sft(config: SFTConfig, resume: bool, fuse: bool, show_progress: bool, started: float) -> dict | None:
    from eval.validation import HeldOutEval
    from llm.loading import load_model
    from solver.setup import load_setup

    main = distributed.world().is_main
    distributed.portion(config.batch_size, "--batch-size")  # a batch must have a share for every process
    data = load_data_dir(config.data)
    out = Path(config.out)
    digest = hashlib.sha256((Path(config.data) / "train.jsonl").read_bytes()).hexdigest()

    # Full fine-tuning updates the base weights themselves: they train in float32 unless asked otherwise.
    model, tokenizer = load_model(config.model, config.adapter,
                                  "float32" if config.full and config.dtype == "auto" else config.dtype)
    mx.random.seed(config.seed)
    adapter_config = (continue_adapter(model, config.adapter) if config.adapter
                      else attach_adapter(model, AdapterSettings(full=config.full, rank=config.rank)))
    adapter_config["model"] = config.model
    trainer = SFTTrainer(model, tokenizer, OptimizerSettings(config.learning_rate, config.iters, config.warmup_steps))
    train, valid = _tokenized(trainer, data, config)
    if len(train) < config.batch_size:
        raise UserError(f"train.jsonl has {len(train)} examples, fewer than --batch-size {config.batch_size}")
    order = BatchOrder([len(t) for t, _ in train], config.batch_size, config.seed)

    metrics = MetricsLog(out / "metrics.jsonl")
    trajectory = config.trajectory(digest)
    start = 0
    if resume:
        checkpoint = load_checkpoint(out, model, trainer.optimizer)
        saved = checkpoint.extra.get("config")
        if not isinstance(saved, dict):
            raise UserError(f"checkpoint {checkpoint.path} is corrupt: its state.json does not hold the run's settings")
        _check_same_trajectory(saved, trajectory, out)
        distributed.check_same_size(checkpoint.extra.get("processes", 1))
        start = checkpoint.step
        if start > config.iters:  # only a corrupt checkpoint: --iters is part of the trajectory
            raise UserError(f"checkpoint {checkpoint.path} is at step {start}, past --iters {config.iters}")
    distributed.barrier()  # every process has read the folder before rank 0 changes it
    if main:
        if resume:
            metrics.keep_until(start)
        else:
            out.mkdir(parents=True, exist_ok=True)
            metrics.path.unlink(missing_ok=True)
        atomic_write_json(out / "run.json", {**asdict(config), "trajectory": trajectory,
                                             "processes": distributed.world().size})
    games = HeldOutEval(load_setup("answers"), config.eval_games, config.seed) if config.eval_games else None

    def measure(record: dict) -> dict:
        if valid:
            record["val_loss"] = round(trainer.loss(valid, config.batch_size), 5)
        if games is not None and main:
            record |= {f"eval_{k}": v for k, v in games(model, tokenizer).items()}
        return record

    mx.reset_peak_memory()
    _train(trainer, train, order, config, start, metrics, measure, out, adapter_config, trajectory,
           show_progress and main)
    if not main:
        return None

    adapter_dir = save_adapter(out / "adapter", trainable_weights(model), adapter_config)
    fused = None
    if fuse:
        from sft.fuse import write_fused

        prompts = [tokenizer.apply_chat_template(prompt_of(c), add_generation_prompt=True)
                   for c in (data.valid or data.train)[:FUSE_PROMPTS]]
        fused = {"path": str(out / "fused"), **asdict(write_fused(config.model, adapter_dir, out / "fused", prompts))}
    return summarise(metrics.records(), out, adapter_dir, fused, time.perf_counter() - started)


def _train(trainer: SFTTrainer, train, order: BatchOrder, config: SFTConfig, start: int, metrics: MetricsLog,
           measure, out: Path, adapter_config: dict, trajectory: dict, show_progress: bool) -> None:
    from common.progress import progress_bar

    main = distributed.world().is_main
    progress = progress_bar("steps", disable=not show_progress)
    with progress:
        task = progress.add_task("sft", total=config.iters, completed=start)
        if start == 0:  # the start model's figures, inside the display: held-out games take minutes on a CPU
            progress.update(task, description="sft (validating)")
            record = measure({"step": 0})
            if main:
                metrics.append(record)
        for step in range(start, config.iters):
            stats = trainer.train_step(collate([train[i] for i in distributed.mine(order.indices(step))]))
            if not (math.isfinite(stats.loss) and math.isfinite(stats.grad_norm)):
                raise UserError(_diverged(stats.step, stats.loss, out))
            record = {"step": stats.step, "loss": round(stats.loss, 5), "lr": stats.learning_rate,
                      "grad_norm": round(stats.grad_norm, 4), "tokens": stats.tokens,
                      "seconds": round(stats.seconds, 4), "tokens_per_s": round(stats.tokens_per_second, 1),
                      "peak_memory_gb": round(mx.get_peak_memory() / 1e9, 3)}
            if stats.step % config.eval_every == 0 or stats.step == config.iters:
                progress.update(task, description="sft (validating)")
                measure(record)
            if main:
                metrics.append(record)
            if main and (stats.step % config.save_every == 0 or stats.step == config.iters):
                save_checkpoint(out, trainer.model, trainer.optimizer, stats.step, adapter_config,
                                {"config": trajectory, "processes": distributed.world().size})
            progress.update(task, advance=1,
                            description=f"sft loss {stats.loss:.3f} {stats.tokens_per_second:,.0f} tok/s")


def _diverged(step: int, loss: float, out: Path) -> str:
    """The one line a diverged fit ends with: what is kept and how to go on."""
    kept = latest_checkpoint(out)
    return (f"sft step {step}: the loss went {loss} (the fit diverged); nothing of that step was saved"
            + (f", {kept} is kept" if kept else "")
            + ": start again in a new --out with a lower --lr (or from another --adapter)")


def _tokenized(trainer: SFTTrainer, data: SFTData, config: SFTConfig):
    train = trainer.tokenize(data.train)
    check_lengths(train, config.max_seq_len, "train")
    valid = trainer.tokenize(data.valid[:VAL_EXAMPLES])
    check_lengths(valid, config.max_seq_len, "valid")
    return train, valid


def _check_same_trajectory(saved: dict, now: dict, out: Path) -> None:
    """The checkpoint's own record of what decides the weights (the train data's digest too)."""
    refuse_changes(out, "an SFT run", sorted(FLAGS.get(key, key) for key, value in now.items()
                                             if saved.get(key) != value), MAY_CHANGE)


def summarise(records: list[dict], out: Path, adapter_dir: Path, fused: dict | None, seconds: float) -> dict:
    """Final figures of the run (over all its steps, across resumes) for the table and --json."""
    steps = [r for r in records if "loss" in r]
    measured = [r for r in records if "val_loss" in r or "eval_win_rate" in r]
    last = measured[-1] if measured else {}
    tail = steps[-10:]
    return {
        "run": str(out),
        "adapter": str(adapter_dir),
        "steps": steps[-1]["step"] if steps else 0,
        "first_train_loss": steps[0]["loss"] if steps else None,
        "final_train_loss": round(statistics.fmean(r["loss"] for r in tail), 5) if tail else None,
        "initial_val_loss": measured[0].get("val_loss") if measured else None,
        "final_val_loss": last.get("val_loss"),
        "tokens_per_s_median": statistics.median(r["tokens_per_s"] for r in steps) if steps else None,
        "step_seconds_median": statistics.median(r["seconds"] for r in steps) if steps else None,
        "peak_memory_gb": max((r["peak_memory_gb"] for r in steps), default=None),
        "train_seconds": round(sum(r["seconds"] for r in steps), 2),
        "seconds": round(seconds, 2),
        "eval": {k: v for k, v in last.items() if k.startswith("eval_")},
        "history": [{k: r.get(k) for k in ("step", "loss", "val_loss", "eval_format_valid_rate", "eval_win_rate")}
                    for r in measured],
        "fused": fused,
    }

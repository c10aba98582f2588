"""One RL run: GRPO and filtered expert iteration alternating by the schedule.

A step is one GRPO update (on groups from freshly played whole games, tied groups
dropped and replaced) or one expert-iteration round. Every step appends a line to
RUN/metrics.jsonl; every `checkpoint_every` steps a checkpoint (sft/checkpoint.py)
keeps the adapter, both phases' optimizer states, mlx's key, the numpy generator
that draws secrets and start states, and the schedule position, so `--resume`
replays exactly what the interrupted run would have done. RUN/adapter is the final
adapter (start adapter and RL adapter merged, rl/policy.py), loadable with `--adapter`
anywhere. Before the first step, every `eval_every` steps and after the last, the
policy plays the same held-out validation games; the best of those evals is kept as
RUN/best (rl/heldout.py).
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import mlx.core as mx
import numpy as np

from eval.splits import trainable
from eval.validation import HeldOutEval
from llm.generation import SamplingSettings
from rl.config import RLConfig, build_config, load_config_file
from rl.expert_iteration import ExpertIteration
from rl.grpo import GrpoLearner, collect_groups
from rl.heldout import BestSoFar, figures_of, heldout_record, heldout_summary, is_training_step
from rl.policy import load_policy
from rl.reward import RewardScorer
from rl.rollout import play
from sft.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from sft.lora import ADAPTER_CONFIG, ADAPTER_WEIGHTS
from sft.run import MetricsLog
from sft.states import sample_start_states
from solver.errors import UserError
from solver.fileio import atomic_replace_dir, atomic_write_json

CONFIG_FILE = "config.json"
RUN_FILE = "run.json"  # the model and start adapter, for --resume
START_ADAPTER = "start_adapter"  # a copy of --adapter: a resume does not depend on the original


@dataclass(frozen=True)
class RunRequest:
    model: str
    adapter: str | None  # the adapter RL starts from (fused in; see rl/policy.py)
    out: Path
    config: RLConfig
    resume: bool = False
    show_progress: bool = True


class PhaseOptimizers:
    """GRPO's and expert iteration's optimizers seen as one state tree, for one checkpoint."""

    def __init__(self, grpo, ei) -> None:
        self.grpo, self.ei = grpo, ei

    @property
    def state(self) -> dict:
        return {"grpo": self.grpo.state, "ei": self.ei.state}

    def init(self, parameters) -> None:
        self.grpo.init(parameters)
        self.ei.init(parameters)


def resume_request(out: Path, steps: int | None, show_progress: bool = True) -> RunRequest:
    """The run in `out` as it started (only `steps` may change, to run longer)."""
    if latest_checkpoint(out) is None:
        raise UserError(f"--resume: {out} has no checkpoint to resume from")
    if not (out / CONFIG_FILE).is_file() or not (out / RUN_FILE).is_file():
        raise UserError(f"--resume: {out} has no {CONFIG_FILE} or {RUN_FILE}; is it an RL run folder?")
    config = build_config(load_config_file(out / CONFIG_FILE), {"steps": steps} if steps is not None else None,
                          str(out / CONFIG_FILE))
    run = json.loads((out / RUN_FILE).read_text())
    adapter = str(out / START_ADAPTER) if run.get("start_adapter") else None
    return RunRequest(run["model"], adapter, out, config, resume=True, show_progress=show_progress)


def run_rl(request: RunRequest) -> dict:
    from rl.report import LiveView
    from solver.setup import load_setup

    config, out = request.config, request.out
    _check_run_folder(out, request.resume)
    setup = load_setup(config.secrets)
    secrets = trainable(setup.lists.secrets(config.secrets))  # eval's held-out secrets never train
    mx.random.seed(config.seed)
    policy = load_policy(request.model, request.adapter, config.lora)
    model, tokenizer = policy.model, policy.tokenizer

    solver = setup.solver()
    scorer = RewardScorer(setup, config.reward)
    grpo = GrpoLearner(model, config.grpo, config.rollout.temperature, tokenizer.eos_token_id)
    ei = ExpertIteration(model, tokenizer, scorer, solver, config.ei, config.rollout)
    optimizers = PhaseOptimizers(grpo.optimizer, ei.trainer.optimizer)
    optimizers.init(model.trainable_parameters())
    rng = np.random.default_rng(config.seed)
    schedule = config.phases
    metrics = MetricsLog(out / "metrics.jsonl")
    # Sampled at eval's temperature, with the answer length the rollouts allow.
    held_out = HeldOutEval(setup, config.eval_games, config.seed,
                           SamplingSettings(max_tokens=config.rollout.max_tokens),
                           config.rollout.batch_size) if config.eval_every else None
    best = BestSoFar(out)
    start = 0
    if request.resume:
        checkpoint = load_checkpoint(out, model, optimizers)
        start = checkpoint.step
        rng.bit_generator.state = checkpoint.extra["rng"]
        metrics.keep_until(start)
        best = BestSoFar(out, checkpoint.extra.get("best"))
        best.resume(policy, start)
    else:
        _start_run_folder(out, request, config)

    def starts(n: int, min_history: int = 0):
        return sample_start_states(setup, solver, secrets, n, rng, config.rollout.max_history,
                                   config.rollout.off_policy, min_history)

    def grpo_step(view: LiveView) -> dict:
        return run_grpo_step(model, tokenizer, scorer, grpo, config,
                             lambda: starts(config.rollout.games_per_round), rng, view.status)

    def ei_step(view: LiveView) -> dict:
        view.status(f"{config.ei.states_per_step} positions")
        chosen = starts(config.ei.states_per_step, config.ei.min_history)
        return {**ei.step(chosen, seed=int(rng.integers(2**31))), "secrets": sorted({s.secret for s in chosen})}

    def evaluate(step: int, view: LiveView) -> bool:
        """Play the held-out games with the policy as it is; True when they beat the best so far."""
        view.status(f"held-out eval, {len(held_out.secrets)} games")
        record = heldout_record(step, held_out(model, tokenizer))
        metrics.append(record)
        return best.offer(figures_of(record))

    with LiveView(config.steps, start, request.show_progress) as view:
        if held_out is not None and not request.resume and evaluate(0, view):
            best.export(policy)
        for step in range(start, config.steps):
            phase = schedule.phase(step)
            mx.reset_peak_memory()
            began = time.perf_counter()
            view.begin(step + 1, phase)
            record = grpo_step(view) if phase == "grpo" else ei_step(view)
            seconds = time.perf_counter() - began
            record = {"step": step + 1, "phase": phase, **record, "seconds": seconds,
                      "tokens_per_s": (record["answer_tokens"] + record.get("trained_tokens", 0)) / seconds,
                      "peak_memory_gb": max(mx.get_peak_memory() / 1e9, record.get("rollout_peak_memory_gb", 0.0))}
            metrics.append(record)
            last = step + 1 == config.steps
            improved = (held_out is not None and ((step + 1) % config.eval_every == 0 or last)
                        and evaluate(step + 1, view))
            # A new best is checkpointed before RUN/best is replaced: see rl/heldout.py.
            if improved or (step + 1) % config.checkpoint_every == 0 or last:
                save_checkpoint(out, model, optimizers, step + 1, policy.adapter_config,
                                {"rng": rng.bit_generator.state, "schedule": str(schedule),
                                 "schedule_position": schedule.position(step + 1), "best": best.best},
                                keep=config.keep_checkpoints)
            if improved:
                best.export(policy)
            view.update(record)
    adapter_dir = policy.export(out / "adapter")
    return summarise(metrics.records(), out, adapter_dir, best)


def run_grpo_step(model, tokenizer, scorer: RewardScorer, learner: GrpoLearner, config: RLConfig,
                  fresh_starts: Callable[[], list], rng: np.random.Generator,
                  status: Callable[[str], None] = lambda doing: None) -> dict:
    """One GRPO step: rounds of fresh games (`fresh_starts()` draws each round's start
    states) until enough informative groups, then one update; its metrics.jsonl record.

    Besides the learning figures, the record says what the step's time went into:
    answer tokens per second of the rollout, trained (answer) tokens per second of the
    update, each one's share of the step, and the share of the update's micro-batch
    positions that were padding.
    """
    rollout_start = time.perf_counter()
    wanted = config.grpo.groups_per_step
    rollout, kept = collect_groups(
        lambda: play(model, tokenizer, scorer, fresh_starts(), config.rollout, rng),
        wanted, config.grpo.max_rollouts, config.grpo.tie_threshold,
        on_round=lambda done, found: status(f"round {done + 1}, {found}/{wanted} groups"))
    update_start, rollout_peak = time.perf_counter(), mx.get_peak_memory()
    mx.reset_peak_memory()
    status(f"update, {len(kept)} groups")
    figures = learner.update(kept) if kept else {"skipped": "no informative group"}
    update_end = time.perf_counter()
    stats = rollout.stats(config.rollout.temperature)
    rollout_seconds, update_seconds = update_start - rollout_start, update_end - update_start
    return {**stats, **figures, "groups": len(rollout.groups), "informative_groups": len(kept),
            "dropped_fraction": 1.0 - len(kept) / len(rollout.groups),
            "rollout_seconds": rollout_seconds, "update_seconds": update_seconds,
            "rollout_share": rollout_seconds / (rollout_seconds + update_seconds),
            "rollout_peak_memory_gb": rollout_peak / 1e9, "update_peak_memory_gb": mx.get_peak_memory() / 1e9,
            "rollout_tokens_per_s": stats["answer_tokens"] / rollout_seconds,
            "update_tokens_per_s": figures.get("trained_tokens", 0) / update_seconds,
            "secrets": sorted({g.secret for g in rollout.games}),
            "group_rewards": [[round(float(x), 4) for x in g.rewards.total] for g in rollout.groups]}


def _start_run_folder(out: Path, request: RunRequest, config: RLConfig) -> None:
    """The files a resume needs: the config, the model, and a copy of the start adapter."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.jsonl").unlink(missing_ok=True)
    if request.adapter is not None:
        def copy(tmp: Path) -> None:
            for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
                shutil.copy2(Path(request.adapter) / name, tmp / name)

        atomic_replace_dir(out / START_ADAPTER, copy)
    atomic_write_json(out / RUN_FILE, {"model": request.model, "start_adapter": request.adapter})
    atomic_write_json(out / CONFIG_FILE, config.to_json())


def _check_run_folder(out: Path, resume: bool) -> None:
    existing = latest_checkpoint(out)
    if resume and existing is None:
        raise UserError(f"--resume: {out} has no checkpoint to resume from")
    if not resume and (existing is not None or (out / CONFIG_FILE).exists()):
        raise UserError(f"{out} already holds an RL run; add --resume to continue it or choose another --out")


def summarise(records: list[dict], out: Path, adapter_dir: Path, best: BestSoFar) -> dict:
    """Figures over the whole run (across resumes), for the final table and --json."""
    steps = [r for r in records if is_training_step(r)]
    grpo = [r for r in steps if r["phase"] == "grpo"]
    games = sum(r["games"] for r in grpo)
    wins = sum(r["wins"] for r in grpo)

    def median(key: str, rows: list[dict]):
        values = [r[key] for r in rows if r.get(key) is not None]
        return statistics.median(values) if values else None

    return {
        "run": str(out), "adapter": str(adapter_dir), "steps": steps[-1]["step"] if steps else 0,
        "grpo_steps": len(grpo), "ei_steps": len(steps) - len(grpo),
        "games": games, "wins": wins, "win_rate": wins / games if games else None,
        "last_reward_mean": steps[-1].get("reward_mean") if steps else None,
        "mean_dropped_fraction": statistics.fmean(r["dropped_fraction"] for r in grpo) if grpo else None,
        "grpo_step_seconds_median": median("seconds", grpo),
        "ei_step_seconds_median": median("seconds", [r for r in steps if r["phase"] == "ei"]),
        "peak_memory_gb": max((r["peak_memory_gb"] for r in steps), default=None),
        "nonfinite_skipped": sum(r.get("nonfinite_skipped", 0) for r in steps),
        **heldout_summary(records, best),
    }

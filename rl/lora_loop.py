"""LoRA RL: GRPO and filtered expert iteration alternating by the schedule (rl/loop.py chooses it
over head RL when the start adapter has no naming head, or `head.train` is off).

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

Under `mlx.launch -n N` (llm/distributed.py) each process plays its share of the games,
groups and expert-iteration positions with its own dice (numpy generator and mlx key,
both kept per rank in the checkpoint), and the updates combine every rank's gradient.
Rank 0 alone plays the held-out games, writes the run folder and shows the live view;
a step's logged figures are of all ranks' games. A run resumes with the N it began with.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Callable

import mlx.core as mx
import numpy as np

from eval.endgame import EndgameEval, model_positions
from eval.splits import SPLITS, held_out_validation
from eval.validation import HeldOutEval
from llm import distributed
from llm.adapter_files import STACKED_ON
from llm.generation import SamplingSettings
from llm.loading import portable_spec
from rl.config import RLConfig
from rl.expert_iteration import ExpertIteration
from rl.grpo import GrpoLearner, collect_groups, sampled_win
from rl.guidance import ExpertGuide, guidance_figures
from rl.heldout import ENDGAME, BestSoFar, figures_of, heldout_record, heldout_summary, is_training_step
from common.errors import UserError
from common.fileio import read_json
from rl.policy import load_policy
from rl.reward import RewardScorer
from rl.run_files import START_ADAPTER, RunRequest, start_run_folder
from rl.rollout import play
from sft.checkpoint import Checkpoint, latest_checkpoint, load_checkpoint, save_checkpoint
from sft.run import MetricsLog
from sft.states import frequent_positions, model_game_states, sample_endgame_states, sample_start_states
from solver.policy import expert_policy

# A metrics record's figures that measure the machine's speed, not the run: a resumed or
# several-process run repeats every other figure of the run it continues or splits.
TIMING_FIGURES = frozenset({
    "seconds", "tokens_per_s", "rollout_tokens_per_s", "update_tokens_per_s", "rollout_share", "peak_memory_gb",
    "rollout_seconds", "update_seconds", "rollout_peak_memory_gb", "update_peak_memory_gb",
    "rollout_prefill_seconds", "rollout_decode_seconds", "reference_seconds"})


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


def run_lora_rl(request: RunRequest) -> dict | None:
    """LoRA RL (the loop above): the run's summary; None on the processes other than rank 0
    under mlx.launch. The caller holds the run folder's lock (rl/loop.py)."""
    from rl.report import LiveView
    from solver.setup import load_setup

    config, out = request.config, request.out
    main = distributed.world().is_main
    _check_run_folder(out, request.resume)
    games_per_round = distributed.portion(config.rollout.games_per_round, "rollout.games_per_round")
    groups_wanted = distributed.portion(config.grpo.groups_per_step, "grpo.groups_per_step")
    ei_played = config.ei.positions == "played"
    ei_starts = distributed.portion(config.ei.games_per_step if ei_played else config.ei.states_per_step,
                                    "ei.games_per_step" if ei_played else "ei.states_per_step")
    distributed.portion(config.ei.batch_size, "ei.batch_size")  # checked now, not at the first EI step
    setup = load_setup(config.secrets)
    secrets = SPLITS[config.secret_split](setup.lists.secrets(config.secrets))  # held-out secrets never train
    own_positions = (model_game_states(model_positions(setup, read_json(config.rollout.start_games, "games file"),
                                                       config.rollout.endgame_candidates), secrets)
                     if config.rollout.start == "games" else [])
    mx.random.seed(config.seed)
    model_spec = portable_spec(request.model)  # run.json's: a resume may start in another working directory
    policy = load_policy(model_spec, request.adapter, config.lora, config.dtype)
    model, tokenizer = policy.model, policy.tokenizer
    if not main:  # the same adapter initialisation everywhere, then each rank's own dice
        mx.random.seed(distributed.rank_seed(config.seed))

    solver = setup.solver()
    history_teacher = solver.for_histories()  # proof-free where proofs are slow (the allowed list)
    scorer = RewardScorer(setup, config.reward)
    grpo = GrpoLearner(model, config.grpo, config.rollout.temperature, tokenizer.eos_token_id)
    expert = expert_policy(solver, config.ei.expert)
    drill = frequent_positions(setup, expert, secrets, config.ei.drill, config.ei.drill_depth) if config.ei.drill else ()
    ei = ExpertIteration(model, tokenizer, scorer, expert, config.ei, config.rollout, drill)
    guide = ExpertGuide(expert, tokenizer, scorer) if config.grpo.expert_in_group else None
    optimizers = PhaseOptimizers(grpo.optimizer, ei.trainer.optimizer)
    optimizers.init(model.trainable_parameters())
    rng = np.random.default_rng(distributed.rank_seed(config.seed))
    schedule = config.phases
    metrics = MetricsLog(out / "metrics.jsonl")
    # Sampled at eval's temperature, with the answer length the rollouts allow.
    heldout_sampling = SamplingSettings(max_tokens=config.rollout.max_tokens)
    held_out = HeldOutEval(setup, config.eval_games, config.seed, heldout_sampling,
                           config.rollout.batch_size) if config.eval_every and config.eval_games else None
    endgame = EndgameEval(setup, history_teacher, held_out_validation(setup.lists.secrets(config.secrets)),
                          config.eval_endgame, config.seed, heldout_sampling, config.rollout.batch_size,
                          config.rollout.endgame_candidates) if config.eval_every and config.eval_endgame else None
    evaluating = held_out is not None or endgame is not None
    best = BestSoFar(out, best_by=config.best_by)
    # A checkpoint holds RL's own LoRA, trained over the fused start adapter: its config says so,
    # and `eval --adapter RUN/checkpoints/step-N` loads the two (llm/loading.py apply_adapter).
    checkpoint_adapter_config = ({**policy.adapter_config, STACKED_ON: f"../../{START_ADAPTER}"}
                                 if request.adapter else policy.adapter_config)
    start = 0
    if request.resume:
        checkpoint = load_checkpoint(out, model, optimizers)
        start = checkpoint.step
        if start > config.steps:
            raise UserError(f"--resume: the run in {out} is at step {start} already, past --steps {config.steps}")
        _restore_rng(rng, checkpoint)
        _restore_rank_dice(checkpoint.extra.get("ranks"), rng)
        best = BestSoFar(out, _saved_best(checkpoint), config.best_by)
    distributed.barrier()  # every process has read the folder before rank 0 changes it
    if main:
        if request.resume:
            metrics.keep_until(start)
            best.resume(policy, start)
        else:
            start_run_folder(out, model_spec, request.adapter, config)

    def starts(n: int, min_history: int = 0):
        """`n` start states: `rollout.any_share` of them (rounded) as start: any draws them, the rest as
        `rollout.start` says. GRPO at endgame positions alone moves the whole game, the opening
        included (results/endgame-loop/), so ordinary positions can share every round."""
        ordinary = n if config.rollout.start == "any" else round(n * config.rollout.any_share)
        chosen = sample_start_states(setup, history_teacher, secrets, ordinary, rng, config.rollout.max_history,
                                     config.rollout.off_policy, min_history) if ordinary else []
        if config.rollout.start == "games":
            chosen += [own_positions[i] for i in rng.integers(len(own_positions), size=n - ordinary)]
        elif config.rollout.start == "endgame":
            chosen += sample_endgame_states(setup, history_teacher, secrets, n - ordinary, rng,
                                            config.rollout.endgame_candidates, config.rollout.off_policy)
        return chosen

    def grpo_step(view: LiveView) -> dict:
        return run_grpo_step(model, tokenizer, scorer, grpo, config, lambda: starts(games_per_round), rng,
                             view.status, groups_wanted, guide)

    def ei_step(view: LiveView) -> dict:
        view.status(f"{ei_starts} {'games' if ei_played else 'positions'}")
        chosen = starts(ei_starts, config.ei.min_history)
        figures = ei.step(chosen, rng, starts(config.ei.replay) if config.ei.replay else [])
        return whole_step({**figures, "secrets": sorted({s.secret for s in chosen})}, figures["positions"])

    def evaluate(step: int, view: LiveView) -> bool:
        """Play the held-out games and endgame positions with the policy as it is; True when
        they beat the best so far."""
        figures: dict = {"seconds": 0.0}
        if held_out is not None:
            view.status(f"held-out eval, {len(held_out.secrets)} games")
            figures = held_out(model, tokenizer)
        if endgame is not None:
            view.status(f"held-out endgame eval, {len(endgame.positions)} positions")
            answered = endgame(model, tokenizer)
            figures = {**figures, **{ENDGAME + k: v for k, v in answered.items() if k != "seconds"},
                       "seconds": figures["seconds"] + answered["seconds"]}
        record = heldout_record(step, figures)
        metrics.append(record)
        return best.offer(figures_of(record))

    with LiveView(config.steps, start, request.show_progress and main) as view:
        if evaluating and not request.resume and main and evaluate(0, view):
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
            if main:
                metrics.append(record)
            last = step + 1 == config.steps
            improved = (evaluating and ((step + 1) % config.eval_every == 0 or last)
                        and distributed.main_decides(main and evaluate(step + 1, view)))
            # A new best is checkpointed before RUN/best is replaced: see rl/heldout.py.
            if improved or (step + 1) % config.checkpoint_every == 0 or last:
                ranks = distributed.gather_json(_rank_dice(rng)) if distributed.world().size > 1 else None
                if main:
                    save_checkpoint(out, model, optimizers, step + 1, checkpoint_adapter_config,
                                    {"rng": rng.bit_generator.state, "schedule": str(schedule),
                                     "schedule_position": schedule.position(step + 1), "best": best.best,
                                     **({"ranks": ranks} if ranks else {})},
                                    keep=config.keep_checkpoints)
            if improved and main:
                best.export(policy)
            view.update(record)
    if not main:
        return None
    adapter_dir = policy.export(out / "adapter")
    return summarise(metrics.records(), out, adapter_dir, best)


def _rank_dice(rng: np.random.Generator) -> dict:
    """This rank's random state: its numpy generator and mlx's key."""
    return {"rng": rng.bit_generator.state, "key": np.array(mx.random.state[0]).tolist()}


def _restore_rank_dice(ranks: list[dict] | None, rng: np.random.Generator) -> None:
    """Put back this rank's dice from a checkpoint (a single-process checkpoint has no `ranks`)."""
    distributed.check_same_size(len(ranks) if ranks else 1)
    if ranks:
        mine = ranks[distributed.world().rank]
        rng.bit_generator.state = mine["rng"]
        mx.random.state[0][...] = mx.array(mine["key"], dtype=mx.uint32)


# A step's figures that add up over ranks, and those that are means over each rank's answers (or positions).
SUMMED = ("games", "wins", "answer_tokens", "groups", "won_groups", "positions", "targets", "rewritten_thoughts")
AVERAGED = ("invalid_rate", "format_rate", "kept_fraction", "expert_fraction")


def whole_step(figures: dict, weight: int) -> dict:
    """A step's figures over every rank under mlx.launch: counts summed, means weighted by each
    rank's `weight` (groups or positions: the answers behind its means), reward std pooled,
    secrets and group rewards joined. The rest (the update's loss, norms, tokens, timings) is
    rank 0's: the update already reduced it, or it is rank 0's own."""
    if distributed.world().size == 1:
        return figures
    ranks = distributed.gather_json({"figures": figures, "weight": weight})
    weights = np.array([r["weight"] for r in ranks], dtype=np.float64)
    merged = dict(figures)

    def mean(key: str) -> float:
        return float(np.dot(weights, [r["figures"][key] for r in ranks]) / weights.sum())

    for key in figures:
        if key in SUMMED:
            merged[key] = sum(r["figures"][key] for r in ranks)
        elif key in AVERAGED or (key.startswith("reward_") and key != "reward_std"):
            merged[key] = mean(key)
    if "reward_std" in figures:
        spread = float(np.dot(weights, [r["figures"]["reward_std"] ** 2 + r["figures"]["reward_mean"] ** 2
                                        for r in ranks]) / weights.sum())
        merged["reward_std"] = float(np.sqrt(max(spread - merged["reward_mean"] ** 2, 0.0)))
    if "win_rate" in figures:
        merged["win_rate"] = merged["wins"] / merged["games"] if merged["games"] else None
    merged["secrets"] = sorted({s for r in ranks for s in r["figures"]["secrets"]})
    if "group_rewards" in figures:
        merged["group_rewards"] = [g for r in ranks for g in r["figures"]["group_rewards"]]
    return merged


def _restore_rng(rng: np.random.Generator, checkpoint: Checkpoint) -> None:
    """The generator that draws secrets and start states, as the checkpoint saved it."""
    try:
        rng.bit_generator.state = checkpoint.extra["rng"]
    except (KeyError, TypeError, ValueError, OverflowError) as err:
        raise UserError(f"checkpoint {checkpoint.path} is corrupt: its rng state does not load "
                        f"({' '.join(str(err).split())[:200]})") from err


def _saved_best(checkpoint: Checkpoint) -> dict | None:
    """The best held-out eval the checkpoint recorded ({"step": k, **figures}), if any."""
    best = checkpoint.extra.get("best")
    if best is not None and not (isinstance(best, dict) and type(best.get("step")) is int):
        raise UserError(f"checkpoint {checkpoint.path} is corrupt: its best eval has no step")
    return best


def run_grpo_step(model, tokenizer, scorer: RewardScorer, learner: GrpoLearner, config: RLConfig,
                  fresh_starts: Callable[[], list], rng: np.random.Generator,
                  status: Callable[[str], None] = lambda doing: None, groups_wanted: int | None = None,
                  guide: ExpertGuide | None = None) -> dict:
    """One GRPO step: rounds of fresh games (`fresh_starts()` draws each round's start
    states) until enough informative groups (`groups_wanted`, this process's share under
    mlx.launch), then one update; its metrics.jsonl record, over every process.

    Besides the learning figures, the record counts the groups in which a sampled answer
    won (at endgame positions the only ones that can teach closing) and says what the
    step's time went into: answer tokens per second of the rollout, its prompt tokens and
    seconds of prefill and its decode steps and their seconds, trained (answer) tokens per
    second of the update, each one's share of the step, and the share of the update's
    micro-batch positions that were padding. With a `guide`
    (`grpo.expert_in_group`) the expert's answer joins each group; how it stood against
    the samples is logged too.
    """
    rollout_start = time.perf_counter()
    wanted = config.grpo.groups_per_step if groups_wanted is None else groups_wanted
    rollout, kept = collect_groups(
        lambda: play(model, tokenizer, scorer, fresh_starts(), config.rollout, rng),
        wanted, config.grpo.max_rollouts, config.grpo.tie_threshold,
        on_round=lambda done, found: status(f"round {done + 1}, {found}/{wanted} groups"), guide=guide,
        wins_only=config.grpo.wins_only)
    update_start, rollout_peak = time.perf_counter(), mx.get_peak_memory()
    mx.reset_peak_memory()
    informative = int(distributed.total(len(kept)))
    status(f"update, {informative} groups")
    figures = learner.update(kept) if informative else {"skipped": "no informative group"}
    update_end = time.perf_counter()
    stats = whole_step({**rollout.stats(config.rollout.temperature), "groups": len(rollout.groups),
                        "won_groups": sum(sampled_win(g) for g in rollout.groups),
                        "secrets": sorted({g.secret for g in rollout.games}),
                        "group_rewards": [[round(float(x), 4) for x in g.rewards.total] for g in rollout.groups]},
                       len(rollout.groups))
    rollout_seconds, update_seconds = update_start - rollout_start, update_end - update_start
    passes = rollout.passes
    return {**stats, **figures, **(guidance_figures(kept) if guide is not None else {}),
            "rollout_prompt_tokens": passes.prefill_tokens, "rollout_prefill_seconds": passes.prefill_seconds,
            "rollout_decode_steps": passes.decode_steps, "rollout_decode_seconds": passes.decode_seconds,
            "informative_groups": informative,
            "dropped_fraction": 1.0 - informative / stats["groups"],
            "rollout_seconds": rollout_seconds, "update_seconds": update_seconds,
            "rollout_share": rollout_seconds / (rollout_seconds + update_seconds),
            "rollout_peak_memory_gb": rollout_peak / 1e9, "update_peak_memory_gb": mx.get_peak_memory() / 1e9,
            "rollout_tokens_per_s": stats["answer_tokens"] / rollout_seconds,
            "update_tokens_per_s": figures.get("trained_tokens", 0) / update_seconds}


def _check_run_folder(out: Path, resume: bool) -> None:
    """A fresh run may take a folder whose run never reached a checkpoint: nothing there is worth keeping."""
    existing = latest_checkpoint(out)
    if resume and existing is None:
        raise UserError(f"--resume: {out} has no checkpoint to resume from")
    if not resume and existing is not None:
        raise UserError(f"{out} already holds an RL run ({existing.name}); add --resume to continue it "
                        "or choose another --out")


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
        "won_groups": sum(r.get("won_groups", 0) for r in grpo), "groups": sum(r["groups"] for r in grpo),
        "last_reward_mean": steps[-1].get("reward_mean") if steps else None,
        "mean_dropped_fraction": statistics.fmean(r["dropped_fraction"] for r in grpo) if grpo else None,
        "grpo_step_seconds_median": median("seconds", grpo),
        "ei_step_seconds_median": median("seconds", [r for r in steps if r["phase"] == "ei"]),
        "peak_memory_gb": max((r["peak_memory_gb"] for r in steps), default=None),
        "nonfinite_skipped": sum(r.get("nonfinite_skipped", 0) for r in steps),
        **heldout_summary(records, best),
    }

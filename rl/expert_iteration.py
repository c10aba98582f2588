"""Filtered expert iteration: train on the model's own good answers, or the expert's.

The positions are those the model itself reaches: it plays whole games from start
states (`positions` "played", as a GRPO rollout does, one sampled answer advancing each
game), so its own weak guesses and refused words are in the histories it trains on,
the states eval will put it in; "sampled" uses the start states alone. At each position
the model has sampled K answers (at the rollout temperature, eval's). An answer is kept
when its move is good: playable, and its guess quality (the reward without the
thought's credit) at or above `threshold`, or its guess is the solver's own move. Best
first, distinct guesses, at most `keep_per_state`. A kept answer's thought must be true:
one the checker (sft/cot.py) accepts is trained on as written, any other is replaced by
the true thought for the same guess, so a false claim ("Only vigor remains." when it
does not) never becomes a target. Where no answer passes, the target is the solver's
move with its chain of thought, so a position never goes untaught. `replay` more targets
are the expert's own moves at fresh start states (the empty board included), drawn as
`gen-sft` draws its examples: without them every update pulls the adapter towards the
positions the model reaches after turn `min_history` and nothing holds what SFT taught
elsewhere (the pipeline's expert iteration left 19 of 32 openers unplayable, SFT 6). The
targets train through the SFT trainer (sft/trainer.py), the same masked cross-entropy step
the `sft` command runs, with RL's bias-corrected optimizer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import mlx.core as mx
import numpy as np
from mlx.utils import tree_map

from common.knobs import knob
from llm.format import Rejection, messages, prompt_tokens
from llm.generation import sample
from rl.optimizer import rl_optimizer
from rl.reward import GroupRewards, RewardScorer
from rl.rollout import Group, Rollout, RolloutSettings, play
from sft.cot import check_thought, expert_answer, truthful_answer
from sft.data import Conversation
from sft.lora import trainable_weights
from llm.histories import sample_rejections
from sft.states import MAX_DRILL_DEPTH, StartState
from sft.trainer import OptimizerSettings, SFTTrainer
from solver.feedback import WIN
from solver.policy import EXPERTS, Policy


POSITIONS = ("played", "sampled")


@dataclass(frozen=True)
class EISettings:
    positions: str = knob("played", "Every position of games the model plays, or the start states alone.",
                          choices=POSITIONS)
    # Whose move a position is taught where no sample passes: the solver's, or its best
    # among the words that can still be the secret (solver/policy.py CandidatePolicy).
    expert: str = knob("solver", "The teacher where no sample passes: the solver's moves, or its best possible "
                                 "answer.", choices=EXPERTS)
    games_per_step: int = knob(2, "Games the model plays per step (positions \"played\").", range=(1, 100_000))
    states_per_step: int = knob(8, "Start states per step (positions \"sampled\").", range=(1, 100_000))
    # Earliest turn trained: the empty board's answer is always the solver's opener, and
    # drilling it made the model answer that word again at turn 2 (57 of its 71 repeats).
    min_history: int = knob(1, "Earliest turn trained (earlier turns before it).", range=(0, 5))
    samples: int = knob(4, "Answers sampled per state (K).", range=(1, 256))
    threshold: float = knob(1.6, "Guess quality (reward without the thought) at or above which a move is kept.",
                            range=(-math.inf, math.inf))
    keep_per_state: int = knob(1, "Most answers kept per state (best first).", range=(1, 256))
    sft_steps: int = knob(2, "SFT updates per expert-iteration step.", range=(1, 100_000))
    batch_size: int = knob(4, "Targets per SFT update.", range=(1, 4096))
    # a LoRA adapter, a few SFT steps per round
    learning_rate: float = knob(1e-4, "Expert-iteration learning rate.", range=(0.0, 1.0), open_low=True)
    warmup_steps: int = knob(2, "Updates over which the rate ramps up to learning_rate.", range=(0, 100_000))
    replay: int = knob(0, "The expert's moves at fresh start states added to each step's targets (0: none).",
                       range=(0, 100_000))
    # The expert's moves at the `drill` positions its own games reach most often after each of its
    # first `drill_depth` moves (sft/states.py frequent_positions), added to every step's targets:
    # the same positions each step, so they are taught until they stick (results/rl-drill/).
    drill: int = knob(0, "Positions after the opener (those most secrets lead to) taught at every step (0: none).",
                      range=(0, WIN))
    drill_depth: int = knob(1, "Drill the positions after each of the expert's first N moves, not just its opener.",
                            range=(1, MAX_DRILL_DEPTH))
    # Share of the drilled prompts, drawn anew each step, that name one or two answers refused at
    # that turn (llm/histories.py sample_rejections), as eval names them: a model drilled without
    # them gave a drilled answer again once it had been refused; with half of them it still
    # did at the positions not drilled (results/rl-drill/, D5).
    drill_refused: float = knob(0.0, "Share of the drilled prompts that name one or two refused answers.",
                                range=(0.0, 1.0))


@dataclass(frozen=True)
class Targets:
    conversations: list[Conversation]
    sampled: Rollout  # every sampled group, for the reward figures
    positions: int  # positions trained (those from turn min_history + 1 on)
    expert_states: int  # states where no sample passed and the solver's answer was used
    rewritten: int  # kept answers whose thought was false, trained with the true thought instead
    replayed: int  # expert demonstrations at fresh start states (and drilled positions) among the conversations


class ExpertIteration:
    """One SFT trainer (and its optimizer) for every expert-iteration step of a run."""

    def __init__(self, model, tokenizer, scorer: RewardScorer, expert: Policy, settings: EISettings,
                 rollout: RolloutSettings, drill: Sequence[StartState] = ()) -> None:
        """`drill`: positions whose expert move joins every step's targets (`EISettings.drill`)."""
        self.model = model
        self.drill = list(drill)
        self._drill_answers = [expert_answer(expert, s.state) for s in self.drill]
        self.tokenizer = tokenizer
        self.scorer = scorer
        self.expert = expert
        self.settings = settings
        self.rollout = rollout
        self.trainer = SFTTrainer(model, tokenizer, OptimizerSettings(learning_rate=settings.learning_rate),
                                  rl_optimizer(settings.learning_rate, settings.warmup_steps))

    def positions(self, starts: list[StartState], rng: np.random.Generator) -> Rollout:
        """K sampled answers, scored, at each position to train: the games played from
        `starts` ("played") or the start states alone ("sampled")."""
        settings = self.settings
        if settings.positions == "played":
            return play(self.model, self.tokenizer, self.scorer, starts,
                        replace(self.rollout, group_size=settings.samples, choose="sampled"), rng)
        prompts = [prompt_tokens(self.tokenizer, s.state, s.rejected) for s in starts]
        answers = sample(self.model, self.tokenizer, prompts, settings.samples, self.rollout.sampling,
                         self.rollout.batch_size)
        return Rollout(groups=[Group(start.state, start.secret, prompt, completions,
                                     self.scorer.score([c.text for c in completions], start.state, start.secret),
                                     start.rejected)
                               for start, prompt, completions in zip(starts, prompts, answers)])

    def targets(self, sampled: Rollout, replay: Sequence[StartState] = (),
                rng: np.random.Generator | None = None) -> Targets:
        """One target (or up to `keep_per_state`) for each position from turn `min_history` + 1 on,
        then the expert's move at each `replay` start state and at each drilled position (whose
        prompt names refused answers, a `drill_refused` share of them, drawn with `rng`)."""
        settings = self.settings
        trained = [g for g in sampled.groups if len(g.state.turns) >= settings.min_history]
        conversations, expert_states, rewritten = [], 0, 0
        for group in trained:
            texts = [c.text for c in group.completions]
            rewards, parsed = group.rewards, group.rewards.parsed
            chosen = passing_answers(rewards, self.expert.choose(group.state), settings.threshold,
                                     settings.keep_per_state)
            kept = [truthful_target(group.state, texts[i], parsed.thoughts[i], parsed.guesses[i]) for i in chosen]
            rewritten += sum(text != texts[i] for text, i in zip(kept, chosen))
            if not kept:
                kept = [expert_answer(self.expert, group.state)]
                expert_states += 1
            conversations.extend(messages(group.state, group.rejected) + [{"role": "assistant", "content": text}]
                                 for text in kept)
        conversations.extend(messages(start.state) + [{"role": "assistant", "content": expert_answer(self.expert, start.state)}]
                             for start in replay)
        conversations.extend(messages(start.state, self._refused(start, rng))
                             + [{"role": "assistant", "content": answer}]
                             for start, answer in zip(self.drill, self._drill_answers))
        return Targets(conversations, sampled, len(trained), expert_states, rewritten, len(replay) + len(self.drill))

    def _refused(self, start: StartState, rng: np.random.Generator | None) -> tuple[Rejection, ...]:
        return () if rng is None else sample_rejections(start.state, rng, self.settings.drill_refused)

    def step(self, starts: list[StartState], rng: np.random.Generator,
             replay: Sequence[StartState] = ()) -> dict[str, float | None]:
        """Play or sample, filter, train (with the `replay` demonstrations); a non-finite loss
        undoes the step's updates and is counted."""
        targets = self.targets(self.positions(starts, rng), replay, rng)
        seed = int(rng.integers(2**31))
        if not targets.positions:
            return {**targets.sampled.stats(self.rollout.temperature), "positions": 0,
                    "skipped": f"no position from turn {self.settings.min_history + 1} on"}
        saved = self._snapshot()
        stats = self.trainer.train_on_messages(targets.conversations, self.settings.sft_steps,
                                               self.settings.batch_size, seed)
        finite = all(math.isfinite(s.loss) and math.isfinite(s.grad_norm) for s in stats)
        if not finite:
            self._restore(saved)
        positions = targets.positions
        return {**targets.sampled.stats(self.rollout.temperature), "positions": positions,
                "kept_fraction": 1.0 - targets.expert_states / positions,
                "expert_fraction": targets.expert_states / positions,
                "targets": len(targets.conversations), "replayed": targets.replayed,
                "rewritten_thoughts": targets.rewritten,
                "loss": float(np.mean([s.loss for s in stats])),
                "grad_norm": float(np.mean([s.grad_norm for s in stats])), "lr": stats[-1].learning_rate,
                "nonfinite_skipped": 0 if finite else len(stats),
                "trained_tokens": int(sum(s.tokens for s in stats))}

    def _snapshot(self) -> tuple[dict, dict]:
        """References to the current weights and optimizer state (arrays are immutable: no copy)."""
        return trainable_weights(self.model), tree_map(lambda a: a, self.trainer.optimizer.state)

    def _restore(self, saved: tuple[dict, dict]) -> None:
        weights, state = saved
        self.model.load_weights(list(weights.items()), strict=False)
        _assign_into(self.trainer.optimizer.state, state)  # in place: the compiled step holds this dict
        mx.eval(self.model.parameters(), self.trainer.optimizer.state)


def passing_answers(rewards: GroupRewards, solver_move: str, threshold: float, keep: int) -> list[int]:
    """Indices of playable answers with distinct guesses whose guess quality reaches `threshold`
    or that play the solver's move; best first (then truest thought), at most `keep`."""
    parsed, quality = rewards.parsed, rewards.guess_quality
    good = [i for i in range(len(quality))
            if parsed.playable[i] and (quality[i] >= threshold or parsed.guesses[i] == solver_move)]
    good.sort(key=lambda i: (-quality[i], -rewards.total[i]))
    kept: dict[str, int] = {}
    for i in good:
        kept.setdefault(parsed.guesses[i], i)
    return list(kept.values())[:keep]


def truthful_target(state, text: str, thought: str | None, guess: str) -> str:
    """`text` if its `thought` (as the parser read it) is true at `state`, else the same guess with the true thought."""
    if thought is not None and check_thought(state, thought, guess).accepted:
        return text
    return truthful_answer(state, guess)


def _assign_into(target, source) -> None:
    for key in (range(len(source)) if isinstance(source, list) else source):
        if isinstance(source[key], (dict, list)):
            _assign_into(target[key], source[key])
        else:
            target[key] = source[key]

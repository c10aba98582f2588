"""Filtered expert iteration: train on the model's own good answers, or the expert's.

At each start state the model samples K answers; those the reward kernel scores at
or above `threshold`, or whose guess is the solver's own move, are kept (best first,
distinct texts, at most `keep_per_state`). Where none passes, the target is the
solver's move with its chain of thought (sft/cot.py), so a state never goes
untaught. The targets train through the SFT trainer itself (sft/trainer.py): the
same masked cross-entropy step the `sft` command runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mlx.core as mx
import numpy as np
from mlx.utils import tree_map

from llm.format import messages, prompt_tokens
from llm.generation import sample
from rl.reward import RewardScorer
from rl.rollout import Group, Rollout, RolloutSettings
from sft.cot import expert_answer
from sft.data import Conversation
from sft.lora import trainable_weights
from sft.states import StartState
from sft.trainer import OptimizerSettings, SFTTrainer
from solver.policy import Policy


@dataclass(frozen=True)
class EISettings:
    states_per_step: int = 8  # start states sampled per expert-iteration step
    samples: int = 4  # answers sampled per state (K)
    threshold: float = 1.6  # reward at or above which a sampled answer is kept
    keep_per_state: int = 1  # most answers kept per state (best first)
    sft_steps: int = 2  # SFT updates per expert-iteration step
    batch_size: int = 4
    learning_rate: float = 1e-4  # a LoRA adapter, a few SFT steps per round


@dataclass(frozen=True)
class Targets:
    conversations: list[Conversation]
    sampled: Rollout  # every sampled group, for the reward figures
    expert_states: int  # states where no sample passed and the solver's answer was used


class ExpertIteration:
    """One SFT trainer (and its optimizer) for every expert-iteration step of a run."""

    def __init__(self, model, tokenizer, scorer: RewardScorer, solver: Policy, settings: EISettings,
                 rollout: RolloutSettings) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.scorer = scorer
        self.solver = solver
        self.settings = settings
        self.rollout = rollout
        self.trainer = SFTTrainer(model, tokenizer, OptimizerSettings(learning_rate=settings.learning_rate,
                                                                      min_lr_ratio=1.0))

    def targets(self, starts: list[StartState]) -> Targets:
        settings = self.settings
        prompts = [prompt_tokens(self.tokenizer, s.state) for s in starts]
        answers = sample(self.model, self.tokenizer, prompts, settings.samples, self.rollout.sampling,
                         self.rollout.batch_size)
        conversations, groups, expert_states = [], [], 0
        for start, prompt, completions in zip(starts, prompts, answers):
            rewards = self.scorer.score([c.text for c in completions], start.state, start.secret)
            groups.append(Group(start.state, start.secret, prompt, completions, rewards))
            kept = passing_answers(rewards, [c.text for c in completions], self.solver.choose(start.state),
                                   settings.threshold, settings.keep_per_state)
            if not kept:
                kept = [expert_answer(self.solver, start.state)]
                expert_states += 1
            conversations.extend(messages(start.state) + [{"role": "assistant", "content": text}] for text in kept)
        return Targets(conversations, Rollout(groups=groups), expert_states)

    def step(self, starts: list[StartState], seed: int) -> dict[str, float | None]:
        """Sample, filter, train; a non-finite loss undoes the step's updates and is counted."""
        targets = self.targets(starts)
        saved = self._snapshot()
        stats = self.trainer.train_on_messages(targets.conversations, self.settings.sft_steps,
                                               self.settings.batch_size, seed)
        finite = all(math.isfinite(s.loss) and math.isfinite(s.grad_norm) for s in stats)
        if not finite:
            self._restore(saved)
        return {**targets.sampled.stats(),
                "kept_fraction": 1.0 - targets.expert_states / len(starts),
                "expert_fraction": targets.expert_states / len(starts),
                "targets": len(targets.conversations),
                "loss": float(np.mean([s.loss for s in stats])),
                "grad_norm": float(np.mean([s.grad_norm for s in stats])),
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


def passing_answers(rewards, texts: list[str], solver_move: str, threshold: float, keep: int) -> list[str]:
    """Distinct answers at or above `threshold`, or playing the solver's move; best first, at most `keep`."""
    parsed = rewards.parsed
    good = [i for i in range(len(texts))
            if rewards.total[i] >= threshold or (parsed.playable[i] and parsed.guesses[i] == solver_move)]
    good.sort(key=lambda i: -rewards.total[i])
    kept: list[str] = []
    for i in good:
        if texts[i] not in kept:
            kept.append(texts[i])
    return kept[:keep]


def _assign_into(target, source) -> None:
    for key in (range(len(source)) if isinstance(source, list) else source):
        if isinstance(source[key], (dict, list)):
            _assign_into(target[key], source[key])
        else:
            target[key] = source[key]
